"""Checks for chapter 06 · Gather and scatter.

Each check feeds the learner's function small CPU tensors with fixed values, sized so that the most
common slip, the right operation along the wrong ``dim``, still *runs* and is caught by its values
rather than by a crash. Every call into the learner's code goes through :func:`utils.checks.learner_code`,
so an error becomes a hint that names the likely cause.

Where the output lands is checked without a GPU, on the principle that a GPU machine has two devices: the
input's, and the default one (the CPU) where a tensor made without ``device=`` lands.

* Inputs on the ``meta`` device (shapes and devices, no data) stand in for inputs on a GPU; the result
  must be on ``meta`` too. Meta kernels do not refuse every mix of devices that CUDA refuses (a
  ``scatter_add_`` with a CPU ``src`` runs), so :func:`utils.exercises.cuda_rules.same_device` refuses them as
  CUDA does:
  a call may mix the two devices only through the CPU numbers CUDA accepts (0-dim tensors), CPU index
  tensors in advanced indexing (``x[idx]``, ``x[idx] = v``, ``index_put_``: CUDA moves them to the data;
  ``gather``, ``scatter*``, ``index_select`` and ``index_add_`` refuse them on CUDA and here; a CPU tensor
  indexed with a GPU index is refused) and conversions (``.to``, ``copy_``). Copying the data to the CPU
  (``.cpu()``, ``.numpy()``) fails on ``meta`` and is refused: the exercises ask for the work on the
  input's device, and on a GPU the copy waits for its queued work.
* Where an operation has no meta kernel (``torch.bincount``, a boolean mask) or the code needs the values
  (``.item()``, ``.tolist()``), the check falls back to CPU inputs with the *default* device set to
  ``meta`` (:func:`utils.exercises.cuda_rules.default_device_elsewhere`): a tensor the answer creates without
  ``device=`` lands on ``meta`` (a number, 0-dim, stays on the CPU, as CUDA accepts it), so the result
  moves, breaks or changes, and the same function mode, with the two devices' roles swapped, refuses a
  call that mixes it with the inputs. An answer that takes the device from its input gives the same CPU
  result as before, and one that calls ``.cpu()`` or ``.numpy()`` is refused. Moving a new tensor onto the
  input's device (``.to(x.device)``, or an index made without ``device=`` that advanced indexing moves)
  cannot copy out of ``meta``, but works on a GPU, so it passes.

The learner's code runs with ``torch.use_deterministic_algorithms(True, warn_only=True)`` (its warnings
silenced): memory from ``torch.empty`` or ``new_empty`` then holds NaN (integers: their largest value) rather
than whatever was there, so an answer that reads memory nobody wrote fails every time, not by chance.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

from utils.checks import ExerciseFailed, exercise, expect, learner_code
from utils.exercises.common import generator, shape_of
from utils.exercises.cuda_rules import default_device_elsewhere, same_device
from utils.exercises.observe import TorchCalls
from utils.i18n import N_, _

__all__ = ["check_count_tokens", "check_one_hot", "check_segment_mean", "check_select_scores"]

#: The ways to write with an index that the one-hot task accepts as "built with scatter".
SCATTERS = frozenset({"scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_"})

ON_META = N_("calling your function on inputs on the meta device (a stand-in for a GPU: shapes and devices, no data)")
WITH_META_DEFAULT = N_(
    "calling your function with the default device set to meta (a stand-in for inputs on a GPU while new tensors "
    "default to the CPU)"
)


#: Each exercise's output made where its data is, with the dtype and shape its task asks for: what a device hint
#: suggests, so that following it meets the task's other requirements too (one-hot is float, whatever the labels).
_MADE_ON_THE_DEVICE = {
    "labels": "torch.zeros(N, num_classes, device=labels.device)",
    "scores": "scores.new_zeros(B, N)",
    "values": "values.new_zeros(num_segments, D)",
    "tokens": "tokens.new_zeros(B, vocab_size)",
}


def _device_hint(name: str) -> str:
    return _(
        "create every new tensor on {name}.device, as {make} does (an index: torch.arange(..., "
        "device={name}.device)). A bare torch.zeros(...) or torch.arange(...) lands on the default device (the "
        "CPU), not where the data is"
    ).format(name=name, make=_MADE_ON_THE_DEVICE[name])


def _host_hint(name: str) -> str:
    return _(
        "keep the work on {name}.device: .cpu() and .numpy() copy the data to the CPU, which on a GPU waits for "
        "all its queued work and sends the data over and back (a result built from the copy, torch.from_numpy "
        "too, stays on the CPU unless moved). Also {advice}"
    ).format(name=name, advice=_device_hint(name))


_NOT_RUN = object()


class _NeedsData(Exception):
    """The learner's code needs the values of a meta tensor."""


