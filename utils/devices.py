"""Finding the devices a notebook can use.

The contract (the one *Dive into Deep Learning* made familiar, with its empty-list bug fixed):

=================  ==================  ==================  ============================
call               no GPU              one GPU             four GPUs
=================  ==================  ==================  ============================
``num_gpus()``     ``0``               ``1``               ``4``
``try_gpu()``      ``cpu``             ``cuda:0``          ``cuda:0``
``try_gpu(3)``     ``cpu``             ``cpu``             ``cuda:3``
``try_all_gpus()`` ``[cpu]``           ``[cuda:0]``        ``[cuda:0, ..., cuda:3]``
=================  ==================  ==================  ============================

**Which devices count as a GPU.** The current accelerator that ``torch.accelerator`` reports, when it
is a GPU: CUDA (NVIDIA, and AMD through ROCm, which PyTorch also calls ``cuda``), Intel XPU or Apple
MPS. On a Mac, ``try_gpu()`` therefore returns ``mps:0``. Other accelerator types are not GPUs and
are ignored. ``try_all_gpus()`` never returns an empty list: with no GPU it returns ``[cpu]``, so
``for d in try_all_gpus()`` and ``devices[0]`` always work.

Nothing here initializes CUDA: counting devices goes through ``torch.accelerator.device_count()``,
which reads the driver without creating a context.

Used by every chapter's setup cell (``try_gpu``, ``check_torch_version``), by the GPU-only cells of
chapters 05, 06, 07, 09 and 10 (``requires``) and by chapters 00, 07 and 09 (``try_all_gpus``).
"""

from __future__ import annotations

import re

import torch

from utils._validate import check_int
from utils.i18n import OLD_TORCH, SKIPPED_MANY, SKIPPED_ONE, _

__all__ = [
    "GPU_TYPES",
    "MIN_TORCH",
    "check_torch_version",
    "gpu_type",
    "num_gpus",
    "requires",
    "try_all_gpus",
    "try_gpu",
]

#: The oldest PyTorch release the committed outputs are kept valid for (README: "Supported versions").
MIN_TORCH = (2, 11)

#: Accelerator types that these helpers treat as GPUs.
GPU_TYPES = ("cuda", "xpu", "mps")


def gpu_type() -> str | None:
    """The type of this machine's GPU (``'cuda'``, ``'xpu'`` or ``'mps'``), or ``None`` without one."""
    if not torch.accelerator.is_available():
        return None
    acc = torch.accelerator.current_accelerator()
    if acc is None or acc.type not in GPU_TYPES:
        return None
    return acc.type


def num_gpus() -> int:
    """How many GPUs this process can see (0 without one). ``CUDA_VISIBLE_DEVICES`` is respected."""
    if gpu_type() is None:
        return 0
    return torch.accelerator.device_count()


def try_gpu(i: int = 0) -> torch.device:
    """Return GPU ``i`` if it exists, else the CPU.

    >>> try_gpu()        # on a laptop without a GPU
    device(type='cpu')
    """
    i = check_int(i, "i")
    kind = gpu_type()
    if kind is not None and i < num_gpus():
        return torch.device(kind, i)
    return torch.device("cpu")


def try_all_gpus() -> list[torch.device]:
    """Return every GPU, or ``[torch.device('cpu')]`` when there is none (never an empty list)."""
    kind = gpu_type()
    n = num_gpus()
    if kind is None or n == 0:
        return [torch.device("cpu")]
    return [torch.device(kind, i) for i in range(n)]


def requires(kind: str = "cuda", count: int = 1) -> bool:
    """True when this machine has ``count`` devices of ``kind``; otherwise say so and return False.

    Guards a notebook cell that needs hardware, so that *Run All* on a laptop skips it instead of
    crashing::

        if requires("cuda", 2):
            ...  # the two-GPU demo

    Such cells also carry the tag ``requires-cuda`` (or ``requires-multi-gpu`` for ``count >= 2``);
    the test suite skips them where the hardware is missing.
    """
    if kind not in GPU_TYPES:
        raise ValueError(f"kind must be one of {GPU_TYPES}, got {kind!r}")
    count = check_int(count, "count")
    have = num_gpus() if gpu_type() == kind else 0
    if have >= count:
        return True
    if count == 1:
        print(_(SKIPPED_ONE).format(
            kind=kind.upper(), have=have))
    else:
        print(_(SKIPPED_MANY).format(
            count=count, kind=kind.upper(), have=have))
    return False


def check_torch_version(version: str | None = None, minimum: tuple[int, int] = MIN_TORCH) -> bool:
    """True if ``version`` (default: the running torch) is ``minimum`` or newer; else say so plainly.

    Every chapter's setup cell calls it, so a learner on an older image (Colab, a GPU container) reads
    why a cell may fail or print other values, instead of guessing. ``minimum`` is ``(MAJOR, MINOR)``.
    """
    if not (
        isinstance(minimum, tuple)
        and len(minimum) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in minimum)
    ):
        raise TypeError(
            f"minimum must be a tuple (MAJOR, MINOR) of non-negative ints such as (2, 11), "
            f"got {type(minimum).__name__} {minimum!r}"
        )
    version = torch.__version__ if version is None else version
    if not isinstance(version, str):
        raise TypeError(f"version must be a str such as '2.13.0', got {type(version).__name__}")
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"version must start with MAJOR.MINOR, got {version!r}")
    if (int(match.group(1)), int(match.group(2))) >= minimum:
        return True
    need = ".".join(map(str, minimum))
    print(_(OLD_TORCH).format(version=version, need=need))
    return False
