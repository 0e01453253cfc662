"""Checks for chapter 06 · GPU placement and device pitfalls.

Every check runs on the CPU: the ``meta`` device (shapes and dtypes, no data) stands in for a second
device, and dtype conversion shows what ``.to()`` reaches.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_movable", "check_noise", "check_training_bytes", "strays"]

META = torch.device("meta")


def strays(module: nn.Module) -> list[str]:
    """Attributes that ``module.to()`` cannot reach: plain tensors and containers of modules or tensors.

    Walks every registered sub-module and returns names such as ``'mean (plain tensor attribute)'`` or
    ``'block.layers (list of modules or tensors)'``. An empty list means ``.to()`` moves everything the
    modules hold as attributes.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
    found = []
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if name.startswith("_"):
                continue  # nn.Module's own registries (_parameters, _buffers, _modules, hooks)
            where = f"{prefix}.{name}" if prefix else name
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                found.append(f"{where} (plain tensor attribute)")
            elif isinstance(value, (list, tuple, set, dict)):
                items = value.values() if isinstance(value, dict) else value
                if any(isinstance(v, (nn.Module, torch.Tensor)) for v in items):
                    found.append(f"{where} ({type(value).__name__} of modules or tensors)")
    return found


def _own_rng(check: Callable[..., None]) -> Callable[..., None]:
    """Run ``check`` with its own CPU random state, so calling it leaves the learner's unchanged."""

    @functools.wraps(check)
    def run(*args, **kwargs) -> None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(6)
            check(*args, **kwargs)

    return run


# --- Exercise 1 ------------------------------------------------------------------------------------

def _standardized_mlp(x, mean, std, linears):
    h = (x - mean) / std
    for k, layer in enumerate(linears):
        h = layer(h)
        if k < len(linears) - 1:
            h = torch.relu(h)
    return h


@exercise("Exercise 1 · Make .to() move everything")
@_own_rng
def check_movable(cls: type[nn.Module]) -> None:
    """``cls(mean, std, widths)``: standardise with constant ``mean``/``std``, then Linear layers.

    ``forward(x)`` computes ``(x - mean) / std`` and feeds it through ``Linear(widths[0], widths[1])``,
    ``Linear(widths[1], widths[2])``, ... with a ReLU between layers (none after the last). After
    ``.to(device)`` or ``.to(dtype)`` every tensor the module uses must have moved.
    """
    mean = torch.tensor([1.0, -2.0, 0.5, 3.0])
    std = torch.tensor([0.5, 2.0, 1.0, 4.0])
    widths = (4, 8, 6, 3)
    model = cls(mean.clone(), std.clone(), widths)
    expect(isinstance(model, nn.Module), "the class must subclass nn.Module")
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    y = model(x)
    expect(
        isinstance(y, torch.Tensor) and y.shape == (5, 3),
        f"widths {widths} on a batch of 5 give shape (5, 3); got {getattr(y, 'shape', type(y))}",
    )
    left = strays(model)
    lists = [s for s in left if "of modules or tensors" in s]
    plain = [s for s in left if "plain tensor" in s]
    expect(not lists, f".to() cannot see inside {', '.join(lists)}: keep the layers in an nn.ModuleList")
    expect(not plain, f".to() leaves {', '.join(plain)} behind: use self.register_buffer(name, tensor)")
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    expect(
        [(m.in_features, m.out_features) for m in linears] == list(zip(widths, widths[1:], strict=False)),
        f"expected registered Linear layers {list(zip(widths, widths[1:], strict=False))}, "
        f"found {[(m.in_features, m.out_features) for m in linears]}",
    )
    expect(
        torch.allclose(y, _standardized_mlp(x, mean, std, linears), atol=1e-6),
        "forward must compute (x - mean) / std, then the layers with a ReLU between them (none after the last)",
    )
    expect(
        not any(p.shape == mean.shape and (torch.equal(p, mean) or torch.equal(p, std)) for p in model.parameters()),
        "mean and std are constants: register them as buffers, not nn.Parameter (an optimizer would train them)",
    )
    saved = model.state_dict().values()
    expect(
        any(t.shape == mean.shape and torch.equal(t, mean) for t in saved)
        and any(t.shape == std.shape and torch.equal(t, std) for t in saved),
        "mean and std must be saved with the model: register them as persistent buffers (persistent=True)",
    )

    moved = model.to(META)
    expect(moved is model, ".to() on a module must return the module itself")
    behind = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device != META]
    expect(not behind, f"after .to('meta') these stayed behind: {behind}")
    try:
        out = model(torch.empty(7, 4, device=META))
    except (RuntimeError, NotImplementedError) as err:  # a stub failed earlier, on the CPU input
        expect(False, f"after .to('meta'), forward on a meta input fails ({err}): a tensor stayed on the CPU")
    expect(out.device == META and out.shape == (7, 3), "after .to('meta') the output must be on 'meta'")

    wide = cls(mean.clone(), std.clone(), widths).to(torch.float64)
    expect(
        all(t.dtype == torch.float64 for t in [*wide.parameters(), *wide.buffers()]),
        ".to(torch.float64) must convert every parameter and buffer",
    )
    out64 = wide(x.double())
    expect(out64.dtype == torch.float64, "after .to(torch.float64) the output must be float64")


