"""Chapter 01's checks accept the reference answers and reject the plausible wrong ones."""

import pytest
import torch
from torch import nn

from utils import ExerciseFailed
from utils.exercises.ch01 import check_parallel, check_router


class Parallel(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.net1, self.net2 = net1, net2

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class Serial(Parallel):
    def forward(self, x):
        return self.net2(self.net1(x))


class ConcatWrongDim(Parallel):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=0)


class HiddenInList(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = [net1, net2]

    def forward(self, x):
        return torch.cat([n(x) for n in self.nets], dim=1)


class SwappedOrder(Parallel):
    def forward(self, x):
        return torch.cat([self.net2(x), self.net1(x)], dim=1)


def test_parallel_accepts_reference(capsys):
    check_parallel(Parallel)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [Serial, ConcatWrongDim, HiddenInList, SwappedOrder])
def test_parallel_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_parallel(wrong)


class Router(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = nn.ModuleDict(heads)

    def forward(self, x, task):
        return self.heads[task](x)


class PlainDictRouter(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = dict(heads)

    def forward(self, x, task):
        return self.heads[task](x)


class AlwaysFirstHead(Router):
    def forward(self, x, task):
        return next(iter(self.heads.values()))(x)


def test_router_accepts_reference(capsys):
    check_router(Router)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [PlainDictRouter, AlwaysFirstHead])
def test_router_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_router(wrong)
