"""Suite-wide hooks for the notebook regression run.

Hardware tags. A cell tagged ``requires-cuda`` needs one CUDA GPU, ``requires-multi-gpu`` needs two.
Where the machine lacks them the cell is skipped; where it has them the cell runs and its output, which
depends on the hardware, is not compared. The cell itself starts with ``if requires("cuda"):`` so that
*Run All* in Jupyter skips it too (tests/test_notebook_anatomy.py keeps tag and guard together).

Threads. pytest-xdist runs one notebook per core, so each kernel gets one intra-op thread
(``OMP_NUM_THREADS=1`` unless already set): two kernels with a thread per core each would fight over
the cores and small tensor operations would slow down many times over.

Timing cells. A cell tagged ``runs-alone`` measures speed, so while it runs no other test runs: every
test holds a shared lock across the xdist workers and such a cell takes it exclusively. A turnstile lock
keeps the other workers from slipping new tests in while it waits.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

try:
    import fcntl
except ImportError:  # Windows: no flock; timing cells then share the machine like any other test
    fcntl = None

HARDWARE_TAGS = {"requires-cuda": 1, "requires-multi-gpu": 2}
ALONE_TAG = "runs-alone"
_LOCKS = pytest.StashKey[tuple[int, int]]()

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _tags(item) -> set[str]:
    cell = getattr(item, "cell", None)
    return set(cell.get("metadata", {}).get("tags", [])) if cell is not None else set()


def pytest_collection_modifyitems(config, items):
    have = None
    for item in items:
        tags = _tags(item)
        need = max((HARDWARE_TAGS[t] for t in tags & HARDWARE_TAGS.keys()), default=0)
        if not need:
            continue
        if have is None:
            have = _cuda_count()
        if have < need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA GPU(s), this machine has {have}"))
        else:
            item.options["check"] = False


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
    fcntl.flock(turnstile, fcntl.LOCK_EX)
    if ALONE_TAG in _tags(item):
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for the test running elsewhere to finish
    else:
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        if ALONE_TAG in _tags(item):
            fcntl.flock(turnstile, fcntl.LOCK_UN)
