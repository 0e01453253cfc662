"""The language of what ``utils`` tells a learner in every chapter: exercise titles, verdicts and hints. English
unless a notebook asks.

A Chinese edition's setup cell calls ``set_language("zh-Hans")`` (or ``"zh-Hant"``). Every message then goes
through the standard library's :mod:`gettext`, with the catalogue ``utils/locale/<language>/LC_MESSAGES/utils.mo``
that ``python -m tools.course sync`` compiles from ``locale/zh_Hans/LC_MESSAGES/utils.po``; a message without a
translation stays English. Messages are written ``_("ones({n}) must have shape ({n},)").format(n=n)``: the
catalogue holds the text with its placeholders, and the values are filled in after the translation.
"""

from __future__ import annotations

import contextlib
import gettext
from collections.abc import Iterator
from pathlib import Path

__all__ = ["LANGUAGES", "L_", "N_", "_", "language", "messages_used", "set_language"]

LANGUAGES = ("en", "zh-Hans", "zh-Hant")
LOCALE = Path(__file__).resolve().parent / "locale"
DOMAIN = "utils"

_state: dict[str, object] = {"language": "en", "translation": gettext.NullTranslations()}



def set_language(language: str) -> None:
    """Show this package's messages in ``language``: ``"en"``, ``"zh-Hans"`` (简体) or ``"zh-Hant"`` (繁體)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, got {language!r}")
    translation = (gettext.NullTranslations() if language == "en"
                   else gettext.translation(DOMAIN, LOCALE, languages=[language.replace("-", "_")]))
    _state.update(language=language, translation=translation)


def language() -> str:
    """The language set by :func:`set_language` (``"en"`` until then)."""
    return str(_state["language"])


def N_(message: str) -> str:  # noqa: N802 (gettext's name for it)
    """Mark ``message`` for the catalogue without translating it yet (a constant that ``_()`` translates when
    it is shown)."""
    return message


#: The lines ``utils`` prints or raises whole: a verdict, a hint, a hardware or version note (with the messages
#: given to ``L_``). A Chinese edition translates the lines of its outputs that are one of these
#: (tools/translate.py), and nothing else it printed.
NOT_YET = N_("{title}: not yet. {hint}")
FAILED_AT = N_("(The check that failed: {where}.)")
NOT_ATTEMPTED = N_("… {title}: not attempted yet (the answer still raises NotImplementedError).")
PASSED = N_("✓ {title}: passed.")
SKIPPED_ONE = N_("Skipped: this cell needs a {kind} device; this machine has {have}.")
SKIPPED_MANY = N_("Skipped: this cell needs {count} {kind} devices; this machine has {have}.")
OLD_TORCH = N_("Note: this is PyTorch {version}; the course needs {need} or newer. Some cells will fail or print "
               "other values. Upgrade with: pip install --upgrade 'torch>={need}'")
PRINTED = (NOT_YET, FAILED_AT, NOT_ATTEMPTED, PASSED, SKIPPED_ONE, SKIPPED_MANY, OLD_TORCH)


def _(message: str) -> str:
    """``message`` in the chosen language (itself where the catalogue has no translation)."""
    used = _state.get("used")
    if used is not None:
        used.append(message)  # type: ignore[attr-defined]
    return _state["translation"].gettext(message)  # type: ignore[attr-defined]


def L_(message: str) -> str:  # noqa: N802 (after gettext's _ and N_)
    """``_()`` for a message that is a whole line of output (a report line, a table heading): a Chinese edition
    translates such lines of its committed outputs through the catalogue, as its kernel prints them."""
    return _(message)


@contextlib.contextmanager
def messages_used() -> Iterator[list[str]]:
    """The messages ``_()`` is asked for inside the block, in order: what the tests compare between languages
    (the same messages, so the same fix, in English and in Chinese)."""
    used: list[str] = []
    _state["used"] = used
    try:
        yield used
    finally:
        _state.pop("used", None)
