"""Argument checks shared by the helpers: a bad input gets an error that names the argument."""

from __future__ import annotations


def check_int(value: object, name: str, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[low, high]``; else raise TypeError/ValueError naming ``name``.

    ``bool`` is refused although it subclasses ``int``: ``True`` is not a count or an index.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value
