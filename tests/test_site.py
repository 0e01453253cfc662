"""The web edition (tools/site.py, site/): the built site in _site/, every page of its three editions opened from
disk in headless Chromium at a phone's width (390 px).

Every page loads with no console error, no page error and no request that leaves the machine, and without a
horizontal scroll bar (code blocks and wide tables scroll inside their own box). Every chapter page has each heading
and each printed output (stream text) of its notebook, the Colab, Binder, slides and download links, its Going-further
blocks folded and closed, its reference solutions folded, no bookkeeping cell, a note under each widget's picture,
copy buttons, prev/next links, typeset formulas, and a language switch to the same chapter in the other two
editions; following that switch lands there. The search of each edition finds a chosen term (in Chinese: words that
jieba keeps whole, in the JavaScript search too). No link between the site's own files is broken.

The build is not part of the suite (it takes tens of seconds): these tests read _site/ as ``python -m tools.course
site`` left it. Without it they skip, unless the run must not skip browser tests (``must_not_skip``: REQUIRE_BROWSER=1,
as in CI, which builds the site first); a site built from other notebooks or another configuration fails.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import nbformat
import pytest

from tools import course, site, slides

pytestmark = pytest.mark.xdist_group("browser")  # the Chromium of tests/test_slides.py (conftest.py)

EDITIONS = course.LANGUAGES
PAGES = [(language, ch) for language in EDITIONS for ch in course.CHAPTERS]
OTHER_PAGES = ("search", "genindex")
#: A term per edition and the chapters whose pages its search must list (among others).
SEARCHES = {"en": ("broadcasting", {"06"}), "zh-Hans": ("梯度", {"02", "04"}),
            "zh-Hant": ("參數繫結", {"03"})}
PHONE = {"width": 390, "height": 844}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def must_not_skip() -> bool:
    """Whether this run must run the browser tests rather than skip them (CI: REQUIRE_BROWSER=1)."""
    return os.environ.get("REQUIRE_BROWSER") == "1"


@pytest.fixture(scope="module")
def built() -> Path:
    """_site/, built from the notebooks and configuration of this checkout."""
    stamp = site.SITE / site.STAMP
    if not stamp.is_file():
        reason = "no web edition in _site/: run python -m tools.course site"
        if must_not_skip():
            pytest.fail(reason)
        pytest.skip(reason)
    if json.loads(stamp.read_text(encoding="utf-8"))["source"] != site.source_hash():
        pytest.fail("the web edition in _site/ is stale (notebooks or site/ changed since): "
                    "run python -m tools.course site")
    return site.SITE


#: What a test reads from a page, in one pass.
READ = """() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main');
  const texts = sel => [...article.querySelectorAll(sel)].map(e => e.textContent);
  const hrefs = sel => [...document.querySelectorAll(sel)].map(a => a.href);
  return {
    title: document.title,
    text: article.textContent,
    headings: texts('h1, h2, h3'),
    folded: [...article.querySelectorAll('details.going-further')].map(d => d.open),
    solutions: [...article.querySelectorAll('.tag_hide-input details')].map(d => d.open),
    bookkeeping: article.querySelectorAll('.tag_bookkeeping').length,
    setup: article.querySelectorAll('.tag_setup .cell_input').length
      - article.querySelectorAll('.tag_setup details .cell_input').length,
    widgetNotes: article.querySelectorAll('p.widget-note + *').length,
    copyButtons: article.querySelectorAll('.cell_input button.copybtn').length,
    codeCells: article.querySelectorAll('.cell_input').length,
    prevNext: hrefs('.prev-next-area a'),
    languages: hrefs('.course-languages a'),
    badges: hrefs('.course-links a'),
    math: article.querySelectorAll('.math.nohighlight').length,
    typeset: article.querySelectorAll('.math.nohighlight > .MathJax, .math.nohighlight > .MathJax_Display').length,
    mathErrors: article.querySelectorAll('.MathJax_Error, merror').length,
    width: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
    found: typeof Search !== 'undefined' && Search.output
      ? [...Search.output.querySelectorAll('li > a')].map(a => a.href) : [],
  };
}"""
#: Every formula Sphinx wrote (MathJax's own output has spans of class "math" too) is typeset.
TYPESET = """() => [...document.querySelectorAll('.math.nohighlight')]
  .every(m => m.querySelector('.MathJax, .MathJax_Display'))"""
#: Sphinx's search has listed its results.
SEARCHED = "() => typeof Search !== 'undefined' && Search.output && Search._pulse_status === -1"


def _local(url: str) -> bool:
    return urlparse(url).scheme in {"file", "data", "blob", "about"}


def page_name(ch: course.Chapter) -> str:
    return site.page(ch) + ".html"


@pytest.fixture(scope="module")
def visited(built, browser):
    """Every page of the three editions opened from disk at 390 px: what each shows, and what it logged. The English
    course map is reached through the front door (_site/index.html), each search page is opened with its edition's
    term, and from one chapter the language switch is followed (``("switched", "03")``)."""
    context = browser.new_context(viewport=PHONE)
    results = {}
    try:
        page = context.new_page()
        log = {"requests": [], "errors": []}
        page.on("request", lambda request: log["requests"].append(request.url))
        # (a request that the next navigation cuts short is not a failure)
        page.on("requestfailed", lambda request: request.failure != "net::ERR_ABORTED"
                and log["errors"].append(f"failed: {request.url} ({request.failure})"))
        page.on("console", lambda message: message.type == "error" and log["errors"].append(message.text))
        page.on("pageerror", lambda exc: log["errors"].append(str(exc)))

        def visit(key, url, arrived=None, ready=None):
            for entries in log.values():
                entries.clear()
            page.goto(url)
            if arrived:
                page.wait_for_url(arrived)
            for condition in (ready, TYPESET):  # TYPESET: MathJax, from the site's own copy
                if condition:
                    page.wait_for_function(condition, timeout=20_000)
            results[key] = {**page.evaluate(READ), "url": page.url, **{k: list(v) for k, v in log.items()}}

        visit(("en", "index.html"), (built / "index.html").as_uri(), arrived="**/en/index.html")
        for language in EDITIONS:
            for name in [page_name(ch) for ch in course.CHAPTERS] + ["genindex.html"]:
                if (language, name) not in results:
                    visit((language, name), (built / language / name).as_uri())
            search = (built / language / "search.html").as_uri() + f"?q={SEARCHES[language][0]}"
            visit((language, "search.html"), search, ready=SEARCHED)
        page.goto((built / "en" / "03_parameter_tying.html").as_uri())
        page.click(".course-languages a[lang=zh-Hant]")
        page.wait_for_url("**/zh-Hant/03_parameter_tying.html")
        results["switched", "03"] = {"h1": page.locator("article h1").first.text_content()}
    finally:
        context.close()
    return results


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def headings(nb) -> list[str]:
    """The notebook's headings (#, ##, ###) as text, outside code fences and the generated navigation."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or {"nav-header", "nav-footer"} & set(cell.metadata.get("tags", [])):
            continue
        fenced = False
        for line in cell.source.split("\n"):
            fenced ^= line.startswith("```")
            if not fenced and re.match(r"#{1,3} ", line):
                found.append(_squash(line.lstrip("#").replace("`", "")))
    return found


