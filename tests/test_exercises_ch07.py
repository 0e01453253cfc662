"""Chapter 07's checks: a catalogue of plausible wrong answers per exercise, each with the hint it gets,
and right answers written differently from the notebook's reference."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch
from torch import nn

from utils.checks import outcome
from utils.exercises.ch07 import check_movable, check_noise


def judged(check, answer, *args):
    verdict, hint = outcome(check, answer, *args)
    return verdict, hint


# --- Exercise 1 · Make .to() move everything --------------------------------------------------------
# Right answers, each written differently from the notebook's reference (register_buffer + ModuleList).


class BufferAndSequential(nn.Module):
    """nn.Buffer attributes and one nn.Sequential holding the layers and ReLUs."""

    def __init__(self, mean, std, widths):
        super().__init__()
        self.mean = nn.Buffer(mean)
        self.std = nn.Buffer(std)
        layers = []
        for a, b in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x.sub(self.mean).div(self.std))


class NestedNormalizer(nn.Module):
    """The constants live in a sub-module of their own; the layers in an nn.ModuleDict."""

    class Normalize(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            for name, value in (("mean", mean), ("std", std)):
                self.register_buffer(name, value.clone())

        def forward(self, x):
            return (x - self.mean) / self.std

    def __init__(self, mean, std, widths):
        super().__init__()
        self.norm = self.Normalize(mean, std)
        self.layers = nn.ModuleDict({f"fc{i}": nn.Linear(a, b) for i, (a, b) in enumerate(pairwise(widths))})

    def forward(self, x):
        h = self.norm(x)
        *hidden, last = self.layers.values()
        for layer in hidden:
            h = nn.functional.relu(layer(h))
        return last(h)


class ReverseLoop(nn.Module):
    """Buffers registered after the layers; the last layer found by index."""

    def __init__(self, mean, std, widths):
        super().__init__()
        self.fcs = nn.ModuleList()
        for i in range(len(widths) - 1):
            self.fcs.append(nn.Linear(widths[i], widths[i + 1]))
        self.register_buffer("std", std)
        self.register_buffer("mean", mean)

    def forward(self, x):
        x = (x - self.mean) / self.std
        for i, fc in enumerate(self.fcs):
            x = fc(x)
            if i < len(self.fcs) - 1:
                x = x.clamp(min=0)
        return x


class RowBuffers(ReverseLoop):
    """mean and std kept as (1, 4) rows, to broadcast explicitly over the batch: saved, moved, same output."""

    def __init__(self, mean, std, widths):
        super().__init__(mean.view(1, -1), std.unsqueeze(0), widths)


class OutputLayerFirst(nn.Module):
    """The last layer registered before the hidden ones: registration order is not the order they run in."""

    def __init__(self, mean, std, widths):
        super().__init__()
        self.out = nn.Linear(widths[-2], widths[-1])
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-2], widths[1:-1], strict=True))
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x):
        x = (x - self.mean) / self.std
        for layer in self.hidden:
            x = torch.relu(layer(x))
        return self.out(x)


class ActivationsInAList(ReverseLoop):
    """A plain list of ReLU modules: they hold no tensor, so .to() misses nothing."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        self.acts = [nn.ReLU() for _ in range(len(widths) - 2)]

    def forward(self, x):
        x = (x - self.mean) / self.std
        for fc, act in zip(self.fcs, self.acts, strict=False):
            x = act(fc(x))
        return self.fcs[-1](x)


