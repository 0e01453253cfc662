"""The Chinese editions: every chapter in 简体 and 繁體, made from the English notebook and gettext catalogues.

English is the one source. The workflow is gettext's: Babel extracts (``xgettext``'s job), GNU gettext's ``msgmerge``
merges, polib reads and compiles:

1. **Templates.** ``locale/<domain>.pot`` (generated, never edited) holds what the English sources ask translators
   for: one domain per chapter (``mdpo`` splits each Markdown cell into headings, paragraphs, list items and table
   cells; consecutive code-comment lines are one message), ``shared`` (messages found in two chapters or more),
   ``course`` (what tools/course.py generates) and ``utils`` (what ``utils`` tells a learner, extracted from
   ``_()``, ``N_()``, ``L_()`` and ``@exercise``). ``#:`` names the notebook and the line of the cell's id (or the
   file and line in ``utils``), ``#.`` the cell, or what fills each ``{placeholder}``.
2. **Catalogues.** ``locale/zh_Hans/LC_MESSAGES/<domain>.po`` and ``locale/zh_Hant/...`` (繁體, written for Taiwan)
   are updated from the templates by ``msgmerge --previous``: a changed message
   keeps its old translation, marked ``fuzzy`` with the old msgid as ``#|``; a removed one is kept as ``#~``; a
   translator's edits and flags are never touched. An exact match elsewhere in the same language fills a new
   message (a compendium); a new 繁體 message with a confirmed 简体 one gets an OpenCC draft, marked fuzzy.
3. **Editions.** ``notebooks/zh-Hans/`` and ``notebooks/zh-Hant/`` are the English notebooks with their Markdown and
   code comments translated by the confirmed (not fuzzy) translations; untranslated text stays English, as
   gettext does. What ``utils`` printed in the committed outputs is translated line by line through ``utils.po``.

``python -m tools.course sync`` does all three; ``python -m tools.course check`` says what is stale.
"""

from __future__ import annotations

import functools
import importlib
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

#: What OpenCC's s2twp gets wrong for this course: terms set aside before the conversion (longest first) and put
#: back in this spelling (CONTRIBUTING's glossary), so that a 繁體 draft starts closer to Taiwan's usage. A draft is
#: still marked fuzzy: a translator reads it before it is used.
TRADITIONAL_TERMS = {
    "参数": "參數", "激活函数": "激活函數", "激活": "激活", "试运行": "試跑", "注册表": "註冊表", "访问": "存取",
    "打印出": "印出", "打印": "印出", "进程": "行程", "单元格": "儲存格", "返回": "回傳", "抛出": "引發",
    "构建": "建構", "列表": "串列", "当前": "目前", "噪声": "雜訊", "常量": "常數", "标量": "純量", "掩码": "遮罩",
    "规范化": "正規化", "随机数": "亂數", "实现": "實作", "幻灯片": "投影片", "自定义": "自訂", "默认": "預設",
    "内存": "記憶體", "显存": "GPU 記憶體", "线程": "執行緒", "批量": "批次", "采样": "取樣", "异常": "例外",
    "“": "「", "”": "」", "‘": "『", "’": "』",  # Taiwan's quotation marks
}
_TERMS = re.compile("|".join(map(re.escape, sorted(TRADITIONAL_TERMS, key=len, reverse=True))))


#: A link out of ``notebooks/`` (``](../utils/ddp_train.py)``): an edition lives one folder further down.
_UP = re.compile(r"\]\(\.\./")
#: Comments that are instructions to tools, or markers the course's tools look for: never translated.
_UNTRANSLATED_COMMENT = re.compile(r"^(noqa|type:|pragma|fmt:|ruff:|----)")


# --- what a notebook asks translators for ----------------------------------------------------------------

def _mdpo(module: str):
    """``mdpo.<module>``, or an error that says how to install mdpo where requirements.txt does not."""
    try:
        return importlib.import_module(f"mdpo.{module}")
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "making or checking the Chinese editions needs mdpo, which requirements.txt installs on Python 3.11 "
            "only (its Markdown parser, pymd4c, has no wheel for newer Pythons): install the md4c C library "
            "(apt-get install libmd4c-dev libmd4c-html0-dev pkg-config; brew install md4c pkg-config), then "
            "pip install mdpo==2.1.4") from error


