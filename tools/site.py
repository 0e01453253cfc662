"""The course as a website: a reading edition in English, 简体 and 繁體, built by Sphinx with MyST-NB and the book
theme from the committed notebooks and their committed outputs (nothing is re-executed).

    python -m tools.course site      # _site/en/, _site/zh-Hans/, _site/zh-Hant/, the decks in _site/slides/,
                                     # and _site/index.html, which leads to the English edition

Sphinx's configuration, templates and stylesheet are in ``site/``. This module only prepares each edition's sources,
copies of the notebooks in a temporary folder (the notebooks in notebooks/ are read, never written), and runs
``sphinx-build`` on the three editions at once. In the copies:

* the generated navigation cells go (the theme has its own table of contents and prev/next links); after the title
  comes a line of links instead: Colab, Binder, the chapter's deck and the notebook to download, then the
  prerequisites;
* bookkeeping cells are removed (MyST-NB's ``remove-cell``), reference solutions show their output with their code
  folded (``hide-input``), and a "Going further" heading gets a label (``going-further-NN-K``) by which
  ``site/conf.py`` folds the block into a closed ``<details>``, as JupyterLab shows it;
* a widget's output keeps its picture (the view itself needs a kernel) and is followed by a line saying that it is
  interactive in Jupyter;
* a link to a file of the repository goes to GitHub; the course map becomes the edition's home page, with the
  table of contents.

The build writes ``_site/stamp.json``, the hash of what it was built from (:func:`source_hash`); the tests
(tests/test_site.py) read the built site and fail on a stale one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from tools import course, slides

ROOT = course.ROOT
SITE = ROOT / "_site"
CONF = ROOT / "site"
STAMP = "stamp.json"

#: Sphinx's code for each edition (its own words, and the search's word splitter: jieba for Chinese).
SPHINX_LANGUAGE = {"en": "en", "zh-Hans": "zh_CN", "zh-Hant": "zh_TW"}
#: What the language switch calls each edition, in its own script.
EDITION_NAMES = {"en": "English", "zh-Hans": "简体中文", "zh-Hant": "繁體中文"}
#: The words this module and site/conf.py add to a page.
WORDS = {
    "en": {"title": "PyTorch building blocks", "colab": "Open in Colab", "binder": "Launch on Binder",
           "slides": "Slides", "download": "Download the notebook", "show": "Show code", "hide": "Hide code",
           "languages": "Other languages",
           "widget": "Interactive in Jupyter: run this chapter in JupyterLab, on Colab or on Binder to move the "
                     "controls. Here, the picture it drew."},
    "zh-Hans": {"title": "PyTorch 的基本构件", "colab": "在 Colab 中打开", "binder": "在 Binder 上启动",
                "slides": "幻灯片", "download": "下载 notebook", "show": "显示代码", "hide": "隐藏代码",
                "languages": "其他语言",
                "widget": "在 Jupyter 中可以交互：在 JupyterLab、Colab 或 Binder 中运行本章即可拖动控件。"
                          "这里显示的是它画出的图。"},
    "zh-Hant": {"title": "PyTorch 的基本構件", "colab": "在 Colab 中開啟", "binder": "在 Binder 上啟動",
                "slides": "投影片", "download": "下載 notebook", "show": "顯示程式碼", "hide": "隱藏程式碼",
                "languages": "其他語言",
                "widget": "在 Jupyter 中可以互動：在 JupyterLab、Colab 或 Binder 中執行本章即可拖動控制項。"
                          "這裡顯示的是它畫出的圖。"},
}
FOLD = "going-further-"  # the label prefix of a Going-further heading; site/conf.py folds the block
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def page(ch: course.Chapter) -> str:
    """A chapter's page name in every edition: the course map is the home page (``index``)."""
    return "index" if ch.number == "00" else ch.path.stem


def _links(markdown: str, folder: Path = course.NOTEBOOKS) -> str:
    """Chapter links point at the pages' sources; a link to another file of the repository (relative to
    ``folder``, the notebook's) goes to GitHub."""
    def fix(m: re.Match) -> str:
        target = m.group(1)
        if target == course.CHAPTERS[0].file:
            return "](index.ipynb)"
        path = (folder / target).resolve()
        if "://" in target or target in {c.file for c in course.CHAPTERS} or not path.is_file():
            return m.group(0)
        rel = path.relative_to(ROOT).as_posix()
        return f"](https://github.com/{course.REPO}/blob/{course.BRANCH}/{rel})"

    return _LINK.sub(fix, markdown)


def _header(ch: course.Chapter, language: str) -> str:
    """The line under the title: Colab, Binder, the deck, the notebook itself; then the prerequisites."""
    words = WORDS[language]
    deck = "../slides/" + ("" if language == "en" else f"{language}/") + f"{ch.path.stem}.slides.html"
    line = (f'<a class="course-badge colab" href="{course.colab_url(ch, language)}">{words["colab"]}</a> '
            f'<a class="course-badge binder" href="{course.binder_url(ch, language)}">{words["binder"]}</a> '
            f'<a class="course-badge slides" href="{deck}">{words["slides"]}</a> '
            f'[{words["download"]} (.ipynb)](path:_notebooks/{ch.file})')
    parts = ["{.course-links}\n" + line]
    if ch.prerequisites:
        links = ", ".join(course._link(course.BY_NUMBER[p], language) for p in ch.prerequisites)
        parts.append(f"*{course.tr('Prerequisites:', language)}* {_links(links)}")
    return "\n\n".join(parts)