class AliasesOfRegisteredLayers(ReverseLoop):
    """Second names, in plain containers, for layers the ModuleList registers."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        self.hidden, self.out = list(self.fcs)[:-1], self.fcs[-1]

    def forward(self, x):
        x = (x - self.mean) / self.std
        for fc in self.hidden:
            x = torch.relu(fc(x))
        return self.out(x)


class FloorWithCpuNumber(ReverseLoop):
    """std floored with a 0-dim CPU tensor: a number, which CUDA accepts next to GPU tensors."""

    def forward(self, x):
        return super().forward(x * torch.maximum(self.std, torch.tensor(1e-6)) / self.std)


RIGHT_MOVABLE = [BufferAndSequential, NestedNormalizer, ReverseLoop, RowBuffers, OutputLayerFirst, ActivationsInAList,
                 AliasesOfRegisteredLayers, FloorWithCpuNumber]


# Wrong answers, starting from the notebook's Standardize (the module to fix).


class Standardize(nn.Module):
    def __init__(self, mean, std, widths):
        super().__init__()
        self.mean, self.std = mean, std
        self.layers = [nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False)]

    def forward(self, x):
        x = (x - self.mean) / self.std
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


class LayersFixedOnly(Standardize):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        self.layers = nn.ModuleList(self.layers)


class PlainStdOnly(LayersFixedOnly):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean
        self.register_buffer("mean", mean)


class TupleOfLayers(ReverseLoop):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        fcs = tuple(self.fcs)
        del self.fcs
        self.fcs = fcs


class DictOfLayers(NestedNormalizer):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        layers = dict(self.layers)
        del self.layers
        self.layers = layers


class UnderscorePlain(LayersFixedOnly):
    """'Private' names do not hide a plain tensor from the check."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self._mean, self._std = mean, std

    def forward(self, x):
        x = (x - self._mean) / self._std
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
        return self.layers[-1](x)


class ToWithoutAssigning(LayersFixedOnly):
    """Overrides .to() and calls tensor.to() without keeping the result."""

    def to(self, *args, **kwargs):
        super().to(*args, **kwargs)
        self.mean.to(*args, **kwargs)
        self.std.to(*args, **kwargs)
        return self


class BuffersAtFirstForward(LayersFixedOnly):
    """Registers the buffers in the first forward: a .to() right after construction misses them."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.pending = (mean, std)

    def forward(self, x):
        if "mean" not in self._buffers:
            self.register_buffer("mean", self.pending[0])
            self.register_buffer("std", self.pending[1])
        return super().forward(x)


class ConstantsAsParameters(ReverseLoop):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.mean, self.std = nn.Parameter(mean), nn.Parameter(std)


class FrozenParameters(ReverseLoop):
    """Parameters with requires_grad=False: never trained by the optimizer, but still parameters."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.mean = nn.Parameter(mean, requires_grad=False)
        self.std = nn.Parameter(std, requires_grad=False)


class ApplyMovesPlain(LayersFixedOnly):
    """Overrides _apply and keeps what fn returns: every move reaches the plain tensors, no save does."""

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        self.mean, self.std = fn(self.mean), fn(self.std)
        return self


class ToMovesPlain(LayersFixedOnly):
    """Overrides .to() and keeps the results; .double() and .cuda() go through _apply instead."""

    def to(self, *args, **kwargs):
        super().to(*args, **kwargs)
        self.mean, self.std = self.mean.to(*args, **kwargs), self.std.to(*args, **kwargs)
        return self


class NotSaved(ReverseLoop):
    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        del self.mean, self.std
        self.register_buffer("mean", mean, persistent=False)
        self.register_buffer("std", std, persistent=False)


class ReluAfterLast(ReverseLoop):
    def forward(self, x):
        x = (x - self.mean) / self.std
        for fc in self.fcs:
            x = torch.relu(fc(x))
        return x


class MultipliesByStd(ReverseLoop):
    def forward(self, x):
        return super().forward((x - self.mean) * self.std * self.std + self.mean)  # (x - m) * s instead of / s


class OnesCreatedInForward(ReverseLoop):
    """Everything registered, but a tensor made inside forward on the default device."""

    def forward(self, x):
        return super().forward(x * torch.ones(x.shape[-1]))


class HardCodedCuda(ReverseLoop):
    def __init__(self, mean, std, widths):
        super().__init__(mean.cuda(), std.cuda(), widths)


class CudaDeviceInForward(ReverseLoop):
    def forward(self, x):
        return super().forward(x + torch.zeros(x.shape[-1], device=torch.device("cuda")))


class OldSignature(ReverseLoop):
    def __init__(self, mean, std):
        super().__init__(mean, std, (4, 3))


