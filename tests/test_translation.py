"""The Chinese editions (tools/translate.py): the gettext workflow (templates, catalogues merged as msgmerge does, a
translator's work kept), translations that keep every code span, formula and link, Taiwan's words in 繁體, and
notebooks whose code is the English code. (That the editions are current is part of ``course.stale()``,
tests/test_notebook_anatomy.py.) Completeness is the ``translation`` marker: ``-m "not translation"`` leaves it
out."""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess

import nbformat
import polib
import pytest

from tools import course, translate

SCRIPTS = course.LANGUAGES[1:]
DOMAINS = sorted(p.stem for p in translate.LOCALE.glob("*.pot"))
CATALOGUES = [translate.catalogue_path(d, language) for language in SCRIPTS for d in DOMAINS]
HANT = [p for p in CATALOGUES if "zh_Hant" in str(p)]
CJK = re.compile(r"[\u3400-\u9fff]")


def _id(path) -> str:
    return f"{path.parent.parent.name}-{path.stem}"


def _entries(path):
    """The confirmed translations of a catalogue (what the editions show): not obsolete, not fuzzy."""
    return [e for e in polib.pofile(str(path)) if not e.obsolete and not e.fuzzy]


def test_every_domain_has_a_template_and_a_catalogue_per_script():
    stems = {c.path.stem for c in course.CHAPTERS} | {translate.SHARED_CATALOGUE, translate.COURSE_CATALOGUE,
                                                       translate.UTILS_CATALOGUE}
    assert set(DOMAINS) == stems
    assert all(p.exists() for p in CATALOGUES), [str(p) for p in CATALOGUES if not p.exists()]


@pytest.mark.translation
@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_catalogue_is_translated_in_full(path):
    entries = [e for e in polib.pofile(str(path)) if not e.obsolete]
    missing = [e.msgid[:70] for e in entries if not e.msgstr]
    fuzzy = [e.msgid[:70] for e in entries if e.fuzzy]
    assert not missing, f"{_id(path)}: {len(missing)} of {len(entries)} messages untranslated, first: {missing[0]!r}"
    assert not fuzzy, f"{_id(path)}: {len(fuzzy)} fuzzy translations to review, first: {fuzzy[0]!r}"


