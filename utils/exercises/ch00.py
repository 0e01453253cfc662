"""The warm-up check of chapter 00 · Course map."""

from __future__ import annotations

import torch

from utils.checks import exercise, expect, learner_code
from utils.i18n import _

__all__ = ["check_ones"]

#: The sizes the warm-up tries: empty, a single entry, a few more (a constant answer fails some) and one
#: large size (an answer capped at some small size fails it).
SIZES = (0, 1, 3, 7, 100)


def _dtype_hint(dtype: torch.dtype) -> str:
    """The likely cause of a dtype other than float32."""
    if dtype == torch.float64:
        return _("a NumPy array is float64, and so is the tensor made from it (torch.from_numpy, torch.tensor); "
                 "build it with torch, without dtype=")
    if dtype == torch.bool:
        return _("True is not 1.0: comparisons and dtype=torch.bool make a tensor of booleans")
    if dtype.is_floating_point or dtype.is_complex:
        return _("leave the dtype at torch's default, float32")
    return _("an int fill value or a list of ints makes an integer tensor")


@exercise("Warm-up · a tensor of ones")
def check_ones(answer) -> None:
    """``answer(n)`` must return a 1-D float32 tensor of shape ``(n,)`` filled with ones, for every n >= 0."""
    for n in SIZES:
        with learner_code(_("calling ones({n})").format(n=n), _("ones(n) takes one int, n, and returns a tensor")):
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
                n=n, dtype=result.dtype, cause=_dtype_hint(result.dtype)),
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
