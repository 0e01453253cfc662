"""Checks for chapter 07 · Gather and scatter.

Each check feeds the learner's function small CPU tensors drawn from a fixed seed, and sizes them so
that the most common slip — the right operation along the wrong ``dim`` — still *runs* and is caught
by its values, not by a crash.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from utils.checks import ExerciseFailed, exercise, expect

__all__ = ["check_one_hot", "check_segment_mean", "check_select_scores"]


def _call(fn: Callable[..., object], *args: object) -> object:
    """Call the learner's function; turn a crash into a failed check (NotImplementedError passes)."""
    try:
        return fn(*args)
    except NotImplementedError:
        raise
    except (RuntimeError, IndexError, ValueError, TypeError) as err:
        first_line = str(err).splitlines()[0] if str(err) else ""
        raise ExerciseFailed(
            f"your function raised {type(err).__name__}: {first_line}. Check which dim you index along "
            "and that the index has as many dimensions as the tensor."
        ) from None


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@exercise("Exercise 1 · One-hot with scatter")
def check_one_hot(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(labels, num_classes)``: labels of shape (N,) → float tensor (N, num_classes) of 0s and 1s."""
    # N > C, so scattering along dim 0 instead of dim 1 runs without error.
    labels = torch.tensor([2, 0, 3, 1, 3, 0, 2])
    kept = labels.clone()
    out = _call(fn, labels, 4)
    expect(isinstance(out, torch.Tensor), f"return a tensor, got {type(out).__name__}")
    expect(out.shape == (7, 4), f"7 labels and 4 classes give shape (7, 4); got {tuple(out.shape)}")
    expect(out.is_floating_point(), f"return a float tensor (losses multiply it with floats); got {out.dtype}")
    expect(torch.equal(labels, kept), "do not modify labels in place")
    want = torch.nn.functional.one_hot(labels, 4).to(out.dtype)
    expect(
        torch.equal(out, want),
        "row i must hold a single 1, in column labels[i]: scatter along dim=1 "
        "(zeros(N, C).scatter_(1, labels.unsqueeze(1), 1.0)), not dim=0",
    )
    # num_classes wins over the largest label; a single label works too.
    wide = _call(fn, torch.tensor([1]), 5)
    expect(
        isinstance(wide, torch.Tensor) and wide.shape == (1, 5) and wide.tolist() == [[0, 1, 0, 0, 0]],
        "use num_classes for the width, not labels.max() + 1: fn(tensor([1]), 5) must be [[0, 1, 0, 0, 0]]",
    )


@exercise("Exercise 2 · Select each label's score in a batch")
def check_select_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """``fn(scores, labels)``: scores (B, N, C), labels (B, N) → (B, N), ``out[b, n] = scores[b, n, labels[b, n]]``."""
    # N >= C, so gathering along dim 1 instead of dim 2 runs without error.
    scores = torch.randn(2, 5, 4, generator=_gen(70)).requires_grad_()
    labels = torch.randint(0, 4, (2, 5), generator=_gen(71))
    out = _call(fn, scores, labels)
    expect(isinstance(out, torch.Tensor), f"return a tensor, got {type(out).__name__}")
    expect(out.shape == (2, 5), f"scores (2, 5, 4) and labels (2, 5) give shape (2, 5); got {tuple(out.shape)}")
    want = [[scores[b, n, labels[b, n]].item() for n in range(5)] for b in range(2)]
    expect(
        torch.allclose(out.detach(), torch.tensor(want)),
        "out[b, n] must be scores[b, n, labels[b, n]]: the class axis is the last one, so gather along "
        "dim=2 (or -1) with labels.unsqueeze(-1), not along dim=1",
    )
    expect(out.requires_grad, "keep the result differentiable: use gather, not .item() or .detach()")
    out.sum().backward()
    hits = torch.zeros(2, 5, 4).scatter_(2, labels.unsqueeze(-1), 1.0)
    expect(
        scores.grad is not None and torch.equal(scores.grad, hits),
        "the gradient must reach exactly the selected scores",
    )
    one = _call(fn, torch.tensor([[[0.5, 1.5, 2.5]]]), torch.tensor([[2]]))
    expect(
        isinstance(one, torch.Tensor) and one.shape == (1, 1) and one.item() == 2.5,
        "a batch of one sequence of length one must still give shape (1, 1): squeeze only the last dim "
        "(squeeze(-1)), not every dim of size 1",
    )


def _segment_mean_reference(values: torch.Tensor, ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    rows: list[list[float]] = []
    for s in range(num_segments):
        members = [values[i].tolist() for i in range(len(ids)) if int(ids[i]) == s]
        width = values.shape[1]
        rows.append([sum(col) / len(members) for col in zip(*members, strict=True)] if members else [0.0] * width)
    return torch.tensor(rows, dtype=values.dtype)


@exercise("Exercise 3 · Segment mean")
def check_segment_mean(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(values, segment_ids, num_segments)``: values (N, D) → (num_segments, D) per-segment means.

    Row ``s`` is the mean of the rows of ``values`` whose id is ``s``; a segment with no rows gives 0.
    """
    # num_segments == D: dividing sums (S, D) by counts (S,) broadcasts along the wrong dim and still runs.
    values = torch.randint(-9, 10, (7, 4), generator=_gen(72)).float()
    ids = torch.tensor([0, 2, 0, 1, 2, 2, 0])
    want = _segment_mean_reference(values, ids, 4)   # segment 3 is empty
    out = _call(fn, values, ids, 4)
    expect(isinstance(out, torch.Tensor), f"return a tensor, got {type(out).__name__}")
    expect(out.shape == (4, 4), f"4 segments of width 4 give shape (4, 4); got {tuple(out.shape)}")
    expect(
        not torch.isnan(out).any(),
        "an empty segment must give 0, not NaN: divide by the count clamped to at least 1",
    )
    counts = torch.bincount(ids, minlength=4).unsqueeze(1).float()
    expect(
        not torch.allclose(out[:3], (want * counts / (counts + 1))[:3]),
        "each mean is divided by one member too many: scatter_reduce(..., 'mean') counts the initial "
        "zeros of the output as members unless you pass include_self=False",
    )
    expect(
        torch.allclose(out[:3], want[:3]),
        "row s must be the mean of the rows with id s: divide each segment's sum by its own count. "
        "Counts of shape (S,) divide the columns (dim 1) when broadcast against sums of shape (S, D); "
        "counts.unsqueeze(1) makes them divide the rows (dim 0)",
    )
    expect(torch.equal(out[3], torch.zeros(4)), "the empty segment (id 3) must be a row of zeros")
    # Different S and D, and an id order the learner cannot rely on.
    values2 = torch.randint(-9, 10, (5, 2), generator=_gen(73)).float()
    ids2 = torch.tensor([4, 1, 1, 4, 0])
    out2 = _call(fn, values2, ids2, 5)
    expect(
        isinstance(out2, torch.Tensor) and out2.shape == (5, 2)
        and torch.allclose(out2, _segment_mean_reference(values2, ids2, 5)),
        "with 5 segments of width 2 the result must have shape (5, 2) and hold each segment's mean",
    )
