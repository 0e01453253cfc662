"""The Chinese editions (tools/translate.py): complete catalogues, translations that keep every code span, formula
and link, and notebooks whose code is the English code. (That the editions are current is part of
``course.stale()``, tests/test_notebook_anatomy.py.)"""

from __future__ import annotations

import ast
import functools
import re

import nbformat
import polib
import pytest

from tools import course, translate

CATALOGUES = sorted(translate.catalogue_path("*").parent.glob("*.po"))
CJK = re.compile(r"[\u3400-\u9fff]")


def _entries(path):
    return [e for e in polib.pofile(str(path)) if not e.obsolete]


def test_every_chapter_has_a_catalogue():
    stems = {p.stem for p in CATALOGUES}
    assert stems == {c.path.stem for c in course.CHAPTERS} | {translate.COURSE_CATALOGUE, translate.UTILS_CATALOGUE}


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: p.stem)
def test_catalogue_is_translated_in_full(path):
    entries = _entries(path)
    missing = [e.msgid[:70] for e in entries if not e.msgstr]
    fuzzy = [e.msgid[:70] for e in entries if e.fuzzy]
    assert not missing, f"{path.name}: {len(missing)} of {len(entries)} messages untranslated, first: {missing[0]!r}"
    assert not fuzzy, f"{path.name}: fuzzy translations to review, first: {fuzzy[0]!r}"


def _kept(text: str) -> dict[str, list[str]]:
    """What a translation must carry over unchanged: code spans, formulas, link targets, images, footnote-like
    references, and the Markdown heading and list markers mdpo leaves in a message."""
    code = re.findall(r"`+[^`]+`+", text)
    bare = re.sub(r"`+[^`]+`+", "", text)
    return {
        "code spans": sorted(code),
        "formulas": sorted(re.findall(r"\$\$.+?\$\$|\$[^$\n]+\$", bare, flags=re.S)),
        "links": sorted(re.findall(r"\]\(([^)\s]+)", bare)),
        "html tags": sorted(re.findall(r"</?[a-z][a-z0-9]*\b", bare)),
    }


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: p.stem)
def test_translations_keep_code_formulas_and_links(path):
    problems = []
    for e in _entries(path):
        if not e.msgstr:
            continue
        want, got = _kept(e.msgid), _kept(e.msgstr)
        problems += [f"{e.msgid[:60]!r}: {kind} differ: {want[kind]} vs {got[kind]}"
                     for kind in want if want[kind] != got[kind]]
        if "{minutes}" in e.msgid and "{minutes}" not in e.msgstr:
            problems.append(f"{e.msgid!r}: the placeholder {{minutes}} is lost")
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: p.stem)
def test_no_english_sentence_left(path):
    """A message with English prose (three words or more outside code and formulas) is translated into Chinese."""
    left = []
    for e in _entries(path):
        prose = re.sub(r"`+[^`]+`+|\$[^$]+\$|\]\([^)]*\)|https?://\S+|\{\w+\}|\w+_\w+", " ", e.msgid)  # _: a name
        if e.msgstr and len(re.findall(r"[A-Za-z]{2,}", prose)) >= 3 and not CJK.search(e.msgstr):
            left.append(e.msgid[:70])
    assert not left, f"{path.name}: English left as the translation of {left[:5]}"


def test_hints_keep_their_placeholders():
    """A message of ``utils`` is filled in with ``.format``: its translation has the same ``{placeholders}``."""
    problems = []
    for e in _entries(translate.catalogue_path(translate.UTILS_CATALOGUE)):
        if e.msgstr and sorted(re.findall(r"\{\w*\}", e.msgid)) != sorted(re.findall(r"\{\w*\}", e.msgstr)):
            problems.append(f"{e.msgid[:60]!r} -> {e.msgstr[:60]!r}")
    assert not problems, "\n".join(problems[:10])


def _stray_asterisks(markdown: str) -> int:
    """Asterisks left in the text once Markdown is rendered (by mistune, nbconvert's renderer): emphasis that did
    not parse. ``**错误。**正文`` leaves four: CommonMark does not close a run after punctuation and before a
    letter."""
    import mistune

    html = re.sub(r"<code>.*?</code>", "", mistune.html(markdown), flags=re.S)
    return re.sub(r"<[^>]+>", "", html).count("*")


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: p.stem)
def test_emphasis_renders(path):
    """``**错误。** 正文`` or ``**错误**。正文``, never ``**错误。**正文`` (the asterisks would show)."""
    dead = [e.msgstr[:70] for e in _entries(path)
            if e.msgstr and _stray_asterisks(e.msgstr) > _stray_asterisks(e.msgid)]
    assert not dead, f"{path.name}: emphasis that does not render in {dead[:5]}"