def edition(ch: course.Chapter, language: str = "en") -> nbformat.NotebookNode:
    """The notebook of ``ch`` in ``language`` as the site renders it (see the module's docstring)."""
    nb = nbformat.read(ch.path_in(language), as_version=4)
    further = slides.going_further(nb.cells)
    cells, folds = [], 0
    for i, cell in enumerate(nb.cells):
        tags = list(cell.metadata.get("tags", []))
        if {"nav-header", "nav-footer"} & set(tags):
            continue
        if "bookkeeping" in tags:
            tags.append("remove-cell")
        elif slides.is_solution(cell):
            tags.append("hide-input")
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)
        if cell.cell_type == "markdown":  # MathJax 2 would print the backslash of \text{fan\_in}, as on the slides
            linked = _links(cell.source, ch.path_in(language).parent)
            cell.source = slides._TEXT_ESCAPES.sub(lambda m: m.group(0).replace("\\_", "_"), linked)
            if i in further and cell.source.startswith("### "):
                folds += 1
                cell.source = f"({FOLD}{ch.number}-{folds})=\n{cell.source}"
        widgets = [o for o in cell.get("outputs", []) if _WIDGET_VIEW in o.get("data", {})]
        for output in widgets:
            del output["data"][_WIDGET_VIEW]
        if widgets:
            cells.append(nbformat.v4.new_markdown_cell("{.widget-note}\n" + WORDS[language]["widget"]))
    cells.insert(1, nbformat.v4.new_markdown_cell(_header(ch, language)))
    if ch.number == "00":
        names = "\n".join(page(c) for c in course.CHAPTERS[1:])
        caption = course.tr("The chapters", language)
        cells.append(nbformat.v4.new_markdown_cell(f"```{{toctree}}\n:hidden:\n:caption: {caption}\n\n{names}\n```"))
    for k, cell in enumerate(cells):
        cell["id"] = f"c{k}"  # the inserted cells need ids too
    nb.cells = cells
    return nb


def search_terms(language: str) -> list[str]:
    """The course's Chinese terms (CONTRIBUTING's glossary, in ``language``'s column), for jieba to keep as words when
    it splits the text for the search index: 參數綁定 is one word, not four characters."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split("**Glossary**", 1)[1]
    column = 1 if language == "zh-Hans" else 2
    terms = set()
    for row in text.split("\n\n", 2)[1].splitlines()[2:]:  # the table, less its heading and rule
        cells = row.strip().strip("|").split("|")
        for part in re.split(r"[/、]", cells[column]):
            for word in (re.sub(r"[（(].*?[）)]", "", part).strip(), re.sub(r"[（()）]", "", part).strip()):
                if len(word) > 1 and all("\u4e00" <= c <= "\u9fff" for c in word):
                    terms.add(word)
    return sorted(terms)


def source_hash() -> str:
    """A hash of what a build reads from this repository: the notebooks of the three editions, the files in
    ``site/``, this module, and the search's Chinese terms."""
    files = sorted(course.NOTEBOOKS.glob("*.ipynb")) + sorted(course.NOTEBOOKS.glob("zh-*/*.ipynb"))
    files += sorted(p for p in CONF.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files.append(Path(__file__))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for language in course.LANGUAGES[1:]:
        digest.update("\n".join(search_terms(language)).encode())
    return digest.hexdigest()


def _sources(language: str, folder: Path) -> None:
    """Write the sources of one edition into ``folder``: the prepared notebooks, the originals to download, and
    (Chinese) the search's word list."""
    (folder / "_notebooks").mkdir(parents=True)
    for ch in course.CHAPTERS:
        nbformat.write(edition(ch, language), folder / f"{page(ch)}.ipynb")
        shutil.copyfile(ch.path_in(language), folder / "_notebooks" / ch.file)
    if language != "en":
        (folder / "_search_words.txt").write_text("\n".join(search_terms(language)) + "\n", encoding="utf-8")


def build(out: Path = SITE) -> float:
    """Build the three editions (three ``sphinx-build`` processes at once; a warning fails the build) and the decks
    into ``out``; return the seconds it took."""
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        runs = []
        for language in course.LANGUAGES:
            # each edition in a folder of its own: MyST-NB writes the outputs' images next to the HTML folder
            work = Path(tmp) / language
            _sources(language, work / "src")
            env = dict(os.environ, COURSE_SITE_LANGUAGE=language, PYTHONPATH=str(ROOT))
            command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going", "-c", str(CONF),
                       "-d", str(work / "doctrees"), str(work / "src"), str(work / "html")]
            runs.append((language, subprocess.Popen(command, env=env, cwd=ROOT)))
        for language in course.LANGUAGES:  # the decks, while Sphinx works (a deck is written by one process)
            course.write_decks(list(course.CHAPTERS), out / "slides", language)
        failed = [language for language, run in runs if run.wait() != 0]
        if failed:
            raise SystemExit(f"sphinx-build failed for {', '.join(failed)}")
        for language in course.LANGUAGES:
            shutil.move(Path(tmp) / language / "html", out / language)
    (out / "index.html").write_text(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>PyTorch building blocks</title>\n'
        '<meta http-equiv="refresh" content="0; url=en/index.html"></head>\n'
        '<body><p><a href="en/index.html">English</a> · <a href="zh-Hans/index.html">简体中文</a> · '
        '<a href="zh-Hant/index.html">繁體中文</a></p></body></html>\n', encoding="utf-8")
    (out / STAMP).write_text(json.dumps({"source": source_hash()}) + "\n", encoding="utf-8")
    return time.perf_counter() - start
