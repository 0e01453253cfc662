"""What the checks of several chapters share: seeded data, how a result is named in a hint, and a distribution
test. A chapter's check module keeps only what its own exercises need."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from utils.i18n import _

__all__ = ["generator", "ks_distance", "ks_limit", "randn", "shape_of", "translated"]


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
