"""The web edition (tools/site.py, site/), as ``python -m tools.course site`` built it into _site/.

Every chapter page of the three editions, read from its HTML: each heading and each printed output (stream text) of
its notebook; its Going-further blocks folded and closed, its reference solutions folded, no bookkeeping cell, the
setup cell; a note under each widget's picture; the Colab, Binder, deck and download links; prev/next links to its
neighbours; a language switch to the same chapter in the other two editions. No link between the site's files is
broken.

In headless Chromium, from disk, at a phone's width (390 px): the front door (_site/index.html) leads to the English
course map; every page loads with no console error, no failed request and no request that leaves the machine,
without a sideways scroll (code blocks and wide tables scroll in their own box), with its formulas typeset and a copy
button on every code cell; the language switch, followed, lands on the same chapter; each edition's search finds the
chapters that teach a chosen term (in Chinese: a word that only the course's word list keeps whole). Opening a page
costs Chromium about half a second, so a plain run opens every English page and, of the Chinese editions, the
chapters the suite re-runs under nbval (``EDITIONS_BY_DEFAULT``) and the search pages; ``--slow`` opens every page of
those editions too (CI sets it).

The build is not part of the suite: these tests read _site/. Without it they skip, unless the run must not skip the
browser tests (``--require-browser``, as in CI, which builds the site first); a site built from other
notebooks or another configuration fails.
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import nbformat
import pytest

from tools import course, site, slides

EDITIONS = course.LANGUAGES
PAGES = [(language, ch) for language in EDITIONS for ch in course.CHAPTERS]
#: Terms, and chapters that teach them, which each edition's search must list (among others). 惰性初始化 and 參數綁定
#: are words only through the course's word list (tools/site.py: jieba would cut them into characters).
SEARCHES = {"en": [("broadcasting", {"06"}), ("tied", {"03"})],
            "zh-Hans": [("梯度", {"02", "04"}), ("惰性初始化", {"02"})],
            "zh-Hant": [("參數", {"02", "03"}), ("參數綁定", {"03"})]}
PHONE = {"width": 390, "height": 844}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def browsed(every_page: bool) -> list[tuple[str, str]]:
    """The pages a run opens in Chromium, as (edition, file name): see the module's docstring."""
    from conftest import is_default_edition

    pages = []
    for language in EDITIONS:
        every = language == "en" or every_page
        pages += [(language, page_name(ch)) for ch in course.CHAPTERS
                  if every or is_default_edition(Path(language) / ch.file)]
        pages += [(language, "genindex.html")] * every + [(language, "search.html")]
    return pages


def page_name(ch: course.Chapter) -> str:
    return site.page(ch) + ".html"


@pytest.fixture(scope="module")
def built(request) -> Path:
    """_site/, built from the notebooks and configuration of this checkout."""
    stamp = site.SITE / site.STAMP
    if not stamp.is_file():
        reason = "no web edition in _site/: run python -m tools.course site"
        if request.config.getoption("--require-browser"):
            pytest.fail(reason)
        pytest.skip(reason)
    if json.loads(stamp.read_text(encoding="utf-8"))["source"] != site.source_hash():
        pytest.fail("the web edition in _site/ is stale (notebooks or site/ changed since): "
                    "run python -m tools.course site")
    return site.SITE


# --- what a page's HTML holds ---------------------------------------------------------------------------------

def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _text(html: str) -> str:
    return _squash(unescape(re.sub(r"<[^>]+>", "", html)))


def _hrefs(html: str, page: Path) -> list[str]:
    """The links in ``html``, a file's page ``page``: absolute as they are, relative ones as file URIs."""
    hrefs = [unescape(h) for h in re.findall(r'href="([^"]*)"', html)]
    return [h if re.match(r"[a-z]+:", h) else (page.parent / h).resolve().as_uri() for h in hrefs]


