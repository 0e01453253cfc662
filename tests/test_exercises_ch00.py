"""Chapter 00's warm-up check: right answers written several ways pass, plausible wrong ones get their hint."""

import numpy as np
import pytest
import torch

from utils.checks import STUB_MESSAGE, outcome
from utils.exercises.ch00 import check_ones


def stub(n):
    raise NotImplementedError(STUB_MESSAGE)


WRONG = {
    # (answer, a distinctive part of the hint it must get)
    "zeros": (lambda n: torch.zeros(n), "every entry of ones(1) must be 1, but 1 of 1 are not: entry 0 is 0.0"),
    "constant size": (lambda n: torch.ones(3), "ones(0) must have shape (0,), got (3,)"),
    "python list": (lambda n: [1.0] * n, "must return a torch.Tensor, got list"),
    "numpy array": (lambda n: np.ones(n, dtype=np.float32), "must return a torch.Tensor, got ndarray"),
    "list of ints": (lambda n: torch.tensor([1] * n), "ones(1) must be float32, like torch.ones(n), got torch.int64: "
                     "torch.tensor was given integers (1, not 1.0)"),
    "int fill value": (lambda n: torch.full((n,), 1), "ones(0) must be float32, like torch.ones(n), got torch.int64: "
                       "torch.full was given integers"),
    "row vector": (lambda n: torch.ones(1, n), "ones(0) must have shape (0,), got (1, 0)"),
    "square matrix": (lambda n: torch.ones(n, n), "ones(0) must have shape (0,), got (0, 0)"),
    "off by one": (lambda n: torch.ones(n + 1), "ones(0) must have shape (0,), got (1,)"),
    "at least one": (lambda n: torch.ones(max(n, 1)), "ones(0) must have shape (0,), got (1,)"),
    "float64": (lambda n: torch.ones(n, dtype=torch.float64), "got torch.float64"),
    "from numpy": (lambda n: torch.from_numpy(np.ones(n)), "a NumPy array went into torch"),
    "tensor of a numpy array": (lambda n: torch.tensor(np.ones(n)), "keeps the array's dtype (torch.float64)"),
    "float16": (lambda n: torch.ones(n, dtype=torch.float16), "torch.ones was given dtype=torch.float16"),
    "booleans": (lambda n: torch.ones(n, dtype=torch.bool), "torch.ones was given dtype=torch.bool"),
    "compared with zero": (lambda n: torch.zeros(n) == 0, "True is not 1.0"),
    "complex": (lambda n: torch.ones(n, dtype=torch.complex64), "leave dtype= out, float32 is the default"),
    "keyword only": (lambda *, n: torch.ones(n), "calling ones(0) raised TypeError"),
    "arange": (lambda n: torch.arange(n, dtype=torch.float32), "ones(1) must be 1, but 1 of 1 are not: entry 0 is 0.0"),
    # Slipped through before: sizes up to 7 only, and the hint never said what was observed.
    "capped at ten": (lambda n: torch.ones(min(n, 10)), "ones(100) must have shape (100,), got (10,)"),
    "last entry zero": (
        lambda n: torch.ones(n).index_fill_(0, torch.tensor([n - 1]), 0.0) if n > 2 else torch.ones(n),
        "every entry of ones(3) must be 1, but 1 of 3 are not: entry 2 is 0.0",
    ),
    "not a number": (lambda n: torch.full((n,), float("nan")), "ones(1) must be 1, but 1 of 1 are not: entry 0 is nan"),
    "on the meta device": (lambda n: torch.ones(n, device="meta"), "ones(0) returned a tensor on the meta device"),
}


# A hint names the cause the check saw the answer have, and no other: a float64 made with dtype= is not told about
# NumPy, an int64 made with dtype= is not told about its fill value, a conversion is named as such.
OBSERVED = {
    "float64 by dtype=": (lambda n: torch.ones(n, dtype=torch.float64),
                          "torch.ones was given dtype=torch.float64: leave dtype= out", "NumPy"),
    "int64 by dtype=": (lambda n: torch.ones(n, dtype=torch.int64), "torch.ones was given dtype=torch.int64", "1.0"),
    "converted to long": (lambda n: torch.ones(n).long(), "your answer converted the tensor (.long)", "dtype="),
    "converted to double": (lambda n: torch.ones(n).double(), "converted the tensor (.double)", "NumPy"),
    "cause not seen": (lambda n: torch.ones(n).to(torch.int32), "converted the tensor (.to)", "NumPy"),
}
WRONG.update({name: (answer, hint) for name, (answer, hint, _) in OBSERVED.items()})


@pytest.mark.parametrize("name", OBSERVED)
def test_a_hint_names_no_cause_the_answer_does_not_have(name):
    answer, hint, absent = OBSERVED[name]
    verdict, message = outcome(check_ones, answer)
    assert verdict == "failed" and hint in message and absent not in message, message


@pytest.mark.parametrize("name", WRONG)
def test_wrong_answers_get_their_hint(name):
    answer, hint = WRONG[name]
    verdict, message = outcome(check_ones, answer)
    assert verdict == "failed"
    assert hint in message, message


RIGHT = {
    "full with a float": lambda n: torch.full((n,), 1.0),
    "zeros plus one": lambda n: torch.zeros(n) + 1,
    "ones_like": lambda n: torch.ones_like(torch.empty(n)),
    "from a list of floats": lambda n: torch.tensor([1.0] * n),
    "filled in place": lambda n: torch.empty(n).fill_(1),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_answers_pass(name):
    assert outcome(check_ones, RIGHT[name]) == ("passed", "")


def test_the_stub_is_not_attempted(capsys):
    assert outcome(check_ones, stub) == ("not attempted", "")
    check_ones(stub)
    assert "not attempted yet" in capsys.readouterr().out


def test_a_raised_error_becomes_a_hint():
    def broken(n):
        raise ValueError("boom")

    verdict, message = outcome(check_ones, broken)
    assert verdict == "failed" and "calling ones(0) raised ValueError: boom" in message
