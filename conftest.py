"""Suite-wide hooks for the notebook regression run (pytest, pytest-xdist and nbval, used as they come).

From any folder. The sanitizer file named in ``addopts`` is resolved against the repository root, so
``pytest`` works from the root, from ``notebooks/`` or ``tests/``, and as ``pytest /path/to/checkout``.

Hardware tags. A cell tagged ``requires-cuda`` needs one CUDA GPU, ``requires-multi-gpu`` needs two.
Where the machine has them the cell runs and its output, which depends on the hardware, is not
compared. Where it lacks them the cell is skipped, unless ``REQUIRE_GPUS=N`` is set: then a cell
that needs at most N GPUs fails instead of skipping, so a GPU runner cannot go green by skipping
(a driver too old for the wheel, a container without the GPU). The cell itself starts with
``if requires("cuda"):`` so that *Run All* in Jupyter skips it too (tests/test_notebook_anatomy.py
keeps tag and guard together). Every run ends with one line: GPU cells run / skipped, the device,
and the torch version.

Workers. ``-n auto``: one pytest-xdist worker per core. Under ``--dist loadgroup`` the work units are this
file's (``work_unit``): a notebook's cells form one unit (one worker, one kernel per notebook), the browser tests
another (one Chromium), and every other test is a unit of its own; xdist hands out the largest units first. The
units are read from the test ids alone, not from ``xdist_group`` marks: xdist carries a mark to the controller by
appending ``@group`` to the test's id on the worker, which pytest 9.2 no longer lets it do (the id became a
structured ``NodeId``; pytest-xdist issue 1386), and the cells of a notebook were then spread over the workers,
most of them in a kernel that never ran the setup cell. Kernels are nbval's, started the standard way
(``--nbval-current-env``: ``python -m ipykernel_launcher``).

Threads. About one notebook runs per core, so each kernel gets one intra-op thread (``OMP_NUM_THREADS=1``
unless already set): two kernels with a thread per core each would fight over the cores. No output
depends on the thread count.

IPython. The run's kernels get an IPython directory of their own (``IPYTHONDIR``, a temporary folder), with
their input history kept in memory: no one's profile reaches a lesson, and ~/.ipython is left alone.

Markers and options (``pytest --markers`` lists them):

- ``slow``: the Chinese editions and their decks beyond the two a plain run re-runs (``EDITIONS_BY_DEFAULT``). They
  are deselected unless ``--slow`` is given (or their folder is named: ``python -m pytest notebooks/zh-Hant``).
- ``translation``: the catalogues are complete (no untranslated, no fuzzy message, in either script). A plain run
  includes them, as CI does; a maintainer's English loop can leave them out with ``-m "not translation"``, and the
  rest of the suite stays green while a new English sentence waits for its translators.
- ``--require-browser``: a browser test that cannot find Chromium fails instead of skipping (CI sets it).

Hints in Chinese. In the exercise-check catalogues (``tests/test_exercises_*.py``) every ``outcome()`` also runs
the check in 简体: the same verdict, made of the same messages (so the same fix). The test itself then compares the
English hint. That each message is translated is the ``translation`` marker's concern.

Sockets. nbval's kernels and their clients talk through Unix sockets in a temporary folder, not TCP ports:
another process could take a port between jupyter_client choosing it and the kernel binding it, and the
kernel would die at start ("Kernel died before replying to kernel_info").
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

HARDWARE_TAGS = {"requires-cuda": 1, "requires-multi-gpu": 2}
GPU_CELL = "gpu_cell"  # keyword on hardware-tagged items; it travels with their reports across xdist
_TALLY = {"run": 0, "skipped": 0, "failed": 0}  # GPU cells, counted where reports arrive

os.environ.setdefault("OMP_NUM_THREADS", "1")


#: The Chinese editions a plain run re-runs under nbval (the others are marked ``slow``).
EDITIONS_BY_DEFAULT = {("zh-Hans", "01_layers_and_blocks.ipynb"), ("zh-Hant", "07_gpu_placement.ipynb")}
SLOW, TRANSLATION = "slow", "translation"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help="also run the tests marked slow: every Chinese edition and its deck")
    parser.addoption("--require-browser", action="store_true",
                     help="fail, rather than skip, a browser test where Chromium or playwright is missing")


def is_default_edition(path: Path) -> bool:
    """Whether a Chinese edition (or its deck) is one a plain run re-runs."""
    return (path.parent.name, path.name) in EDITIONS_BY_DEFAULT


def _named(config, path: Path) -> bool:
    named = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    return bool(named & {path, path.parent})


@pytest.fixture
def mdpo():
    """mdpo, which splits Markdown into the editions' messages: a test that makes templates or editions skips
    without it (requirements.txt installs it on Python 3.11 only: tools/translate.py says why)."""
    return pytest.importorskip("mdpo.md2po", reason="no mdpo, which requirements.txt installs on Python 3.11 only")


@pytest.fixture(autouse=True)
def hints_in_chinese_too(request, monkeypatch):
    """In an exercise catalogue, make ``outcome`` judge every answer in English and in 简体 (see the docstring)."""
    if not request.module.__name__.startswith("test_exercises_"):
        yield
        return
    from utils import checks, i18n

    english_outcome = checks.outcome

    def both(check, *args, **kwargs):
        with i18n.messages_used() as english_messages:
            verdict, hint = english_outcome(check, *args, **kwargs)
        i18n.set_language("zh-Hans")
        try:
            with i18n.messages_used() as chinese_messages:
                chinese = english_outcome(check, *args, **kwargs)
        finally:
            i18n.set_language("en")
        assert chinese[0] == verdict, f"in 简体 the verdict is {chinese[0]!r}, in English {verdict!r}"
        assert chinese_messages == english_messages, "the 简体 hint is made of other messages than the English one"
        return verdict, hint

    monkeypatch.setattr(checks, "outcome", both)
    if hasattr(request.module, "outcome"):
        monkeypatch.setattr(request.module, "outcome", both)
    yield


def required_gpus(environ=os.environ) -> int:
    """The ``REQUIRE_GPUS`` setting: how many GPUs this run must have (0 when unset or empty)."""
    raw = environ.get("REQUIRE_GPUS", "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise pytest.UsageError(f"REQUIRE_GPUS must be a whole number of GPUs such as 1 or 2, got {raw!r}")
    return int(raw)


def hardware_verdict(need: int, have: int, required: int) -> tuple[str, str]:
    """What to do with a cell that needs ``need`` GPUs on a machine with ``have``.

    Returns ``("run", "")``, ``("skip", reason)`` or ``("fail", reason)``: a missing GPU is a failure
    when the run was told it has at least ``need`` of them (``REQUIRE_GPUS``), else a skip.
    """
    if have >= need:
        return "run", ""
    reason = f"needs {need} CUDA GPU(s), this machine has {have}"
    if need <= required:
        return "fail", f"{reason}, but REQUIRE_GPUS={required}: the GPU run must not skip it"
    return "skip", reason


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _tags(item) -> set[str]:
    cell = getattr(item, "cell", None)
    return set(cell.get("metadata", {}).get("tags", [])) if cell is not None else set()


def pytest_configure(config):
    option = config.option
    sanitize = getattr(option, "nbval_sanitize_with", None)
    if sanitize and not Path(sanitize).is_absolute() and not Path(sanitize).exists():
        option.nbval_sanitize_with = str(config.rootpath / sanitize)
    _TALLY.update(run=0, skipped=0, failed=0)
    config.addinivalue_line("markers", f"{GPU_CELL}: a notebook cell that needs a GPU")
    config.addinivalue_line("markers", f"{SLOW}: a Chinese edition or deck beyond the default two (run with --slow)")
    config.addinivalue_line("markers", f"{TRANSLATION}: the catalogues are complete (leave out: -m 'not translation')")
    _isolate_ipython(config)
    _kernels_over_unix_sockets(config)


def _isolate_ipython(config):
    """On the controller: the kernels' IPython directory is a new one for the run, with the history kept in
    memory. No one's startup files or settings reach a lesson, and the run writes nothing to ~/.ipython (each
    kernel would add its cells to the history database there, and ten kernels would take turns locking it)."""
    if getattr(config, "workerinput", None) is not None or config.option.collectonly:
        return
    folder = tempfile.mkdtemp(prefix="ipython-")
    profile = Path(folder, "profile_default")
    profile.mkdir()
    (profile / "ipython_kernel_config.py").write_text('c.HistoryManager.hist_file = ":memory:"\n', encoding="utf-8")
    before = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = folder  # the kernels, JupyterLab's included, and the workers inherit it

    def remove():
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            os.environ.pop("IPYTHONDIR", None)
        else:
            os.environ["IPYTHONDIR"] = before

    config.add_cleanup(remove)


def _kernels_over_unix_sockets(config):
    """nbval's kernels talk to their clients through Unix sockets in a folder of this process, not TCP ports.

    For TCP, jupyter_client finds five free ports, lets them go and writes their numbers down; the kernel
    binds them a moment later. Any process may take one in between (every outgoing connection on the machine
    takes a port from that range), and the kernel then dies at start: "Kernel died before replying to
    kernel_info", rare, and likelier on a busy machine, where the moment lasts longer. No one takes a file."""
    import nbval.kernel
    import zmq

    plain = nbval.kernel.KernelManager
    if (sys.platform == "win32" or not zmq.has("ipc") or config.option.collectonly
            or getattr(plain, "over_unix_sockets", False)):
        return
    folder = []  # made when the first kernel starts

    class UnixSocketKernelManager(plain):
        over_unix_sockets = True

        def __init__(self, **kwargs):
            if not folder:
                folder.append(tempfile.mkdtemp(prefix="kernels-"))
            # the sockets are the files {ip}-1 to {ip}-5, removed when the kernel shuts down
            super().__init__(transport="ipc", ip=os.path.join(folder[0], uuid.uuid4().hex[:12]), **kwargs)

    nbval.kernel.KernelManager = UnixSocketKernelManager

    def restore():
        nbval.kernel.KernelManager = plain
        for path in folder:
            shutil.rmtree(path, ignore_errors=True)

    config.add_cleanup(restore)