class _TolistNeedsData(TorchFunctionMode):
    """Raises :class:`_NeedsData` where the code asks a meta tensor for Python numbers (``.tolist()``): a new
    tensor made from them shows where it lands only when the check falls back to the default device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "tolist" and args and args[0].is_meta:
            raise _NeedsData("tolist")
        return func(*args, **(kwargs or {}))


def _copied_to_host(err: BaseException) -> bool:
    """The error a meta tensor raises when the code copies its data to the CPU."""
    text = str(err)
    return "copy out of meta" in text or "convert meta device type tensor to numpy" in text


def _meta_cannot_run(err: BaseException) -> bool:
    """True for an operation that has no meta kernel (``bincount``) or needs the data (``.item()``, a mask)."""
    text = str(err)
    if _copied_to_host(err):
        return False
    return (isinstance(err, NotImplementedError) and "meta" in text.lower()) or "called on meta tensors" in text


def _empty_memory_filled(check: Callable) -> Callable:
    """Run ``check`` with ``torch.use_deterministic_algorithms(True, warn_only=True)``: ``torch.empty`` then fills
    new memory with NaN (integers: their largest value). Its warnings are dropped and the previous settings
    come back."""

    @functools.wraps(check)
    def run(*args, **kwargs):
        enabled = torch.are_deterministic_algorithms_enabled()
        warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
        fill = torch.utils.deterministic.fill_uninitialized_memory
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.utils.deterministic.fill_uninitialized_memory = True
            try:
                return check(*args, **kwargs)
            finally:
                torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
                torch.utils.deterministic.fill_uninitialized_memory = fill

    return run


#: The factories whose new memory holds whatever was there (NaN, or the largest integer, in the checks).
_EMPTY = frozenset({"empty", "new_empty", "empty_like", "empty_strided"})


def _names(seen: TorchCalls) -> set[str]:
    """What the learner's code called, a method named without the leading dot: ``scatter_``, ``new_empty``."""
    return {name.lstrip(".") for name in seen.names}


def _called(calls: set[str], names: frozenset[str] | set[str]) -> str | None:
    """The first of ``names`` (alphabetically) that the learner's code called, if any."""
    return min(calls & names, default=None)


def _expect_untouched(name: str, now: torch.Tensor, before: torch.Tensor) -> None:
    """The caller's tensor ``name`` is as it was ``before``: the same values, and requires_grad not switched on."""
    expect(now.shape == before.shape and torch.equal(now, before),
           _("do not modify {name} in place (it is the caller's tensor): use out-of-place forms "
             "({name}.unsqueeze(1), not {name}.unsqueeze_(1); {name} + k, not {name} += k)").format(name=name))
    expect(now.requires_grad == before.requires_grad,
           _("do not call {name}.requires_grad_(): it changes the caller's tensor, whose every later use autograd "
             "then records. The result requires grad by itself whenever {name} does, as it is computed from {name}"
             ).format(name=name))


#: Pieces of torch's messages for a source whose dtype is not the output's (scatter*, index_add_, index_put_).
_DTYPE_MISMATCH = ("Expected self.dtype to be equal to src.dtype", "must have the same scalar type",
                   "requires the source and destination dtypes match")
#: Torch's message for an in-place write into a tensor made with requires_grad=True (or a view of one).
_LEAF_IN_PLACE = "a leaf Variable that requires grad is being used in an in-place operation"


def _leaf_hint(make: str, source: str | None = None) -> str:
    if source:
        return _("the output was made with requires_grad=True, and autograd refuses in-place writes (scatter_, "
                 "index_add_, out[i] = ...) into such a tensor: create it without requires_grad ({make}). The result "
                 "requires grad by itself whenever {source} does, as it is computed from {source}").format(
                     make=make, source=source)
    return _("the output was made with requires_grad=True, and autograd refuses in-place writes (scatter_, "
             "index_add_, out[i] = ...) into such a tensor: create it without requires_grad ({make})").format(make=make)


#: Out-of-place forms of the writes with an index: each returns a new tensor and leaves its ``self`` unchanged.
_OUT_OF_PLACE_WRITES = frozenset({"scatter", "scatter_add", "scatter_reduce", "index_add", "index_put", "index_copy",
                                  "index_reduce", "index_fill", "masked_fill", "masked_scatter", "put"})
#: Torch's message for an in-place write into an expanded tensor (several elements share one memory location).
_EXPANDED_WRITE = "more than one element of the written-to tensor refers to a single memory location"
#: Torch's message for an index value of -1 in gather, scatter* and index_add_ (what zero-based ids minus 1 give).
_MINUS_ONE = "index -1 is out of bounds"
#: Pieces of torch's messages for an index whose number of dimensions or dtype gather and scatter refuse.
_INDEX_NDIM = "must have the same number of dimensions as"
_INDEX_DTYPE = "Expected dtype int32/int64 for index"
#: The cause given for an error that no known piece of a message explains: what was observed is the error itself.
_UNKNOWN_ERROR = N_("unknown: the check does not recognize this error (PyTorch's message above says what it refused)")


def _expanded_hint(make: str) -> str:
    return _("the tensor written into is an expanded view: expand() repeats its rows without copying them (stride 0), "
             "so several of its elements are one memory location, and PyTorch refuses in-place writes into it. "
             "Create it at full size ({make}), or call .clone() on the expanded tensor before writing into it"
             ).format(make=make)


def _index_causes(ids: str, make: str) -> dict[str, str]:
    """Causes of errors that the writes with an index raise, whatever the exercise (see :func:`learner_code`)."""
    return {
        _EXPANDED_WRITE: _expanded_hint(make),
        _MINUS_ONE: _("an index held -1: {ids} are zero-based already (0 up to the size - 1), so use them as they "
                      "are. Subtracting 1 turns 0 into -1, which gather, scatter and index_add_ refuse"
                      ).format(ids=ids),
    }


def _expect_not_expanded(out: torch.Tensor, make: str) -> None:
    """A wrong result that is an expanded view (stride 0 along a dimension longer than 1): writes into one of its
    rows landed in all of them."""
    shared = [d for d in range(out.dim()) if out.stride(d) == 0 and out.shape[d] > 1]
    expect(not shared,
           _("the result is an expanded view (stride 0 along dim {dim}): all its rows are one "
             "memory location, so every write landed in each of them. expand() does not copy; create the output at "
             "full size ({make}), or call .clone() on the expanded tensor before writing into it").format(
                 dim=shared[0] if shared else 0, make=make))