class CastsToFloat32(ReverseLoop):
    """x.float() in forward: float64 hides it (it wins the promotion), bfloat16 does not."""

    def forward(self, x):
        return super().forward(x.float())


class OnesOnTheDeviceInFloat32(ReverseLoop):
    def forward(self, x):
        return super().forward(x * torch.ones(x.shape[-1], device=x.device))


class RegisteredOverPlain(nn.Module):
    """The plain assignments kept, with register_buffer added after them."""

    def __init__(self, mean, std, widths):
        super().__init__()
        self.mean, self.std = mean, std
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))


class StandardizesInPlace(ReverseLoop):
    def forward(self, x):
        x -= self.mean
        x /= self.std
        for i, fc in enumerate(self.fcs):
            x = fc(x)
            if i < len(self.fcs) - 1:
                x = x.clamp(min=0)
        return x


class StackedBuffer(ReverseLoop):
    """One persistent (2, D) buffer holding mean and std: moved and saved, but not the two buffers asked for."""

    def __init__(self, mean, std, widths):
        nn.Module.__init__(self)
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))
        self.register_buffer("stats", torch.stack([mean, std]))

    @property  # ReverseLoop.forward standardizes with self.mean and self.std
    def mean(self):
        return self.stats[0]

    @property
    def std(self):
        return self.stats[1]


