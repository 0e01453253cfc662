"""The exercise-check mechanism every chapter uses."""

import pytest

from utils import ExerciseFailed, exercise, expect, rejection


@exercise("Ex · positive")
def check_positive(fn):
    expect(fn(2) > 0, "return a positive number")


def test_pass_prints_and_returns_none(capsys):
    assert check_positive(lambda x: x) is None
    assert capsys.readouterr().out == "✓ Ex · positive: passed.\n"


def test_not_attempted_does_not_raise(capsys):
    def stub(x):
        raise NotImplementedError

    check_positive(stub)
    assert "not attempted yet" in capsys.readouterr().out


def test_failure_names_exercise_and_hint():
    with pytest.raises(ExerciseFailed, match=r"Ex · positive: not yet\. return a positive number"):
        check_positive(lambda x: -x)


def test_other_errors_in_an_answer_propagate():
    with pytest.raises(ZeroDivisionError):
        check_positive(lambda x: 1 / 0)


def test_rejection_returns_message_and_refuses_accepted_answers(capsys):
    assert "return a positive number" in rejection(check_positive, lambda x: -x)
    with pytest.raises(AssertionError, match="accepted a wrong answer"):
        rejection(check_positive, lambda x: x)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="hint"):
        expect(True, "")
    with pytest.raises(TypeError, match="title"):
        exercise("")
    assert issubclass(ExerciseFailed, AssertionError)