def printed(nb) -> list[str]:
    """What the notebook's shown code cells printed: stream text, and plain-text results that have no picture."""
    texts = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "bookkeeping" in cell.metadata.get("tags", []):
            continue
        for output in cell.outputs:
            data = output.get("data", {})
            if output.output_type == "stream":
                texts.append(output.text)
            elif set(data) == {"text/plain"}:
                texts.append(data["text/plain"])
    return [_squash(_ANSI.sub("", t)) for t in texts if t.strip()]


@pytest.mark.parametrize(("language", "ch"), PAGES, ids=lambda x: x if isinstance(x, str) else x.number)
def test_a_chapter_page_shows_its_notebook(visited, language, ch):
    seen = visited[language, page_name(ch)]
    nb = nbformat.read(ch.path_in(language), as_version=4)
    shown = [_squash(h.replace("#", "")) for h in seen["headings"]]  # less the headings' permalinks
    assert [h for h in headings(nb) if h.replace("#", "") not in [s for s in shown]] == [], "headings missing"
    text = _squash(seen["text"])
    missing = [t for t in printed(nb) if t not in text]
    assert not missing, f"{len(missing)} printed outputs missing, such as {missing[0][:200]!r}"

    further = [i for i in slides.going_further(nb.cells) if nb.cells[i].source.startswith("### ")]
    assert seen["folded"] == [False] * len(further), "every Going-further block, folded and closed"
    solutions = [c for c in nb.cells if slides.is_solution(c) and "bookkeeping" not in c.metadata.get("tags", [])]
    assert seen["solutions"] == [False] * len(solutions), "reference solutions, folded"
    assert seen["bookkeeping"] == 0, "a bookkeeping cell is shown"
    assert seen["setup"] == 1, "the setup cell, shown as the notebook has it"
    widgets = [c for c in nb.cells if any(site._WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]
    assert seen["widgetNotes"] == len(widgets), "a line under each widget's picture"
    assert seen["copyButtons"] == seen["codeCells"] > 0, "a copy button on every code cell"
    assert seen["math"] == seen["typeset"] and not seen["mathErrors"], "formulas not typeset"

    assert seen["badges"][:2] == [course.colab_url(ch, language), course.binder_url(ch, language)]
    deck = "slides/" + ("" if language == "en" else f"{language}/") + f"{ch.path.stem}.slides.html"
    assert seen["badges"][2] == (site.SITE / deck).as_uri() and (site.SITE / deck).is_file(), "the deck"
    assert seen["badges"][3].endswith("/" + ch.file), "the notebook to download"
    i = course.CHAPTERS.index(ch)
    neighbours = [c for c in course.CHAPTERS[max(i - 1, 0):i + 2] if c is not ch]
    assert [Path(unquote(urlparse(u).path)).name for u in seen["prevNext"]] == [page_name(c) for c in neighbours]
    others = [(site.SITE / other / page_name(ch)).as_uri() for other in EDITIONS if other != language]
    assert seen["languages"] == others, "the language switch leads to the same chapter"


@pytest.mark.parametrize("language", EDITIONS)
def test_every_page_loads_offline_cleanly_and_fits_a_phone(visited, language):
    problems = []
    for (lang, name), seen in visited.items():
        if lang != language:
            continue
        problems += [f"{name}: request leaves the machine: {u}" for u in seen["requests"] if not _local(u)]
        problems += [f"{name}: {e}" for e in seen["errors"]]
        if seen["width"][0] > seen["width"][1]:
            problems.append(f"{name}: {seen['width'][0]} px wide at {seen['width'][1]} px: it scrolls sideways")
    assert not problems, "\n".join(problems[:20])


def test_the_front_door_leads_to_english_and_the_switch_to_the_same_chapter(visited):
    assert visited["en", "index.html"]["url"].endswith("/en/index.html")
    assert visited["switched", "03"]["h1"].startswith("03 · 參數")


@pytest.mark.parametrize("language", EDITIONS)
def test_search_finds_the_chapters_that_teach_a_term(visited, language):
    term, chapters = SEARCHES[language]
    names = {Path(unquote(urlparse(u).path)).name for u in visited[language, "search.html"]["found"]}
    assert {page_name(course.BY_NUMBER[n]) for n in chapters} <= names, f"{term!r} found only {sorted(names)}"


_TARGET = re.compile(r"""(?:href|src)="([^"]*)\"""")
_ID = re.compile(r"""\sid="([^"]*)\"""")


def test_no_link_between_the_sites_files_is_broken(built):
    pages = sorted(built.glob("*.html"))
    pages += [page for language in EDITIONS for page in sorted((built / language).glob("*.html"))]
    ids = {}
    broken = []
    for page in pages:
        html = page.read_text(encoding="utf-8")
        for target in _TARGET.findall(html):
            url, fragment = urldefrag(target.replace("&amp;", "&"))
            if re.match(r"[a-z]+:|//", url) or not (url or fragment):
                continue
            path = (page.parent / unquote(url.split("?")[0])).resolve() if url else page
            if not path.exists():
                broken.append(f"{page.relative_to(built)}: {target}")
            elif fragment and path.suffix == ".html":
                if path not in ids:
                    ids[path] = set(_ID.findall(path.read_text(encoding="utf-8")))
                if unquote(fragment) not in ids[path]:
                    broken.append(f"{page.relative_to(built)}: {target} (no such anchor)")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(broken[:20])
