"""Checks for chapter 07 · Gather and scatter.

Each check feeds the learner's function small CPU tensors with fixed values, sized so that the most
common slip, the right operation along the wrong ``dim``, still *runs* and is caught by its values
rather than by a crash. Every call into the learner's code goes through :func:`utils.checks.learner_code`,
so an error becomes a hint that names the likely cause.

Where the output lands is checked without a GPU, in one of two ways:

* inputs on the ``meta`` device (shapes and devices, no data): the output must be on ``meta`` too.
  Used where every plausible right answer has a meta kernel (exercises 1 and 2).
* CPU inputs with the *default* device set to ``meta`` (``with torch.device("meta")``): a tensor the
  answer creates without ``device=`` lands on ``meta``, so the result moves, breaks or changes; an
  answer that takes the device from its input gives the same CPU result as before. Used where a right
  answer may call an operation without a meta kernel, such as ``torch.bincount`` (exercises 3 and 4).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

from utils.checks import exercise, expect, learner_code

__all__ = ["check_count_tokens", "check_one_hot", "check_segment_mean", "check_select_scores"]

#: The ways to write with an index that the one-hot task accepts as "built with scatter".
SCATTERS = frozenset({"scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"})

ON_META = "your function on inputs on the meta device (a stand-in for a GPU: shapes and devices, no data)"
WITH_META_DEFAULT = (
    "your function with the default device set to meta (a stand-in for inputs on a GPU while new tensors "
    "default to the CPU)"
)


def _device_hint(name: str) -> str:
    return (
        f"create every new tensor on {name}.device: torch.zeros(..., device={name}.device), "
        f"{name}.new_zeros(...) or torch.zeros_like({name}). A bare torch.zeros(...) or torch.arange(...) "
        "lands on the default device (the CPU), not where the data is"
    )


class _Calls(TorchFunctionMode):
    """Records the name of every torch function and Tensor method the learner's code calls."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.names.add(getattr(func, "__name__", ""))
        return func(*args, **(kwargs or {}))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _shape(out: object) -> str:
    return str(tuple(out.shape)) if isinstance(out, torch.Tensor) else type(out).__name__


def _expect_tensor(out: object) -> None:
    expect(isinstance(out, torch.Tensor), f"return a tensor, got {type(out).__name__}")


def _expect_untouched(name: str, now: torch.Tensor, before: torch.Tensor) -> None:
    expect(
        now.shape == before.shape and torch.equal(now, before),
        f"do not modify {name} in place (it is the caller's tensor): use out-of-place forms "
        f"({name}.unsqueeze(1), not {name}.unsqueeze_(1); {name} + k, not {name} += k)",
    )


def _expect_same_without_default_device(name: str, out: torch.Tensor, under_meta: object) -> None:
    """``under_meta`` is the result with the default device set to meta; it must equal ``out``."""
    expect(
        isinstance(under_meta, torch.Tensor)
        and under_meta.device == out.device
        and under_meta.shape == out.shape
        and under_meta.dtype == out.dtype
        and torch.equal(under_meta, out),
        "with the default device set to meta the result changed, so a tensor in your function was made on "
        f"the default device instead of {name}.device: " + _device_hint(name),
    )


# --- Exercise 1 ---------------------------------------------------------------------------------------