@pytest.fixture(scope="session")
def browser(request):
    """One headless Chromium per worker, driven by playwright, for tests/test_browser.py, test_slides.py and
    test_site.py. Skips, or fails under ``--require-browser``, where Chromium or playwright is missing."""
    from test_browser import CHROMIUM_FLAGS, chromium_or_skip

    chromium = chromium_or_skip(request.config.getoption("--require-browser"))
    from playwright.sync_api import sync_playwright

    p = sync_playwright().start()
    try:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        yield b
        b.close()
    finally:
        p.stop()


def _fail_for_missing_gpu(reason: str):
    def fail():
        pytest.fail(reason, pytrace=False)

    return fail


#: Test modules whose tests stay together on one worker, by unit name: each builds something dear once per worker
#: (the decks, the site's pages, JupyterLab) and would otherwise build it on both. The three are units of their own,
#: so that they run beside each other rather than one after another.
SHARED_WORKER = {"tests/test_browser.py": "browser", "tests/test_slides.py": "slides", "tests/test_site.py": "site"}


def work_unit(nodeid: str) -> str:
    """The work unit of a test, from its id (relative to the root folder): the notebook for a notebook's cell (its
    cells run in order on one worker, in one kernel), the unit ``SHARED_WORKER`` names for its modules, else the test
    itself (the other tests spread over the workers one by one)."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        return path
    return SHARED_WORKER.get(path, nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (``addopts``) with the units of :func:`work_unit`; another ``--dist`` is xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class CourseScheduling(LoadScopeScheduling):
        """xdist's scope scheduling (the largest units first, a unit on one worker), with the course's units."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return CourseScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    have = None
    required = required_gpus()
    for item in items:
        path = Path(str(item.path))
        if (getattr(item, "cell", None) is not None and path.parent.name in ("zh-Hans", "zh-Hant")
                and not is_default_edition(path)):
            item.add_marker(SLOW)
    if not config.getoption("--slow"):
        kept = [i for i in items if SLOW not in i.keywords or _named(config, Path(str(i.path)))]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[i for i in items if i not in kept])
            items[:] = kept
    for item in items:
        tags = _tags(item)
        need = max((HARDWARE_TAGS[t] for t in tags & HARDWARE_TAGS.keys()), default=0)
        if not need:
            continue
        item.add_marker(GPU_CELL)
        if have is None:
            have = _cuda_count()
        verdict, reason = hardware_verdict(need, have, required)
        if verdict == "skip":
            item.add_marker(pytest.mark.skip(reason=reason))
        elif verdict == "fail":
            item.runtest = _fail_for_missing_gpu(reason)
        else:
            item.options["check"] = False


