"""Auto-checked exercises (every chapter's Exercises section).

A chapter's exercise is a function decorated with :func:`exercise`. Inside, :func:`expect` states each
property a correct answer has, with the hint a learner needs when it does not hold, and
:func:`learner_code` wraps each call into the learner's code::

    @exercise("Exercise 1 · A parallel block")
    def check_parallel(cls):
        with learner_code("building Parallel(net1, net2)"):
            block = cls(nn.Linear(2, 3), nn.Linear(2, 4))
        with learner_code("calling the block on a (1, 2) input", "feed the same x to both nets"):
            y = block(torch.ones(1, 2))
        expect(y.shape == (1, 7), "concatenate the two outputs along dim 1")

Calling the check on a learner's answer prints ``✓ ... passed``. While the answer is still the stub,
which raises ``NotImplementedError("your code here")`` (:data:`STUB_MESSAGE`), it prints that the
exercise is not attempted yet, so *Run All* goes through. Any other outcome is a hint: a failed
``expect`` and every error the learner's code raises become :class:`ExerciseFailed` with a message that
says what was being tried, the likely cause and the original error. PyTorch's own
``NotImplementedError`` for a module without ``forward`` (a misspelt ``forward``, or an
``nn.ModuleList`` called like a module) is such an error, not "not attempted".
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Literal, TypeVar

from utils.i18n import FAILED_AT, N_, NOT_ATTEMPTED, NOT_YET, PASSED, _

__all__ = ["STUB_MESSAGE", "ExerciseFailed", "exercise", "expect", "keeps_global_rng", "learner_code", "outcome",
           "rejection"]

F = TypeVar("F", bound=Callable[..., object])

#: The message of the ``NotImplementedError`` that every exercise stub raises.
STUB_MESSAGE = "your code here"

Verdict = Literal["passed", "not attempted", "failed"]

_NO_FORWARD = re.compile(r'Module \[(\w+)\] is missing the required "forward" function')

#: Errors whose cause is the same whatever the exercise: (a piece of torch's message, the cause to give).
_KNOWN_CAUSES = (
    ("a leaf Variable that requires grad is being used in an in-place operation",
     N_("a parameter was edited in place while autograd records: fill it with nn.init (which turns recording "
     "off itself), or make the edit inside `with torch.no_grad():`")),
    ("Boolean value of Tensor with more than one value is ambiguous",
     N_("`if` (or `and`, `or`, `not`) on a tensor of several values: `a == b` and `a != b` compare element by "
     "element. Compare whole tensors with torch.equal(a, b), or reduce first: (a != b).any()")),
    ("must be tuple of Tensors, not Tensor",
     N_("torch.cat and torch.stack take the tensors as one list or tuple: torch.cat([a, b], dim=1), not "
     "torch.cat(a, b)")),
    ("'ModuleDict' object has no attribute",
     N_("an nn.ModuleDict is read by key, heads[name] (also `in`, keys(), items(), values()); it has no .get(), "
     "and heads.task looks for a module named 'task', not for the value of the variable task")),
    ("already exists",
     N_("register_buffer and register_parameter refuse a name that is already a plain attribute of the module: "
     "drop the plain assignment (self.mean = mean) and register the tensor under that name instead")),
    ("'int' object is not iterable",
     N_("a number was looped over (or unpacked) where a sequence is needed: to do something n times, loop over "
     "range(n), `for _ in range(n)`, not over n itself")),
    ("Expected more than 1 value per channel when training",
     N_("a batch norm layer in training mode needs more than one sample to compute a batch's statistics: run "
     "the network on the whole example batch")),
)


class ExerciseFailed(AssertionError):
    """A learner's answer does not have a property the exercise asks for.

    ``where`` names the line of the check that found it (``"utils/exercises/ch03.py, line 42"``), so that a
    learner who opens the check finds the property that failed."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where

    def _render_traceback_(self) -> list[str]:
        """What IPython shows in place of the traceback: the verdict, the hint and the check's line that failed,
        and no frames. A traceback whose last frame is in this file reads as a crash of the course; a failed
        check is a verdict on the answer. The exception is still raised, so *Run All* stops at it."""
        lines = str(self).splitlines()
        at = _(FAILED_AT).format(where=self.where) if self.where else ""
        if at and at not in lines:
            lines.append(at)
        return lines


def _check_line() -> str:
    """The file and line of the innermost frame outside this module and contextlib: the check's own line."""
    import sys

    frame = sys._getframe(1)
    skip = {__file__, contextlib.__file__}
    while frame is not None and frame.f_code.co_filename in skip:
        frame = frame.f_back
    if frame is None:
        return ""
    path = Path(frame.f_code.co_filename)
    package_root = Path(__file__).resolve().parents[1]
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(package_root)
    return f"{path.as_posix()}, line {frame.f_lineno}"


def expect(condition: object, hint: str) -> None:
    """Fail the exercise with ``hint`` unless ``condition`` is true."""
    if not isinstance(hint, str) or not hint:
        raise TypeError("hint must be a non-empty str")
    if not condition:
        raise ExerciseFailed(hint, _check_line())


def keeps_global_rng(check: F) -> F:
    """Run ``check`` with the global CPU generator forked: a check that draws random numbers never shifts the
    numbers that the notebook's later cells print."""

    @functools.wraps(check)
    def run(*args, **kwargs):
        import torch  # here, not at the top: importing the checks stays cheap

        with torch.random.fork_rng(devices=[]):
            return check(*args, **kwargs)

    return run  # type: ignore[return-value]


