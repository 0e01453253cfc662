"""Suite-wide hooks for the notebook regression run.

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

Workers. ``--dist loadgroup`` keeps each notebook's cells on one worker (one kernel per notebook) and
spreads every other test one by one, which balances the workers far better than whole files. A few test
files run whole on one worker (``_ONE_WORKER``): those that share a heavy import no other file needs (each
worker would import it again), and those that mostly wait for their own processes (spread, they would
wait on both workers at once, and leave both cores idle).

How many workers. ``-n auto`` starts one worker more than the cores this process may use: about a third
of a worker's time goes to waiting for other processes (kernels, Chromium, JupyterLab, torchrun), and
the extra worker fills those gaps (on 2 cores, 3 workers finish sooner than 2; 4 are slower again).
``PYTEST_XDIST_AUTO_NUM_WORKERS`` or an explicit ``-n N`` still decide.

Threads. pytest-xdist runs about one notebook per core, so each kernel gets one intra-op thread
(``OMP_NUM_THREADS=1`` unless already set): two kernels with a thread per core each would fight over
the cores and small tensor operations would slow down many times over.

Kernels and workers. A fresh kernel spends about 3 s of CPU on Python, ipykernel and ``import torch`` before
a lesson starts, and a fresh xdist worker as much on torch and ``torch._dynamo`` (which most test files
need). The run therefore forks each notebook's kernel, and each worker, from one server that has made those
imports (tools/kernel_server.py says what a notebook or a worker can and cannot tell); ``FRESH_KERNELS=1``
starts every kernel and worker the usual way.

IPython. The run's kernels get an IPython directory of their own (``IPYTHONDIR``, a temporary folder), with
their input history kept in memory: no one's profile reaches a lesson, and ~/.ipython is left alone.

Sockets. nbval's kernels and their clients talk through Unix sockets in a temporary folder, not TCP ports:
another process could take a port between jupyter_client choosing it and the kernel binding it, and the
kernel would die at start.

JupyterLab. The browser tests need one (tools/lab.py), and it takes about 2.5 s of CPU to start. While the
kernel server imports torch, in the run's first seconds, one core has nothing else to do: the run starts
JupyterLab then, where it will run tests/test_browser.py and a Chromium is there, and stops it at the end.

Timing cells. A cell tagged ``runs-alone`` measures speed, so while it runs no other test runs: every
test holds a shared lock across the xdist workers and such a cell takes it exclusively. A turnstile lock
keeps the other workers from slipping new tests in while it waits.
"""

from __future__ import annotations

import gc
import os
import shlex
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tools import kernel_server

# nbformat validates with jsonschema, whose optional IRI checker (rfc3987-syntax, pulled in by Jupyter)
# compiles a grammar for over a second at import, in every worker. No notebook uses IRI formats: skip it.
# nbval is loaded here, after this line, rather than as an auto-loaded plugin (`-p no:nbval` in addopts).
sys.modules.setdefault("rfc3987_syntax", None)
pytest_plugins = ["nbval.plugin"]

from tools import lab as lab_server  # noqa: E402 - imports nbformat: after the line above

try:
    import fcntl
except ImportError:  # Windows: no flock; timing cells then share the machine like any other test
    fcntl = None

HARDWARE_TAGS = {"requires-cuda": 1, "requires-multi-gpu": 2}
ALONE_TAG = "runs-alone"
GPU_CELL = "gpu_cell"  # keyword on hardware-tagged items; it travels with their reports across xdist
_LOCKS = pytest.StashKey[tuple[int, int]]()
_TALLY = {"run": 0, "skipped": 0, "failed": 0}  # GPU cells, counted where reports arrive

os.environ.setdefault("OMP_NUM_THREADS", "1")


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
    _quiet_nbval_logging()
    _isolate_ipython(config)
    _kernels_over_unix_sockets(config)
    if forks_kernels(config.args, config.option.collectonly):
        _start_kernel_server(config)
        _launch_kernels_from_the_server()
        _fork_workers_from_the_server(config)
    if _starts_lab(config):
        _start_lab(config)


def pytest_unconfigure(config):
    # The run is over. One full collection now, while pytest still reports what finalizers raise, then
    # freeze what survives: pytest's own clean-up collects five more times, and the interpreter once more
    # as it exits, and each would walk every object alive (about 0.15 s a time in a worker).
    # What pytest_configure started (JupyterLab, the kernel server, the IPython folder) stops after this, in
    # its registered clean-ups, the last started first.
    gc.collect()
    gc.freeze()


