"""The warm-up check of chapter 00 · Course map."""

from __future__ import annotations

import torch

from utils.checks import exercise, expect, learner_code

__all__ = ["check_ones"]

#: The sizes the warm-up tries: empty, a single entry, a few more (a constant answer fails some) and one
#: large size (an answer capped at some small size fails it).
SIZES = (0, 1, 3, 7, 100)


def _dtype_hint(dtype: torch.dtype) -> str:
    """The likely cause of a dtype other than float32."""
    if dtype == torch.float64:
        return ("a NumPy array is float64, and so is the tensor made from it (torch.from_numpy, torch.tensor); "
                "build it with torch, without dtype=")
    if dtype == torch.bool:
        return "True is not 1.0: comparisons and dtype=torch.bool make a tensor of booleans"
    if dtype.is_floating_point or dtype.is_complex:
        return "leave the dtype at torch's default, float32"
    return "an int fill value or a list of ints makes an integer tensor"


@exercise("Warm-up · a tensor of ones")
def check_ones(answer) -> None:
    """``answer(n)`` must return a 1-D float32 tensor of shape ``(n,)`` filled with ones, for every n >= 0."""
    for n in SIZES:
        with learner_code(f"calling ones({n})", "ones(n) takes one int, n, and returns a tensor"):
            result = answer(n)
        expect(
            isinstance(result, torch.Tensor),
            f"ones({n}) must return a torch.Tensor, got {type(result).__name__}: build it with torch",
        )
        expect(
            result.shape == (n,),
            f"ones({n}) must have shape ({n},), got {tuple(result.shape)}: one dimension of length n",
        )
        expect(
            result.dtype == torch.float32,
            f"ones({n}) must be float32, like torch.ones(n), got {result.dtype}: {_dtype_hint(result.dtype)}",
        )
        expect(
            result.device.type != "meta",
            f"ones({n}) returned a tensor on the meta device, which has shapes but no values: build it on the CPU, "
            "without device=",
        )
        wrong = (result != 1).nonzero().flatten()
        if wrong.numel():
            i = int(wrong[0])
            expect(
                False,
                f"every entry of ones({n}) must be 1, but {wrong.numel()} of {n} are not: entry {i} is "
                f"{result[i].item()}",
            )