@pytest.mark.skipif(not shutil.which("msgfmt"), reason="GNU gettext's msgfmt not installed (apt-get install gettext)")
@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_msgfmt_check_is_clean(path):
    """``msgfmt -c``: the header (Language-Team, PO-Revision-Date, Plural-Forms, ...) and every {placeholder} of a
    ``python-brace-format`` message, as gettext itself checks them."""
    done = subprocess.run(["msgfmt", "-c", "-o", "/dev/null", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and not done.stderr, done.stderr[:500]


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


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
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


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_no_english_sentence_left(path):
    """A message with English prose (three words or more outside code and formulas) is translated into Chinese."""
    left = []
    for e in _entries(path):
        prose = re.sub(r"`+[^`]+`+|\$[^$]+\$|\]\([^)]*\)|https?://\S+|\{\w+\}|\w+_\w+", " ", e.msgid)  # _: a name
        if e.msgstr and len(re.findall(r"[A-Za-z]{2,}", prose)) >= 3 and not CJK.search(e.msgstr):
            left.append(e.msgid[:70])
    assert not left, f"{_id(path)}: English left as the translation of {left[:5]}"


@pytest.mark.parametrize("language", SCRIPTS)
def test_hints_keep_their_placeholders(language):
    """A message of ``utils`` is filled in with ``.format``: its translation has the same ``{placeholders}``."""
    problems = []
    for e in _entries(translate.catalogue_path(translate.UTILS_CATALOGUE, language)):
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


@pytest.mark.parametrize("path", CATALOGUES, ids=_id)
def test_emphasis_renders(path):
    """``**错误。** 正文`` or ``**错误**。正文``, never ``**错误。**正文`` (the asterisks would show)."""
    dead = [e.msgstr[:70] for e in _entries(path)
            if e.msgstr and _stray_asterisks(e.msgstr) > _stray_asterisks(e.msgid)]
    assert not dead, f"{_id(path)}: emphasis that does not render in {dead[:5]}"


def _code_without_comments(source: str):
    lines = [line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
             for line in source.split("\n")]
    return ast.dump(ast.parse("\n".join(lines)))


#: What a Chinese edition's setup cell adds (tools/course.py): hints in the edition's language.
LANGUAGE_LINE = re.compile(r'^set_language\("zh-Han[st]"\)  #.*\n', re.M)


@functools.cache
def _printed(language: str):
    """What utils prints in ``language``, and its patterns (compiled once)."""
    table = translate.printed_table(translate.read_catalogue(
        translate.catalogue_path(translate.UTILS_CATALOGUE, language)))
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


@pytest.mark.parametrize("language", course.LANGUAGES)
def test_every_relative_link_leads_to_a_file_from_where_the_notebook_lives(language):
    # An edition lives one folder below the English notebooks: a link out of notebooks/ (chapter 10's to
    # ../utils/ddp_train.py) climbs one folder further there, or JupyterLab opens nothing.
    for ch in course.CHAPTERS:
        path = ch.path_in(language)
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            prose = re.sub(r"```.*?```|`[^`]*`|\$[^$]*\$", "", cell.source, flags=re.S)  # not code, not maths
            for target in re.findall(r"\]\(([^)\s]+)\)", prose):
                if "://" in target or target.startswith(("#", "mailto:")):
                    continue
                assert (path.parent / target.split("#")[0]).is_file(), f"{path.name} cell {cell.id}: {target}"


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




# --- the gettext workflow: a translator's work is never lost ---------------------------------------------------

MSGMERGE = pytest.mark.skipif(not shutil.which("msgmerge"), reason="sync needs GNU gettext (apt-get install gettext)")


def _template(*messages: str) -> str:
    template = translate._new_template("demo")
    for k, message in enumerate(messages):
        translate._add(template, message, ("notebooks/demo.ipynb", k + 1), [])
    return translate.catalogue_text(template)


def _merge(tmp_path, template: str, old: str | None, language="zh-Hans", known=None, seed=None) -> polib.POFile:
    path = tmp_path / f"demo-{language}.po"
    if old is not None:
        path.write_text(old, encoding="utf-8")
    text = translate.merged_catalogue(template, path if old is not None else None, "demo", language, known or {}, seed)
    path.write_text(text, encoding="utf-8")
    return translate.read_catalogue(path)


@MSGMERGE
def test_a_changed_sentence_keeps_its_translation_as_fuzzy_with_the_previous_msgid(tmp_path):
    po = _merge(tmp_path, _template("The cell prints the sum of the two tensors."), None)
    po.find("The cell prints the sum of the two tensors.").msgstr = "这个单元格打印两个张量之和。"
    po = _merge(tmp_path, _template("The cell prints the sum of both tensors."), str(po))
    entry = po.find("The cell prints the sum of both tensors.")
    assert entry.msgstr == "这个单元格打印两个张量之和。" and entry.fuzzy
    assert entry.previous_msgid == "The cell prints the sum of the two tensors."
    assert translate.table(po) == {}, "a fuzzy translation is not shown: the edition keeps the English"
    again = _merge(tmp_path, _template("The cell prints the sum of both tensors."), str(po))
    assert str(again) == str(po), "a second sync changes nothing (the #| line stays a previous msgid)"


@MSGMERGE
def test_a_translators_fuzzy_flag_and_edit_survive_an_update(tmp_path):
    po = _merge(tmp_path, _template("One.", "Two."), None, "zh-Hant")
    po.find("One.").msgstr, po.find("Two.").msgstr = "一。", "二。"
    po.find("One.").flags.append("fuzzy")  # the translator is not sure yet
    po.find("Two.").tcomment = "reviewed"
    po = _merge(tmp_path, _template("One.", "Two."), str(po), "zh-Hant", known={"Two.": "貳。"})
    assert po.find("One.").fuzzy and po.find("One.").msgstr == "一。"
    assert po.find("Two.").msgstr == "二。" and not po.find("Two.").fuzzy and po.find("Two.").tcomment == "reviewed"


@MSGMERGE
def test_a_removed_message_stays_as_obsolete_and_comes_back_from_the_compendium(tmp_path):
    po = _merge(tmp_path, _template("Kept.", "Moved away."), None)
    po.find("Moved away.").msgstr = "移走了。"
    po = _merge(tmp_path, _template("Kept."), str(po))
    assert [e.msgid for e in po.obsolete_entries()] == ["Moved away."] and '#~ msgid "Moved away."' in str(po)
    elsewhere = _merge(tmp_path, _template("Moved away."), None, known={"Moved away.": "移走了。"})
    assert translate.table(elsewhere) == {"Moved away.": "移走了。"}


@MSGMERGE
def test_a_new_traditional_message_gets_a_fuzzy_draft_from_simplified(tmp_path):
    seed = {"A new sentence.": translate.to_traditional("当前单元格返回一个列表")}
    entry = _merge(tmp_path, _template("A new sentence."), None, "zh-Hant", seed=seed).find("A new sentence.")
    assert entry.fuzzy and entry.msgstr == "目前儲存格回傳一個串列", "a draft in Taiwan's terms, to be read"


@pytest.mark.usefixtures("mdpo")
def test_a_message_two_chapters_share_lives_in_one_catalogue():
    def notebook(title, own, cell):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"{title}\n\n{own}", id=f"{cell}0"),
                                               nbformat.v4.new_markdown_cell("Both.", id=f"{cell}1")])

    english = {"01_layers_and_blocks": notebook("# 01 · A", "Only here.", "a"),
               "02_parameters": notebook("# 02 · B", "Here only.", "b")}
    templates = translate.templates(english, [])
    owners = [domain for domain, t in templates.items() if t.get("Both.")]
    assert owners == [translate.SHARED_CATALOGUE]
    assert [loc[0] for loc in templates[translate.SHARED_CATALOGUE].get("Both.").locations] == [
        "notebooks/01_layers_and_blocks.ipynb", "notebooks/02_parameters.ipynb"]


