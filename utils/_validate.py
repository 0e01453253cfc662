"""Argument checks shared by every helper: a bad input gets an error that names the argument.

Used by all of ``utils`` (and so by every chapter): devices and the fake GPUs, timing (chapter 09),
checkpoints (chapters 05 and 10), the explorers (chapters 02 and 06), the doctor (chapter 08) and the
exercise checks. ``bool`` is refused wherever a number is expected although it subclasses ``int``:
``True`` is not a count, an index or a duration.
"""

from __future__ import annotations

import os
from pathlib import Path

from utils.i18n import _

__all__ = ["check_bool", "check_choice", "check_int", "check_number", "check_path", "check_str"]


def _kind(value: object) -> str:
    return type(value).__name__


def check_int(value: object, name: str, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high]``; else raise TypeError/ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(_("{name} must be an int, got {type} {value}").format(
            name=name, type=_kind(value), value=repr(value)))
    if value < low or (high is not None and value > high):
        if high is None:
            raise ValueError(_("{name} must be >= {low}, got {value}").format(name=name, low=low, value=value))
        raise ValueError(_("{name} must be between {low} and {high}, got {value}").format(
            name=name, low=low, high=high, value=value))
    return value


def check_number(value: object, name: str, low: float | None = 0.0) -> float:
    """Return ``value`` as a float if it is a real number (not a bool) ``>= low``; else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(_("{name} must be a number, got {type} {value}").format(
            name=name, type=_kind(value), value=repr(value)))
    if value != value or (low is not None and value < low):  # NaN, or below the bound
        raise ValueError(_("{name} must be a number >= {low}, got {value}").format(
            name=name, low=low, value=repr(value)))
    return float(value)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a bool (not 0 or 1); else raise TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(_("{name} must be a bool, got {type} {value}").format(
            name=name, type=_kind(value), value=repr(value)))
    return value


def check_str(value: object, name: str, *, allow_none: bool = False, empty: bool = False) -> str | None:
    """Return ``value`` if it is a str (non-empty unless ``empty``), or ``None`` when ``allow_none``."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        message = (_("{name} must be a str or None, got {type} {value}") if allow_none
                   else _("{name} must be a str, got {type} {value}"))
        raise TypeError(message.format(name=name, type=_kind(value), value=repr(value)))
    if not value and not empty:
        raise ValueError(_("{name} must be a non-empty str").format(name=name))
    return value


def check_path(value: object, name: str) -> Path:
    """Return ``value`` as a :class:`~pathlib.Path` if it names a file (a str or os.PathLike)."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(_("{name} must be a str or os.PathLike, got {type} {value}").format(
            name=name, type=_kind(value), value=repr(value)))
    path = Path(value)
    if str(value) == "" or path.name == "":
        raise ValueError(_("{name} must name a file, got {value}").format(name=name, value=repr(value)))
    return path


def check_choice(value: object, name: str, allowed: tuple[str, ...] | list[str]) -> str:
    """Return ``value`` if it is one of the strings ``allowed``; else raise naming ``name`` and the choices."""
    check_str(value, name, empty=True)
    if value not in allowed:
        raise ValueError(_("{name} must be one of {allowed}, got {value}").format(
            name=name, allowed=tuple(allowed), value=repr(value)))
    return value