def auto_workers(cores: int | None, environ=os.environ) -> int | None:
    """The number of workers ``-n auto`` starts: one more than ``cores``; ``None`` (xdist's own count) when
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` is set or the cores are unknown."""
    if environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not cores:
        return None
    return cores + 1


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return auto_workers(cores)


def forks_kernels(args, collect_only: bool, environ=os.environ, platform: str = sys.platform) -> bool:
    """Whether this run forks its kernels from a server: on Linux, when a notebook may run, unless told not to."""
    if environ.get("FRESH_KERNELS") or not platform.startswith("linux") or collect_only:
        return False
    files = [str(arg).split("::")[0] for arg in args]
    return not files or not all(file.endswith(".py") for file in files)


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


def selects(args, where: Path, root: Path, target: Path) -> bool:
    """Whether a run with these command-line ``args`` (given in folder ``where``, no args meaning what pytest
    then collects, which includes ``target`` here) collects the file ``target``."""
    for arg in args or [str(root)]:
        path = Path(str(arg).split("::")[0])
        if not path.is_absolute():
            path = where / path if (where / path).exists() else root / path
        path = path.resolve()
        if path == target or path in target.parents:
            return True
    return False


def _starts_lab(config) -> bool:
    """On the controller of a run that will run the browser tests: start their JupyterLab now."""
    if getattr(config, "workerinput", None) is not None or config.option.collectonly:
        return False
    if os.environ.get(lab_server.ENV) or lab_server.chromium() is None:
        return False  # a run inside a run has its own (or none); without Chromium the tests skip
    target = config.rootpath / "tests" / "test_browser.py"
    return selects(config.args, config.invocation_params.dir, config.rootpath, target)


def _start_lab(config):
    folder = tempfile.mkdtemp(prefix="browser-test-lab-")
    process, lab = lab_server.start(Path(folder))
    os.environ[lab_server.ENV] = lab_server.to_environment(lab)  # the workers, started after this, inherit it

    def stop():
        lab_server.stop(process)
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(lab_server.ENV, None)

    config.add_cleanup(stop)