@functools.lru_cache(maxsize=4096)
def markdown_messages(markdown: str) -> tuple[str, ...]:
    """The messages of one Markdown cell, as ``mdpo`` splits it (code blocks are not messages)."""
    Md2Po = _mdpo("md2po").Md2Po

    # Md2Po first tries its argument as a glob of files (a cell reading "*" would be read as this folder's files),
    # which also costs a regular expression per cell. A cell is always content: give it as ``content``.
    extractor = Md2Po("")
    extractor.content = markdown
    return tuple(entry.msgid for entry in extractor.extract())


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


# --- templates (POT): what the English sources ask translators for ----------------------------------------

#: One domain per chapter, plus these: messages several chapters share, what tools/course.py generates (titles,
#: navigation, the chapter table), and what ``utils`` tells a learner.
SHARED_CATALOGUE = "shared"
COURSE_CATALOGUE = "course"
UTILS_CATALOGUE = "utils"
UTILS_LOCALE = ROOT / "utils" / "locale"
PROJECT = "torch-building-blocks"
HEADER = {  # what msgfmt -c and the PO editors want in a header; a translator's editor may change the last two
    "zh-Hans": {"Language-Team": "简体中文 <https://github.com/torch-building-blocks/course/issues>"},
    "zh-Hant": {"Language-Team": "繁體中文（臺灣） <https://github.com/torch-building-blocks/course/issues>"},
}


#: The date written into a new template or catalogue header: a fixed one, so that a sync that changes no message
#: changes no file (a PO editor records its own revision date when a translator saves).
_EPOCH = __import__("datetime").datetime(2026, 1, 1, tzinfo=__import__("datetime").timezone.utc)


def template_path(domain: str) -> Path:
    return LOCALE / f"{domain}.pot"


def catalogue_path(domain: str, language: str = "zh-Hans") -> Path:
    return LOCALE / language.replace("-", "_") / "LC_MESSAGES" / f"{domain}.po"


def _cell_lines(path: Path) -> dict[str, int]:
    """The line of each cell's ``"id"`` in a notebook's JSON: a ``#:`` reference opens the file there."""
    lines = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        match = re.match(r'\s*"id": "([^"]+)",?$', line)
        if match:
            lines.setdefault(match.group(1), number)
    return lines


def _notebook_entries(path: Path, nb) -> list[tuple[str, int, str]]:
    """``(message, line, note)`` for every message of a notebook, in order, repeats included."""
    lines = _cell_lines(path)
    found = []
    for cell in nb.cells:
        if GENERATED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        line = lines.get(cell.get("id"), 0)
        if cell.cell_type == "markdown":
            found += [(m, line, f"cell {cell.get('id')}") for m in markdown_messages(_title_split(nb, cell)[1])]
        elif cell.cell_type == "code":
            found += [(m, line, f"cell {cell.get('id')}, a code comment (it keeps the code's line count)")
                      for m in code_messages(cell.source)]
    return found


def _placeholder_notes() -> dict[str, list[str]]:
    """For each ``_("…{name}…").format(name=expression)`` in ``utils``, what fills each placeholder: the source of
    the expression, read from the code (a ``#.`` comment for translators)."""
    import ast

    notes: dict[str, list[str]] = {}
    for path in sorted((ROOT / "utils").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                    and isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", "") in
                    ("_", "L_", "N_") and node.func.value.args
                    and isinstance(node.func.value.args[0], ast.Constant)):
                continue
            message = node.func.value.args[0].value
            for keyword in node.keywords:
                if keyword.arg and "{" + keyword.arg + "}" in message:
                    note = f"{{{keyword.arg}}}: {ast.unparse(keyword.value)}"
                    notes.setdefault(message, [])
                    if note not in notes[message]:
                        notes[message].append(note)
    return notes


def _new_template(domain: str):
    from babel.messages.catalog import Catalog

    return Catalog(domain=domain, project=PROJECT, version="main", fuzzy=False,
                   msgid_bugs_address="https://github.com/torch-building-blocks/course/issues",
                   creation_date=_EPOCH, header_comment=f"# {domain}: generated by "
                   "`python -m tools.course sync` from the English sources; never edit it.\n#")


def _add(catalog, message: str, location: tuple[str, int], notes: list[str]) -> None:
    entry = catalog.get(message)
    if entry is None:
        entry = catalog.add(message, locations=[location], auto_comments=notes)
        entry.flags.discard("python-format")  # the course formats with {names}, never with %
        return
    if location not in entry.locations:
        entry.locations.append(location)
    entry.auto_comments += [n for n in notes if n not in entry.auto_comments]