def _expect_written(out: torch.Tensor, calls: set[str]) -> None:
    """A result that is all zeros, as if nothing was written: name the dropped out-of-place write if there was one."""
    dropped = sorted(calls & _OUT_OF_PLACE_WRITES)
    expect(bool(out.detach().any()),
           _("the result is all zeros, as if nothing had been written into it, and your function called {function}() "
             "(no trailing underscore), which returns a new tensor and leaves the one it is called on unchanged: keep "
             "what it returns (out = out.{function}(...)) or call {function}_(...), which writes in place").format(
                 function=dropped[0])
           if dropped else
           _("the result is all zeros, as if nothing had been written into it; the check cannot tell why"))


def _first_difference(out: torch.Tensor, want: torch.Tensor) -> str:
    """Where ``out`` first differs from ``want``, as a learner reads it: ``out[1, 2] is 0.5 where 1.5 is expected``."""
    got = out.detach().to(want.dtype)
    differ = (~torch.isclose(got, want)).nonzero()
    if not len(differ):
        return _("out is close to what is expected everywhere")
    where = tuple(int(i) for i in differ[0])
    spot = ", ".join(map(str, where))
    return _("out[{index}] is {value} where {expected} is expected").format(
        index=spot, value=f"{got[where].item():.4g}", expected=f"{want[where].item():.4g}")


def _unknown(task: str, out: torch.Tensor, want: torch.Tensor) -> str:
    return _("{task}; {difference}. The check does not recognize the cause of this difference").format(
        task=task, difference=_first_difference(out, want))


def _expect_same_without_default_device(name: str, out: torch.Tensor, under_meta: object) -> None:
    """``under_meta`` is the result with the default device set to meta; it must equal ``out``."""
    expect(isinstance(under_meta, torch.Tensor)
           and under_meta.device == out.device
           and under_meta.shape == out.shape
           and under_meta.dtype == out.dtype
           and torch.equal(under_meta, out),
           _("with the default device set to meta the result changed, so a tensor in your function was made on "
             "the default device instead of {name}.device: {advice}").format(name=name, advice=_device_hint(name)))


def _expect_on_input_device(name: str, fn: Callable, args: tuple, out: torch.Tensor) -> None:
    """``fn(*args)`` gave ``out`` on the CPU; its result must follow the inputs to another device (see the top)."""
    on_meta: object = _NOT_RUN
    meta_args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    with learner_code(_(ON_META), _device_hint(name)):
        try:
            with _TolistNeedsData(), same_device(name, hint=_device_hint(name)):
                on_meta = fn(*meta_args)
        except Exception as err:
            if _copied_to_host(err):
                raise ExerciseFailed(_("your function copies data to the CPU ({error}): {advice}").format(
                    error=f"{type(err).__name__}: {err}", advice=_host_hint(name))) from None
            if not (isinstance(err, _NeedsData) or _meta_cannot_run(err)):
                raise
            on_meta = _NOT_RUN              # no meta kernel, or the code needs the values: the default device
    if on_meta is not _NOT_RUN:
        expect(isinstance(on_meta, torch.Tensor) and on_meta.is_meta and on_meta.shape == out.shape,
               _("with {name} on the meta device the result must be on the meta device too, of shape "
                 "{shape}; it is {found}: {advice}").format(
                   name=name, shape=tuple(out.shape), advice=_host_hint(name),
                   found=(_("on {device}, of shape {shape}").format(device=on_meta.device, shape=tuple(on_meta.shape))
                          if isinstance(on_meta, torch.Tensor) else type(on_meta).__name__)))
        return
    with learner_code(_(WITH_META_DEFAULT), _device_hint(name)):
        try:
            with (default_device_elsewhere("meta"), TorchCalls() as calls,
                  same_device(name, host="meta", hint=_device_hint(name))):
                under_meta = fn(*args)
        except NotImplementedError as err:
            if "copy out of meta" not in str(err):
                raise
            under_meta = None               # a new tensor moved onto the input's device: fine on a GPU
    expect(not _names(calls) & {"cpu", "numpy", "__array__"}, _host_hint(name))
    if under_meta is not None:
        _expect_same_without_default_device(name, out, under_meta)


def _run(fn: Callable, args: tuple, inputs: dict[str, torch.Tensor], what: str,
         causes: dict[str, str]) -> tuple[torch.Tensor, set[str]]:
    """``fn(*args)`` returns a tensor and leaves the caller's ``inputs`` as they were; it and what the answer called."""
    kept = {name: t.clone() for name, t in inputs.items()}
    with TorchCalls() as seen, learner_code(what, _(_UNKNOWN_ERROR), causes):
        out = fn(*args)
    expect(isinstance(out, torch.Tensor), _("return a tensor, got {type}").format(type=type(out).__name__))
    for name, now in inputs.items():
        _expect_untouched(name, now, kept[name])
    return out, _names(seen)


def _expect_width_from_argument(fn: Callable, args: tuple, want: list, what: str, hint: str, message: str) -> None:
    """The output's width is the one the arguments give, whatever the values hold."""
    with learner_code(what, hint):
        small = fn(*args)
    expect(isinstance(small, torch.Tensor) and small.tolist() == want, message)


# --- Exercise 1 ---------------------------------------------------------------------------------------