# --- Exercise 2 ------------------------------------------------------------------------------------

@exercise("Exercise 2 · Noise that follows its input")
@_own_rng
def check_noise(cls: type[nn.Module]) -> None:
    """``cls(sigma)``: in training mode add ``sigma`` times standard normal noise; in eval mode, identity.

    The noise must be created on the input's device and with its dtype.
    """
    layer = cls(0.5)
    expect(isinstance(layer, nn.Module), "the class must subclass nn.Module")
    x = torch.zeros(20_000)
    layer.eval()
    expect(torch.equal(layer(x), x), "in eval mode (layer.eval()) return the input unchanged")
    layer.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        noisy = layer(x)
        again = layer(x)
    expect(noisy.shape == x.shape, "the output must have the input's shape")
    expect(not torch.equal(noisy, again), "draw fresh noise on every call in training mode")
    expect(abs(noisy.mean().item()) < 0.02, f"the noise must have mean 0; got {noisy.mean().item():.3f}")
    expect(abs(noisy.std().item() - 0.5) < 0.02, f"sigma=0.5 must give noise of std 0.5; got {noisy.std().item():.3f}")
    ones = torch.ones(20_000)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        shifted = layer(ones)
    expect(abs(shifted.mean().item() - 1) < 0.02, "add the noise to the input (x + noise), do not replace it")
    try:
        on_meta = layer(torch.zeros(3, 4, device=META))
    except (RuntimeError, NotImplementedError) as err:
        expect(False, f"a meta input fails ({err}): create the noise on x's device, e.g. torch.randn_like(x)")
    expect(on_meta.device == META, "the output must be on the input's device")
    half = layer(torch.zeros(8, dtype=torch.bfloat16))
    expect(
        half.dtype == torch.bfloat16,
        f"a bfloat16 input gave a {half.dtype} output: create the noise with x's dtype too (torch.randn_like(x))",
    )


# --- Exercise 3 ------------------------------------------------------------------------------------

def _measured_bytes(model: nn.Module) -> int:
    """Run one Adam step on a copy and add up what it holds (the ground truth for exercise 3)."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-3)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    dtype = first.weight.dtype
    x = torch.randn(3, first.in_features, dtype=dtype, generator=torch.Generator().manual_seed(0))
    out = model(x)
    F.mse_loss(out, torch.zeros_like(out)).backward()
    optimizer.step()
    total = sum(p.numel() * p.element_size() for p in params)
    total += sum(p.grad.numel() * p.grad.element_size() for p in trainable)
    for p in trainable:
        state = optimizer.state[p]
        total += sum(state[k].numel() * state[k].element_size() for k in ("exp_avg", "exp_avg_sq"))
    return total


def _cases() -> dict[str, nn.Module]:
    mlp = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    frozen = copy.deepcopy(mlp)
    frozen[0].requires_grad_(False)
    shared = nn.Linear(6, 6)
    tied = nn.Sequential(nn.Linear(4, 6), shared, nn.ReLU(), shared)
    normed = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    return {
        "a float32 MLP": mlp,
        "the same MLP with its first layer frozen": frozen,
        "the MLP in float64": copy.deepcopy(mlp).double(),
        "the MLP in bfloat16": copy.deepcopy(mlp).to(torch.bfloat16),
        "a model that uses one layer twice": tied,
        "a model with BatchNorm buffers": normed,
    }


@exercise("Exercise 3 · Memory of a training step")
@_own_rng
def check_training_bytes(fn) -> None:
    """``fn(model) -> int``: bytes of parameters + gradients + Adam's two moment estimates.

    Frozen parameters (``requires_grad=False``) have no gradient and no Adam state; each parameter
    counts with its own dtype's size; a parameter used twice counts once; buffers do not count.
    """
    for label, model in _cases().items():
        got = fn(model)
        expect(isinstance(got, int) and not isinstance(got, bool), f"return an int (bytes); got {type(got).__name__}")
        want = _measured_bytes(model)
        expect(got == want, f"for {label}: {got} bytes, but one Adam step holds {want}")
