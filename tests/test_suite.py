"""The regression suite guards itself: strict comparison, REQUIRE_GPUS, the summary line, any folder.

One real nbval run of a small notebook made here (so no chapter's wording is assumed) proves at once
that an edited output fails, that ``REQUIRE_GPUS`` turns a missing GPU into a failure, that a cell
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
        code("print(2 + 2)", "4\n"),
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
         "-p", "conftest", "-n", "0", "-q", "-rfs",
         "--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"), "probe.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    assert "FAILED probe.ipynb::Cell 1" in report, report  # the edited output
    assert "FAILED probe.ipynb::Cell 2" in report, report  # the GPU cell: a failure, not a skip
    assert "needs 1 CUDA GPU(s), this machine has 0, but REQUIRE_GPUS=1" in report, report
    assert "SKIPPED [1] probe.ipynb: needs 2 CUDA GPU(s), this machine has 0" in report, report
    assert "2 failed, 4 passed, 1 skipped" in report, report
    assert "GPU cells: 0 run, 1 skipped, 1 failed; device: cpu (no CUDA GPU visible); torch " in report, report
    assert "; REQUIRE_GPUS=1" in report


def test_work_units_come_from_the_test_ids():
    """A notebook is one unit, each browser module another, every other test a unit of its own: no xdist_group
    mark is needed (pytest 9.2 drops the ``@group`` suffix by which xdist carried one to its scheduler)."""
    ids = ["notebooks/07_gpu_placement.ipynb::Cell 0", "notebooks/07_gpu_placement.ipynb::Cell 12",
           "notebooks/zh-Hant/07_gpu_placement.ipynb::Cell 0", "tests/test_browser.py::test_rise",
           "tests/test_slides.py::test_deck[02]", "tests/test_checks.py::test_a", "tests/test_checks.py::test_b"]
    assert [conftest.work_unit(i) for i in ids] == [
        "notebooks/07_gpu_placement.ipynb", "notebooks/07_gpu_placement.ipynb",
        "notebooks/zh-Hant/07_gpu_placement.ipynb", "browser", "slides",
        "tests/test_checks.py::test_a", "tests/test_checks.py::test_b"]


class FakeWorker:
    """What xdist's scope scheduling asks of a worker: run these tests (by index), shut down."""

    def __init__(self, name):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.pending: list[int] = []

    def send_runtest_some(self, indices):
        self.pending.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def test_with_loadgroup_a_notebook_runs_in_order_on_one_worker_and_other_tests_spread():
    """xdist's scheduling, with the course's units, over two pretend workers that collected the test ids pytest 9.2
    gives (no ``@group`` suffix), run to the end: each notebook's cells on one worker, in order; the browser modules
    on one worker; the other tests on both. ``--dist load`` stays xdist's own."""
    option = SimpleNamespace(dist="loadgroup", tx=["2*popen"], loadscopereorder=True)
    config = SimpleNamespace(getvalue=lambda name: getattr(option, name), option=option)
    log = SimpleNamespace(loadscopesched=lambda *args: None)
    assert conftest.pytest_xdist_make_scheduler(SimpleNamespace(getvalue=lambda name: "load"), log) is None
    scheduler = conftest.pytest_xdist_make_scheduler(config, log)
    ids = [*(f"notebooks/07_gpu_placement.ipynb::Cell {i}" for i in range(6)),
           *(f"notebooks/10_data_parallel_training.ipynb::Cell {i}" for i in range(5)),
           *(f"tests/test_checks.py::test_{i}" for i in range(8)),
           "tests/test_browser.py::test_rise", "tests/test_slides.py::test_deck[01]",
           "tests/test_slides.py::test_deck[02]"]
    workers = [FakeWorker("gw0"), FakeWorker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
    for worker in workers:
        scheduler.add_node_collection(worker, ids)
    scheduler.schedule()
    ran: dict[str, list[str]] = {"gw0": [], "gw1": []}
    while any(w.pending for w in workers):
        for worker in workers:  # the workers take turns, one test each
            if worker.pending:
                index = worker.pending.pop(0)
                ran[worker.gateway.id].append(ids[index])
                scheduler.mark_test_complete(worker, index)
    assert sorted(ran["gw0"] + ran["gw1"]) == sorted(ids)
    for unit in ("07_gpu_placement.ipynb", "10_data_parallel_training.ipynb", "test_browser.py", "test_slides.py"):
        on = [name for name, tests in ran.items() if any(unit in t for t in tests)]
        assert len(on) == 1, (unit, ran)
        assert [t for t in ran[on[0]] if unit in t] == [t for t in ids if unit in t]  # in order
    browser = [name for name, tests in ran.items() if any("test_browser" in t or "test_slides" in t for t in tests)]
    assert len(browser) == 1, ran
    assert all(any("test_checks" in t for t in tests) for tests in ran.values()), ran  # spread one by one


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
