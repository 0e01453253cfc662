"""The Chinese editions: every chapter in 简体 and 繁體, made from the English notebook and gettext catalogues.

English is the one source. ``locale/zh_Hans/LC_MESSAGES/<chapter>.po`` holds a chapter's messages: one per
Markdown block (``mdpo`` splits a cell into its headings, paragraphs, list items and table cells) and one per code
comment, each with its 简体 translation. 繁體 is not kept by hand: OpenCC converts 简体 with Taiwan's words and
phrases (``s2twp``), except for the few terms of ``TRADITIONAL_TERMS``, which it would get wrong for this course.

``python -m tools.course sync`` brings every catalogue up to date (new English text comes in untranslated, text
that left a chapter goes; a translation follows its English sentence from one chapter to another) and writes
``notebooks/zh-Hans/`` and ``notebooks/zh-Hant/``: the English notebook's code, outputs and metadata with the
Chinese Markdown and code comments. Identifiers, strings and outputs are not translated (the test suite compares
them).
"""

from __future__ import annotations

import functools
import io
import re
import tempfile
import tokenize
from functools import cache
from pathlib import Path

import polib

ROOT = Path(__file__).resolve().parents[1]
LOCALE = ROOT / "locale"
LANGUAGES = ("zh-Hans", "zh-Hant")

#: Terms that OpenCC's s2twp conversion would get wrong for this course, with their 繁體: they are set aside
#: before the conversion (longest first) and put back in this spelling, so OpenCC's phrase table never sees them.
TRADITIONAL_TERMS = {
    "参数": "參數",  # a model's parameter (s2twp: 引數, a function's argument)
    "激活函数": "激活函數",  # (s2twp: 啟用函式)
    "激活": "激活",  # activation (s2twp: 啟用, "enable"); 启用 itself still becomes 啟用
    "试运行": "試運行",  # a dry run (s2twp: 試執行)
    "注册表": "註冊表",  # a module's registries (s2twp: 登錄檔, the Windows registry)
    "访问": "存取",  # reading a parameter (s2twp leaves 訪問, a visit)
    "优化器": "優化器",  # (s2twp: 最佳化器)
    "打印出": "印出",
    "打印": "印出",  # print() (s2twp: 列印, on paper)
    "进程": "行程",  # an operating-system process (s2twp: 程序, a procedure; 子程序 would be a subroutine)
    "“": "「", "”": "」", "‘": "『", "’": "』",  # Taiwan's quotation marks
}
_TERMS = re.compile("|".join(map(re.escape, sorted(TRADITIONAL_TERMS, key=len, reverse=True))))


#: Comments that are instructions to tools, or markers the course's tools look for: never translated.
_UNTRANSLATED_COMMENT = re.compile(r"^(noqa|type:|pragma|fmt:|ruff:|----)")


def catalogue_path(stem: str, language: str = "zh-Hans") -> Path:
    return LOCALE / language.replace("-", "_") / "LC_MESSAGES" / f"{stem}.po"


# --- what a notebook asks translators for ----------------------------------------------------------------

@functools.lru_cache(maxsize=4096)
def markdown_messages(markdown: str) -> tuple[str, ...]:
    """The messages of one Markdown cell, as ``mdpo`` splits it (code blocks are not messages)."""
    from mdpo.md2po import markdown_to_pofile

    return tuple(entry.msgid for entry in markdown_to_pofile(markdown))


@functools.lru_cache(maxsize=4096)
def _comment_runs(code: str) -> list[tuple[int, int, list[tuple[int, int, int]], str]]:
    """Comments of a code cell, consecutive full-line comments at one indentation joined into one run:
    ``(first line, indent or -1 for a trailing comment, [(line, start col, end col)], text)``."""
    lines = [line if not line.lstrip().startswith(("%", "!")) else "" for line in code.split("\n")]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    runs: list = []
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        (row, col), (_, end) = tok.start, tok.end
        text = tok.string[1:].strip()
        full_line = not tok.line[:col].strip()
        if not text or _UNTRANSLATED_COMMENT.match(text):
            continue
        prev = runs[-1] if runs else None
        if full_line and prev and prev[1] == col and prev[2][-1][0] == row - 1:
            prev[2].append((row, col, end))
            runs[-1] = (prev[0], prev[1], prev[2], prev[3] + " " + text)
        else:
            runs.append((row, col if full_line else -1, [(row, col, end)], text))
    return runs


def code_messages(code: str) -> list[str]:
    return [run[3] for run in _comment_runs(code)]


