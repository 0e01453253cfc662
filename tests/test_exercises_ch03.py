"""Chapter 03's checks accept the reference answers and reject the plausible wrong ones."""

import pytest
import torch
from torch import nn

from utils import ExerciseFailed
from utils.exercises.ch03 import check_count_parameters, check_tied_lm


class TiedLM(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.body = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


class TiedOtherWay(TiedLM):
    """Tying in the other direction is tying too: one Parameter, two owners."""

    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size)
        self.embed.weight = self.head.weight


class Untied(TiedLM):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)


class CopiedOnce(Untied):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        with torch.no_grad():
            self.head.weight.copy_(self.embed.weight)


class NewParameterOnSameMemory(TiedLM):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head.weight = nn.Parameter(self.embed.weight.detach())


class ManualLogitsUnusedHead(Untied):
    def forward(self, tokens):
        return self.body(self.embed(tokens)) @ self.embed.weight.T


class WrongShape(TiedLM):
    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens))).mean(dim=1)


@pytest.mark.parametrize("right", [TiedLM, TiedOtherWay])
def test_tied_lm_accepts_reference(right, capsys):
    check_tied_lm(right)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (Untied, "same Parameter object"),
        (CopiedOnce, "same Parameter object"),
        (NewParameterOnSameMemory, "same Parameter object"),
        (ManualLogitsUnusedHead, "output of self.head"),
        (WrongShape, "shape (3, 7, 50)"),
    ],
)
def test_tied_lm_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match="Exercise 1") as failure:
        check_tied_lm(wrong)
    assert hint in str(failure.value)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def count_from_state_dict(model):
    return sum(t.numel() for t in model.state_dict().values())


def count_with_duplicates(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))


def count_as_tensor(model):
    return torch.tensor([p.numel() for p in model.parameters()]).sum()


def test_count_accepts_reference(capsys):
    check_count_parameters(count_parameters)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [count_from_state_dict, count_with_duplicates, count_as_tensor])
def test_count_rejects(wrong):
    with pytest.raises(ExerciseFailed, match="Exercise 2"):
        check_count_parameters(wrong)


def test_unattempted_exercises_say_so(capsys):
    class Stub(nn.Module):
        def __init__(self, *args):
            super().__init__()
            raise NotImplementedError("your code here")

    def stub(model):
        raise NotImplementedError("your code here")

    check_tied_lm(Stub)
    check_count_parameters(stub)
    assert capsys.readouterr().out.count("not attempted yet") == 2