def pytest_runtest_logreport(report):
    """Count GPU cells on the process that reports (the controller under xdist)."""
    if GPU_CELL not in report.keywords:
        return
    if report.skipped and report.when in ("setup", "call"):
        _TALLY["skipped"] += 1
    elif report.when == "call":
        _TALLY["run" if report.passed else "failed"] += 1


_WORKER_DEVICE_LINE: dict[str, str] = {}  # the controller imports no torch: a worker says what it saw


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    line = getattr(node, "workeroutput", {}).get("device_line")
    if line:
        _WORKER_DEVICE_LINE["line"] = line


def _device_line() -> str:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count():
        names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
        device = f"{torch.cuda.device_count()} x CUDA ({', '.join(names)})"
    else:
        device = "cpu (no CUDA GPU visible)"
    return f"device: {device}; torch {torch.__version__}"


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "workerinput", None) is not None:
        return
    tally = _TALLY
    required = required_gpus()
    need = f"; REQUIRE_GPUS={required}" if required else ""
    terminalreporter.write_line(
        f"GPU cells: {tally['run']} run, {tally['skipped']} skipped, {tally['failed']} failed; "
        f"{_WORKER_DEVICE_LINE.get('line') or _device_line()}{need}"
    )


def pytest_sessionfinish(session):
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:
        worker["device_line"] = _device_line()
