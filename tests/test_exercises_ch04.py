"""Chapter 04's checks: each accepts right answers written in several ways and rejects plausible wrong ones.

The reference answers live in the notebook (nbval runs them); the answers here are written differently.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from utils.checks import outcome
from utils.exercises.ch04 import _made_elsewhere, check_half_fourier, check_norm1d, check_weight_norm_linear

# ---------------------------------------------------------------- Exercise 1 · WeightNormLinear


class _WeightNormBase(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.direction = nn.Parameter(torch.randn(out_features, in_features))
        self.scale = nn.Parameter(torch.ones(out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))


# Right answers, written differently from the notebook's reference.
class WeightNormNormalize(_WeightNormBase):
    def forward(self, x):
        return F.linear(x, self.scale.unsqueeze(1) * F.normalize(self.direction, dim=1), self.bias)


class WeightNormVectorNorm(_WeightNormBase):
    def forward(self, x):
        length = torch.linalg.vector_norm(self.direction, dim=-1, keepdim=True)
        return x @ (self.direction * (self.scale[:, None] / length)).mT + self.bias


class WeightNormEinsum(_WeightNormBase):
    def forward(self, x):
        unit = self.direction / self.direction.pow(2).sum(dim=1, keepdim=True).sqrt()
        return torch.einsum("...i,oi,o->...o", x, unit, self.scale) + self.bias


# Wrong answers.
class _Reference(_WeightNormBase):
    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=1, keepdim=True)

    def forward(self, x):
        return x @ self.weight().T + self.bias


class UsesData(_Reference):
    """The well-known mistake: right numbers, but `direction` never gets a gradient."""

    def weight(self):
        d = self.direction.data
        return self.scale[:, None] * d / d.norm(dim=1, keepdim=True)


class UsesDetach(_Reference):
    def forward(self, x):
        return x @ self.weight().detach().T + self.bias


class DetachedNorm(_Reference):
    """Gradients arrive, but are wrong: the norm is treated as a constant."""

    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=1, keepdim=True).detach()


class NormUnderNoGrad(_Reference):
    def weight(self):
        with torch.no_grad():
            length = self.direction.norm(dim=1, keepdim=True)
        return self.scale[:, None] * self.direction / length


class NormOverColumns(_Reference):
    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=0, keepdim=True)


class NormOfWholeMatrix(_Reference):
    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm()


class NotNormalized(_Reference):
    def weight(self):
        return self.scale[:, None] * self.direction


class PlainTensors(_Reference):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.direction = torch.randn(out_features, in_features, requires_grad=True)
        self.scale = torch.ones(out_features, requires_grad=True)
        self.bias = torch.zeros(out_features, requires_grad=True)


class FlattensBatch(_Reference):
    def forward(self, x):
        return x.reshape(-1, x.shape[-1]) @ self.weight().T + self.bias


class MisspelledForward(_Reference):
    forward = nn.Module.forward

    def foward(self, x):
        return x @ self.weight().T + self.bias


class EpsMadeOnCPU(_Reference):
    """A tensor created in forward without the input's device."""

    def weight(self):
        eps = torch.full((self.direction.shape[0], 1), 1e-12)
        return self.scale[:, None] * self.direction / (self.direction.norm(dim=1, keepdim=True) + eps)


class CastsToFloat32(_Reference):
    def forward(self, x):
        return x.float() @ self.weight().float().T + self.bias.float()


class WeightNormNumberTensor(_WeightNormBase):
    """A 0-dim tensor made on the CPU: torch.maximum refuses a Python number, and GPU kernels accept it."""

    def forward(self, x):
        length = torch.maximum(self.direction.norm(dim=1, keepdim=True), torch.tensor(1e-12))
        return x @ (self.scale[:, None] * self.direction / length).T + self.bias