def templates(notebooks: dict[str, object], generated: list[str]) -> dict[str, object]:
    """The POT templates: ``notebooks`` maps a chapter's file stem to its English notebook (with its generated parts
    synced); ``generated`` is what tools/course.py writes (``course.generated_messages()``). A message found in two
    chapters or more goes to the ``shared`` domain, so it is translated once."""
    from babel.messages.extract import extract_from_dir

    found = {stem: _notebook_entries(ROOT / "notebooks" / f"{stem}.ipynb", nb) for stem, nb in notebooks.items()}
    owners: dict[str, set[str]] = {}
    for stem, entries in found.items():
        for message, _line, _note in entries:
            owners.setdefault(message, set()).add(stem)
    out = {stem: _new_template(stem) for stem in notebooks}
    out[SHARED_CATALOGUE] = _new_template(SHARED_CATALOGUE)
    for stem, entries in found.items():
        for message, line, note in entries:
            domain = stem if len(owners[message]) == 1 else SHARED_CATALOGUE
            _add(out[domain], message, (f"notebooks/{stem}.ipynb", line), [note])
    course_text = (ROOT / "tools" / "course.py").read_text(encoding="utf-8").split("\n")
    out[COURSE_CATALOGUE] = _new_template(COURSE_CATALOGUE)
    for message in generated:
        line = next((k for k, text in enumerate(course_text, 1) if message[:40] in text), 0)
        _add(out[COURSE_CATALOGUE], message, ("tools/course.py", line), [])
    out[UTILS_CATALOGUE] = _new_template(UTILS_CATALOGUE)
    placeholders = _placeholder_notes()
    for file, line, message, comments, _context in extract_from_dir(
            str(ROOT / "utils"), method_map=[("**.py", "python")], comment_tags=("TRANSLATORS:",),
            keywords={"_": None, "N_": None, "L_": None, "exercise": None}):
        notes = list(comments) + placeholders.get(message, [])
        if re.search(r"\{\w+\}", message) and not placeholders.get(message):
            notes.append("{…}: filled in after translation; keep every {name} as it is")
        _add(out[UTILS_CATALOGUE], message, (f"utils/{file}", line), notes)
    return out


# --- catalogues: brought up to date from the templates by msgmerge --previous ----------------------------------

def catalogue_text(catalog) -> str:
    """A template (a Babel catalogue) as ``.pot`` text, one line per message."""
    from babel.messages.pofile import write_po

    for message in catalog:
        if message.id:
            message.flags.discard("python-format")
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, sort_output=False)
    return buffer.getvalue().decode("utf-8")


def _dateless(text: str) -> str:
    """``text`` without the header lines that only record when a file was written."""
    return re.sub(r'^"(POT-Creation-Date|PO-Revision-Date|X-Generator): .*\n', "", text, flags=re.M)


def same_catalogue_text(a: str, b: str) -> bool:
    return _dateless(a) == _dateless(b)


def read_catalogue(path: Path) -> polib.POFile:
    return polib.pofile(str(path), wrapwidth=0)


def _confirmed(entry) -> bool:
    return bool(entry.msgid) and bool(entry.msgstr) and not entry.fuzzy


def table(po) -> dict[str, str]:
    """msgid → translation, for the messages a translator has confirmed (fuzzy ones stay English, as gettext
    does)."""
    return {e.msgid: e.msgstr for e in po if _confirmed(e) and not e.obsolete}


def load_table(domain: str, language: str) -> dict[str, str]:
    path = catalogue_path(domain, language)
    return table(read_catalogue(path)) if path.exists() else {}


def compendium(language: str) -> dict[str, str]:
    """Every translation confirmed in ``language``'s catalogues, obsolete entries included: a message that moves to
    another domain keeps its translation (``msgmerge --compendium``)."""
    known: dict[str, str] = {}
    for path in sorted(catalogue_path("*", language).parent.glob("*.po")):
        for entry in read_catalogue(path):
            if _confirmed(entry):
                known.setdefault(entry.msgid, entry.msgstr)
    return known