def _expect_one_hot_of(out: torch.Tensor, labels: torch.Tensor, called: set[str]) -> None:
    """Row i holds a single 1, in column labels[i], and zeros elsewhere."""
    want = torch.nn.functional.one_hot(labels, 4).to(out.dtype)
    empty = _called(called, _EMPTY)
    expect(not out.isnan().any(),
           _("start from torch.zeros: your function called {function}(), whose new memory holds whatever was there "
             "(NaN here: the check fills new memory with NaN), and scatter_ writes one position per row, so the "
             "others keep it").format(function=empty) if empty else
           _("the result holds NaN; row i must hold a single 1, in column labels[i], and zeros elsewhere"))
    expect(torch.equal(out, want) or bool(out[1:].any()) or not out[0].bool().equal(want.bool().any(0)),
           _("only row 0 was written, with a 1 for every label: the index had shape (1, N) (labels.unsqueeze(0)). "
             "Along dim=1, index[i][j] says which column of row i to write, so it needs one row per label, "
             "shape (N, 1): labels.unsqueeze(1)"))
    if not torch.equal(out, want):
        _expect_not_expanded(out, "torch.zeros(N, num_classes, device=labels.device)")
        _expect_written(out, called)
        along_rows = torch.zeros(7, 4).scatter_(0, labels.unsqueeze(1), 1.0).to(out.dtype)
        expect(not torch.equal(out, along_rows),
               _("the 1s are where a scatter along dim=0 puts them (column 0, row labels[i]); row i must hold a "
                 "single 1, in column labels[i]: scatter along dim=1 (zeros of shape (N, C), then "
                 ".scatter_(1, labels.unsqueeze(1), 1.0)), not along dim=0"))
        expect(False, _unknown(_("row i must hold a single 1, in column labels[i]"), out, want))


