"""Chapter 04's checks accept the reference answers and reject the plausible wrong ones."""

import numpy as np
import pytest
import torch
from torch import nn

from utils import ExerciseFailed
from utils.exercises.ch04 import check_half_fourier, check_weight_norm_linear


class WeightNormLinear(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.direction = nn.Parameter(torch.randn(out_features, in_features))
        self.scale = nn.Parameter(torch.ones(out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=1, keepdim=True)

    def forward(self, x):
        return x @ self.weight().T + self.bias


class UsesData(WeightNormLinear):
    """The well-known mistake: right numbers, but `direction` never gets a gradient."""

    def weight(self):
        d = self.direction.data
        return self.scale[:, None] * d / d.norm(dim=1, keepdim=True)


class UsesDetach(WeightNormLinear):
    def forward(self, x):
        return x @ self.weight().detach().T + self.bias


class DetachedNorm(WeightNormLinear):
    """Gradients arrive, but are wrong: the norm is treated as a constant."""

    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=1, keepdim=True).detach()


class NormOverColumns(WeightNormLinear):
    def weight(self):
        return self.scale[:, None] * self.direction / self.direction.norm(dim=0, keepdim=True)


class NotNormalised(WeightNormLinear):
    def weight(self):
        return self.scale[:, None] * self.direction


class PlainTensors(WeightNormLinear):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.direction = torch.randn(out_features, in_features, requires_grad=True)
        self.scale = torch.ones(out_features, requires_grad=True)
        self.bias = torch.zeros(out_features, requires_grad=True)


class FlattensBatch(WeightNormLinear):
    def forward(self, x):
        return x.reshape(-1, x.shape[-1]) @ self.weight().T + self.bias


def test_weight_norm_accepts_reference(capsys):
    check_weight_norm_linear(WeightNormLinear)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong", [UsesData, UsesDetach, DetachedNorm, NormOverColumns, NotNormalised, PlainTensors, FlattensBatch]
)
def test_weight_norm_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_weight_norm_linear(wrong)


def test_data_mistake_gets_the_gradient_hint():
    with pytest.raises(ExerciseFailed, match=r"no gradient reached 'direction'.*\.data"):
        check_weight_norm_linear(UsesData)


class HalfFourier(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x, dim=-1)[..., : x.shape[-1] // 2]


class RealFFT(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x, dim=-1)


class Magnitudes(HalfFourier):
    def forward(self, x):
        return super().forward(x).abs()


class FirstDim(nn.Module):
    def forward(self, x):
        return torch.fft.fft(x, dim=0)[: x.shape[0] // 2]


class AllDims(nn.Module):
    def forward(self, x):
        return torch.fft.fftn(x)[..., : x.shape[-1] // 2]


class ViaNumpy(nn.Module):
    def forward(self, x):
        return torch.from_numpy(np.fft.fft(x.numpy(), axis=-1)[..., : x.shape[-1] // 2])


class ViaDetachedNumpy(nn.Module):
    def forward(self, x):
        out = np.fft.fft(x.detach().numpy(), axis=-1)[..., : x.shape[-1] // 2]
        return torch.from_numpy(out.astype(np.complex64))


class HalfWithParameter(HalfFourier):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(()))


def test_rfft_gets_its_hint():
    with pytest.raises(ExerciseFailed, match="rfft keeps n // 2 \\+ 1"):
        check_half_fourier(RealFFT)


def test_half_fourier_accepts_reference(capsys):
    check_half_fourier(HalfFourier)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong", [RealFFT, Magnitudes, FirstDim, AllDims, ViaNumpy, ViaDetachedNumpy, HalfWithParameter]
)
def test_half_fourier_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_half_fourier(wrong)


class WeightNormStub(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()

    def forward(self, x):
        raise NotImplementedError("your code here")


class HalfFourierStub(nn.Module):
    def forward(self, x):
        raise NotImplementedError("your code here")


@pytest.mark.parametrize("check, stub", [(check_weight_norm_linear, WeightNormStub),
                                         (check_half_fourier, HalfFourierStub)])
def test_stubs_are_not_attempted_yet(check, stub, capsys):
    check(stub)
    assert "not attempted yet" in capsys.readouterr().out