GENERATED_TAGS = {"nav-header", "nav-footer", "course-map"}


def _title_split(nb, cell) -> tuple[str, str]:
    """The title cell's generated first line (``# NN · title``, written in each language by tools/course.py)
    and the rest of the cell."""
    if cell is nb.cells[0] and cell.source.startswith("# "):
        first, _, rest = cell.source.partition("\n")
        return first + "\n", rest
    return "", cell.source


def notebook_messages(nb) -> list[str]:
    """Every message of a notebook, in order, each once. Generated text (the title line, navigation, the
    chapter table) is not included: tools/course.py writes it in each language from ``course.po``."""
    seen: dict[str, None] = {}
    for cell in nb.cells:
        if GENERATED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if cell.cell_type == "markdown":
            seen.update(dict.fromkeys(markdown_messages(_title_split(nb, cell)[1])))
        elif cell.cell_type == "code":
            seen.update(dict.fromkeys(code_messages(cell.source)))
    return list(seen)


# --- catalogues -------------------------------------------------------------------------------------------

def _new_catalogue() -> polib.POFile:
    po = polib.POFile(wrapwidth=0)
    po.metadata = {
        "Project-Id-Version": "torch-building-blocks",
        "Language": "zh_Hans",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }
    return po


def known_translations() -> dict[str, str]:
    """Every translated message in every 简体 catalogue: a sentence moved to another chapter keeps its
    translation."""
    known: dict[str, str] = {}
    for path in sorted(catalogue_path("*").parent.glob("*.po")):
        for entry in polib.pofile(str(path)):
            if entry.msgstr and not entry.fuzzy and not entry.obsolete:
                known.setdefault(entry.msgid, entry.msgstr)
    return known


def updated_catalogue(messages: list[str], old: polib.POFile | None, known: dict[str, str]) -> polib.POFile:
    """The catalogue of ``messages`` in order, each with its translation from ``old`` or from ``known``."""
    po = _new_catalogue()
    if old is not None:
        po.metadata = old.metadata
    previous = {e.msgid: e for e in old or []}
    for msgid in messages:
        entry = polib.POEntry(msgid=msgid, msgstr=known.get(msgid, ""))
        if msgid in previous and previous[msgid].tcomment:
            entry.tcomment = previous[msgid].tcomment  # a translator's note stays with its message
        po.append(entry)
    return po


def catalogue_text(po: polib.POFile) -> str:
    po.wrapwidth = 0
    return str(po) + "\n"


# --- 繁體 from 简体 ------------------------------------------------------------------------------------------

@cache
def _converter():
    import opencc

    return opencc.OpenCC("s2twp")


def to_traditional(text: str) -> str:
    """简体 → 繁體 with Taiwan's words and phrases (OpenCC ``s2twp``), ``TRADITIONAL_TERMS`` kept as listed."""
    pieces, start = [], 0
    for match in _TERMS.finditer(text):
        pieces += [_converter().convert(text[start:match.start()]), TRADITIONAL_TERMS[match.group(0)]]
        start = match.end()
    return "".join([*pieces, _converter().convert(text[start:])])


def language_catalogue(po: polib.POFile, language: str) -> polib.POFile:
    if language == "zh-Hans":
        return po
    converted = _new_catalogue()
    converted.metadata = dict(po.metadata, Language="zh_Hant")
    for entry in po:
        converted.append(polib.POEntry(msgid=entry.msgid, msgstr=to_traditional(entry.msgstr)))
    return converted


# --- translating a notebook -------------------------------------------------------------------------------

def _lookup_catalogue(po: polib.POFile) -> polib.POFile:
    """``po`` as po2md reads it. md2po joins a line that ends in a TeX row break (``\\\\``) to the next one without
    a space, po2md with one: each such message is given under both spellings."""
    lookup = polib.POFile()
    for entry in po:
        if not entry.msgstr:
            continue
        lookup.append(polib.POEntry(msgid=entry.msgid, msgstr=entry.msgstr))
        spaced = re.sub(r"(?<!\\)((?:\\\\)+)(?=[^\s\\])", r"\1 ", entry.msgid)
        if spaced != entry.msgid:
            lookup.append(polib.POEntry(msgid=spaced, msgstr=entry.msgstr))
    return lookup


