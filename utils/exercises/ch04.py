"""Checks for chapter 04 · Custom layers."""

from __future__ import annotations

import torch
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_half_fourier", "check_weight_norm_linear"]


def _randn(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _weight_norm_reference(x, direction, scale, bias):
    weight = scale[:, None] * direction / direction.norm(dim=1, keepdim=True)
    return x @ weight.T + bias


@exercise("Exercise 1 · A weight-normalised linear layer")
def check_weight_norm_linear(cls: type[nn.Module]) -> None:
    """``cls(in_features, out_features)`` with parameters ``direction``, ``scale``, ``bias``.

    ``forward(x) = x @ W.T + bias`` with ``W = scale[:, None] * direction / ‖direction row‖``, and
    gradients must reach all three parameters (a forward that reads ``.data`` or ``.detach()`` of a
    parameter computes the right numbers but never trains it).
    """
    layer = cls(5, 3)
    expect(isinstance(layer, nn.Module), "WeightNormLinear must subclass nn.Module")
    x = _randn(4, 5, seed=4)
    layer(x)  # an unfinished answer stops here, with NotImplementedError
    shapes = {name: tuple(p.shape) for name, p in layer.named_parameters()}
    wanted = {"direction": (3, 5), "scale": (3,), "bias": (3,)}
    expect(
        shapes == wanted,
        f"cls(5, 3) must register exactly the parameters {wanted}; got {shapes}. "
        "Wrap each tensor in nn.Parameter and assign it as an attribute.",
    )
    direction, scale, bias = _randn(3, 5, seed=1), _randn(3, seed=2).abs() + 0.5, _randn(3, seed=3)
    with torch.no_grad():
        layer.direction.copy_(direction)
        layer.scale.copy_(scale)
        layer.bias.copy_(bias)
    y = layer(x)
    expected = _weight_norm_reference(x, direction, scale, bias)
    expect(
        isinstance(y, torch.Tensor) and y.shape == (4, 3),
        f"a batch of 4 inputs of width 5 must give shape (4, 3); got {getattr(y, 'shape', type(y))}",
    )
    expect(
        torch.allclose(y, expected, atol=1e-5),
        "wrong values: W = scale[:, None] * direction / direction.norm(dim=1, keepdim=True) (each row of "
        "direction divided by its own norm), then y = x @ W.T + bias",
    )
    expect(
        layer(_randn(2, 6, 5, seed=5)).shape == (2, 6, 3),
        "leading dimensions must pass through: an input of shape (2, 6, 5) gives (2, 6, 3)",
    )
    with torch.no_grad():
        layer.direction.mul_(3.0)
    expect(
        torch.allclose(layer(x), expected, atol=1e-5),
        "scaling direction must not change the output: only its direction counts, its length is "
        "normalised away",
    )
    with torch.no_grad():
        layer.direction.copy_(direction)

    # Gradients: every parameter gets one, and it is the right one.
    layer.zero_grad(set_to_none=True)
    (layer(x) ** 2).sum().backward()
    leaves = [t.clone().requires_grad_(True) for t in (direction, scale, bias)]
    (_weight_norm_reference(x, *leaves) ** 2).sum().backward()
    for name, reference in zip(("direction", "scale", "bias"), leaves, strict=True):
        grad = getattr(layer, name).grad
        expect(
            grad is not None,
            f"no gradient reached {name!r}: forward must use the parameter itself. Reading "
            f"self.{name}.data or self.{name}.detach() gives the right numbers but cuts it out of "
            "autograd, so it is never trained",
        )
        expect(
            torch.allclose(grad, reference.grad, atol=1e-4),
            f"the gradient of {name!r} is wrong: is part of the computation (e.g. the norm) taken "
            "under torch.no_grad(), from .data, or detached?",
        )


@exercise("Exercise 2 · The first half of the Fourier coefficients")
def check_half_fourier(cls: type[nn.Module]) -> None:
    """``cls()(x)`` returns ``torch.fft.fft(x)`` along the last dim, first ``n // 2`` coefficients."""
    layer = cls()
    expect(isinstance(layer, nn.Module), "HalfFourier must subclass nn.Module")
    expect(len(list(layer.parameters())) == 0, "this layer has nothing to learn: it needs no parameters")
    for shape in [(3, 8), (2, 3, 9), (1, 1)]:
        x = _randn(*shape, seed=sum(shape)).requires_grad_(True)
        try:
            out = layer(x)
        except NotImplementedError:
            raise
        except RuntimeError as err:
            expect(False, f"forward failed on an input that requires grad ({err}). Stay in torch "
                          "(torch.fft), not NumPy, so that autograd can follow")
        n = shape[-1]
        want = torch.fft.fft(x.detach(), dim=-1)[..., : n // 2]
        expect(
            isinstance(out, torch.Tensor) and out.is_complex(),
            "return the complex coefficients of torch.fft.fft, not their magnitudes or real parts",
        )
        rfft_hint = " torch.fft.rfft keeps n // 2 + 1 of them, one too many." if out.shape[-1] == n // 2 + 1 else ""
        expect(
            out.shape == want.shape,
            f"an input of shape {shape} must give {tuple(want.shape)} (the first n // 2 = {n // 2} "
            f"coefficients along the last dimension); got {tuple(out.shape)}.{rfft_hint}",
        )
        expect(
            out.dtype == want.dtype,
            f"a {x.dtype} input gives {want.dtype} coefficients in torch.fft; got {out.dtype} (a NumPy detour?)",
        )
        expect(
            torch.allclose(out.detach(), want, atol=1e-5),
            "wrong values: apply torch.fft.fft along the last dimension only, then keep [..., : n // 2]",
        )
        if n >= 2:
            hint = "no gradient reaches the input: the layer must be differentiable (stay in torch, no NumPy)"
            expect(out.requires_grad, hint)
            out.abs().sum().backward()
            expect(x.grad is not None and bool(x.grad.abs().sum() > 0), hint)
