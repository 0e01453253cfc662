"""What the checks of several chapters share: seeded data and a fixed random state, how a result is named in a
hint, a whole number, a distribution test, and the hint for a hard-coded CUDA device. A chapter's check module
keeps only what its own exercises need."""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
import re
from collections.abc import Callable, Iterator

import torch

from utils.checks import ExerciseFailed, keeps_global_rng, learner_code
from utils.i18n import N_, _

__all__ = ["CUDA_IN_ERROR", "HARD_CODED_DEVICE", "calling", "generator", "is_whole_number", "ks_distance", "ks_limit",
           "own_rng", "randn", "shape_of", "translated"]

#: An error that names CUDA: on a machine without one, the learner's code asked for it by itself.
CUDA_IN_ERROR = re.compile(r"cuda|nvidia", re.IGNORECASE)
HARD_CODED_DEVICE = N_(
    "a hard-coded device such as .cuda() or device='cuda' (torch.device('cuda') fails where there is no "
    "GPU, and elsewhere puts tensors where the caller did not ask): take the device from the input "
    "(x.device) or leave it to .to(device)")


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: a check's data never draws from, nor shifts, the learner's."""
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Standard normal values of ``shape`` drawn from ``seed``."""
    return torch.randn(*shape, generator=generator(seed), dtype=dtype)


def shape_of(value: object) -> str:
    """How a hint names a result: its shape, ``(3, 8)``, or the type of what is not a tensor, ``list``."""
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def ks_distance(sample: torch.Tensor, cdf: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """The Kolmogorov–Smirnov distance between the empirical law of ``sample`` and the law whose CDF is ``cdf``."""
    x = sample.detach().double().flatten().sort().values
    n = x.numel()
    f = cdf(x)
    rank = torch.arange(1, n + 1, dtype=torch.float64)
    return torch.maximum(rank / n - f, f - (rank - 1) / n).max().item()


def ks_limit(n: int) -> float:
    """A KS distance that a sample of ``n`` from the right law exceeds with probability about 4e-6."""
    return 2.5 / math.sqrt(n)


def translated(causes: dict[str, str]) -> dict[str, str]:
    """A table of causes for :func:`~utils.checks.learner_code` (pieces of error messages, and their causes marked
    with ``N_``), in the learner's language."""
    return {piece: _(cause) for piece, cause in causes.items()}


def is_whole_number(value: object) -> bool:
    """A whole number of Python's or NumPy's kind (np.int64 from np.ceil(...).astype(int) counts), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def own_rng(check: Callable[..., None]) -> Callable[..., None]:
    """Run ``check`` with its own CPU random state, seeded alike every time, and give the learner's back after."""

    @functools.wraps(check)
    def run(*args, **kwargs) -> None:
        torch.default_generator.manual_seed(6)
        check(*args, **kwargs)

    return keeps_global_rng(run)


@contextlib.contextmanager
def calling(what: str, hint: str, on: torch.device | None = None) -> Iterator[None]:
    """:func:`~utils.checks.learner_code` that recognizes a hard-coded CUDA device in the error.

    ``on`` is the device of the check's inputs (the CPU if None): when it is not a CUDA device, an error that mentions
    CUDA comes from the learner's code asking for CUDA by itself.
    """
    try:
        yield
    except ExerciseFailed:
        raise
    except Exception as err:
        if (on is None or on.type != "cuda") and CUDA_IN_ERROR.search(f"{type(err).__name__}: {err}"):
            hint = _(HARD_CODED_DEVICE)
        with learner_code(what, hint):
            raise err from None