def translate_markdown(markdown: str, po: polib.POFile) -> str:
    """``markdown`` with each of its messages replaced by its translation in ``po`` (mdpo's ``po2md``). Raises
    ``LookupError`` naming a translated message that po2md nevertheless left in English."""
    from mdpo.po2md import Po2Md

    messages = markdown_messages(markdown)
    if not messages:
        return markdown
    translator = Po2Md([], wrapwidth=float("inf"))
    translator.pofiles = [po]  # the catalogue already read, rather than a path po2md would parse per cell
    out = translator.translate(markdown).rstrip("\n")
    translated = {e.msgid for e in po if e.msgstr and e.msgstr != e.msgid}
    missed = [m for m in markdown_messages(out) if m in translated]
    if missed:
        raise LookupError(f"po2md left this translated message in English: {missed[0][:80]!r}")
    return out


_PUNCTUATION = re.compile(r"[，。；：、）,;:)]\s*")


def _split(text: str, parts: int) -> list[str]:
    """``text`` in ``parts`` lines of about equal length, each break after a punctuation mark where there is one
    near, else at a space, else between two characters outside a code span or an English word."""
    spans = [m.span() for m in re.finditer(r"`[^`]*`|[A-Za-z0-9_.]+", text)]
    inside = {i for a, b in spans for i in range(a + 1, b)}
    punctuation = {m.end() for m in _PUNCTUATION.finditer(text)}
    spaces = {m.end() for m in re.finditer(r"\s+", text)}
    allowed = [i for i in range(1, len(text)) if i not in inside]
    cuts, last = [], 0
    for k in range(1, parts):
        target = k * len(text) / parts
        options = [i for i in allowed if i > last] or [len(text)]
        window = [i for i in options if abs(i - target) <= len(text) / (2 * parts)]
        near = [i for i in window if i in punctuation] or [i for i in window if i in spaces] or options
        cut = min(near, key=lambda i: abs(i - target))
        cuts.append(cut)
        last = cut
    bounds = [0, *cuts, len(text)]
    return [text[a:b].strip() for a, b in zip(bounds, bounds[1:], strict=False)]


def translate_code(code: str, table: dict[str, str]) -> str:
    """``code`` with its comments replaced by their translations: the code and its line numbers are unchanged
    (a comment that ran over several lines is translated as one sentence, then spread over the same lines)."""
    lines = code.split("\n")
    for _first, _indent, spans, text in _comment_runs(code):
        translated = table.get(text)
        if not translated:
            continue
        for (row, col, end), piece in zip(spans, _split(translated, len(spans)), strict=True):
            line = lines[row - 1]
            lines[row - 1] = line[:col] + ("# " + piece).rstrip() + line[end:]
    return "\n".join(lines)


def translated_notebook(nb, po: polib.POFile, language: str, printed: dict[str, str] | None = None,
                        patterns: list | None = None):
    """A copy of ``nb`` (an English notebook whose generated parts are already in ``language``) with its Markdown
    and code comments translated by the 简体 catalogue ``po``, and what ``utils`` printed translated by
    ``printed`` (the ``utils`` catalogue, msgid -> translation in ``language``). ``patterns``:
    ``printed_patterns(printed)``, when the caller has it already (it is the same for every chapter)."""
    import nbformat

    nb = nbformat.from_dict(nb)
    po = language_catalogue(po, language)
    table = {e.msgid: e.msgstr for e in po if e.msgstr}
    lookup = _lookup_catalogue(po)
    if patterns is None:
        patterns = printed_patterns(printed) if printed else []
    for cell in nb.cells:
        if GENERATED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if cell.cell_type == "markdown":
            title, rest = _title_split(nb, cell)
            cell.source = title + translate_markdown(rest, lookup)
        elif cell.cell_type == "code":
            cell.source = translate_code(cell.source, table)
            if printed:
                translate_outputs(cell, printed, patterns)
    return nb


COURSE_CATALOGUE = "course"  # the strings tools/course.py generates: titles, table headings, navigation
UTILS_CATALOGUE = "utils"  # what utils tells a learner (utils/i18n.py): exercise titles, verdicts, hints
UTILS_LOCALE = ROOT / "utils" / "locale"


def utils_messages() -> list[str]:
    """The messages of ``utils``, found by Babel's extractor: the texts given to ``_()`` and ``N_()``, and exercise
    titles."""
    from babel.messages.extract import extract_from_dir

    found = extract_from_dir(str(ROOT / "utils"), method_map=[("**.py", "python")],
                             keywords={"_": None, "N_": None, "L_": None, "exercise": None})
    return list(dict.fromkeys(message for _file, _line, message, _comments, _context in found))


