"""The warm-up check of chapter 00 · Course map (the spy it shares with chapters 01 and 02, :class:`TorchCalls`,
is in :mod:`utils.exercises.observe`)."""

from __future__ import annotations

import torch

from utils.checks import exercise, expect, learner_code
from utils.exercises.observe import TorchCalls
from utils.i18n import _

__all__ = ["check_ones"]


#: The sizes the warm-up tries: empty, a single entry, a few more (a constant answer fails some) and one
#: large size (an answer capped at some small size fails it).
SIZES = (0, 1, 3, 7, 100)


_CONVERSIONS = (".double", ".half", ".bfloat16", ".int", ".long", ".short", ".bool", ".to", ".type")
#: Comparisons, which make booleans.
_COMPARISONS = (".__eq__", ".__ne__", ".__gt__", ".__ge__", ".__lt__", ".__le__", "eq", "ne", "gt", "ge", "lt", "le")


def _dtype_cause(result: torch.Tensor, seen: TorchCalls) -> str:
    """Why ``result`` is not float32, from what the answer was seen doing; else that it is not known."""
    made = seen.maker(result)
    if made is not None and made[1].get("dtype") is not None:
        return _("torch.{function} was given dtype={dtype}: leave dtype= out, float32 is the default").format(
            function=made[0], dtype=made[1]["dtype"])
    if seen.numpy or not result.untyped_storage().resizable():  # NumPy's memory (torch.from_numpy) is not resizable
        return _("a NumPy array went into torch, and the tensor keeps the array's dtype ({dtype}): build it with "
                 "torch, not from NumPy").format(dtype=result.dtype)
    if result.dtype == torch.bool and any(c in seen.names for c in _COMPARISONS):
        return _("a comparison makes booleans, and True is not 1.0: build the ones themselves")
    if made is not None and not result.dtype.is_floating_point:
        return _("torch.{function} was given integers (1, not 1.0), so it made an integer tensor: give it 1.0, or "
                 "use torch.ones(n)").format(function=made[0])
    converted = sorted(c for c in _CONVERSIONS if c in seen.names)
    if converted:
        return _("your answer converted the tensor ({calls}): leave it float32").format(calls=", ".join(converted))
    return _("why is not known from here: torch.ones(n) makes float32 ones")


@exercise("Warm-up · a tensor of ones")
def check_ones(answer) -> None:
    """``answer(n)`` must return a 1-D float32 tensor of shape ``(n,)`` filled with ones, for every n >= 0."""
    for n in SIZES:
        with learner_code(_("calling ones({n})").format(n=n), _("ones(n) takes one int, n, and returns a tensor")), \
                TorchCalls() as seen:
            result = answer(n)
        expect(
            isinstance(result, torch.Tensor),
            _("ones({n}) must return a torch.Tensor, got {type}: build it with torch").format(
                n=n, type=type(result).__name__),
        )
        expect(
            result.shape == (n,),
            _("ones({n}) must have shape ({n},), got {shape}: one dimension of length n").format(
                n=n, shape=tuple(result.shape)),
        )
        expect(
            result.dtype == torch.float32,
            _("ones({n}) must be float32, like torch.ones(n), got {dtype}: {cause}").format(
                n=n, dtype=result.dtype, cause=_dtype_cause(result, seen)),
        )
        expect(
            result.device.type != "meta",
            _("ones({n}) returned a tensor on the meta device, which has shapes but no values: build it on the CPU, "
              "without device=").format(n=n),
        )
        wrong = (result != 1).nonzero().flatten()
        if wrong.numel():
            i = int(wrong[0])
            expect(
                False,
                _("every entry of ones({n}) must be 1, but {count} of {n} are not: entry {i} is {value}").format(
                    n=n, count=wrong.numel(), i=i, value=result[i].item()),
            )
