"""Suite-wide hooks: hardware tags on notebook cells.

A cell tagged ``requires-cuda`` needs one CUDA GPU, ``requires-multi-gpu`` needs two. Where the machine
lacks them the cell is skipped; where it has them the cell runs and its output, which depends on the
hardware, is not compared. The cell itself starts with ``if requires("cuda"):`` so that *Run All* in
Jupyter skips it too (tests/test_notebook_anatomy.py keeps tag and guard together).
"""

from __future__ import annotations

import pytest

HARDWARE_TAGS = {"requires-cuda": 1, "requires-multi-gpu": 2}


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config, items):
    have = None
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        tags = set(cell.get("metadata", {}).get("tags", []))
        need = max((HARDWARE_TAGS[t] for t in tags & HARDWARE_TAGS.keys()), default=0)
        if not need:
            continue
        if have is None:
            have = _cuda_count()
        if have < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA GPU(s), this machine has {have}"))
        else:
            item.options["check"] = False
