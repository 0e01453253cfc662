"""Importing the helpers is cheap, never initializes CUDA, and loads heavy libraries only on use.

"Cheap" is checked by what the import loads, not by a stopwatch (a busy machine must not fail the
suite): on top of torch, `import utils` may load its own four small modules and nothing else. Measure
the time by hand with `python -X importtime -c "import torch, utils"`.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = r"""
import json, sys, time
import torch
before = set(sys.modules)
t0 = time.perf_counter()
import utils
import_ms = (time.perf_counter() - t0) * 1000
new = sorted(set(sys.modules) - before)
utils.try_gpu(); utils.try_all_gpus(); utils.num_gpus()
after_utils = sorted(m for m in sys.modules if m.startswith("utils."))
import utils.checkpoint, utils.doctor, utils.index_explorer, utils.init_explorer, utils.placement, utils.timing
heavy = sorted({"matplotlib", "ipywidgets", "torch.utils.benchmark"} & set(sys.modules))
print(json.dumps({"import_ms": import_ms, "new": new, "after_utils": after_utils, "heavy": heavy,
                  "cuda_initialized": torch.cuda.is_initialized()}))
"""


def probe() -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_import_is_cheap_lazy_and_leaves_cuda_alone():
    first = probe()
    # `import utils` loads the device helpers (with their argument checks) and the exercise mechanism,
    # and nothing else: no module of torch's, the standard library's or anyone's that torch had not.
    assert first["new"] == ["utils", "utils._validate", "utils.checks", "utils.devices", "utils.i18n"]
    assert first["after_utils"] == ["utils._validate", "utils.checks", "utils.devices", "utils.i18n"]
    # The sub-modules import matplotlib, ipywidgets and torch.utils.benchmark only when used.
    assert first["heavy"] == []
    assert first["cuda_initialized"] is False