@exercise("Exercise 1 · One-hot with scatter")
def check_one_hot(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(labels, num_classes)``: labels (N,) → float (N, num_classes) of 0s and 1s, built with scatter,
    on the labels' device."""
    # N > C, so scattering along dim 0 instead of dim 1 runs without an error.
    labels = torch.tensor([2, 0, 3, 1, 3, 0, 2])
    kept = labels.clone()
    with _Calls() as calls, learner_code(
        "calling one_hot(labels, 4) on 7 labels",
        "the index needs as many dimensions as the output, (N, 1): labels.unsqueeze(1); it must hold "
        "integers (int64): .to(out) converts the dtype too, use .to(out.device) to move a tensor",
    ):
        out = fn(labels, 4)
    _expect_tensor(out)
    _expect_untouched("labels", labels, kept)
    expect(out.shape == (7, 4), f"7 labels and 4 classes give shape (7, 4); got {_shape(out)}")
    expect(out.is_floating_point(), f"return a float tensor (losses multiply it with floats); got {out.dtype}")
    want = torch.nn.functional.one_hot(labels, 4).to(out.dtype)
    expect(
        torch.equal(out, want),
        "row i must hold a single 1, in column labels[i]: scatter along dim=1 "
        "(zeros of shape (N, C), then .scatter_(1, labels.unsqueeze(1), 1.0)), not along dim=0",
    )
    expect(
        bool(calls.names & SCATTERS),
        "the values are right, but the task is to build it with scatter_ (or scatter): start from zeros "
        "and write a 1 per row, instead of F.one_hot, torch.eye(C)[labels] or a comparison",
    )
    with learner_code("calling one_hot(tensor([1]), 5)", "use num_classes for the width"):
        wide = fn(torch.tensor([1]), 5)
    expect(
        isinstance(wide, torch.Tensor) and wide.shape == (1, 5) and wide.tolist() == [[0, 1, 0, 0, 0]],
        "use num_classes for the width, not labels.max() + 1: one_hot(tensor([1]), 5) must be [[0, 1, 0, 0, 0]]",
    )
    with learner_code(f"calling {ON_META}", _device_hint("labels")):
        on_meta = fn(labels.to("meta"), 4)
    expect(
        isinstance(on_meta, torch.Tensor) and on_meta.is_meta,
        f"with labels on the meta device the one-hot landed on "
        f"{on_meta.device if isinstance(on_meta, torch.Tensor) else 'nothing'}: " + _device_hint("labels"),
    )


# --- Exercise 2 ---------------------------------------------------------------------------------------


@exercise("Exercise 2 · Select each label's score in a batch")
def check_select_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """``fn(scores, labels)``: scores (B, N, C), labels (B, N) → (B, N), ``out[b, n] = scores[b, n, labels[b, n]]``,
    differentiable with respect to ``scores``, on the scores' device."""
    # N >= C, so gathering along dim 1 instead of dim 2 runs without an error.
    scores = torch.randn(2, 5, 4, generator=_gen(70))
    labels = torch.tensor([[3, 0, 2, 2, 1], [1, 3, 3, 0, 2]])
    kept_scores, kept_labels = scores.clone(), labels.clone()
    leaf = scores.clone().requires_grad_()
    with learner_code(
        "calling select_scores(scores, labels) with scores (2, 5, 4) and labels (2, 5)",
        "gather along the class axis (the last one), with an index of as many dimensions as scores "
        "(labels.unsqueeze(-1)) holding integers: labels.to(scores) would turn them into floats, "
        "use labels.to(scores.device) to move them",
    ):
        out = fn(leaf, labels)
    _expect_tensor(out)
    _expect_untouched("labels", labels, kept_labels)
    _expect_untouched("scores", leaf.detach(), kept_scores)
    expect(out.shape == (2, 5), f"scores (2, 5, 4) and labels (2, 5) give shape (2, 5); got {_shape(out)}")
    want = torch.tensor([[scores[b, n, labels[b, n]].item() for n in range(5)] for b in range(2)])
    expect(
        torch.allclose(out.detach(), want),
        "out[b, n] must be scores[b, n, labels[b, n]]: the class axis is the last one, so gather along "
        "dim=2 (or -1) with labels.unsqueeze(-1), not along dim=1",
    )
    expect(out.requires_grad, "keep the result differentiable: use gather, not .item(), .tolist() or .detach()")
    with learner_code("back-propagating from the sum of your output", "use gather, which has a gradient"):
        out.sum().backward()
    hits = torch.zeros(2, 5, 4).scatter_(2, labels.unsqueeze(-1), 1.0)
    expect(
        leaf.grad is not None and torch.equal(leaf.grad, hits),
        "the gradient must reach exactly the selected scores, each with weight 1",
    )
    with learner_code("calling select_scores on a batch of one sequence of length one", "squeeze only dim -1"):
        one = fn(torch.tensor([[[0.5, 1.5, 2.5]]]), torch.tensor([[2]]))
    expect(
        isinstance(one, torch.Tensor) and one.shape == (1, 1) and one.item() == 2.5,
        "a batch of one sequence of length one must still give shape (1, 1): squeeze only the last dim "
        "(squeeze(-1)), not every dim of size 1",
    )
    with learner_code(f"calling {ON_META}", _device_hint("scores")):
        on_meta = fn(scores.to("meta"), labels.to("meta"))
    expect(
        isinstance(on_meta, torch.Tensor) and on_meta.is_meta and on_meta.shape == (2, 5),
        "with scores and labels on the meta device the result must be on the meta device too, of shape "
        "(2, 5): " + _device_hint("scores"),
    )


# --- Exercise 3 ---------------------------------------------------------------------------------------


def _segment_mean_reference(values: torch.Tensor, ids: torch.Tensor, num_segments: int) -> torch.Tensor:
    """Plain Python: each segment's mean, 0 for an empty one."""
    rows: list[list[float]] = []
    width = values.shape[1]
    for s in range(num_segments):
        members = [values[i].tolist() for i in range(len(ids)) if int(ids[i]) == s]
        rows.append([sum(col) / len(members) for col in zip(*members, strict=True)] if members else [0.0] * width)
    return torch.tensor(rows, dtype=values.dtype)


def _one_member_kept(out: torch.Tensor, values: torch.Tensor, ids: torch.Tensor, counts: torch.Tensor) -> bool:
    """True if every segment with several rows holds one member row divided by the count (a raced write)."""
    several = [s for s in range(len(counts)) if counts[s] > 1]
    return bool(several) and all(
        any(torch.allclose(out[s] * counts[s], values[i]) for i in range(len(ids)) if int(ids[i]) == s)
        for s in several
    )


#: Exercise 3's data: 7 rows in 4 segments of 3, 1, 3 and 0 rows (sizes that do not divide evenly), ids out
#: of order, means that are not whole numbers, and no member row equal to its segment's sum.
SEGMENT_VALUES = torch.tensor(
    [[4.0, -2.0, 7.0, 1.0], [-5.0, 3.0, 0.0, 8.0], [2.0, 6.0, -4.0, -1.0], [9.0, -7.0, 5.0, 3.0],
     [1.0, 1.0, 2.0, -6.0], [6.0, -3.0, 9.0, 2.0], [-1.0, 4.0, 0.0, 5.0]]
)
SEGMENT_IDS = torch.tensor([0, 2, 0, 1, 2, 2, 0])


@exercise("Exercise 3 · Segment mean")
def check_segment_mean(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(values, segment_ids, num_segments)``: values (N, D) → (num_segments, D) per-segment means.

    Row ``s`` is the mean of the rows of ``values`` whose id is ``s``; a segment with no rows gives 0.
    The result has the values' dtype and device and is differentiable with respect to ``values``.
    """
    # num_segments == D: dividing sums (S, D) by counts (S,) broadcasts along the wrong dim and still runs.
    values, ids = SEGMENT_VALUES.clone(), SEGMENT_IDS.clone()
    kept_values, kept_ids = values.clone(), ids.clone()
    want = _segment_mean_reference(values, ids, 4)  # segment 3 is empty
    counts = torch.bincount(ids, minlength=4).unsqueeze(1).float()
    with learner_code(
        "calling segment_mean(values, ids, 4) with values (7, 4)",
        "segments are given by the ids, not by position: they need not be contiguous nor of equal size, "
        "so no reshape; index_add_ takes the 1-D ids, scatter_add_/scatter_reduce need them expanded to "
        "values' shape (ids.unsqueeze(1).expand_as(values))",
    ):
        out = fn(values, ids, 4)
    _expect_tensor(out)
    _expect_untouched("values", values, kept_values)
    _expect_untouched("segment_ids", ids, kept_ids)
    expect(
        out.shape == (4, 4),
        f"4 segments of width 4 give shape (4, 4); got {_shape(out)}. The number of rows is num_segments, "
        "not ids.max() + 1: the last segments may have no rows",
    )
    expect(out.dtype == values.dtype, f"return values' dtype ({values.dtype}); got {out.dtype}")
    expect(
        not torch.isnan(out).any(),
        "an empty segment must give 0, not NaN: divide by the count clamped to at least 1",
    )
    expect(
        not torch.allclose(out[:3], (want * counts / (counts + 1))[:3]),
        "each mean is divided by one member too many: scatter_reduce(..., 'mean') counts the initial "
        "zeros of the output as members unless you pass include_self=False",
    )
    expect(
        not _one_member_kept(out, values, ids, counts.squeeze(1)),
        "each segment holds one of its rows instead of their sum: scatter_ (and index_copy_) keep one of "
        "the writes that meet at a position; repeated ids must add up, with scatter_add_ or index_add_",
    )
    expect(
        not torch.equal(out[:3], want[:3].floor()),
        "the means are rounded down: divide with /, not // (floor division); means need not be whole numbers",
    )
    expect(
        not torch.allclose(out, want * counts / counts.clamp(min=1).T),
        "each segment's sum must be divided by its own count. Counts of shape (S,) divide the columns (dim 1) "
        "when broadcast against sums of shape (S, D); counts.unsqueeze(1) makes them divide the rows (dim 0)",
    )
    expect(
        torch.allclose(out[:3], want[:3]),
        "row s must be the mean of the rows whose id is s: the sum of those rows divided by how many there are",
    )
    expect(torch.equal(out[3], torch.zeros(4)), "the empty segment (id 3) must be a row of zeros")

    # Another width and number of segments, float64, ids in no particular order, two empty segments.
    values2 = torch.tensor([[1.5, -2.0], [4.0, 0.5], [-3.0, 7.0], [2.5, 1.0], [8.0, -6.0]], dtype=torch.float64)
    ids2 = torch.tensor([4, 1, 1, 4, 0])
    with learner_code(
        "calling segment_mean on float64 values (5, 2) with 5 segments",
        "create the output with values' dtype (values.new_zeros, or dtype=values.dtype) and num_segments rows",
    ):
        out2 = fn(values2, ids2, 5)
    expect(
        isinstance(out2, torch.Tensor) and out2.shape == (5, 2) and out2.dtype == torch.float64,
        "float64 values (5, 2) in 5 segments must give a float64 result of shape (5, 2): take the dtype from "
        f"values and the number of rows from num_segments; got {_shape(out2)}"
        + (f" {out2.dtype}" if isinstance(out2, torch.Tensor) else ""),
    )
    expect(
        torch.allclose(out2, _segment_mean_reference(values2, ids2, 5)),
        "with 5 segments of width 2 (ids 4, 1, 1, 4, 0) each row must hold its segment's mean, and the empty "
        "segments 2 and 3 zeros",
    )

    leaf = values.clone().requires_grad_()
    with learner_code("back-propagating from the sum of your output", "use differentiable tensor operations"):
        mean = fn(leaf, ids, 4)
        expect(
            isinstance(mean, torch.Tensor) and mean.requires_grad,
            "keep the result differentiable with respect to values: no .tolist(), .item() or torch.tensor(...) "
            "of Python numbers",
        )
        mean.sum().backward()
    share = (1.0 / counts.squeeze(1))[ids].unsqueeze(1).expand(-1, 4)
    expect(
        leaf.grad is not None and torch.allclose(leaf.grad, share),
        "the gradient of a segment's mean reaches each of its rows with weight 1 / (rows in the segment)",
    )

    with learner_code(f"calling {WITH_META_DEFAULT}", _device_hint("values")):
        with torch.device("meta"):
            under_meta = fn(values, ids, 4)
    _expect_same_without_default_device("values", out, under_meta)


# --- Exercise 4 ---------------------------------------------------------------------------------------


@exercise("Exercise 4 · Count tokens per row")
def check_count_tokens(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(tokens, vocab_size)``: tokens (B, L) int64 → int64 (B, vocab_size), ``out[b, v]`` = how many
    times ``v`` occurs in row ``b``; on the tokens' device."""
    # B = 6 > the largest token (3), so counting along dim 0 instead of dim 1 runs without an error;
    # token 4 never occurs, so a width taken from the data is too small; rows repeat tokens.
    tokens = torch.tensor([[3, 1, 3, 3], [0, 0, 0, 0], [2, 1, 2, 0], [1, 1, 3, 2], [0, 3, 1, 2], [2, 2, 2, 1]])
    kept = tokens.clone()
    want = torch.stack([torch.bincount(row, minlength=5) for row in tokens])
    with learner_code(
        "calling count_tokens(tokens, 5) with tokens (6, 4)",
        "count along the vocabulary axis (dim 1); scatter_add_ wants an index and a source of the same shape "
        "and the same dtype as the output (torch.ones_like(tokens)); index_put_ needs one index tensor per "
        "dimension (rows and tokens)",
    ):
        out = fn(tokens, 5)
    _expect_tensor(out)
    _expect_untouched("tokens", tokens, kept)
    expect(
        out.shape == (6, 5),
        f"6 rows and a vocabulary of 5 give shape (6, 5); got {_shape(out)}. The width is vocab_size (not "
        "tokens.max() + 1) and each row keeps its own counts",
    )
    expect(out.dtype == torch.int64, f"counts are whole numbers: return int64 (torch.long); got {out.dtype}")
    expect(
        not torch.equal(out, want.clamp(max=1)),
        "a token that occurs several times in a row is counted once: out[rows, tokens] += 1, scatter_ and "
        "index_put_ without accumulate write each position once, however often it repeats. Make repeats "
        "add up: scatter_add_, or index_put_(..., accumulate=True)",
    )
    expect(
        torch.equal(out, want),
        "out[b, v] must count how often token v occurs in row b: add 1 along dim 1 (the vocabulary axis), "
        "not dim 0, and keep the rows apart",
    )
    with learner_code("calling count_tokens(tensor([[1]]), 3)", "use vocab_size for the width"):
        small = fn(torch.tensor([[1]]), 3)
    expect(
        isinstance(small, torch.Tensor) and small.tolist() == [[0, 1, 0]],
        "use vocab_size for the width, not tokens.max() + 1: count_tokens(tensor([[1]]), 3) must be [[0, 1, 0]]",
    )
    with learner_code(f"calling {WITH_META_DEFAULT}", _device_hint("tokens")):
        with torch.device("meta"):
            under_meta = fn(tokens, 5)
    _expect_same_without_default_device("tokens", out, under_meta)