class StackedNotSaved(StackedBuffer):
    """The same (2, D) stack as a non-persistent buffer."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        stats = self.stats
        del self.stats
        self.register_buffer("stats", stats, persistent=False)


class IdentityMadeOnTheCpu(ReverseLoop):
    """Multiplies the input by an identity matrix made on the CPU (in the input's dtype): meta runs the product
    and returns a meta tensor, CUDA refuses it."""

    def forward(self, x):
        return super().forward(x @ torch.eye(x.shape[-1], dtype=x.dtype))


class ThreeLayersByHand(ReverseLoop):
    """A forward written for exactly three layers."""

    def forward(self, x):
        x = (x - self.mean) / self.std
        x = torch.relu(self.fcs[0](x))
        x = torch.relu(self.fcs[1](x))
        return self.fcs[2](x)


class EpsilonAttribute(ReverseLoop):
    """A 0-dim epsilon kept as a plain attribute: CUDA would accept it from the CPU, but the task asks that
    .to() move every tensor the module uses (and .to(torch.float64) convert it)."""

    def __init__(self, mean, std, widths):
        super().__init__(mean, std, widths)
        self.eps = torch.tensor(0.0)

    def forward(self, x):
        return super().forward(x + self.eps)


class ForwardWithoutGrad(BufferAndSequential):
    """The right output, computed under torch.no_grad(): nothing in it trains."""

    def forward(self, x):
        with torch.no_grad():
            return super().forward(x)


class DetachesTheBatch(BufferAndSequential):
    """Detaches its input: the layers train, but no gradient reaches the layers before the model."""

    def forward(self, x):
        return super().forward(x.detach())


class ChecksStdInPython(BufferAndSequential):
    """Reads a value into Python in forward (bool of a tensor), which a meta tensor cannot give."""

    def forward(self, x):
        if not bool((self.std > 0).all()):
            raise ValueError("std must be positive")
        return super().forward(x)


class RefusesMeta(BufferAndSequential):
    """Fails on meta for a reason of its own: the hint must not guess that it reads values."""

    def forward(self, x):
        if x.is_meta:
            raise ValueError("not on meta")
        return super().forward(x)


WRONG_MOVABLE = [
    (ForwardWithoutGrad, "no gradient reaches "),
    (DetachesTheBatch, "no gradient reaches x from the output"),
    (ChecksStdInPython, "forward reads values into Python (.item(), .tolist(), .numpy())"),
    (RefusesMeta, "raised ValueError: not on meta: forward must work on any device"),
    (EpsilonAttribute, ".to() right after construction leaves eps (plain tensor attribute) behind: use "
                       "self.register_buffer(name, tensor)."),
    (StackedBuffer, "mean and std are stacked into one tensor, stats of shape (2, 4): the task asks for each in a "
                    "buffer of its own, self.register_buffer('mean', mean) and self.register_buffer('std', std)"),
    (StackedNotSaved, "mean and std are stacked into one tensor, stats of shape (2, 4)"),
    (IdentityMadeOnTheCpu, "matmul() got tensors on x.device and on the default device (the CPU); on a GPU it stops"),
    (IdentityMadeOnTheCpu, "created inside forward without device=x.device (torch.eye(n)"),
    (ThreeLayersByHand, "calling the model on a (5, 3) batch"),
    (Standardize, "cannot see inside layers (list of modules or tensors)"),
    (LayersFixedOnly, "leaves mean (plain tensor attribute), std (plain tensor attribute) behind"),
    (PlainStdOnly, "leaves std (plain tensor attribute) behind"),
    (TupleOfLayers, "fcs (tuple of modules or tensors)"),
    (DictOfLayers, "layers (dict of modules or tensors)"),
    (UnderscorePlain, "_mean (plain tensor attribute)"),
    (ToWithoutAssigning, "tensor.to() returns a new tensor"),
    (BuffersAtFirstForward, "right after construction cannot see inside pending"),
    (ConstantsAsParameters, "not nn.Parameter (an optimizer would train them)"),
    (FrozenParameters, "A frozen nn.Parameter (requires_grad=False) is still a parameter"),
    (ApplyMovesPlain, "your override moves mean (plain tensor attribute), std (plain tensor attribute), but a plain"),
    (ToMovesPlain, "but .cuda(), .double() and .half() call _apply, not .to(), so they miss them, and a plain"),
    (NotSaved, "persistent buffers"),
    (ReluAfterLast, "none after the last"),
    (MultipliesByStd, "(x - mean) / std"),
    (OnesCreatedInForward, "created inside forward without device=x.device"),
    (HardCodedCuda, "hard-coded device such as .cuda()"),
    (CudaDeviceInForward, "hard-coded device such as .cuda()"),
    (OldSignature, "the constructor takes (mean, std, widths)"),
    (CastsToFloat32, "x.float(), or a tensor made without dtype=x.dtype, is float32"),
    (OnesOnTheDeviceInFloat32, "x.float(), or a tensor made without dtype=x.dtype, is float32"),
    (RegisteredOverPlain, "drop the plain assignment (self.mean = mean)"),
    (StandardizesInPlace, "forward changed its input in place"),
]


def test_movable_names_the_tensors_no_gradient_reaches():
    _, message = outcome(check_movable, ForwardWithoutGrad)
    assert ".weight" in message and ".bias" in message and "x" in message
    _, message = outcome(check_movable, DetachesTheBatch)
    assert "weight" not in message.split("no gradient reaches")[1].split("from the output")[0]


def test_movable_names_reading_values_only_when_it_happened():
    _, message = outcome(check_movable, RefusesMeta)
    assert ".item()" not in message


@pytest.mark.parametrize("right", RIGHT_MOVABLE, ids=lambda c: c.__name__)
def test_movable_accepts_right_answers(right):
    assert outcome(check_movable, right) == ("passed", "")
    assert outcome(check_movable, right, torch.device("cpu")) == ("passed", "")


@pytest.mark.parametrize(("wrong", "hint"), WRONG_MOVABLE, ids=lambda w: getattr(w, "__name__", ""))
def test_movable_rejects(wrong, hint):
    verdict, message = outcome(check_movable, wrong)
    assert verdict == "failed"
    assert hint in message, message


def test_movable_hint_does_not_quote_torch_for_a_device_error():
    _, message = outcome(check_movable, OnesCreatedInForward)
    assert "got tensors on x.device and on the default device" in message and "expected device" not in message


def test_bad_device_argument_is_the_callers_error():
    for check, answer in ((check_movable, ReverseLoop), (check_noise, NormalAroundX)):
        with pytest.raises(TypeError, match="device"):
            check(answer, 0)
        with pytest.raises(ValueError, match="device"):
            check(answer, "meta")
        with pytest.raises(TypeError, match="device"):
            outcome(check, answer, 0)


# --- Exercise 2 · Noise that follows its input -------------------------------------------------------


class AddWithAlpha(nn.Module):
    """torch.add with alpha=sigma scaling the noise."""

    def __init__(self, sigma):
        super().__init__()
        self.sigma = sigma

    def forward(self, x):
        return torch.add(x, torch.randn_like(x), alpha=self.sigma) if self.training else x


class FilledInPlace(nn.Module):
    """A new empty tensor filled in place with normal_(0, sigma)."""

    def __init__(self, sigma):
        super().__init__()
        self.sigma = float(sigma)

    def forward(self, x):
        if not self.training:
            return x
        return x + torch.empty_like(x).normal_(0.0, self.sigma)


class SigmaBuffer(nn.Module):
    """sigma as a 0-dim buffer; noise from factory keywords taken from x."""

    def __init__(self, sigma):
        super().__init__()
        self.register_buffer("sigma", torch.tensor(sigma))

    def forward(self, x):
        if self.training:
            x = x + self.sigma.to(x.dtype) * torch.randn(x.shape, device=x.device, dtype=x.dtype)
        return x


class SigmaAsCpuNumber(nn.Module):
    """sigma kept as a 0-dim CPU tensor (a plain attribute): a number, which CUDA accepts next to GPU tensors."""

    def __init__(self, sigma):
        super().__init__()
        self.sigma = torch.tensor(sigma)

    def forward(self, x):
        return x + self.sigma * torch.randn_like(x) if self.training else x


class ShuffledNoise(SigmaAsCpuNumber):
    """The noise's last dimension shuffled with a CPU index tensor: indexing with CPU indices works on CUDA."""

    def forward(self, x):
        if not self.training:
            return x
        return x + self.sigma.item() * torch.randn_like(x)[..., torch.randperm(x.shape[-1])]


RIGHT_NOISE = [AddWithAlpha, FilledInPlace, SigmaBuffer, SigmaAsCpuNumber, ShuffledNoise]


class Noise(nn.Module):
    """Base of the wrong answers below (the notebook's reference is not repeated here)."""

    def __init__(self, sigma):
        super().__init__()
        self.sigma = sigma


class NoiseOnDefaultDevice(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn(x.shape) if self.training else x


class NormalOnDefaultDevice(Noise):
    def forward(self, x):
        return x + torch.normal(0.0, self.sigma, size=x.shape) if self.training else x


class ToWithoutKeeping(Noise):
    def forward(self, x):
        if not self.training:
            return x
        noise = torch.randn(x.shape, dtype=x.dtype)
        noise.to(x.device)  # the moved copy is thrown away
        return x + self.sigma * noise


class NoiseWrongDtype(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn(x.shape, device=x.device) if self.training else x


class NoiseAlways(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn_like(x)


class EvalIsAMethod(Noise):
    def forward(self, x):
        if self.eval:  # a bound method: always true
            return x
        return x + self.sigma * torch.randn_like(x)


class NoiseWithVariance(Noise):
    def forward(self, x):
        return x + self.sigma**2 * torch.randn_like(x) if self.training else x


class UniformNoise(Noise):
    """Right mean and std, wrong family."""

    def forward(self, x):
        return x + self.sigma * math.sqrt(12) * (torch.rand_like(x) - 0.5) if self.training else x


class ShiftedNoise(Noise):
    def forward(self, x):
        return x + self.sigma * (torch.randn_like(x) + 1) if self.training else x


class NoiseReplaces(Noise):
    def forward(self, x):
        return self.sigma * torch.randn_like(x) if self.training else x


class NoiseSharedByRows(Noise):
    def forward(self, x):
        noise = torch.randn(x.shape[-1], device=x.device, dtype=x.dtype)
        return x + self.sigma * noise if self.training else x


class SeededEveryCall(Noise):
    def forward(self, x):
        if not self.training:
            return x
        torch.manual_seed(0)
        return x + self.sigma * torch.randn_like(x)


class AddsInPlace(Noise):
    def forward(self, x):
        return x.add_(self.sigma * torch.randn_like(x)) if self.training else x


class NoiseOnCuda(Noise):
    def forward(self, x):
        return x + self.sigma * torch.randn_like(x).cuda() if self.training else x


class OneNumberPerRow(Noise):
    """One draw per row, broadcast over the row (a single number for a 1-d input)."""

    def forward(self, x):
        noise = torch.randn(*x.shape[:-1], 1, device=x.device, dtype=x.dtype)
        return x + self.sigma * noise if self.training else x


class MultipliesNoise(Noise):
    def forward(self, x):
        return x * (1 + self.sigma * torch.randn_like(x)) if self.training else x


class NormalAroundX(Noise):
    """torch.normal(mean=x, std=sigma): the right numbers, but no gradient reaches x."""

    def forward(self, x):
        return torch.normal(x, self.sigma) if self.training else x


class DetachesInput(Noise):
    def forward(self, x):
        return x.detach() + self.sigma * torch.randn_like(x) if self.training else x


class AntitheticNoise(Noise):
    """Half the draws, the other half their negatives."""

    def forward(self, x):
        if not self.training:
            return x
        half = torch.randn((x.numel() + 1) // 2, device=x.device, dtype=x.dtype)
        return x + self.sigma * torch.cat([half, -half])[: x.numel()].reshape(x.shape)


class SigmaVectorBuffer(nn.Module):
    """sigma as a float32 buffer of shape (1,): it promotes a bfloat16 input's output to float32."""

    def __init__(self, sigma):
        super().__init__()
        self.register_buffer("sigma", torch.tensor([float(sigma)]))

    def forward(self, x):
        return x + self.sigma.to(x.device) * torch.randn_like(x) if self.training else x


class OwnCpuGenerator(Noise):
    """Reproducible noise from a generator of its own: a CPU one, which a GPU input cannot use."""

    def __init__(self, sigma):
        super().__init__(sigma)
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x):
        if not self.training:
            return x
        return x + self.sigma * torch.randn(x.shape, generator=self.generator, device=x.device, dtype=x.dtype)


class OwnCpuGeneratorInPlace(OwnCpuGenerator):
    def forward(self, x):
        return x + torch.empty_like(x).normal_(0, self.sigma, generator=self.generator) if self.training else x


class DrawnOnceBroadcast(Noise):
    """One number drawn per call and broadcast over the whole input."""

    def forward(self, x):
        return x + self.sigma * torch.randn((), device=x.device, dtype=x.dtype) if self.training else x


class ReversedCondition(Noise):
    def forward(self, x):
        return x if self.training else x + self.sigma * torch.randn_like(x)


class NeverAddsNoise(Noise):
    """Forgets the noise: identity in both modes, with a correct self.training test."""

    def forward(self, x):
        return x if self.training else x


class GradientZeroedByHand(Noise):
    """The right values, but x enters only through x * 0 and a detached copy: a zero gradient, no torch.normal."""

    def forward(self, x):
        if not self.training:
            return x
        return x * 0 + x.detach() + self.sigma * torch.randn_like(x)


class HardCodedSigma(Noise):
    def forward(self, x):
        return x + 0.5 * torch.randn_like(x) if self.training else x


WRONG_NOISE = [
    (HardCodedSigma, "the noise has std 0.5"),
    (HardCodedSigma, "for sigma=2.0, the same as for sigma=0.5: forward does not use the sigma given to the "
                     "constructor"),
    (NoiseOnDefaultDevice, "created inside forward without device=x.device"),
    (NormalOnDefaultDevice, "created inside forward without device=x.device"),
    (ToWithoutKeeping, "created inside forward without device=x.device"),
    (NoiseWrongDtype, "a bfloat16 input gave a float32 output"),
    (NoiseAlways, "in eval mode (layer.eval()) return the input unchanged"),
    (EvalIsAMethod, "forward tests self.eval, a method, and a method is always true"),
    (NoiseWithVariance, "std 0.5; got 0.250"),
    (UniformNoise, "not normally distributed"),
    (ShiftedNoise, "the noise must have mean 0; got 0.5"),
    (NoiseReplaces, "add the noise to the input"),
    (NoiseSharedByRows, "every element of a batch needs its own noise"),
    (OneNumberPerRow, "every element needs its own noise: all 20000 elements of the output are the same number"),
    (DrawnOnceBroadcast, "every element needs its own noise: all 20000 elements of the output are the same number"),
    (ReversedCondition, "the condition is the wrong way round"),
    (NeverAddsNoise, "in training mode (the default) the output must differ from the input"),
    (GradientZeroedByHand, "the gradient of sum(output) with respect to x must be all ones"),
    (SeededEveryCall, "fresh noise on every call"),
    (AddsInPlace, "forward changed its input"),
    (NoiseOnCuda, "hard-coded device such as .cuda()"),
    (MultipliesNoise, "the noise is multiplied into x. Add it"),
    (OwnCpuGenerator, "a generator of its own, which lives on the cpu device"),
    (OwnCpuGeneratorInPlace, "a generator of its own, which lives on the cpu device"),
    (NormalAroundX, "torch.normal(x, sigma) does not pass gradients to its mean x"),
    (DetachesInput, "no gradient reaches x through the layer"),
    (AntitheticNoise, "the noise repeats itself"),
    (SigmaVectorBuffer, "the layer keeps sigma as a float32 tensor of shape (1,)"),
    (SigmaVectorBuffer, "Keep sigma a Python number, or cast it: self.sigma.to(x.dtype)"),
]


@pytest.mark.parametrize(
    ("wrong", "absent"),
    [(DrawnOnceBroadcast, "std 0.5; got"), (OneNumberPerRow, "std 0.5; got"), (NeverAddsNoise, "self.eval"),
     (ReversedCondition, "self.eval"), (EvalIsAMethod, "wrong way round"), (GradientZeroedByHand, "torch.normal"),
     (UniformNoise, "rand_like")],
    ids=lambda w: getattr(w, "__name__", ""),
)
def test_noise_hints_name_only_observed_causes(wrong, absent):
    verdict, message = outcome(check_noise, wrong)
    assert verdict == "failed" and absent not in message, message


@pytest.mark.parametrize("right", RIGHT_NOISE, ids=lambda c: c.__name__)
def test_noise_accepts_right_answers(right):
    assert outcome(check_noise, right) == ("passed", "")
    assert outcome(check_noise, right, "cpu") == ("passed", "")


@pytest.mark.parametrize(("wrong", "hint"), WRONG_NOISE, ids=lambda w: getattr(w, "__name__", ""))
def test_noise_rejects(wrong, hint):
    verdict, message = outcome(check_noise, wrong)
    assert verdict == "failed"
    assert hint in message, message


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    outcome(check_movable, ReverseLoop)
    outcome(check_noise, SeededEveryCall)  # even an answer that reseeds
    assert torch.equal(torch.rand(3), expected)


# --- every exercise: the stub, and the learner's own errors ------------------------------------------


class MovableStub(nn.Module):
    def __init__(self, mean, std, widths):
        super().__init__()

    def forward(self, x):
        raise NotImplementedError("your code here")


class NoiseStub(nn.Module):
    def __init__(self, sigma):
        super().__init__()

    def forward(self, x):
        raise NotImplementedError("your code here")


@pytest.mark.parametrize(
    ("check", "stub"), [(check_movable, MovableStub), (check_noise, NoiseStub)]
)
def test_only_the_stub_is_not_attempted(check, stub, capsys):
    assert outcome(check, stub) == ("not attempted", "")
    check(stub)
    assert "not attempted yet" in capsys.readouterr().out


def test_a_learners_own_not_implemented_error_is_a_hint():
    class HalfDone(Noise):
        def forward(self, x):
            raise NotImplementedError  # not the stub's message

    verdict, message = outcome(check_noise, HalfDone)
    assert verdict == "failed" and "raised NotImplementedError" in message


def test_a_module_without_forward_is_explained():
    class Misspelt(Noise):
        def foward(self, x):
            return x

    verdict, message = outcome(check_noise, Misspelt)
    assert verdict == "failed" and "spelling" in message