def _is_stub(err: BaseException) -> bool:
    return isinstance(err, NotImplementedError) and str(err) == STUB_MESSAGE


def _explain(err: Exception, what: str, hint: str, causes: Mapping[str, str] | None = None) -> str:
    """A hint for an error raised by the learner's code: what was tried, the likely cause, the error.

    ``causes``: pieces of error messages and their causes in this exercise, found before the shared ones."""
    quoted = f"{type(err).__name__}: {err}".strip()
    missing = _NO_FORWARD.search(str(err)) if isinstance(err, NotImplementedError) else None
    if missing and missing.group(1) in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict"):
        cause = _(
            "an nn.{container} was called like a module, but it is only a container and has no "
            "forward: loop over it (or index it) and call the modules inside"
        ).format(container=missing.group(1))
    elif missing:
        cause = _(
            "the module {module} has no forward method: check the spelling of "
            "`def forward(self, ...)` and that it is indented inside the class"
        ).format(module=missing.group(1))
    else:
        known = (*(causes or {}).items(), *((piece, _(cause)) for piece, cause in _KNOWN_CAUSES))
        cause = next((cause for piece, cause in known if piece in str(err)), hint)
    message = (_("{what} raised {error}").format(what=what, error=quoted) if what
               else _("your answer raised {error}").format(error=quoted))
    message += "" if message.endswith((".", "!", "?")) else "."
    return _("{message} Likely cause: {cause}.").format(message=message, cause=cause) if cause else message


@contextlib.contextmanager
def learner_code(what: str, hint: str = "", causes: Mapping[str, str] | None = None) -> Iterator[None]:
    """Run the learner's code inside this block; turn an error it raises into a hint.

    ``what`` says what the check was doing ("calling your block on a (3, 4) input"), ``hint`` the most
    likely cause of an error there, and ``causes`` maps pieces of error messages to causes particular to
    this exercise (they come before the shared ones, which are written for other exercises). The stub's own
    ``NotImplementedError`` passes through unchanged (the exercise is then not attempted), and so does a
    failed :func:`expect`.
    """
    if not isinstance(what, str) or not what:
        raise TypeError("what must be a non-empty str")
    if not isinstance(hint, str):
        raise TypeError(f"hint must be a str, got {type(hint).__name__}")
    try:
        yield
    except ExerciseFailed:
        raise
    except Exception as err:
        if _is_stub(err):
            raise
        raise ExerciseFailed(_explain(err, what, hint, causes), _check_line()) from None


def _judge(check: Callable[..., object], args: tuple, kwargs: dict) -> tuple[Verdict, str, str]:
    """``(verdict, hint, where)``: ``where`` is the check's line that failed, where one did."""
    try:
        check(*args, **kwargs)
    except ExerciseFailed as failure:
        return "failed", str(failure), failure.where
    except Exception as err:
        if _is_stub(err):
            return "not attempted", "", ""
        return "failed", _explain(err, "", ""), ""
    return "passed", "", ""


def exercise(title: str) -> Callable[[F], Callable[..., None]]:
    """Turn a function that calls :func:`expect` into a learner-facing check titled ``title``."""
    if not isinstance(title, str) or not title:
        raise TypeError("title must be a non-empty str")

    def decorate(check: F) -> Callable[..., None]:
        @functools.wraps(check)
        def run(*args, **kwargs) -> None:
            verdict, message, where = _judge(check, args, kwargs)
            if verdict == "failed":
                at = "\n" + _(FAILED_AT).format(where=where) if where else ""
                raise ExerciseFailed(_(NOT_YET).format(title=_(title), hint=message) + at, where)
            if verdict == "not attempted":
                print(_(NOT_ATTEMPTED).format(
                    title=_(title)))
            else:
                print(_(PASSED).format(title=_(title)))

        run.title = title  # type: ignore[attr-defined]
        run.judge = lambda *args, **kwargs: _judge(check, args, kwargs)[:2]  # type: ignore[attr-defined]
        return run

    return decorate


def outcome(check: Callable[..., None], *args, **kwargs) -> tuple[Verdict, str]:
    """Run an :func:`exercise` check quietly; return ``(verdict, hint)``.

    ``verdict`` is ``"passed"``, ``"not attempted"`` or ``"failed"``; ``hint`` is the learner's hint
    (prefixed with the exercise's title) when it failed, else ``""``. Tests use it to assert the exact
    hint each wrong answer gets.
    """
    judge = getattr(check, "judge", None)
    if judge is None:
        raise TypeError(f"check must be a function decorated with @exercise, got {check!r}")
    verdict, message = judge(*args, **kwargs)
    return verdict, (_(NOT_YET).format(title=_(check.title), hint=message) if verdict == "failed"
                     else "")


def rejection(check: Callable[..., None], *args, **kwargs) -> str:
    """Run ``check`` on a wrong answer and return its hint; raise if the check does not reject it.

    Lets a notebook show that a check catches a plausible mistake::

        print(rejection(check_parallel, SerialBlock))

    Raises:
        AssertionError: the check accepted the answer, or reported it as not attempted (the answer
            is still a stub, so it shows nothing about the check).
    """
    verdict, hint = outcome(check, *args, **kwargs)
    if verdict == "failed":
        return hint
    name = getattr(check, "__name__", repr(check))
    if verdict == "not attempted":
        raise AssertionError(f"{name} reported the answer as not attempted, so it was not judged")
    raise AssertionError(f"{name} accepted a wrong answer")
