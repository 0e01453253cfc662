"""Checks for chapter 02 · Parameters: access, initialization, lazy init."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_init_xavier", "check_initialize_lazy"]


class _TaggedLinear(nn.Linear):
    """A subclass of nn.Linear, like the ``out_proj`` inside ``nn.MultiheadAttention``."""


def _std_matches(weight: torch.Tensor, std: float) -> bool:
    """The sample std of ``weight`` is within five standard errors of ``std`` (and the mean near 0)."""
    w = weight.detach()
    n = w.numel()
    return abs(w.std().item() - std) <= 5 * std / math.sqrt(2 * n) and abs(w.mean().item()) <= 5 * std / math.sqrt(n)


@exercise("Exercise 1 · An init function for Module.apply")
def check_init_xavier(init_fn: Callable[[nn.Module], object]) -> None:
    """``net.apply(init_fn)`` gives every linear layer Xavier-uniform weights and zero biases, nothing else."""
    expect(callable(init_fn), "pass the function itself, e.g. check_init_xavier(init_xavier)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = nn.Sequential(
            nn.Linear(300, 200), nn.ReLU(), _TaggedLinear(200, 150), nn.LayerNorm(150), nn.Linear(150, 100)
        )
        with torch.no_grad():
            net[3].weight.fill_(2.0)
            net[3].bias.fill_(0.5)
        net.apply(init_fn)
    for i in (0, 2, 4):
        layer = net[i]
        kind = "a subclass of nn.Linear" if type(layer) is not nn.Linear else "an nn.Linear"
        expect(
            bool((layer.bias == 0).all()),
            f"layer {i} ({kind}, {layer.in_features}→{layer.out_features}) still has non-zero biases"
            + (": test the layer with isinstance(m, nn.Linear), not type(m) == nn.Linear" if i == 2 else
               ": set them with nn.init.zeros_(m.bias)"),
        )
        std = math.sqrt(2.0 / (layer.in_features + layer.out_features))
        expect(
            _std_matches(layer.weight, std),
            f"layer {i}'s weights have std {layer.weight.std().item():.4f}; Xavier gives "
            f"sqrt(2 / (fan_in + fan_out)) = {std:.4f}. Use nn.init.xavier_uniform_ with its default gain",
        )
        expect(
            layer.weight.abs().max().item() <= math.sqrt(3) * std + 1e-6,
            f"layer {i}'s weights exceed the Xavier-uniform bound sqrt(6 / (fan_in + fan_out)) = "
            f"{math.sqrt(3) * std:.4f}: use the uniform variant (xavier_uniform_), not xavier_normal_",
        )
    expect(
        bool((net[3].weight == 2.0).all() and (net[3].bias == 0.5).all()),
        "the LayerNorm changed: initialise linear layers only and leave every other module alone",
    )


@exercise("Exercise 2 · Initialise a lazy network")
def check_initialize_lazy(initialize: Callable[[nn.Module, torch.Tensor], nn.Module]) -> None:
    """``initialize(net, example)`` materialises every lazy layer, then gives it Kaiming-normal weights."""
    expect(callable(initialize), "pass the function itself, e.g. check_initialize_lazy(initialize_lazy)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = nn.Sequential(nn.LazyLinear(256), nn.ReLU(), nn.LazyLinear(128), nn.ReLU(), nn.LazyLinear(10))
        example = torch.rand(4, 300)
        try:
            out = initialize(net, example)
        except (ValueError, RuntimeError) as err:  # nn.init raises either on an uninitialized parameter
            if "uninitialized parameter" not in str(err):
                raise
            expect(False, "an nn.init function met a lazy layer's uninitialized weight: run the network on "
                          "example_input once (a dry run) before initialising")
    expect(out is net, "return the network you were given (initialised in place)")
    expect(
        not any(isinstance(p, nn.parameter.UninitializedParameter) for p in net.parameters()),
        "some parameters are still uninitialized: call net(example_input) once to infer the shapes",
    )
    for i, n_in, n_out in ((0, 300, 256), (2, 256, 128), (4, 128, 10)):
        layer = net[i]
        expect(layer.weight.shape == (n_out, n_in), f"layer {i} must have weight shape {(n_out, n_in)}")
        std = math.sqrt(2.0 / n_in)
        expect(
            _std_matches(layer.weight, std),
            f"layer {i}'s weights have std {layer.weight.std().item():.4f}, Kaiming normal for ReLU gives "
            f"sqrt(2 / fan_in) = {std:.4f}. If it is near 1/sqrt(3 fan_in) = {1 / math.sqrt(3 * n_in):.4f}, your "
            "init never ran: a type(m) == nn.Linear test skips a LazyLinear before the dry run",
        )
        expect(bool((layer.bias == 0).all()), f"layer {i}'s bias must be zero (nn.init.zeros_)")