class EpsAsPlainAttribute(_Reference):
    """A tensor kept as a plain attribute: .to() leaves it where it was made."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.eps = torch.full((out_features, 1), 1e-12)

    def weight(self):
        return self.scale[:, None] * self.direction / (self.direction.norm(dim=1, keepdim=True) + self.eps)


class FlattensToRows(_Reference):
    """Any number of leading dimensions, except none."""

    def forward(self, x):
        return F.linear(x.flatten(0, -2), self.weight(), self.bias).unflatten(0, x.shape[:-1])


class ZeroDirection(_Reference):
    """Starts every parameter at zero, as one might a bias: 0 / 0 in the first forward."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        with torch.no_grad():
            self.direction.zero_()


class ZeroDirectionSafeNorm(WeightNormNormalize):
    """The same start, with F.normalize: finite numbers, but a direction of zeros is no direction."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        with torch.no_grad():
            self.direction.zero_()


class NormWithoutKeepdim(_Reference):
    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=1)


class ForwardUnderNoGrad(_Reference):
    """Right numbers, computed where autograd records nothing: the output has no grad_fn."""

    def forward(self, x):
        with torch.no_grad():
            return super().forward(x)


class EveryParameterFromData(_Reference):
    def forward(self, x):
        d, s, b = self.direction.data, self.scale.data, self.bias.data
        return x @ (s[:, None] * d / d.norm(dim=1, keepdim=True)).T + b


class IdentityDirection(_Reference):
    """Starts at the identity: unit rows while out_features <= in_features, rows of zeros beyond."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        with torch.no_grad():
            self.direction.copy_(torch.eye(out_features, in_features))


class InputDetached(_Reference):
    """Right values and parameter gradients, but the input is cut out of autograd: nothing before it trains."""

    def forward(self, x):
        return x.detach() @ self.weight().T + self.bias


