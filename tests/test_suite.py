"""The regression suite guards itself: strict comparison, REQUIRE_GPUS, the summary line, any folder.

One real nbval run of a small notebook made here (so no chapter's wording is assumed), on two xdist workers as
the suite runs, proves at once that a notebook's cells run in one kernel (a cell uses what the cell before it
defined), that an edited output fails, that ``REQUIRE_GPUS`` turns a missing GPU into a failure, that a cell
needing more GPUs than required is still skipped, and that the run ends with the GPU-cells line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

import conftest

ROOT = Path(__file__).resolve().parents[1]


def code(source: str, output: str, *tags: str):
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    return cell


def test_a_gpu_run_cannot_be_green_by_skipping_and_outputs_are_compared(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.cells = [
        code("four = 2 + 2\nprint(four)", "4\n"),
        # the kernel of the cell before: xdist hands out the first two units to two workers, so a notebook whose
        # cells were not one unit would run this cell in the other worker's kernel (NameError)
        code("print(four + 3)", "7\n"),
        code("print('six')", "seven\n"),  # the committed output differs: strict mode must fail it
        code("print('needs one GPU')", "anything\n", "requires-cuda"),
        code("print('needs two GPUs')", "anything\n", "requires-multi-gpu"),
        # the run's own IPython directory: a kernel's history stays in memory, nothing goes to ~/.ipython
        code("import os; print(get_ipython().history_manager.hist_file, os.environ['IPYTHONDIR'] != "
             f"{os.path.expanduser('~/.ipython')!r})", ":memory: True\n"),
        # a kernel started the standard way, as a learner's: nothing imported before the notebook asks for it
        code("import sys; print(sorted({'torch', 'matplotlib.pyplot'} & set(sys.modules)))", "[]\n"),
        # the kernel talks to nbval through Unix sockets, whose files no other process can take as TCP ports
        code("import json; from ipykernel.connect import get_connection_info; "
             "print(json.loads(get_connection_info())['transport'])", "ipc\n"),
    ]
    for count, cell in enumerate(nb.cells, start=1):
        cell.execution_count = count
    nbformat.write(nb, tmp_path / "probe.ipynb")
    env = {**os.environ, "REQUIRE_GPUS": "1", "CUDA_VISIBLE_DEVICES": ""}
    # `python -m pytest` with this checkout's settings and hooks (conftest.py, found through PYTHONPATH)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(tmp_path),
         "-p", "conftest", "-n", "2", "-q", "-rfs",
         "--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"), "probe.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    assert "FAILED probe.ipynb::Cell 2" in report, report  # the edited output
    assert "FAILED probe.ipynb::Cell 3" in report, report  # the GPU cell: a failure, not a skip
    assert "needs 1 CUDA GPU(s), this machine has 0, but REQUIRE_GPUS=1" in report, report
    assert "SKIPPED [1] probe.ipynb: needs 2 CUDA GPU(s), this machine has 0" in report, report
    assert "2 failed, 5 passed, 1 skipped" in report, report  # Cell 1 too: one kernel for the notebook
    assert "GPU cells: 0 run, 1 skipped, 1 failed; device: cpu (no CUDA GPU visible); torch " in report, report
    assert "; REQUIRE_GPUS=1" in report


def test_work_units_come_from_the_test_ids():
    """A notebook is one unit, the browser modules another, every other test a unit of its own: no xdist_group
    mark is needed (pytest 9.2 drops the ``@group`` suffix by which xdist carried one to its scheduler)."""
    ids = ["notebooks/07_gpu_placement.ipynb::Cell 0", "notebooks/07_gpu_placement.ipynb::Cell 12",
           "notebooks/zh-Hant/07_gpu_placement.ipynb::Cell 0", "tests/test_browser.py::test_rise",
           "tests/test_slides.py::test_deck[02]", "tests/test_checks.py::test_a", "tests/test_checks.py::test_b"]
    assert [conftest.work_unit(i) for i in ids] == [
        "notebooks/07_gpu_placement.ipynb", "notebooks/07_gpu_placement.ipynb",
        "notebooks/zh-Hant/07_gpu_placement.ipynb", "browser", "browser",
        "tests/test_checks.py::test_a", "tests/test_checks.py::test_b"]


def test_loadgroup_uses_the_course_units_and_other_modes_are_xdist_own():
    from xdist.scheduler import LoadScopeScheduling

    def config(dist):
        option = SimpleNamespace(dist=dist, tx=["2*popen"], loadscopereorder=True)
        return SimpleNamespace(getvalue=lambda name: getattr(option, name), option=option)

    log = SimpleNamespace(loadscopesched=lambda *args: None)
    scheduler = conftest.pytest_xdist_make_scheduler(config("loadgroup"), log)
    assert isinstance(scheduler, LoadScopeScheduling)
    assert scheduler._split_scope("notebooks/01_layers.ipynb::Cell 3") == "notebooks/01_layers.ipynb"
    assert conftest.pytest_xdist_make_scheduler(config("load"), log) is None


@pytest.mark.parametrize(
    "need, have, required, verdict",
    [
        (1, 0, 0, "skip"),  # a laptop
        (1, 1, 0, "run"),
        (2, 1, 0, "skip"),
        (1, 0, 1, "fail"),  # a GPU runner whose GPU went missing (old driver, container without it)
        (2, 1, 1, "skip"),  # one GPU required, the two-GPU cell may skip
        (2, 1, 2, "fail"),
        (2, 4, 2, "run"),
    ],
)
def test_hardware_verdict_with_fake_device_counts(need, have, required, verdict):
    got, reason = conftest.hardware_verdict(need, have, required)
    assert got == verdict
    assert (reason == "") == (verdict == "run")
    if verdict == "fail":
        assert f"REQUIRE_GPUS={required}" in reason


@pytest.mark.parametrize("raw, expected", [(None, 0), ("", 0), ("0", 0), ("1", 1), (" 2 ", 2)])
def test_require_gpus_setting(raw, expected):
    environ = {} if raw is None else {"REQUIRE_GPUS": raw}
    assert conftest.required_gpus(environ) == expected


@pytest.mark.parametrize("raw", ["yes", "-1", "1.5", "two"])
def test_require_gpus_rejects_what_is_not_a_count(raw):
    with pytest.raises(pytest.UsageError, match="REQUIRE_GPUS must be a whole number"):
        conftest.required_gpus({"REQUIRE_GPUS": raw})


def test_sanitizer_path_is_found_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # e.g. `cd notebooks && pytest`, or `pytest /path/to/checkout`
    option = SimpleNamespace(nbval_sanitize_with="tests/sanitize.cfg", collectonly=True)  # collecting: no kernels start
    config = SimpleNamespace(option=option, rootpath=ROOT, args=[])
    config.addinivalue_line = lambda *args: None
    conftest.pytest_configure(config)
    assert config.option.nbval_sanitize_with == str(ROOT / "tests" / "sanitize.cfg")
    assert Path(config.option.nbval_sanitize_with).is_file()


def test_the_controller_reports_the_device_a_worker_saw(monkeypatch):
    """Under xdist the controller imports no torch: the summary line's device comes from a worker."""
    monkeypatch.setattr(conftest, "_WORKER_DEVICE_LINE", {})
    monkeypatch.setattr(conftest, "_device_line", lambda: pytest.fail("the controller must not import torch"))
    conftest.pytest_testnodedown(SimpleNamespace(workeroutput={"device_line": "device: 8 x CUDA (X); torch 9"}), None)
    lines = []
    reporter = SimpleNamespace(write_line=lines.append)
    conftest.pytest_terminal_summary(reporter, SimpleNamespace())
    assert lines and "; device: 8 x CUDA (X); torch 9" in lines[0], lines
