"""Argument checks shared by every helper: a bad input gets an error that names the argument.

Used by all of ``utils`` (and so by every chapter): devices and the fake GPUs, timing (chapter 09),
checkpoints (chapters 05 and 10), the explorers (chapters 02 and 06), the doctor (chapter 08) and the
exercise checks. ``bool`` is refused wherever a number is expected although it subclasses ``int``:
``True`` is not a count, an index or a duration.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["check_bool", "check_choice", "check_int", "check_number", "check_path", "check_str"]


def _got(value: object) -> str:
    return f"got {type(value).__name__} {value!r}"


def check_int(value: object, name: str, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high]``; else raise TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, {_got(value)}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_number(value: object, name: str, low: float | None = 0.0) -> float:
    """Return ``value`` as a float if it is a real number (not a bool) ``>= low``; else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, {_got(value)}")
    if value != value or (low is not None and value < low):  # NaN, or below the bound
        raise ValueError(f"{name} must be a number >= {low}, got {value!r}")
    return float(value)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool (not 0 or 1); else raise TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, {_got(value)}")
    return value


def check_str(value: object, name: str, *, allow_none: bool = False, empty: bool = False) -> str | None:
    """Return ``value`` if it is a str (non-empty unless ``empty``), or ``None`` when ``allow_none``."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        kind = "a str or None" if allow_none else "a str"
        raise TypeError(f"{name} must be {kind}, {_got(value)}")
    if not value and not empty:
        raise ValueError(f"{name} must be a non-empty str")
    return value


def check_path(value: object, name: str) -> Path:
    """Return ``value`` as a :class:`~pathlib.Path` if it names a file (a str or os.PathLike)."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, {_got(value)}")
    path = Path(value)
    if str(value) == "" or path.name == "":
        raise ValueError(f"{name} must name a file, got {value!r}")
    return path


def check_choice(value: object, name: str, allowed: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` if it is one of the strings ``allowed``; else raise naming ``name`` and the choices."""
    check_str(value, name, empty=True)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")
    return value