class WeightNormScalarEps(_Reference):
    """A 0-dim tensor kept as a plain attribute: .to() leaves it on the CPU, where GPU kernels take it as a number."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.eps = torch.tensor(1e-12)

    def weight(self):
        return self.scale[:, None] * self.direction / (self.direction.norm(dim=1, keepdim=True) + self.eps)


class WeightNormIndexedNorms(_WeightNormBase):
    """A CPU index tensor made without device=: CUDA indexing accepts it."""

    def forward(self, x):
        rows = torch.arange(self.direction.shape[0])
        length = self.direction.norm(dim=1, keepdim=True)[rows]
        return x @ (self.scale[:, None] * self.direction / length).T + self.bias


@pytest.mark.parametrize("right", [WeightNormNormalize, WeightNormVectorNorm, WeightNormEinsum, WeightNormNumberTensor,
                                   WeightNormIndexedNorms, WeightNormScalarEps])
def test_weight_norm_accepts(right):
    assert outcome(check_weight_norm_linear, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (UsesData, "no gradient reached 'direction'"),
        (UsesDetach, "no gradient reached 'direction'"),
        (DetachedNorm, "the gradient of 'direction' is wrong"),
        (NormUnderNoGrad, "the gradient of 'direction' is wrong"),
        (NormOverColumns, "each row of direction divided by its own norm"),
        (NormOfWholeMatrix, "each row of direction divided by its own norm"),
        (NotNormalized, "each row of direction divided by its own norm"),
        (PlainTensors, "must register exactly the parameters"),
        (FlattensBatch, "leading dimensions must pass through"),
        (MisspelledForward, "check the spelling of `def forward"),
        (EpsMadeOnCPU, "a tensor made without device= was not where x is"),
        (CastsToFloat32, "a float64 input must give a float64 output"),
        (EpsAsPlainAttribute, "self.eps is a tensor kept as a plain attribute: .to() leaves it where it was made"),
        (InputDetached, "no gradient reached the input: forward cut x out of autograd"),
        (FlattensToRows, "calling your layer on one input of shape (5,), without a batch dimension raised"),
        (NormWithoutKeepdim, "without keepdim they are (out,) and divide the columns"),
        (ZeroDirection, "a row of zeros has no direction"),
        (ZeroDirectionSafeNorm, "a row of zeros has no direction"),
        (ForwardUnderNoGrad, "your layer's output has no gradient history (its grad_fn is None)"),
        (EveryParameterFromData, "your layer's output has no gradient history (its grad_fn is None)"),
        (IdentityDirection, "WeightNormLinear(2, 4) starts with a direction row of zeros"),
    ],
)
def test_weight_norm_rejects(wrong, hint):
    verdict, message = outcome(check_weight_norm_linear, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 1")
    assert hint in message


# ---------------------------------------------------------------- Exercise 2 · HalfFourier


# Right answers, written differently from the notebook's reference.
class RfftThenTrim(nn.Module):
    """For a real input the first n // 2 coefficients of rfft and fft agree."""

    def forward(self, x):
        return torch.fft.rfft(x)[..., : x.shape[-1] // 2]


class Narrowed(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x).narrow(-1, 0, x.size(-1) // 2)


class DFTMatrix(nn.Module):
    """The transform written as a matrix, built on the input's device and in its precision."""

    def forward(self, x):
        n = x.shape[-1]
        k = torch.arange(n, device=x.device, dtype=x.dtype)
        angle = -2 * math.pi * k[:, None] * k[None, : n // 2] / n
        return torch.complex(x @ torch.cos(angle), x @ torch.sin(angle))


# Wrong answers.
class RealFFT(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x, dim=-1)


class Magnitudes(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x)[..., : x.shape[-1] // 2].abs()


class FirstDim(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x, dim=0)[: x.shape[0] // 2]


class AllDims(nn.Module):
    def forward(self, x):
        return torch.fft.fftn(x)[..., : x.shape[-1] // 2]


class CeilHalf(nn.Module):
    """Sizes that do not divide evenly: (n + 1) // 2 keeps one more for odd n."""

    def forward(self, x):
        return torch.fft.fft(x)[..., : math.ceil(x.shape[-1] / 2)]


class RoundedHalf(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x)[..., : round(x.shape[-1] / 2)]


class FloatHalf(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x)[..., : x.shape[-1] / 2]


class ViaNumpy(nn.Module):
    def forward(self, x):
        return torch.from_numpy(np.fft.fft(x.numpy(), axis=-1)[..., : x.shape[-1] // 2])


class ViaDetachedNumpy(nn.Module):
    def forward(self, x):
        out = np.fft.fft(x.detach().numpy(), axis=-1)[..., : x.shape[-1] // 2]
        return torch.from_numpy(out.astype(np.complex64))


class DFTMatrixNoDevice(nn.Module):
    """Tensors created in forward on the default device, in complex64 whatever the input."""

    def forward(self, x):
        n = x.shape[-1]
        k = torch.arange(n)
        matrix = torch.exp(-2j * torch.pi * k[:, None] * k[None, : n // 2] / n)
        return x.to(matrix.dtype) @ matrix


class DFTMatrixDtypeOnly(nn.Module):
    """The input's dtype followed, its device forgotten."""

    def forward(self, x):
        n = x.shape[-1]
        k = torch.arange(n, dtype=x.dtype)
        angle = -2 * math.pi * k[:, None] * k[None, : n // 2] / n
        return torch.complex(x @ torch.cos(angle), x @ torch.sin(angle))


class HalfWithParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return torch.fft.fft(x)[..., : x.shape[-1] // 2]


class IndexedWithArange(nn.Module):
    """A CPU index tensor made without device=: on a GPU machine x[..., idx] accepts it."""

    def forward(self, x):
        return torch.fft.fft(x)[..., torch.arange(x.shape[-1] // 2)]


@pytest.mark.parametrize("right", [RfftThenTrim, Narrowed, DFTMatrix, IndexedWithArange])
def test_half_fourier_accepts(right):
    assert outcome(check_half_fourier, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (RealFFT, "rfft keeps n // 2 + 1"),
        (Magnitudes, "not their magnitudes"),
        (FirstDim, "must give (3, 4)"),
        (AllDims, "wrong values"),
        (CeilHalf, "n // 2 rounds down for odd n"),
        (RoundedHalf, "n // 2 rounds down for odd n"),
        (FloatHalf, "slice with an int"),
        (ViaNumpy, "stay in torch"),
        (ViaDetachedNumpy, "no gradient reaches the input"),
        (DFTMatrixNoDevice, "follow the input's"),
        (HalfWithParameter, "needs no parameters"),
        (DFTMatrixDtypeOnly, "a tensor made without device= was not where x is"),
    ],
)
def test_half_fourier_rejects(wrong, hint):
    verdict, message = outcome(check_half_fourier, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 2")
    assert hint in message


def test_one_too_many_for_an_odd_n_is_not_blamed_on_rfft():
    """For an odd n, ceil(n / 2) is n // 2 + 1 too, but the answer used fft: no word about rfft then."""
    _, message = outcome(check_half_fourier, CeilHalf)
    assert "n // 2 rounds down for odd n" in message and "rfft" not in message


# ---------------------------------------------------------------- Exercise 3 · Norm1d


# Right answers, written differently from the notebook's reference.
class Norm1dFromBatchNorm(nn.BatchNorm1d):
    """The built-in layer already follows every rule: subclass it."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__(num_features, eps=eps, momentum=momentum, device=device, dtype=dtype)


class Norm1dFunctional(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.empty(num_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(num_features, device=device, dtype=dtype))
        self.register_buffer("running_mean", torch.empty(num_features, device=device, dtype=dtype))
        self.register_buffer("running_var", torch.empty(num_features, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)
        with torch.no_grad():
            self.running_mean.zero_()
            self.running_var.fill_(1.0)

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training, self.momentum, self.eps)


class Norm1dByHand(Norm1dFunctional):
    def forward(self, x):
        if self.training:
            var, mean = torch.var_mean(x, dim=0, correction=0)
            with torch.no_grad():
                n = x.shape[0]
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * var * n / (n - 1))
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


# Wrong answers: each changes one thing in a right answer.
class _Norm1d(Norm1dFunctional):
    """A right hand-written answer whose parts the wrong answers below override."""

    def make(self, n, device, dtype):
        return {"device": device, "dtype": dtype}

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        kw = self.make(num_features, device, dtype)
        self.weight = nn.Parameter(torch.ones(num_features, **kw))
        self.bias = nn.Parameter(torch.zeros(num_features, **kw))
        self.register_buffer("running_mean", torch.zeros(num_features, **kw))
        self.register_buffer("running_var", torch.ones(num_features, **kw))
        self.reset_parameters()

    def statistics(self, x):
        return x.mean(dim=0), x.var(dim=0, correction=0), x.var(dim=0, correction=1)

    def update(self, mean, unbiased):
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(unbiased, self.momentum)

    def affine(self, h):
        return h * self.weight + self.bias

    def forward(self, x):
        if self.training:
            mean, var, unbiased = self.statistics(x)
            self.update(mean, unbiased)
        else:
            mean, var = self.running_mean, self.running_var
        return self.affine((x - mean) / torch.sqrt(var + self.eps))


class IgnoresDevice(_Norm1d):
    def make(self, n, device, dtype):
        return {"dtype": dtype}


class IgnoresDtype(_Norm1d):
    def make(self, n, device, dtype):
        return {"device": device}


class NoFactoryKeywords(_Norm1d):
    def __init__(self, num_features, momentum=0.1, eps=1e-5):
        super().__init__(num_features, momentum, eps)


class PlainTensorStatistics(_Norm1d):
    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)
        del self._buffers["running_mean"], self._buffers["running_var"]
        self.running_mean = torch.zeros(num_features, device=device, dtype=dtype)
        self.running_var = torch.ones(num_features, device=device, dtype=dtype)


class StatisticsAsParameters(_Norm1d):
    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)
        del self._buffers["running_mean"], self._buffers["running_var"]
        self.running_mean = nn.Parameter(torch.zeros(num_features, device=device, dtype=dtype), requires_grad=False)
        self.running_var = nn.Parameter(torch.ones(num_features, device=device, dtype=dtype), requires_grad=False)


class NewParametersOnReset(_Norm1d):
    def reset_parameters(self):
        self.weight = nn.Parameter(torch.ones_like(self.weight))
        self.bias = nn.Parameter(torch.zeros_like(self.bias))
        with torch.no_grad():
            self.running_mean.zero_()
            self.running_var.fill_(1.0)


class NewBuffersOnReset(_Norm1d):
    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()
        self.running_mean = torch.zeros_like(self.running_mean)  # still buffers, but new objects
        self.running_var = torch.ones_like(self.running_var)


class ResetsOnlyTheAffine(_Norm1d):
    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()


class StartsRightWithoutReset(_Norm1d):
    """Creates the starting values directly and never calls reset_parameters(): right until the rule changes."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(num_features, **kw))
        self.bias = nn.Parameter(torch.zeros(num_features, **kw))
        self.register_buffer("running_mean", torch.zeros(num_features, **kw))
        self.register_buffer("running_var", torch.ones(num_features, **kw))


class NoResetMethod(StartsRightWithoutReset):
    reset_parameters = None


class ResetWithoutNoGrad(_Norm1d):
    def reset_parameters(self):
        self.weight.fill_(1.0)
        self.bias.zero_()
        self.running_mean.zero_()
        self.running_var.fill_(1.0)


class KerasMomentum(_Norm1d):
    """Keras's convention: momentum=0.99 is the weight of the old running value."""

    def __init__(self, num_features, momentum=0.99, eps=1e-5, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)


class KerasEpsilon(_Norm1d):
    def __init__(self, num_features, momentum=0.1, eps=1e-3, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)


class SmallerEpsilon(_Norm1d):
    def __init__(self, num_features, momentum=0.1, eps=1e-6, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)


class EmptyWithoutReset(_Norm1d):
    """Allocates with torch.empty and forgets to call reset_parameters() in __init__."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        nn.Module.__init__(self)
        self.momentum, self.eps = momentum, eps
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.full((num_features,), 0.5, **kw))
        self.bias = nn.Parameter(torch.full((num_features,), 0.5, **kw))
        self.register_buffer("running_mean", torch.full((num_features,), 0.5, **kw))
        self.register_buffer("running_var", torch.full((num_features,), 0.5, **kw))


class NormalisesWithUnbiasedVariance(_Norm1d):
    def statistics(self, x):
        return x.mean(dim=0), x.var(dim=0), x.var(dim=0)


class BiasedRunningVariance(_Norm1d):
    def statistics(self, x):
        return x.mean(dim=0), x.var(dim=0, correction=0), x.var(dim=0, correction=0)


class MomentumTheOtherWay(_Norm1d):
    def update(self, mean, unbiased):
        with torch.no_grad():
            self.running_mean.lerp_(mean, 1 - self.momentum)
            self.running_var.lerp_(unbiased, 1 - self.momentum)


class UpdateWithoutNoGrad(_Norm1d):
    def update(self, mean, unbiased):
        self.running_mean.lerp_(mean, self.momentum)
        self.running_var.lerp_(unbiased, self.momentum)


class DetachedStatistics(_Norm1d):
    def statistics(self, x):
        return x.mean(dim=0).detach(), x.var(dim=0, correction=0).detach(), x.var(dim=0, correction=1)


class DataInForward(_Norm1d):
    def affine(self, h):
        return h * self.weight.data + self.bias


class BatchStatisticsInEval(_Norm1d):
    def forward(self, x):
        mean, var, unbiased = self.statistics(x)
        if self.training:
            self.update(mean, unbiased)
        return self.affine((x - mean) / torch.sqrt(var + self.eps))


class NoEpsInEval(_Norm1d):
    """The running statistics in eval mode, but without eps there."""

    def forward(self, x):
        if not self.training:
            return self.affine((x - self.running_mean) / self.running_var.sqrt())
        return super().forward(x)


class EpsMadeOnCPU(_Norm1d):
    def forward(self, x):
        if self.training:
            mean, var, unbiased = self.statistics(x)
            self.update(mean, unbiased)
        else:
            mean, var = self.running_mean, self.running_var
        eps = torch.full((x.shape[-1],), self.eps, dtype=x.dtype)
        return self.affine((x - mean) / torch.sqrt(var + eps))


class EvalUnderNoGrad(_Norm1d):
    """Nothing is learned in eval() mode, so the branch runs under no_grad(): frozen layers then stop gradients."""

    def forward(self, x):
        if self.training:
            return super().forward(x)
        with torch.no_grad():
            return super().forward(x)


class ForwardWithoutHistory(_Norm1d):
    def forward(self, x):
        with torch.no_grad():
            return super().forward(x)


class EvalDetachedWeight(_Norm1d):
    def affine(self, h):
        weight = self.weight if self.training else self.weight.detach()
        return h * weight + self.bias


class _GivenInit(nn.Module):
    """The exercise's given __init__: a learner writes reset_parameters() and forward()."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.num_features, self.momentum, self.eps = num_features, momentum, eps
        self.weight = nn.Parameter(torch.empty(num_features, **factory))
        self.bias = nn.Parameter(torch.empty(num_features, **factory))
        self.register_buffer("running_mean", torch.empty(num_features, **factory))
        self.register_buffer("running_var", torch.empty(num_features, **factory))
        self.reset_parameters()


class Norm1dOnGivenInit(_GivenInit):
    """A right answer on the given __init__: the four fills from a table, the statistics from var_mean."""

    def reset_parameters(self):
        with torch.no_grad():
            for tensor, value in ((self.weight, 1.0), (self.bias, 0.0), (self.running_mean, 0.0),
                                  (self.running_var, 1.0)):
                tensor.fill_(value)

    def forward(self, x):
        if not self.training:
            return (x - self.running_mean) / (self.running_var + self.eps).sqrt() * self.weight + self.bias
        var, mean = torch.var_mean(x, dim=0, correction=0)
        with torch.no_grad():
            self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
            self.running_var.mul_(1 - self.momentum).add_(x.var(dim=0), alpha=self.momentum)
        return (x - mean) / (var + self.eps).sqrt() * self.weight + self.bias


class ResetWithNewCpuTensors(Norm1dOnGivenInit):
    """The learner's case: __init__ right, reset_parameters() assigns new tensors, made on the default device."""

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()
        self.running_mean = torch.zeros(self.num_features)      # still a buffer, but a new CPU tensor
        self.running_var = torch.ones(self.num_features)


class ResetThroughData(Norm1dOnGivenInit):
    """The same objects, given new memory on the default device through .data."""

    def reset_parameters(self):
        self.weight.data = torch.ones(self.num_features)
        self.bias.data = torch.zeros(self.num_features)
        self.running_mean.data = torch.zeros(self.num_features)
        self.running_var.data = torch.ones(self.num_features)


class UpdateOutsideTraining(Norm1dOnGivenInit):
    """The running statistics updated in both modes: in eval() mode they should stay as they are."""

    def forward(self, x):
        with torch.no_grad():
            self.running_mean.lerp_(x.mean(dim=0), self.momentum)
            self.running_var.lerp_(x.var(dim=0), self.momentum)
        if self.training:
            mean, var = x.mean(dim=0), x.var(dim=0, correction=0)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class InputDetachedInEval(Norm1dOnGivenInit):
    """Nothing to learn from the input in eval() mode, or so it seems: x.detach() there."""

    def forward(self, x):
        return super().forward(x if self.training else x.detach())


class NoAffine(Norm1dOnGivenInit):
    def forward(self, x):
        mean = x.mean(dim=0) if self.training else self.running_mean
        return (super().forward(x) - self.bias) / self.weight if self.training else (x - mean) / torch.sqrt(
            self.running_var + self.eps)


class EpsOutsideSqrt(Norm1dOnGivenInit):
    def forward(self, x):
        if not self.training:
            return super().forward(x)
        var, mean = torch.var_mean(x, dim=0, correction=0)
        with torch.no_grad():
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(x.var(dim=0), self.momentum)
        return (x - mean) / (var.sqrt() + self.eps) * self.weight + self.bias


def test_the_base_of_the_wrong_answers_is_right():
    assert outcome(check_norm1d, _Norm1d) == ("passed", "")


class Norm1dEpsAsTensor(Norm1dByHand):
    """eps as a 0-dim tensor made without device=: a number, which GPU kernels take from the CPU."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        var, mean = torch.var_mean(x, dim=0, correction=0)
        with torch.no_grad():
            n = x.shape[0]
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + torch.tensor(self.eps)) * self.weight + self.bias


class StatisticsWithKeepdim(Norm1dByHand):
    def forward(self, x):
        if not self.training:
            return super().forward(x)
        mean, var = x.mean(0, keepdim=True), x.var(0, correction=0, keepdim=True)
        with torch.no_grad():
            n = x.shape[0]
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class ResetByClassName(Norm1dFunctional):
    """Calls the method through its class, and twice: harmless, and still a call."""

    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__(num_features, momentum, eps, device, dtype)
        ResetByClassName.reset_parameters(self)


@pytest.mark.parametrize("right", [Norm1dFromBatchNorm, Norm1dFunctional, Norm1dByHand, Norm1dEpsAsTensor,
                                   ResetByClassName, Norm1dOnGivenInit])
def test_norm1d_accepts(right):
    assert outcome(check_norm1d, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (IgnoresDevice, "device='meta') created ['weight', 'bias', 'running_mean', 'running_var'] elsewhere in "
         "__init__"),
        (IgnoresDtype, "dtype=torch.float64) created ['weight', 'bias', 'running_mean', 'running_var'] elsewhere in "
         "__init__"),
        (NoFactoryKeywords, "unexpected keyword argument 'device'"),
        (PlainTensorStatistics, "['running_mean', 'running_var'] must be buffers"),
        (StatisticsAsParameters, "register exactly two parameters"),
        (NewParametersOnReset, "reset_parameters() replaced ['weight', 'bias'] by new tensors. Fill the tensors"),
        (NewBuffersOnReset, "reset_parameters() replaced ['running_mean', 'running_var'] by new tensors"),
        (ResetWithNewCpuTensors, "Norm1d(4, device='meta'): reset_parameters() replaced ['running_mean', "
         "'running_var'] by new tensors (made on cpu, torch.float32)"),
        (ResetThroughData, "Likely cause: reset_parameters() assigned .data = a tensor made elsewhere"),
        (UpdateOutsideTraining, "in eval() mode your forward changed the running statistics: update them only in "
         "training mode"),
        (InputDetachedInEval, "in eval() mode no gradient reached the input: forward cut x out of autograd"),
        (NoAffine, "the output is normalized but not scaled and shifted"),
        (EpsOutsideSqrt, "eps was added outside the square root"),
        (ResetsOnlyTheAffine, "['running_mean', 'running_var'] still hold leftover values"),
        (NoResetMethod, "define a method reset_parameters()"),
        (ResetWithoutNoGrad, "edited in place while autograd records: fill it with nn.init"),
        (EmptyWithoutReset, "__init__ must end by calling self.reset_parameters()"),
        (StartsRightWithoutReset, "__init__ must end by calling self.reset_parameters()"),
        (KerasMomentum, "keep the defaults the task gives, momentum=0.1 and eps=1e-5"),
        (KerasEpsilon, "keep the defaults the task gives, momentum=0.1 and eps=1e-5"),
        (SmallerEpsilon, "keep the defaults the task gives, momentum=0.1 and eps=1e-5"),
        (NormalisesWithUnbiasedVariance, "normalized with the batch's unbiased variance (correction=1)"),
        (BiasedRunningVariance, "running_var was updated with the batch's biased variance"),
        (MomentumTheOtherWay, "the running statistics moved by 1 - momentum"),
        (UpdateWithoutNoGrad, "update the running statistics under torch.no_grad()"),
        (DetachedStatistics, "the gradient with respect to the input is wrong"),
        (DataInForward, "no gradient reached 'weight'"),
        (BatchStatisticsInEval, "in eval() mode your layer normalized with the batch's own statistics"),
        (NoEpsInEval, "in eval() mode eps is missing"),
        (EpsMadeOnCPU, "a tensor made without device= was not where x is"),
        (StatisticsWithKeepdim, "keepdim=True gives (1, num_features)"),
        (EvalUnderNoGrad, "in eval() mode your layer's output has no gradient history"),
        (ForwardWithoutHistory, "in training mode your layer's output has no gradient history"),
        (EvalDetachedWeight, "in eval() mode no gradient reached 'weight'"),
    ],
)
def test_norm1d_rejects(wrong, hint):
    patched = vars(wrong).get("reset_parameters")
    verdict, message = outcome(check_norm1d, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 3")
    assert hint in message
    assert vars(wrong).get("reset_parameters") is patched     # the check watched the calls, then put it back


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (ResetWithNewCpuTensors, "elsewhere in __init__"),        # the case: __init__ was right
        (ResetWithNewCpuTensors, "pass them to every tensor"),
        (ResetThroughData, "elsewhere in __init__"),
        (IgnoresDevice, "reset_parameters() replaced"),           # there __init__ is the cause
        (UpdateOutsideTraining, "not the batch's statistics"),    # it normalizes with the running statistics
        (UpdateOutsideTraining, "batch's own statistics"),
        (BatchStatisticsInEval, "eps is missing"),
        (NoEpsInEval, "batch's own statistics"),
    ],
)
def test_norm1d_names_only_the_cause_it_saw(wrong, cause):
    assert cause not in outcome(check_norm1d, wrong)[1]


# ---------------------------------------------------------------- stubs


class WeightNormStub(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        raise NotImplementedError("your code here")


class HalfFourierStub(nn.Module):
    def forward(self, x):
        raise NotImplementedError("your code here")


class Norm1dStub(nn.Module):
    def __init__(self, num_features, momentum=0.1, eps=1e-5, device=None, dtype=None):
        super().__init__()
        raise NotImplementedError("your code here")


class Norm1dNotebookStub(_GivenInit):
    """The notebook's stub: __init__ given, the two methods still to write."""

    def reset_parameters(self):
        raise NotImplementedError("your code here")

    def forward(self, x):
        raise NotImplementedError("your code here")


class Norm1dHalfDone(Norm1dOnGivenInit):
    """reset_parameters() written, forward() still the stub's."""

    def forward(self, x):
        raise NotImplementedError("your code here")


@pytest.mark.parametrize(("check", "stub"), [(check_weight_norm_linear, WeightNormStub),
                                             (check_half_fourier, HalfFourierStub),
                                             (check_norm1d, Norm1dStub),
                                             (check_norm1d, Norm1dNotebookStub),
                                             (check_norm1d, Norm1dHalfDone)])
def test_stubs_are_not_attempted_yet(check, stub):
    assert outcome(check, stub) == ("not attempted", "")


# ---------------------------------------------------------------- the "made elsewhere" stand-in


@pytest.mark.parametrize(
    "forward",
    [
        lambda x: x[..., torch.arange(2)],                   # a CPU index tensor: CUDA indexing takes it
        lambda x: x * torch.tensor(2.0),                     # a CPU number (0-dim): CUDA kernels take it
        lambda x: x + torch.ones(3).to(x.device),            # moved explicitly
        lambda x: x + torch.ones(3).to(x),
        lambda x: x + torch.ones(3, device=x.device),
        lambda x: x + x.new_ones(3) + torch.zeros_like(x),   # derived from x
        lambda x: torch.empty_like(x).copy_(torch.ones(2, 3)),
    ],
)
def test_made_elsewhere_accepts_what_cuda_accepts(forward):
    x = torch.randn(2, 3)
    with _made_elsewhere():
        out = forward(x)
    assert torch.allclose(out, forward(x))                   # real values, the same as without the stand-in


@pytest.mark.parametrize(
    "forward",
    [
        lambda x: x * torch.arange(3),
        lambda x: x + torch.ones(3).to(torch.float32),       # a dtype is no device
        lambda x: x @ torch.cos(torch.arange(3.0)[:, None] * torch.arange(2.0)),
        lambda x: x.index_select(1, torch.arange(2)),        # index_select wants its index on the data's device
        lambda x: F.linear(x, torch.ones(4, 3)),
    ],
)
def test_made_elsewhere_refuses_what_cuda_refuses(forward):
    x = torch.randn(2, 3)                                    # the input, made outside: on "the GPU"
    with _made_elsewhere(), pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        forward(x)