def _start_kernel_server(config):
    """On the controller (or a run without workers): start the server the workers' kernels fork from."""
    if getattr(config, "workerinput", None) is not None:
        return
    outer = os.environ.get(kernel_server.ENV)
    if outer and Path(outer).exists():
        return  # a run inside a run (tests/test_suite.py) uses the outer run's server
    folder = tempfile.mkdtemp(prefix="kernel-server-")
    path = os.path.join(folder, "socket")
    # the server removes the folder as it exits, which it does when this run ends, even killed (SIGKILL)
    process = kernel_server.start_server(path, remove_folder=True)
    if process is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    os.environ[kernel_server.ENV] = path  # the workers, started after this, inherit it

    def stop():
        process.stdin.close()  # the server kills any kernel left and exits
        process.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(kernel_server.ENV, None)

    config.add_cleanup(stop)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collecting imports torch, the test modules and their libraries, and every object alive once it is done
    (modules, test items, torch's own tables) lives until the worker exits. So no automatic garbage
    collection meanwhile (each would walk them all again: about 0.5 s of CPU in all), one at the end, and
    what survives it is frozen, which keeps each later collection from walking it again (ddp_train's
    ``gc.collect()``, pytest's own at the end, and the automatic ones in between)."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


def _fork_workers_from_the_server(config):
    """On the controller: pytest-xdist's workers start as forks of the kernel server too (``python -u -c``
    through its launcher), torch and the rest already imported; where the server declines, as usual."""
    if getattr(config, "workerinput", None) is not None or not os.environ.get(kernel_server.ENV):
        return
    python = shlex.join(kernel_server.python_argv())
    config.option.tx = [f"popen//python={python}" if tx == "popen" else tx for tx in config.option.tx or []]


def _launch_kernels_from_the_server():
    """nbval's kernel (``--nbval-current-env``) starts as the server's launcher instead of ipykernel."""
    import nbval.kernel

    manager = nbval.kernel.NbvalKernelspecManager
    if getattr(manager, "_forked", False):
        return
    plain = manager.get_kernel_spec

    def get_kernel_spec(self, kernel_name):
        spec = plain(self, kernel_name)
        if kernel_name == nbval.kernel.CURRENT_ENV_KERNEL_NAME and os.environ.get(kernel_server.ENV):
            spec.argv = kernel_server.launcher_argv()
        return spec

    manager.get_kernel_spec = get_kernel_spec
    manager._forked = True


class _Lazy:
    """``pformat(msg)`` only when the log line is written: nbval pretty-prints every kernel message for a
    debug log that is off (about 7 ms a cell)."""

    def __init__(self, obj):
        self.obj = obj

    def __str__(self):
        import pprint

        return pprint.pformat(self.obj)


def _quiet_nbval_logging():
    import nbval.kernel

    nbval.kernel.pformat = _Lazy


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium, driven by playwright, for tests/test_browser.py and tests/test_slides.py (one
    xdist group: they run on one worker, and start the browser once). Skips, or fails under
    ``REQUIRE_BROWSER=1``, where Chromium or playwright is missing."""
    from test_browser import CHROMIUM_FLAGS, chromium_or_skip

    chromium = chromium_or_skip()
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


@pytest.hookimpl(tryfirst=True)  # before xdist reads the group markers
def pytest_collection_modifyitems(config, items):
    have = None
    required = required_gpus()
    for item in items:
        if getattr(item, "cell", None) is not None:
            # One kernel per notebook: with --dist loadgroup all its cells go to one worker, while the
            # other tests spread over the workers one by one.
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        elif item.path.name in _ONE_WORKER and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_ONE_WORKER[item.path.name]))
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
    items.sort(key=_cost_rank)  # xdist hands out groups in this order (see _ORDER)


#: Test files whose tests all run on one worker (an xdist group, named here): the kernel server's tests,
#: which mostly wait for the servers and kernels they start (and share one). The explorers' tests spread:
#: the workers, forked from the kernel server, have matplotlib's pyplot imported already.
_ONE_WORKER = {"test_kernel_server.py": "kernel-server"}


#: Where a test file or notebook goes in the run's order (lower: earlier). Longest first, so that no long
#: group starts last while the other worker idles: the browser, the decks, chapter 09 (torchrun jobs), the
#: tests that start interpreters or take a second or more, then the other notebooks, chapter 08 last of
#: them, then the unit tests that take milliseconds each. Chapter 08's timing cells wait for the test that
#: runs on the other worker to finish: that test should then be one of the short ones.
_ORDER = (
    "test_browser.py", "test_slides.py", "09_data_parallel_training.ipynb", "test_launch.py", "test_suite.py",
    "test_kernel_server.py", "test_index_explorer.py", "test_init_explorer.py", "test_ddp_train.py",
    "test_checkpoint.py", "test_doctor.py", "test_import.py",
    "02_parameters.ipynb", "05_saving_and_loading.ipynb", "01_layers_and_blocks.ipynb",
    "07_gather_and_scatter.ipynb", "06_gpu_placement.ipynb", "03_parameter_tying.ipynb",
    "04_custom_layers.ipynb", "00_index.ipynb", "08_multi_gpu_timing.ipynb",
)


def _cost_rank(item) -> int:
    name = item.path.name
    if name in _ORDER:
        return _ORDER.index(name)
    return len(_ORDER) + (item.path.suffix != ".ipynb")  # a new chapter: with the notebooks


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


def _lock_paths(config) -> tuple[Path, Path] | None:
    worker = getattr(config, "workerinput", None)
    if worker is None or fcntl is None:  # not under xdist, tests run one at a time anyway
        return None
    base = Path(tempfile.gettempdir()) / f"building-blocks-{worker['testrunuid']}"
    return base.with_suffix(".lock"), base.with_suffix(".turnstile")


def pytest_sessionstart(session):
    paths = _lock_paths(session.config)
    if paths:
        session.config.stash[_LOCKS] = tuple(os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in paths)


def pytest_sessionfinish(session):
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:
        worker["device_line"] = _device_line()
    fds = session.config.stash.get(_LOCKS, None)
    if fds:
        for fd, path in zip(fds, _lock_paths(session.config), strict=True):
            os.close(fd)
            path.unlink(missing_ok=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    fds = item.config.stash.get(_LOCKS, None)
    if not fds:
        yield
        return
    lock, turnstile = fds
    # a timing cell that is skipped here (a GPU cell on a machine without one) measures nothing: no need to
    # wait for the other workers
    alone = ALONE_TAG in _tags(item) and item.get_closest_marker("skip") is None
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    if alone:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the test running elsewhere to finish
    else:
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        if alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