@exercise("Exercise 1 · One-hot with scatter")
@_empty_memory_filled
def check_one_hot(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(labels, num_classes)``: labels (N,) → float (N, num_classes) of 0s and 1s, built with scatter,
    on the labels' device."""
    # N > C, so scattering along dim 0 instead of dim 1 runs without an error.
    labels = torch.tensor([2, 0, 3, 1, 3, 0, 2])
    dtype_hint = _(
        "the values written must have the output's dtype: scatter_ refused values of another dtype. Write a "
        "number, .scatter_(1, index, 1.0), or ones of the output's dtype, torch.ones(N, 1, device=labels.device) "
        "(torch.ones_like(labels) would be int64, like the labels)"
    )
    out, called = _run(fn, (labels, 4), {"labels": labels}, _("calling one_hot(labels, 4) on 7 labels"), {
        _INDEX_NDIM: _("the index needs as many dimensions as the output, (N, 1): labels.unsqueeze(1)"),
        _INDEX_DTYPE: _("the index must hold integers (int64), and it held another dtype: move the labels with "
                        ".to(labels.device), which keeps their dtype (.to(out) would also convert them to the "
                        "output's float dtype)"),
        **dict.fromkeys(_DTYPE_MISMATCH, dtype_hint),
        _LEAF_IN_PLACE: _leaf_hint("torch.zeros(N, num_classes, device=labels.device)"),
        **_index_causes(_("the labels"), "torch.zeros(N, num_classes, device=labels.device)")})
    expect(out.shape == (7, 4), _("7 labels and 4 classes give shape (7, 4); got {shape}").format(shape=shape_of(out)))
    expect(out.is_floating_point(),
           _("return a float tensor (losses multiply it with floats); got {dtype}").format(dtype=out.dtype))
    _expect_one_hot_of(out, labels, called)
    expect(bool(called & SCATTERS),
           _("the values are right, but the task is to build it with scatter_ (or scatter): start from zeros "
             "and write a 1 per row, instead of F.one_hot, torch.eye(C)[labels] or a comparison"))
    _expect_width_from_argument(
        fn, (torch.tensor([1]), 5), [[0, 1, 0, 0, 0]], _("calling one_hot(tensor([1]), 5)"),
        _("use num_classes for the width"),
        _("use num_classes for the width, not labels.max() + 1: one_hot(tensor([1]), 5) must be [[0, 1, 0, 0, 0]]"))
    _expect_on_input_device("labels", fn, (labels, 4), out)


# --- Exercise 2 ---------------------------------------------------------------------------------------


def _expect_scores_at_labels(out: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor, called: set[str]) -> None:
    """``out[b, n]`` is the score ``scores[b, n, labels[b, n]]``, a floating-point number."""
    want = torch.tensor([[scores[b, n, labels[b, n]].item() for n in range(5)] for b in range(2)])
    expect(out.is_floating_point(),
           _("out[b, n] is a score, so the result holds floating-point numbers like scores; got {dtype}. "
             "argmax gives the index of the best class, not the score of the labelled one: gather along dim=2 (or "
             "-1) with labels.unsqueeze(-1)").format(dtype=out.dtype) if "argmax" in called else
           _("out[b, n] is a score, so the result holds floating-point numbers like scores; got {dtype}: gather "
             "along dim=2 (or -1) with labels.unsqueeze(-1)").format(dtype=out.dtype))
    got = out.detach().to(want.dtype)
    if torch.allclose(got, want):
        return

    def at_labels(source: torch.Tensor, index: torch.Tensor = labels) -> torch.Tensor:
        return source.gather(2, index.unsqueeze(-1)).squeeze(-1)

    for near_miss, hint in [
        (at_labels(scores.softmax(-1)),
         _("out[b, n] holds softmax(scores)[b, n, labels[b, n]], a probability; the task asks for the score "
           "itself, scores[b, n, labels[b, n]]: gather from scores, with no softmax first")),
        (at_labels(scores.log_softmax(-1)),
         _("out[b, n] holds log_softmax(scores)[b, n, labels[b, n]], a log-probability; the task asks for the "
           "score itself, scores[b, n, labels[b, n]]: gather from scores as they are, with no log_softmax first")),
        (at_labels(scores, (labels - 1) % 4),
         _("out[b, n] is scores[b, n, labels[b, n] - 1] (and label 0 read the last class, as an index of -1 "
           "counts from the end): the labels are zero-based already, so index with them as they are")),
        (scores.amax(-1),
         _("out[b, n] is the largest score at position (b, n), a max over the classes, not the score of the "
           "labelled class: gather along dim=2 (or -1) with labels.unsqueeze(-1)")),
        (scores.gather(1, labels.unsqueeze(-1)).squeeze(-1),
         _("out[b, n] is scores[b, labels[b, n], 0]: the gather ran along dim=1 (positions) instead of the "
           "class axis, the last one: gather along dim=2 (or -1) with labels.unsqueeze(-1), not along dim=1")),
        (scores[:, 0, :].gather(-1, labels),
         _("out[b, n] is scores[b, 0, labels[b, n]]: every position read the first position's scores, because "
           "the index had shape (B, 1, N) (labels.unsqueeze(1)); give it shape (B, N, 1) with "
           "labels.unsqueeze(-1) and gather along dim=2 (or -1)")),
    ]:
        expect(not torch.allclose(got, near_miss), hint)
    expect(False, _unknown(_("out[b, n] must be scores[b, n, labels[b, n]]"), got, want))


def _expect_gradient_to_the_selected(out: torch.Tensor, leaf: torch.Tensor, labels: torch.Tensor,
                                     differentiable: str, what: str, reaches: str) -> None:
    """The gradient of the output's sum reaches exactly the selected scores, each with weight 1."""
    expect(out.requires_grad, differentiable)
    with learner_code(what, _("use gather, which has a gradient")):
        out.sum().backward()
    hits = torch.zeros(leaf.shape).scatter_(2, labels.unsqueeze(-1), 1.0)
    expect(leaf.grad is not None and torch.equal(leaf.grad, hits), reaches)


def _expect_classes_from_scores(fn: Callable) -> None:
    """With labels that leave out the last class, the number of classes still comes from scores; gradients too."""
    few = torch.tensor([[[0.5, 1.5, 2.5, 3.5], [4.0, 5.0, 6.0, 7.0], [-1.0, -2.0, -3.0, -4.0]]], requires_grad=True)
    few_labels = torch.tensor([[0, 2, 1]])
    with learner_code(
        _("calling select_scores on scores (1, 3, 4) whose labels [0, 2, 1] leave out the last class"),
        _("the number of classes is scores.shape[-1], whatever the labels hold: F.one_hot(labels) is only "
          "labels.max() + 1 wide unless given num_classes"),
    ):
        picked = fn(few * 1, few_labels)
    expect(isinstance(picked, torch.Tensor) and picked.shape == (1, 3)
           and torch.equal(picked.detach().to(few.dtype), torch.tensor([[0.5, 6.0, -2.0]])),
           _("with labels that leave out the last class the result must still be scores[b, n, labels[b, n]]: take "
             "the number of classes from scores.shape[-1], not from the labels"))
    _expect_gradient_to_the_selected(
        picked, few, few_labels,
        _("keep the result differentiable for every batch: use gather, not .item(), .tolist() or .detach()"),
        _("back-propagating from the sum of your output on scores (1, 3, 4)"),
        _("on scores (1, 3, 4) too, the gradient must reach exactly the selected scores, each with weight 1"))


@exercise("Exercise 2 · Select each label's score in a batch")
@_empty_memory_filled
def check_select_scores(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """``fn(scores, labels)``: scores (B, N, C), labels (B, N) → (B, N), ``out[b, n] = scores[b, n, labels[b, n]]``,
    differentiable with respect to ``scores``, on the scores' device."""
    # N >= C, so gathering along dim 1 instead of dim 2 runs without an error.
    scores = torch.randn(2, 5, 4, generator=generator(70))
    labels = torch.tensor([[3, 0, 2, 2, 1], [1, 3, 3, 0, 2]])
    leaf = scores.clone().requires_grad_()
    given = leaf * 1  # not a leaf, as a model's scores: editing it in place runs, and the check then names it
    out, called = _run(
        fn, (given, labels), {"labels": labels, "scores": given.detach()},
        _("calling select_scores(scores, labels) with scores (2, 5, 4) and labels (2, 5)"),
        {_INDEX_NDIM: _("gather's index needs as many dimensions as scores: labels.unsqueeze(-1), of shape "
                        "(B, N, 1)"),
         _INDEX_DTYPE: _("the index must hold integers, and it held another dtype: labels.to(scores) would turn "
                         "them into floats, labels.to(scores.device) moves them and keeps int64"),
         _LEAF_IN_PLACE: _leaf_hint("scores.new_zeros(B, N)", "scores"),
         **_index_causes(_("the labels"), "scores.new_zeros(B, N)")})
    expect(out.shape == (2, 5),
           _("scores (2, 5, 4) and labels (2, 5) give shape (2, 5); got {shape}").format(shape=shape_of(out)))
    _expect_scores_at_labels(out, scores, labels, called)
    _expect_gradient_to_the_selected(
        out, leaf, labels, _("keep the result differentiable: use gather, not .item(), .tolist() or .detach()"),
        _("back-propagating from the sum of your output"),
        _("the gradient must reach exactly the selected scores, each with weight 1"))
    with learner_code(_("calling select_scores on a batch of one sequence of length one"), _("squeeze only dim -1")):
        one = fn(torch.tensor([[[0.5, 1.5, 2.5]]]), torch.tensor([[2]]))
    expect(isinstance(one, torch.Tensor) and one.shape == (1, 1) and one.item() == 2.5,
           _("a batch of one sequence of length one must still give shape (1, 1): squeeze only the last dim "
             "(squeeze(-1)), not every dim of size 1"))
    _expect_classes_from_scores(fn)
    _expect_on_input_device("scores", fn, (scores, labels), out)


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


#: The reductions whose 'mean' counts the output's initial values unless include_self=False.
_REDUCES = frozenset({"scatter_reduce", "scatter_reduce_", "index_reduce", "index_reduce_"})


#: Exercise 3's data: 7 rows in 4 segments of 3, 1, 3 and 0 rows (sizes that do not divide evenly), ids out
#: of order, means that are not whole numbers, and no member row equal to its segment's sum.
SEGMENT_VALUES = torch.tensor(
    [[4.0, -2.0, 7.0, 1.0], [-5.0, 3.0, 0.0, 8.0], [2.0, 6.0, -4.0, -1.0], [9.0, -7.0, 5.0, 3.0],
     [1.0, 1.0, 2.0, -6.0], [6.0, -3.0, 9.0, 2.0], [-1.0, 4.0, 0.0, 5.0]]
)
SEGMENT_IDS = torch.tensor([0, 2, 0, 1, 2, 2, 0])
#: And a second case: another width, more segments (7) than rows, float64, ids in no particular order, four empty
#: segments.
_WIDE_VALUES = torch.tensor([[1.5, -2.0], [4.0, 0.5], [-3.0, 7.0], [2.5, 1.0], [8.0, -6.0]], dtype=torch.float64)
_WIDE_IDS = torch.tensor([4, 1, 1, 4, 0])


def _segment_causes() -> dict[str, str]:
    """Causes of the errors that writing a segment's sum and count can raise."""
    return {
        **dict.fromkeys(
            _DTYPE_MISMATCH,
            _("the values added must have the output's dtype: scatter_add_ and index_add_ refused values of another "
              "dtype. Make ones with values' dtype, values.new_ones(N) or torch.ones_like(segment_ids, "
              "dtype=values.dtype) (torch.ones_like(segment_ids) alone is int64, like the ids)"),
        ),
        _LEAF_IN_PLACE: _leaf_hint("values.new_zeros(num_segments, D)", "values"),
        **_index_causes(_("the segment ids"), "values.new_zeros(num_segments, D)"),
    }


def _expect_segment_means(out: torch.Tensor, values: torch.Tensor, ids: torch.Tensor, called: set[str]) -> None:
    """Four segments of width 4 in values' dtype: row s is the mean of the rows whose id is s, an empty one 0."""
    want = _segment_mean_reference(values, ids, 4)  # segment 3 is empty
    counts = torch.bincount(ids, minlength=4).unsqueeze(1).float()
    expect(out.shape != (3, 4),
           _("4 segments of width 4 give shape (4, 4); got (3, 4), as many rows as ids.max() + 1: the number of rows "
             "is num_segments, not ids.max() + 1, as the last segments may have no rows (segment 3 has none here)"))
    expect(out.shape == (4, 4), _("4 segments of width 4 give shape (4, 4); got {shape}").format(shape=shape_of(out)))
    expect(out.dtype == values.dtype,
           _("return values' dtype ({expected}); got {dtype}").format(expected=values.dtype, dtype=out.dtype))
    empty, reduce = _called(called, _EMPTY), _called(called, _REDUCES)
    expect(not torch.isnan(out).any(),
           _("an empty segment must give 0, not NaN: your function called {function}(), whose new memory holds "
             "whatever was there (the check fills it with NaN), and nothing is written to an empty segment's row. "
             "Start from zeros (values.new_zeros)").format(function=empty) if empty else
           _("an empty segment must give 0, not NaN: its sum is 0 and its count 0, and 0 / 0 is NaN. Divide by the "
             "count clamped to at least 1"))
    expect(not torch.allclose(out[:3], (want * counts / (counts + 1))[:3]),
           _("each mean is divided by one member too many: {function}(..., 'mean') counts the initial zeros of the "
             "output as members unless you pass include_self=False").format(function=reduce) if reduce else
           _("each mean is divided by one member too many: divide each segment's sum by its number of rows"))
    expect(not _one_member_kept(out, values, ids, counts.squeeze(1)),
           _("each segment holds one of its rows instead of their sum: scatter_ (and index_copy_) keep one of "
             "the writes that meet at a position; repeated ids must add up, with scatter_add_ or index_add_"))
    expect(not torch.equal(out[:3], want[:3].floor()),
           _("the means are rounded down: divide with /, not // (floor division); means need not be whole numbers"))
    expect(not torch.allclose(out, want * counts / counts.clamp(min=1).T),
           _("each segment's sum must be divided by its own count. Counts of shape (S,) divide the columns (dim 1) "
             "when broadcast against sums of shape (S, D); counts.unsqueeze(1) makes them divide the rows (dim 0)"))
    if not torch.allclose(out[:3], want[:3]):
        _expect_not_expanded(out, "values.new_zeros(num_segments, D)")
        _expect_written(out, called)
        expect(not torch.allclose(out, want * counts),
               _("each row holds its segment's sum: divide it by the number of rows in the segment (at least 1) to "
                 "get the mean"))
        expect(False, _unknown(_("row s must be the mean of the rows whose id is s"), out, want))
    expect(torch.equal(out[3], torch.zeros(4)), _("the empty segment (id 3) must be a row of zeros"))


def _expect_more_segments_than_rows(fn: Callable) -> None:
    """With float64 values and more segments than rows, the result has values' dtype and num_segments rows."""
    values2, ids2 = _WIDE_VALUES.clone(), _WIDE_IDS.clone()
    with learner_code(
        _("calling segment_mean on float64 values (5, 2) with 7 segments"),
        _("create the output with values' dtype and num_segments rows (values.new_zeros(num_segments, D)); "
          "anything added into it needs values' dtype too (values.new_ones, or dtype=values.dtype, for counts)"),
    ):
        out2 = fn(values2, ids2, 7)
    expect(isinstance(out2, torch.Tensor) and out2.shape == (7, 2) and out2.dtype == torch.float64,
           _("float64 values (5, 2) in 7 segments must give a float64 result of shape (7, 2): take the dtype from "
             "values and the number of rows from num_segments (there may be more segments than rows); got "
             "{result}").format(result=shape_of(out2) + (f" {out2.dtype}" if isinstance(out2, torch.Tensor) else "")))
    want2 = _segment_mean_reference(values2, ids2, 7)
    if not torch.allclose(out2, want2):
        expect(False, _("with 7 segments of width 2 (ids 4, 1, 1, 4, 0) each row must hold its segment's mean, "
                        "and the empty segments 2, 3, 5 and 6 zeros; {difference}").format(
                            difference=_first_difference(out2, want2)))


def _expect_mean_gradient(fn: Callable, values: torch.Tensor, ids: torch.Tensor, num_segments: int, what: str,
                          differentiable: str, reaches: str) -> None:
    """The gradient of a segment's mean reaches each of its rows with weight 1 / (rows in the segment)."""
    leaf = values.clone().requires_grad_()
    with learner_code(what, _("use differentiable tensor operations"), _segment_causes()):
        mean = fn(leaf * 1, ids, num_segments)  # not a leaf, as in a model: only a leaf the answer made refuses edits
        expect(isinstance(mean, torch.Tensor) and mean.requires_grad, differentiable)
        mean.sum().backward()
    share = (1.0 / torch.bincount(ids, minlength=num_segments).to(values.dtype))[ids].unsqueeze(1).expand_as(values)
    expect(leaf.grad is not None and torch.allclose(leaf.grad, share), reaches)


@exercise("Exercise 3 · Segment mean")
@_empty_memory_filled
def check_segment_mean(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(values, segment_ids, num_segments)``: values (N, D) → (num_segments, D) per-segment means.

    Row ``s`` is the mean of the rows of ``values`` whose id is ``s``; a segment with no rows gives 0.
    The result has the values' dtype and device and is differentiable with respect to ``values``.
    """
    # num_segments == D: dividing sums (S, D) by counts (S,) broadcasts along the wrong dim and still runs.
    values, ids = SEGMENT_VALUES.clone(), SEGMENT_IDS.clone()
    out, called = _run(fn, (values, ids, 4), {"values": values, "segment_ids": ids},
                       _("calling segment_mean(values, ids, 4) with values (7, 4)"), {
        **_segment_causes(),
        "is invalid for input of size": _("segments are given by the ids, not by position: they need not be "
                                          "contiguous nor of equal size, so no reshape"),
        _INDEX_NDIM: _("index_add_ takes the 1-D ids, scatter_add_/scatter_reduce need them expanded to values' "
                       "shape (ids.unsqueeze(1).expand_as(values))"),
        _INDEX_DTYPE: _("the index must hold integers, and it held another dtype (.to(values) would make floats "
                        "of the ids; .to(values.device) moves them and keeps int64)"),
        "must match the size of tensor b": _("two tensors' sizes do not line up (the message gives them). One way "
                                             "this happens here: torch.bincount counts only up to the largest id "
                                             "present unless given minlength=num_segments")})
    _expect_segment_means(out, values, ids, called)
    _expect_more_segments_than_rows(fn)
    _expect_mean_gradient(
        fn, values, ids, 4, _("back-propagating from the sum of your output"),
        _("keep the result differentiable with respect to values: no .tolist(), .item() or torch.tensor(...) "
          "of Python numbers"),
        _("the gradient of a segment's mean reaches each of its rows with weight 1 / (rows in the segment)"))
    _expect_mean_gradient(
        fn, _WIDE_VALUES, _WIDE_IDS.clone(), 7,
        _("back-propagating from the sum of your output on float64 values (5, 2) with 7 segments"),
        _("keep the result differentiable with respect to values for every number of segments: no .tolist(), "
          ".item() or torch.tensor(...) of Python numbers"),
        _("with float64 values (5, 2) in 7 segments too, the gradient of a segment's mean reaches each of its rows "
          "with weight 1 / (rows in the segment)"))
    _expect_on_input_device("values", fn, (values, ids, 4), out)


# --- Exercise 4 ---------------------------------------------------------------------------------------


def _once_writer(calls: set[str]) -> str:
    """How the answer wrote its counts, as a hint names it: the write seen that keeps one of repeated writes."""
    if calls & {"scatter", "scatter_"}:
        return "scatter_"
    if calls & {"index_put", "index_put_"}:
        return _("index_put_ without accumulate=True")
    if "__setitem__" in calls:
        return _("an indexed assignment such as out[rows, tokens] += 1")
    return _("your write")


def _expect_counts(out: torch.Tensor, tokens: torch.Tensor, called: set[str]) -> None:
    """``out[b, v]``, int64 of shape (B, vocab_size), counts how often token v occurs in row b."""
    want = torch.stack([torch.bincount(row, minlength=5) for row in tokens])
    expect(out.dim() != 1,
           _("6 rows and a vocabulary of 5 give shape (6, 5); got {shape}, one count per token for the whole "
             "batch: each row keeps its own counts").format(shape=shape_of(out)))
    expect(out.shape != (6, 4),
           _("6 rows and a vocabulary of 5 give shape (6, 5); got (6, 4), as wide as tokens.max() + 1: the width "
             "is vocab_size, whatever tokens the rows hold (token 4 never occurs here)"))
    expect(out.shape == (6, 5),
           _("6 rows and a vocabulary of 5 give shape (6, 5); got {shape}").format(shape=shape_of(out)))
    expect(out.dtype == torch.int64,
           _("counts are whole numbers: return int64 (torch.long); got {dtype}").format(dtype=out.dtype))
    empty = _called(called, _EMPTY)
    expect(bool(((out >= 0) & (out <= tokens.numel())).all()),
           _("the counts must lie between 0 and the number of tokens: your function called {function}(), whose new "
             "memory holds whatever was there (the check fills it with the largest int64, so adding to it "
             "overflows). Start from zeros (tokens.new_zeros)").format(function=empty) if empty else
           _("the counts must lie between 0 and the number of tokens, {count}; got values from {low} to {high}"
             ).format(count=tokens.numel(), low=int(out.min()), high=int(out.max())))
    expect(not torch.equal(out, want.clamp(max=1)),
           _("a token that occurs several times in a row is counted once: {way} writes each position once, however "
             "often it repeats. Make repeats add up: scatter_add_, or index_put_(..., accumulate=True)").format(
                 way=_once_writer(called)))
    if torch.equal(out, want):
        return
    _expect_not_expanded(out, "tokens.new_zeros(B, vocab_size)")
    _expect_written(out, called)
    expect(not torch.equal(out, want.roll(-1, dims=1)),
           _("out[b, v] counts token v + 1, and the last column counts token 0: the tokens were shifted down by "
             "one, as if counted from 1, and -1 indexed the last column. Tokens are zero-based already: use them "
             "as they are"))
    expect(not torch.equal(out, torch.zeros(6, 5, dtype=torch.long).scatter_add_(0, tokens, torch.ones_like(tokens))),
           _("the counts are those of a scatter_add_ along dim=0 (row tokens[b, l] of column l): add 1 along "
             "dim 1 (the vocabulary axis), not dim 0, and keep the rows apart"))
    expect(False, _unknown(_("out[b, v] must count how often token v occurs in row b"), out, want))


@exercise("Exercise 4 · Count tokens per row")
@_empty_memory_filled
def check_count_tokens(fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
    """``fn(tokens, vocab_size)``: tokens (B, L) int64 → int64 (B, vocab_size), ``out[b, v]`` = how many
    times ``v`` occurs in row ``b``; on the tokens' device."""
    # B = 6 > the largest token (3), so counting along dim 0 instead of dim 1 runs without an error;
    # token 4 never occurs, so a width taken from the data is too small; rows repeat tokens.
    tokens = torch.tensor([[3, 1, 3, 3], [0, 0, 0, 0], [2, 1, 2, 0], [1, 1, 3, 2], [0, 3, 1, 2], [2, 2, 2, 1]])
    out, called = _run(fn, (tokens, 5), {"tokens": tokens}, _("calling count_tokens(tokens, 5) with tokens (6, 4)"), {
        **dict.fromkeys(_DTYPE_MISMATCH, _("the values added must have the output's dtype (int64): "
                                           "torch.ones_like(tokens)")),
        _INDEX_NDIM: _("scatter_add_ wants an index and a source with as many dimensions as the output: tokens "
                       "itself, (B, L), and torch.ones_like(tokens)"),
        "stack expects each tensor to be equal size": _("torch.bincount counts only up to the largest token "
                                                        "present unless given minlength=vocab_size, so the rows' "
                                                        "counts differ in length"),
        "too many indices": _("index_put_ takes one index tensor per dimension of the output: rows and tokens"),
        "cannot be broadcast to indexing result": _("index_put_ takes one index tensor per dimension of the "
                                                    "output, rows and tokens; with the tokens alone each index "
                                                    "picks a whole row, which the values do not fit"),
        "could not be broadcast together": _("index_put_'s index tensors must broadcast together: rows of shape "
                                             "(B, 1) (torch.arange(B, device=tokens.device)[:, None]) with tokens"),
        **_index_causes(_("the tokens"), "tokens.new_zeros(B, vocab_size)")})
    _expect_counts(out, tokens, called)
    _expect_width_from_argument(
        fn, (torch.tensor([[1]]), 3), [[0, 1, 0]], _("calling count_tokens(tensor([[1]]), 3)"),
        _("use vocab_size for the width"),
        _("use vocab_size for the width, not tokens.max() + 1: count_tokens(tensor([[1]]), 3) must be [[0, 1, 0]]"))
    _expect_on_input_device("tokens", fn, (tokens, 5), out)