def _code_without_comments(source: str):
    lines = [line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
             for line in source.split("\n")]
    return ast.dump(ast.parse("\n".join(lines)))


#: What a Chinese edition's setup cell adds (tools/course.py): hints in the edition's language.
LANGUAGE_LINE = re.compile(r'^set_language\("zh-Han[st]"\)  #.*\n', re.M)


@functools.cache
def _printed(language: str):
    """What utils prints in ``language``, and its patterns (compiled once)."""
    table = translate.printed_table(translate.load_catalogue(translate.UTILS_CATALOGUE), language)
    return table, translate.printed_patterns(table)


@pytest.mark.parametrize("language", course.LANGUAGES[1:])
@pytest.mark.parametrize("ch", course.CHAPTERS, ids=lambda c: c.number)
def test_edition_has_the_english_code_and_outputs(ch, language):
    english = nbformat.read(ch.path, as_version=4)
    edition = nbformat.read(ch.path_in(language), as_version=4)
    printed, patterns = _printed(language)
    assert [c.cell_type for c in edition.cells] == [c.cell_type for c in english.cells]
    for en, zh in zip(english.cells, edition.cells, strict=True):
        same = {k: v for k, v in zh.metadata.items() if k != "slideshow"} == {
            k: v for k, v in en.metadata.items() if k != "slideshow"}  # slides split where the Chinese text needs
        assert zh.get("id") == en.get("id") and same, f"cell {en.get('id')}: metadata"
        if en.cell_type == "code":
            code = zh.source
            if "setup" in en.metadata.get("tags", []):
                assert len(LANGUAGE_LINE.findall(code)) == 1, "the setup cell sets the edition's language"
                code = LANGUAGE_LINE.sub("", code).replace("check_torch_version, set_language, try_gpu",
                                                           "check_torch_version, try_gpu")
            else:
                assert len(code.split("\n")) == len(en.source.split("\n")), f"cell {en.id}: line numbers"
            assert _code_without_comments(code) == _code_without_comments(en.source), f"cell {en.id}: code"
            expected = nbformat.from_dict(en)
            translate.translate_outputs(expected, printed, patterns)  # utils's verdicts and hints, translated
            assert zh.outputs == expected.outputs, f"cell {en.id}: outputs"


@pytest.mark.parametrize("language", course.LANGUAGES[1:])
def test_editions_link_to_themselves(language):
    ch = course.CHAPTERS[1]
    edition = nbformat.read(ch.path_in(language), as_version=4)
    header = edition.cells[1].source
    colab = course.colab_url(ch, language)
    assert f"notebooks/{language}/{ch.file}" in colab and colab in header
    assert course.binder_url(ch, language) in header


def test_split_comment_keeps_lines_and_text():
    text = "每块 GPU 上的 fp32 矩阵乘法都以完整的 fp32 精度计算（不用 TF32，不论机器的默认设置如何），因此结果一致。"
    for parts in (1, 2, 3):
        pieces = translate._split(text, parts)
        assert len(pieces) == parts and "".join(pieces).replace(" ", "") == text.replace(" ", "")
        assert not any(p.startswith(("，", "。", "）")) for p in pieces)


def test_code_comments_translated_in_place():
    code = "x = 1  # one\n# a sentence that runs\n# over two lines\ny = x  # noqa: E501"
    table = {"one": "一", "a sentence that runs over two lines": "一句跨两行的话，在这里分开"}
    out = translate.translate_code(code, table)
    assert out.split("\n")[0] == "x = 1  # 一" and out.split("\n")[3] == "y = x  # noqa: E501"
    assert len(out.split("\n")) == 4 and "".join(out.split("\n")[1:3]).count("#") == 2
    assert translate.code_messages(code) == ["one", "a sentence that runs over two lines"]


def test_traditional_is_made_from_simplified_with_overrides():
    assert translate.to_traditional("模型的参数在设备上") == "模型的參數在裝置上"   # s2twp gives 引數 for 参数
    assert translate.to_traditional("张量") == "張量"
    # 激活 kept, 启用 converted
    assert translate.to_traditional("激活函数；启用确定性算法") == "激活函數；啟用確定性演算法"


def test_a_moved_sentence_keeps_its_translation():
    old = polib.POFile()
    old.append(polib.POEntry(msgid="A sentence.", msgstr="一句话。"))
    po = translate.updated_catalogue(["New.", "A sentence."], None, {"A sentence.": "一句话。"})
    assert [(e.msgid, e.msgstr) for e in po] == [("New.", ""), ("A sentence.", "一句话。")]
