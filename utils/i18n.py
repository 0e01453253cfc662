"""The language of what ``utils`` tells a learner in every chapter: exercise titles, verdicts and hints. English
unless a notebook asks.

A Chinese edition's setup cell calls ``set_language("zh-Hans")`` (or ``"zh-Hant"``). Every message then goes
through the standard library's :mod:`gettext`, with the catalogue ``utils/locale/<language>/LC_MESSAGES/utils.mo``
that ``python -m tools.course sync`` compiles from ``locale/zh_Hans/LC_MESSAGES/utils.po``; a message without a
translation stays English. Messages are written ``_("ones({n}) must have shape ({n},)").format(n=n)``: the
catalogue holds the text with its placeholders, and the values are filled in after the translation.
"""

from __future__ import annotations

import gettext
from pathlib import Path

__all__ = ["LANGUAGES", "N_", "_", "language", "set_language"]

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


def _(message: str) -> str:
    """``message`` in the chosen language (itself where the catalogue has no translation)."""
    return _state["translation"].gettext(message)  # type: ignore[attr-defined]
