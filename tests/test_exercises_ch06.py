"""Chapter 06's checks accept the reference answers and reject the plausible wrong ones."""

import re

import pytest
import torch
from torch import nn

from utils import ExerciseFailed
from utils.exercises.ch06 import check_movable, check_noise, check_training_bytes, strays

# --- Exercise 1 · Make .to() move everything --------------------------------------------------------


class Movable(nn.Module):
    def __init__(self, mean, std, widths):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False))

    def forward(self, x):
        x = (x - self.mean) / self.std
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


class PlainTensors(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.mean, self.std = mean, std


class PlainStdOnly(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.std
        self.std = std


class ListOfLayers(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        layers = list(self.layers)
        del self.layers
        self.layers = layers


class TupleOfLayers(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        layers = tuple(self.layers)
        del self.layers
        self.layers = layers


class DictOfLayers(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        self.named = {str(i): layer for i, layer in enumerate(self.layers)}
        del self.layers

    def forward(self, x):
        x = (x - self.mean) / self.std
        layers = list(self.named.values())
        for layer in layers[:-1]:
            x = torch.relu(layer(x))
        return layers[-1](x)


class ConstantsAsParameters(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.mean, self.std = nn.Parameter(mean), nn.Parameter(std)


class NotSaved(Movable):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.register_buffer("mean", mean, persistent=False)
        self.register_buffer("std", std, persistent=False)


class ReluAfterLast(Movable):
    def forward(self, x):
        x = (x - self.mean) / self.std
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


class CreatesOnCpu(Movable):
    """Registers everything, but builds the divisor on the default device inside forward."""

    def forward(self, x):
        x = (x - self.mean) / self.std * torch.ones(x.shape[-1])
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


def test_movable_accepts_reference(capsys):
    check_movable(Movable)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (PlainTensors, "plain tensor attribute"),
        (PlainStdOnly, "std (plain tensor attribute)"),
        (ListOfLayers, "layers (list of modules"),
        (TupleOfLayers, "layers (tuple of modules"),
        (DictOfLayers, "named (dict of modules"),
        (ConstantsAsParameters, "not nn.Parameter"),
        (NotSaved, "persistent"),
        (ReluAfterLast, "none after the last"),
        (CreatesOnCpu, "forward on a meta input fails"),
    ],
)
def test_movable_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=re.escape(hint)):
        check_movable(wrong)


def test_not_attempted(capsys):
    class Stub(nn.Module):
        def __init__(self, mean, std, widths):
            super().__init__()

        def forward(self, x):
            raise NotImplementedError

    check_movable(Stub)
    assert "not attempted yet" in capsys.readouterr().out


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_movable(Movable)
    check_noise(Noise)
    assert torch.equal(torch.rand(3), expected)


def test_strays():
    inner = nn.Module()
    inner.scale = torch.ones(2)
    outer = nn.Sequential(nn.Linear(2, 2))
    outer.block = inner
    outer.helpers = [nn.ReLU()]
    outer.sizes = (1, 2)  # not tensors: fine
    outer.register_buffer("fine", torch.zeros(1))
    assert strays(outer) == ["helpers (list of modules or tensors)", "block.scale (plain tensor attribute)"]
    assert strays(nn.Linear(2, 2)) == []
    with pytest.raises(TypeError, match="module"):
        strays([nn.Linear(2, 2)])


# --- Exercise 2 · Noise that follows its input -------------------------------------------------------


class Noise(nn.Module):
    def __init__(self, sigma):
        super().__init__()
        self.sigma = sigma

    def forward(self, x):
        return x + self.sigma * torch.randn_like(x) if self.training else x


class NoiseOnDefaultDevice(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn(x.shape) if self.training else x


class NoiseWrongDtype(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn(x.shape, device=x.device) if self.training else x


class NoiseAlways(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn_like(x)


class NoiseWithVariance(Noise):
    def forward(self, x):
        return x + self.sigma**2 * torch.randn_like(x) if self.training else x


class NoiseReplaces(Noise):
    def forward(self, x):
        return self.sigma * torch.randn_like(x) if self.training else x


def test_noise_accepts_reference(capsys):
    check_noise(Noise)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (NoiseOnDefaultDevice, "x's device"),
        (NoiseWrongDtype, "dtype"),
        (NoiseAlways, "eval mode"),
        (NoiseWithVariance, "std 0.5"),
        (NoiseReplaces, "add the noise"),
    ],
)
def test_noise_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_noise(wrong)


# --- Exercise 3 · Memory of a training step ----------------------------------------------------------


def training_bytes(model):
    total = 0
    for p in model.parameters():
        copies = 4 if p.requires_grad else 1  # value, gradient, exp_avg, exp_avg_sq
        total += copies * p.numel() * p.element_size()
    return total


def assumes_float32(model):
    return sum(16 * p.numel() if p.requires_grad else 4 * p.numel() for p in model.parameters())


def ignores_frozen(model):
    return sum(4 * p.numel() * p.element_size() for p in model.parameters())


def counts_state_dict(model):
    return sum(4 * t.numel() * t.element_size() for t in model.state_dict().values())


def returns_float(model):
    return float(training_bytes(model))


def test_training_bytes_accepts_reference(capsys):
    check_training_bytes(training_bytes)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (assumes_float32, "float64"),
        (ignores_frozen, "frozen"),
        (counts_state_dict, "frozen"),
        (returns_float, "return an int"),
    ],
)
def test_training_bytes_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_training_bytes(wrong)


def test_each_trap_is_caught_on_its_own():
    """Without frozen layers in the way, counting the state_dict still fails (tied weights, buffers)."""

    def frozen_aware(count):
        def fn(model):
            if any(not p.requires_grad for p in model.parameters()):
                return training_bytes(model)
            return count(model)

        return fn

    with pytest.raises(ExerciseFailed, match="uses one layer twice"):
        check_training_bytes(frozen_aware(counts_state_dict))

    def tied_aware(model):  # counts the state_dict but without duplicates: still counts the buffers
        unique = {t.data_ptr(): t for t in model.state_dict().values()}
        return sum(4 * t.numel() * t.element_size() for t in unique.values())

    with pytest.raises(ExerciseFailed, match="BatchNorm"):
        check_training_bytes(frozen_aware(tied_aware))
