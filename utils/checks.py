"""Auto-checked exercises.

A chapter's exercise is a function decorated with :func:`exercise`. Inside, :func:`expect` states each
property a correct answer has, with the hint a learner needs when it does not hold::

    @exercise("1.1 · A parallel block")
    def check_parallel(cls):
        block = cls(nn.Linear(2, 3), nn.Linear(2, 4))
        expect(block(torch.ones(1, 2)).shape == (1, 7), "concatenate the two outputs along dim 1")

Calling the check on a learner's answer prints ``✓ ... passed``; on an answer that still raises
``NotImplementedError`` it prints that the exercise is not attempted yet (so *Run All* goes through);
on a wrong answer it raises :class:`ExerciseFailed` with the hint. It returns nothing, so a notebook
cell shows only that one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

__all__ = ["ExerciseFailed", "expect", "exercise", "rejection"]

F = TypeVar("F", bound=Callable[..., object])


class ExerciseFailed(AssertionError):
    """A learner's answer does not have a property the exercise asks for."""


def expect(condition: object, hint: str) -> None:
    """Fail the exercise with ``hint`` unless ``condition`` is true."""
    if not isinstance(hint, str) or not hint:
        raise TypeError("hint must be a non-empty str")
    if not condition:
        raise ExerciseFailed(hint)


def exercise(title: str) -> Callable[[F], Callable[..., None]]:
    """Turn a function that calls :func:`expect` into a learner-facing check titled ``title``."""
    if not isinstance(title, str) or not title:
        raise TypeError("title must be a non-empty str")

    def decorate(check: F) -> Callable[..., None]:
        @functools.wraps(check)
        def run(*args, **kwargs) -> None:
            try:
                check(*args, **kwargs)
            except NotImplementedError:
                print(f"… {title}: not attempted yet (the answer still raises NotImplementedError).")
                return
            except ExerciseFailed as failure:
                raise ExerciseFailed(f"{title}: not yet. {failure}") from None
            print(f"✓ {title}: passed.")

        run.title = title  # type: ignore[attr-defined]
        return run

    return decorate


def rejection(check: Callable[..., None], *args, **kwargs) -> str:
    """Run ``check`` on a wrong answer and return its message; raise if the check accepts it.

    Lets a notebook show that a check catches a plausible mistake::

        print(rejection(check_parallel, SerialBlock))
    """
    try:
        check(*args, **kwargs)
    except ExerciseFailed as failure:
        return str(failure)
    raise AssertionError(f"{getattr(check, '__name__', check)!s} accepted a wrong answer")