def _header(po: polib.POFile, domain: str, language: str) -> None:
    """The header fields ``msgfmt -c`` and the PO editors want; a translator's editor keeps its own values."""
    team = HEADER[language]["Language-Team"]
    po.header = (f"{language} translation of the course's {domain} messages.\n"
                 "Edit with any PO editor; `python -m tools.course sync` keeps your work (CONTRIBUTING).")
    meta = po.metadata
    meta["Project-Id-Version"] = f"{PROJECT} main"
    meta["Report-Msgid-Bugs-To"] = "https://github.com/torch-building-blocks/course/issues"
    meta["Language"] = language.replace("-", "_")
    meta["Plural-Forms"] = "nplurals=1; plural=0;"
    for field, value in (("PO-Revision-Date", _EPOCH.strftime("%Y-%m-%d %H:%M+0000")), ("Last-Translator", team),
                         ("Language-Team", team)):
        if not meta.get(field) or "YEAR" in meta[field] or "EMAIL@ADDRESS" in meta[field] or "LL@li.org" in meta[field]:
            meta[field] = value
    meta.setdefault("MIME-Version", "1.0")
    meta["Content-Type"] = "text/plain; charset=UTF-8"
    meta["Content-Transfer-Encoding"] = "8bit"


def merged_catalogue(template: str, old: Path | None, domain: str, language: str, known: dict[str, str],
                     seed: dict[str, str] | None = None) -> str:
    """The catalogue ``old`` (or a new one) brought up to date from the ``template`` text by GNU gettext's
    ``msgmerge --previous``: a new message is untranslated, a changed one keeps its old translation marked fuzzy
    with the old msgid as ``#|``, a removed one is kept as ``#~``; a translator's entries, flags and comments are
    kept. ``known`` is the compendium (exact matches fill new messages); ``seed`` (简体 → 繁體 by OpenCC) drafts what
    is still empty, marked fuzzy for a translator to read."""
    import subprocess

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "template.pot").write_text(template, encoding="utf-8")
        start = polib.POFile(wrapwidth=0)
        if old is not None:
            start = read_catalogue(old)
        _header(start, domain, language)
        start.save(str(work / "old.po"))
        extra = polib.POFile(wrapwidth=0)
        extra.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
        for msgid, msgstr in known.items():
            extra.append(polib.POEntry(msgid=msgid, msgstr=msgstr))
        extra.save(str(work / "compendium.po"))
        subprocess.run(["msgmerge", "--quiet", "--previous", "--no-wrap", f"--compendium={work / 'compendium.po'}",
                        "-o", str(work / "new.po"), str(work / "old.po"), str(work / "template.pot")], check=True)
        po = read_catalogue(work / "new.po")
    _header(po, domain, language)
    for entry in po:
        if not entry.msgstr and seed and entry.msgid in seed:
            entry.msgstr = seed[entry.msgid]
            entry.flags.append("fuzzy")
    return str(po) + "\n"


def compiled_catalogue(po: polib.POFile, language: str) -> tuple[Path, bytes]:
    """Where ``utils`` looks for its catalogue in ``language``, and the compiled ``.mo`` (fuzzy entries left out)."""
    path = UTILS_LOCALE / language.replace("-", "_") / "LC_MESSAGES" / f"{UTILS_CATALOGUE}.mo"
    return path, po.to_binary()


def mo_messages(data: bytes) -> dict[str, str]:
    """The translations in a compiled catalogue, header left out: what decides whether a ``.mo`` is current."""
    import gettext

    catalog = dict(gettext.GNUTranslations(io.BytesIO(data))._catalog)  # noqa: SLF001 (the parsed messages)
    catalog.pop("", None)
    return catalog


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


# --- translating a notebook -------------------------------------------------------------------------------

def _lookup_catalogue(translations: dict[str, str]) -> polib.POFile:
    """The translations as po2md reads them. md2po joins a line that ends in a TeX row break (``\\\\``) to the next
    one without a space, po2md with one: each such message is given under both spellings."""
    lookup = polib.POFile()
    for msgid, msgstr in translations.items():
        lookup.append(polib.POEntry(msgid=msgid, msgstr=msgstr))
        spaced = re.sub(r"(?<!\\)((?:\\\\)+)(?=[^\s\\])", r"\1 ", msgid)
        if spaced != msgid:
            lookup.append(polib.POEntry(msgid=spaced, msgstr=msgstr))
    return lookup


def translate_markdown(markdown: str, po: polib.POFile) -> str:
    """``markdown`` with each of its messages replaced by its translation in ``po`` (mdpo's ``po2md``). Raises
    ``LookupError`` naming a translated message that po2md nevertheless left in English."""
    Po2Md = _mdpo("po2md").Po2Md

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