def read_page(path: Path) -> dict:
    """What a chapter page shows, from its HTML (no script changes any of it)."""
    html = path.read_text(encoding="utf-8")
    article = html[html.index('<article class="bd-article">'):html.index("</article>")]

    def region(pattern, where=article):
        return (re.search(pattern, where, re.S) or [""])[0]

    return {
        "text": _text(article),
        "headings": [_text(h).rstrip("#").strip() for h in re.findall(r"<h[123]\b[^>]*>(.*?)</h[123]>", article, re.S)],
        "folded": [" open" in attrs for attrs in re.findall(r'<details class="going-further"([^>]*)>', article)],
        "solutions": article.count(" tag_hide-input "),
        "solutionsFolded": [" open" in a for a in re.findall(r'<details class="admonition hide above-input"([^>]*)>',
                                                            article)],
        "bookkeeping": article.count("tag_bookkeeping"),
        "setup": bool(re.search(r'<div class="cell tag_setup[^"]*">\s*<div class="cell_input', article)),
        "widgetNotes": article.count('<p class="widget-note">'),
        "badges": _hrefs(region(r'<p class="course-links">.*?</p>'), path),
        "languages": _hrefs(region(r'<nav class="course-languages".*?</nav>', html), path),
        "prevNext": _hrefs(region(r'<div class="prev-next-area">.*?</div>\s*</footer>', html), path),
    }


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
def test_a_chapter_page_shows_its_notebook(built, language, ch):
    path = built / language / page_name(ch)
    seen = read_page(path)
    nb = nbformat.v4.reads(ch.path_in(language).read_text(encoding="utf-8"))  # (read, not validated: faster)
    assert [h for h in headings(nb) if h not in seen["headings"]] == [], "headings missing"
    missing = [t for t in printed(nb) if t not in seen["text"]]
    assert not missing, f"{len(missing)} printed outputs missing, such as {missing[0][:200]!r}"

    further = [i for i in slides.going_further(nb.cells) if nb.cells[i].source.startswith("### ")]
    assert seen["folded"] == [False] * len(further), "every Going-further block, folded and closed"
    solutions = [c for c in nb.cells if slides.is_solution(c) and "bookkeeping" not in c.metadata.get("tags", [])]
    assert seen["solutions"] == len(solutions) and seen["solutionsFolded"] == [False] * len(solutions)
    assert seen["bookkeeping"] == 0, "a bookkeeping cell is shown"
    assert seen["setup"], "the setup cell, shown as the notebook has it"
    widgets = [c for c in nb.cells if any(site._WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]
    assert seen["widgetNotes"] == len(widgets), "a line under each widget's picture"

    assert seen["badges"][:2] == [course.colab_url(ch, language), course.binder_url(ch, language)]
    deck = built / "slides" / ("" if language == "en" else language) / f"{ch.path.stem}.slides.html"
    assert seen["badges"][2] == deck.as_uri() and deck.is_file(), "the chapter's deck"
    assert seen["badges"][3].endswith("/" + ch.file), "the notebook to download"
    i = course.CHAPTERS.index(ch)
    neighbours = [c for c in course.CHAPTERS[max(i - 1, 0):i + 2] if c is not ch]
    assert seen["prevNext"] == [(path.parent / page_name(c)).as_uri() for c in neighbours]
    others = [(built / other / page_name(ch)).as_uri() for other in EDITIONS if other != language]
    assert seen["languages"] == others, "the language switch leads to the same chapter"


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
            url, fragment = urldefrag(unescape(target))
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


# --- in Chromium ------------------------------------------------------------------------------------------------

#: What a page does once loaded, in one pass.
READ = """() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main');
  return {
    codeCells: article.querySelectorAll('.cell_input').length,
    copyButtons: article.querySelectorAll('.cell_input button.copybtn').length,
    math: article.querySelectorAll('.math.nohighlight').length,
    typeset: article.querySelectorAll('.math.nohighlight > .MathJax, .math.nohighlight > .MathJax_Display').length,
    mathErrors: article.querySelectorAll('.MathJax_Error, merror').length,
    width: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
    found: typeof Search !== 'undefined' && Search.output
      ? [...Search.output.querySelectorAll('li > a')].map(a => a.href) : [],
  };
}"""
#: MathJax is done: every formula Sphinx wrote (MathJax's own output has spans of class "math" too) has its output,
#: no longer its preview (the TeX, shown while MathJax works), and MathJax's queue is empty.
TYPESET = """() => [...document.querySelectorAll('.math.nohighlight')].every(m =>
    m.querySelector('.MathJax, .MathJax_Display') && !m.querySelector('.MathJax_Preview')?.textContent)
  && (!document.querySelector('.math.nohighlight')
      || (window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0 && !MathJax.Hub.queue.running))"""
#: Sphinx's search has listed its results.
SEARCHED = "() => typeof Search !== 'undefined' && Search.output && Search._pulse_status === -1"


def _local(url: str) -> bool:
    return urlparse(url).scheme in {"file", "data", "blob", "about"}


@pytest.fixture(scope="module")
def visited(request, built, browser):
    """The pages ``browsed()`` names, opened from disk at 390 px: what each does, and what it logged. The English
    course map is reached through the front door (_site/index.html), each search page is opened with each of its
    edition's terms, and from the English chapter 03 the language switch to 繁體 is followed
    (``("switched", "03")``)."""
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

        def read(key, ready=None):
            for condition in (ready, TYPESET):  # TYPESET: MathJax, from the site's own copy
                if condition:
                    page.wait_for_function(condition, polling=100, timeout=20_000)
            results[key] = {**page.evaluate(READ), "url": page.url, **{k: list(v) for k, v in log.items()}}
            for entries in log.values():
                entries.clear()

        page.goto((built / "index.html").as_uri())
        page.wait_for_url("**/en/index.html")
        read(("en", "index.html"))
        for language, name in browsed(request.config.getoption("--slow")):
            if (language, name) in results:
                continue
            url = (built / language / name).as_uri()
            if name == "search.html":
                for term, _ in SEARCHES[language]:
                    page.goto(f"{url}?q={term}")
                    read((language, f"{name}?q={term}"), ready=SEARCHED)
                continue
            page.goto(url)
            read((language, name))
            if (language, name) == ("en", "03_parameter_tying.html"):
                page.click(".course-languages a[lang=zh-Hant]")
                page.wait_for_url("**/zh-Hant/03_parameter_tying.html")
                results["switched", "03"] = {"h1": page.locator("article h1").first.text_content()}
                read(("zh-Hant", name))
    finally:
        context.close()
    return results


@pytest.mark.parametrize("language", EDITIONS)
def test_pages_load_offline_cleanly_and_fit_a_phone(visited, language):
    problems = []
    for (lang, name), seen in visited.items():
        if lang != language:
            continue
        problems += [f"{name}: request leaves the machine: {u}" for u in seen["requests"] if not _local(u)]
        problems += [f"{name}: {e}" for e in seen["errors"]]
        if seen["width"][0] > seen["width"][1]:
            problems.append(f"{name}: {seen['width'][0]} px wide at {seen['width'][1]} px: it scrolls sideways")
        if seen["copyButtons"] != seen["codeCells"]:
            problems.append(f"{name}: {seen['copyButtons']} copy buttons for {seen['codeCells']} code cells")
        if seen["typeset"] != seen["math"] or seen["mathErrors"]:
            problems.append(f"{name}: {seen['typeset']} of {seen['math']} formulas typeset")
    assert not problems, "\n".join(problems[:20])


def test_the_front_door_leads_to_english_and_the_switch_to_the_same_chapter(visited):
    assert visited["en", "index.html"]["url"].endswith("/en/index.html")
    assert visited["switched", "03"]["h1"].startswith("03 · 參數")


@pytest.mark.parametrize(("language", "term", "chapters"),
                         [(language, *search) for language, searches in SEARCHES.items() for search in searches])
def test_search_finds_the_chapters_that_teach_a_term(visited, language, term, chapters):
    names = {Path(unquote(urlparse(u).path)).name for u in visited[language, f"search.html?q={term}"]["found"]}
    assert {page_name(course.BY_NUMBER[n]) for n in chapters} <= names, f"{term!r} found only {sorted(names)}"