@cache
def printed_lines() -> frozenset[str]:
    """The messages ``utils`` prints as whole lines: ``utils.i18n.PRINTED`` and every message given to ``L_()``."""
    from babel.messages.extract import extract_from_dir

    from utils.i18n import PRINTED

    found = extract_from_dir(str(ROOT / "utils"), method_map=[("**.py", "python")], keywords={"L_": None})
    return frozenset(PRINTED) | {message for _file, _line, message, _comments, _context in found}


def compiled_catalogue(po: polib.POFile, language: str) -> tuple[Path, bytes]:
    """Where ``utils`` looks for its catalogue in ``language``, and the compiled ``.mo`` (``gettext``'s format)."""
    import os

    path = UTILS_LOCALE / language.replace("-", "_") / "LC_MESSAGES" / f"{UTILS_CATALOGUE}.mo"
    fd, tmp = tempfile.mkstemp(suffix=".mo")
    os.close(fd)
    try:
        language_catalogue(po, language).save_as_mofile(tmp)
        return path, Path(tmp).read_bytes()
    finally:
        os.unlink(tmp)


def _placeholder_pattern(msgid: str) -> re.Pattern | None:
    """``msgid`` as a regular expression whose groups are its ``{placeholders}`` (None if it has none)."""
    parts = re.split(r"\{(\w+)\}", msgid)
    if len(parts) == 1:
        return None
    seen, regex = set(), ""
    for k, part in enumerate(parts):
        if k % 2 == 0:
            regex += re.escape(part)
        elif part in seen:
            regex += f"(?P={part})"
        else:
            seen.add(part)
            regex += f"(?P<{part}>.+?)"
    return re.compile(regex, re.S)


def translate_printed(text: str, table: dict[str, str], patterns: list, top: bool = False) -> str:
    """A line ``utils`` printed in English, as it prints it in the language of ``table``: the message it was made
    from is found (with its values, which are translated in turn where they are messages too) and its
    translation filled in. ``top``: ``text`` is a whole output line, translated only if it is one of the lines
    ``utils`` prints whole (``printed_lines()``: verdicts, hints, notes, report lines); the notebook's own prints
    stay as they are."""
    whole = printed_lines() if top else frozenset()
    if text in table and (not top or text in whole):
        return table[text]
    if not top and ", " in text:  # a list of messages, such as the attributes .to() leaves behind
        pieces = text.split(", ")
        translated = [translate_printed(piece, table, patterns) for piece in pieces]
        if all(piece in table or _matches(piece, patterns) for piece in pieces):
            return ", ".join(translated)
    for msgid, pattern in patterns:
        if top and msgid not in whole:
            continue
        match = pattern.fullmatch(text)
        if match:
            values = {k: translate_printed(v, table, patterns) for k, v in match.groupdict().items()}
            return table[msgid].format(**values)
    return text


def printed_table(po: polib.POFile, language: str) -> dict[str, str]:
    """What ``utils`` prints for each of its messages in ``language``: the translation, or the message itself where
    it has none yet (as ``gettext`` does). Every message is kept, so that the most specific one matches a line."""
    return {e.msgid: e.msgstr or e.msgid for e in language_catalogue(po, language)}


def printed_patterns(table: dict[str, str]) -> list:
    """The messages of ``table`` that have placeholders, as patterns, the most specific (longest text) first."""
    return [(m, p) for m in sorted(table, key=lambda m: -len(re.sub(r"\{\w+\}", "", m)))
            if (p := _placeholder_pattern(m)) is not None]


def _matches(text: str, patterns: list) -> bool:
    return any(pattern.fullmatch(text) for _msgid, pattern in patterns)


def translate_outputs(cell, table: dict[str, str], patterns: list | None = None) -> None:
    """Translate, line by line, what ``utils`` printed in a code cell's stream outputs (exercise verdicts and
    hints), as the Chinese edition's kernel prints it after ``set_language``. ``patterns``: ``printed_patterns
    (table)``, when the caller has it already."""
    patterns = printed_patterns(table) if patterns is None else patterns
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            lines = output["text"].split("\n")
            output["text"] = "\n".join(translate_printed(line, table, patterns, top=True) if line else line
                                       for line in lines)


def load_catalogue(stem: str) -> polib.POFile | None:
    path = catalogue_path(stem)
    return polib.pofile(str(path), wrapwidth=0) if path.exists() else None


@cache
def generated_strings(language: str) -> dict[str, str]:
    po = load_catalogue(COURSE_CATALOGUE)
    if po is None:
        return {}
    return {e.msgid: e.msgstr for e in language_catalogue(po, language) if e.msgstr}