def test_templates_say_where_a_message_is_and_what_fills_a_placeholder():
    text = translate.template_path(translate.UTILS_CATALOGUE).read_text(encoding="utf-8")
    skipped = 'msgid "Skipped: this cell needs a {kind} device; this machine has {have}."'
    entry = text.split(skipped)[0].rsplit("\n\n", 1)[1]
    assert "#: utils/" in entry
    chapter = translate.template_path("02_parameters").read_text(encoding="utf-8")
    assert re.search(r"#\. cell c\d+\n#: notebooks/02_parameters\.ipynb:\d+\n", chapter)
    assert re.search(r"#\. \{name\}: ", text), "a placeholder is explained by what the code fills it with"


@pytest.mark.skipif(not shutil.which("msgcat"), reason="GNU gettext's msgcat not installed (apt-get install gettext)")
@pytest.mark.parametrize("domain", ["03_parameter_tying", translate.UTILS_CATALOGUE])
def test_a_catalogue_saved_by_msgcat_is_not_stale(tmp_path, domain):
    """A PO editor rewraps lines and rewrites the header: ``course.stale_translations`` compares what this test
    compares (the messages, the confirmed translations, the compiled ones), never the layout."""
    for language in SCRIPTS:
        path = translate.catalogue_path(domain, language)
        saved = tmp_path / f"{language}.po"
        subprocess.run(["msgcat", "--width=60", "-o", str(saved), str(path)], check=True)
        assert saved.read_text(encoding="utf-8") != path.read_text(encoding="utf-8"), "msgcat changed the layout"
        before, after = translate.read_catalogue(path), translate.read_catalogue(saved)
        assert {e.msgid for e in after if not e.obsolete} == {e.msgid for e in before if not e.obsolete}
        assert translate.table(after) == translate.table(before)
        assert translate.mo_messages(translate.compiled_catalogue(after, language)[1]) == translate.table(before)


# --- 繁體 is written for Taiwan -----------------------------------------------------------------------------