def translated_notebook(nb, translations: dict[str, str], printed: dict[str, str] | None = None,
                        patterns: list | None = None):
    """A copy of ``nb`` (an English notebook whose generated parts are already in the edition's language) with its
    Markdown and code comments translated by ``translations`` (msgid -> confirmed translation: the chapter's
    catalogue and the shared one), and what ``utils`` printed translated by ``printed`` (``printed_table``).
    ``patterns``: ``printed_patterns(printed)``, when the caller has it already (it is the same for every
    chapter)."""
    import nbformat

    nb = nbformat.from_dict(nb)
    lookup = _lookup_catalogue(translations)
    if patterns is None:
        patterns = printed_patterns(printed) if printed else []
    for cell in nb.cells:
        if GENERATED_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if cell.cell_type == "markdown":
            title, rest = _title_split(nb, cell)
            cell.source = _UP.sub("](../../", title + translate_markdown(rest, lookup))
        elif cell.cell_type == "code":
            cell.source = translate_code(cell.source, translations)
            if printed:
                translate_outputs(cell, printed, patterns)
    return nb


@cache
def printed_lines() -> frozenset[str]:
    """The messages ``utils`` prints as whole lines: ``utils.i18n.PRINTED`` and every message given to ``L_()``."""
    import importlib.util

    from babel.messages.extract import extract_from_dir

    spec = importlib.util.spec_from_file_location("_i18n", ROOT / "utils" / "i18n.py")  # not utils: no torch
    i18n = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(i18n)
    found = extract_from_dir(str(ROOT / "utils"), method_map=[("**.py", "python")], keywords={"L_": None})
    return frozenset(i18n.PRINTED) | {message for _file, _line, message, _comments, _context in found}


@functools.lru_cache(maxsize=4096)
def _placeholder_pattern(msgid: str, whole: str = "") -> re.Pattern | None:
    """``msgid`` as a regular expression whose groups are its ``{placeholders}`` (None if it has none). ``whole``:
    an alternation of messages with a comma in them, tried first for a value, so that a value such as "normal, std
    0.01 (too small)" is not cut at its own comma."""
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
            comma_next = k + 1 < len(parts) and parts[k + 1].startswith(", ")
            regex += f"(?P<{part}>{whole if comma_next else ''}.+?)"
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


def printed_table(po) -> dict[str, str]:
    """What ``utils`` prints for each of its messages, given its catalogue in a language: the confirmed translation,
    or the message itself (as ``gettext`` does for an untranslated or fuzzy one). Every message is kept, so that the
    most specific one matches a line."""
    return {e.msgid: e.msgstr if _confirmed(e) else e.msgid for e in po if e.msgid and not e.obsolete}


@cache
def _short_values() -> frozenset[str]:
    """Short messages marked with ``N_()``: labels that ``utils`` fills into other messages (a scheme's name)."""
    from babel.messages.extract import extract_from_dir

    found = extract_from_dir(str(ROOT / "utils"), method_map=[("**.py", "python")], keywords={"N_": None})
    return frozenset(message for _file, _line, message, _comments, _context in found if len(message) <= 48)


def printed_patterns(table: dict[str, str]) -> list:
    """The messages of ``table`` that have placeholders, as patterns, the most specific (longest text) first."""
    with_commas = sorted((m for m in _short_values() if ", " in m and m in table), key=len, reverse=True)
    whole = "".join(f"{re.escape(m)}|" for m in with_commas)
    return [(m, p) for m in sorted(table, key=lambda m: -len(re.sub(r"\{\w+\}", "", m)))
            if (p := _placeholder_pattern(m, whole)) is not None]


def _matches(text: str, patterns: list) -> bool:
    return any(pattern.fullmatch(text) for _msgid, pattern in patterns)


def translate_outputs(cell, table: dict[str, str], patterns: list | None = None) -> None:
    """Translate, line by line, what ``utils`` printed or displayed in a code cell's outputs (exercise verdicts and
    hints in the streams, an explorer's summary in its ``text/plain``), as the Chinese edition's kernel shows it
    after ``set_language``. ``patterns``: ``printed_patterns(table)``, when the caller has it already."""
    patterns = printed_patterns(table) if patterns is None else patterns

    def lines(text: str) -> str:
        return "\n".join(translate_printed(line, table, patterns, top=True) if line else line
                         for line in text.split("\n"))

    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            output["text"] = lines(output["text"])
        elif "text/plain" in output.get("data", {}):
            output["data"]["text/plain"] = lines(output["data"]["text/plain"])


@cache
def generated_strings(language: str) -> dict[str, str]:
    """tools/course.py's generated strings (titles, navigation, the chapter table) in ``language``."""
    return load_table(COURSE_CATALOGUE, language)
