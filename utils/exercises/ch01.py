"""Checks for chapter 01 · Layers and blocks."""

from __future__ import annotations

import torch
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_parallel", "check_router"]


def _seeded_linear(n_in: int, n_out: int, seed: int) -> nn.Linear:
    gen = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=gen))
        layer.bias.copy_(torch.randn(n_out, generator=gen))
    return layer


@exercise("Exercise 1 · A parallel block")
def check_parallel(cls: type[nn.Module]) -> None:
    """``cls(net1, net2)`` must run both nets on the same input and concatenate along dim 1."""
    # Same input and output width: a serial chain runs without error here, and must still fail.
    net1, net2 = _seeded_linear(4, 4, 1), _seeded_linear(4, 4, 2)
    block = cls(net1, net2)
    expect(isinstance(block, nn.Module), "Parallel must subclass nn.Module")
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    y = block(x)
    expect(
        isinstance(y, torch.Tensor) and y.shape == (3, 8),
        f"two branches of width 4 on a batch of 3 give shape (3, 8); got {getattr(y, 'shape', type(y))}. "
        "Concatenate the two outputs along dim 1 instead of feeding one net into the other.",
    )
    expect(torch.allclose(y[:, :4], net1(x)), "the first 4 columns must be net1(x), with x the block's input")
    expect(
        torch.allclose(y[:, 4:], net2(x)),
        "the last 4 columns must be net2(x): net2 sees the same input x, not net1's output",
    )
    own = {id(p) for p in block.parameters()}
    expect(
        all(id(p) in own for p in [*net1.parameters(), *net2.parameters()]),
        "both nets' parameters must be registered: store them as attributes or in an nn.ModuleList, "
        "not in a plain Python list",
    )
    # Different widths must work too (a serial chain cannot even run here).
    wide = cls(_seeded_linear(4, 2, 4), _seeded_linear(4, 5, 5))
    expect(wide(x).shape == (3, 7), "branches of width 2 and 5 must give 7 output columns")
    y.sum().backward()
    expect(
        net1.weight.grad is not None and net2.weight.grad is not None,
        "gradients must reach both branches",
    )


@exercise("Exercise 2 · A router over named heads")
def check_router(cls: type[nn.Module]) -> None:
    """``cls(heads: dict[str, nn.Module])``; ``forward(x, task)`` applies ``heads[task]``."""
    heads = {"price": _seeded_linear(6, 1, 10), "label": _seeded_linear(6, 3, 11)}
    router = cls(heads)
    expect(isinstance(router, nn.Module), "Router must subclass nn.Module")
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(12))
    for task, head in heads.items():
        out = router(x, task)
        expect(
            isinstance(out, torch.Tensor) and out.shape == head(x).shape and torch.allclose(out, head(x)),
            f"router(x, {task!r}) must return heads[{task!r}](x)",
        )
    names = {name.split(".")[-2] for name, _ in router.named_parameters() if "." in name}
    expect(
        {"price", "label"} <= names,
        "every head's parameters must be registered under its name: use nn.ModuleDict(heads)",
    )
    router.to(torch.float64)
    expect(
        all(p.dtype == torch.float64 for h in heads.values() for p in h.parameters()),
        ".to(torch.float64) must convert every head: a plain dict hides them from .to()",
    )