#: Mainland terms (in traditional characters, as a converter leaves them) with the word Taiwan's technical writing
#: uses (CONTRIBUTING's glossary). None may appear in the 繁體 prose, comments or what utils prints.
MAINLAND_TERMS = {
    "單元格": "儲存格", "返回": "回傳", "構建": "建構", "列表": "串列", "當前": "目前", "噪聲": "雜訊",
    "常量": "常數", "標量": "純量", "掩碼": "遮罩", "規範化": "正規化", "歸一化": "正規化", "隨機數": "亂數",
    "實現": "實作", "幻燈片": "投影片", "自定義": "自訂", "默認": "預設", "內存": "記憶體", "顯存": "GPU 記憶體",
    "線程": "執行緒", "進程": "行程", "文件夾": "資料夾", "數據": "資料", "信息": "資訊", "代碼": "程式碼",
    "軟件": "軟體", "硬件": "硬體", "變量": "變數", "接口": "介面", "調用": "呼叫", "緩存": "快取",
    "字符串": "字串", "字節": "位元組", "異步": "非同步", "調試": "除錯", "打印": "印出", "視頻": "影片",
    "屏幕": "螢幕", "服務器": "伺服器", "用戶": "使用者", "網絡": "網路", "源代碼": "原始碼", "採樣": "取樣",
    "文檔": "文件", "遍歷": "走訪", "批量": "批次", "模塊": "模組", "加載": "載入", "獲取": "取得",
    "指針": "指標", "示例": "範例", "方差": "變異數", "正態": "常態", "克隆": "複製", "報錯": "出錯",
    "教程": "教學", "預熱": "暖機", "下劃線": "底線", "打亂": "洗牌", "硬編碼": "寫死", "例項": "實例",
    "回撥": "回呼", "點選": "按一下", "後設資料": "中繼資料", "字首": "前綴",
}

#: What OpenCC's s2twp makes of this course's 简体 where it reads the wrong word: wrong characters or meanings.
CONVERTER_ARTEFACTS = [
    "行動網路",  # 移动网络, "moving the network"
    "線上程",  # 在线程…, "on the thread"
    "線上性",  # 在线性层, "on the linear layer"
    "隻",  # 只 ("only") as the measure word for animals: 隻影響, 隻比較
    "髮",  # 发 as "hair": 截斷髮生, 轉換髮生
    "併為", "復制", "覆現", "上覆",  # 并为, 复制, 复现, 上复…
    "采",  # 采样 → 沒有采樣器
    "擴充套件",  # 扩展 as "a browser extension"
    "丟擲",  # 抛出
    "列印",  # 打印 as printing on paper
    "箇中",  # 个中
    "全域性",  # 全局
    "迴圈層", "迴圈單元",  # 循环层: a recurrent layer is no code loop
    "控制元件",  # 控件
    "秒錶", "對錶",  # 秒表, 对表
    "控制代碼",  # 句柄
    "視訊記憶體",  # 显存
    "繫結",  # 绑定 (the glossary: 綁定)
    "核函式",  # 核函数 (the glossary: 核心函式（kernel）)
]


def _hant_texts():
    for path in HANT:
        for e in _entries(path):
            yield f"{path.stem}: {e.msgid[:50]!r}", e.msgstr
    yield "README.zh-Hant.md", course.README_ZH_HANT.read_text(encoding="utf-8")


def test_traditional_uses_taiwans_terms():
    found = [f"{where}: {term} (Taiwan: {MAINLAND_TERMS[term]})"
             for where, text in _hant_texts() for term in MAINLAND_TERMS if term in text]
    assert len(MAINLAND_TERMS) >= 40 and not found, "\n".join(found[:15])


def test_traditional_has_no_converter_artefacts():
    found = [f"{where}: {bad}" for where, text in _hant_texts() for bad in CONVERTER_ARTEFACTS if bad in text]
    assert not found, "\n".join(found[:15])


@pytest.mark.parametrize("language", SCRIPTS)
def test_rank_of_a_process_is_not_matrix_rank(language):
    """A process's rank stays *rank* (glossed once per chapter); 秩 is kept for the rank of a matrix."""
    wrong = [e.msgid[:60] for d in DOMAINS for e in _entries(translate.catalogue_path(d, language))
             if "秩" in e.msgstr and "matri" not in e.msgid.lower()]
    assert not wrong, wrong[:5]


def test_traditional_drafts_start_from_the_glossary():
    assert translate.to_traditional("模型的参数在设备上") == "模型的參數在裝置上"  # s2twp gives 引數 for 参数
    assert translate.to_traditional("当前单元格返回一个列表") == "目前儲存格回傳一個串列"
