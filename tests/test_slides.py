"""Lecture decks: the slide metadata rules, and every exported deck walked in headless Chromium at 1280x720.

The browser part exports all chapters once (one nbconvert exporter), opens every deck in one Chromium and
visits every slide with all its fragments shown: no slide may be taller than the slide area, no element
may stick out of it or hide a line behind a scroll bar, no text may be smaller than 13 px on the screen,
no setup code, reference solution or widget repr may be visible, and no request may leave the machine
(every request is logged). It needs Chromium and playwright like tests/test_browser.py; ``--require-browser``
turns a skip into a failure. The Chinese decks need Noto Sans CJK (``fonts-noto-cjk``); a plain run walks the
decks of the two Chinese editions it re-runs, ``--slow`` walks them all.
"""

from __future__ import annotations

import base64
import functools
import re
import struct
import zlib
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

from tools import course, slides

CHAPTERS = [c for c in course.CHAPTERS if c.path.exists()]
MIN_TEXT_PX = 13
ALWAYS_BANNED = ("VBox(children=", "HBox(children=", "google.colab", "%pip install", course.SETUP_END)


# --- the rules, on small notebooks ---------------------------------------------------------------------------

def md(source, **meta):
    cell = nbformat.v4.new_markdown_cell(source)
    cell.metadata.update(meta)
    return cell


def code(source, outputs=(), tags=(), **meta):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    if tags:
        cell.metadata["tags"] = list(tags)
    cell.metadata.update(meta)
    return cell


def stdout(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_setup_solutions_navigation_and_bare_asserts_stay_off_the_slides():
    cells = [
        md("# 01 · Title\n\nWhy."),
        md("badges", tags=["nav-header"]),
        code("import torch", tags=["setup", "nbval-ignore-output"]),
        md("## 1 · A section"),
        code("x = 1\nprint(x)", [stdout("1\n")]),
        code("assert x == 1\nassert x > 0"),
        code("assert x == 1  # and a print\nprint('checked')", [stdout("checked\n")]),
        code("def answer():\n    return 42", jupyter={"source_hidden": True}),
        code(""),
        md("---\nnext", tags=["nav-footer"]),
    ]
    assert slides.slide_types(cells) == ["slide", "skip", "skip", "slide", "fragment", "notes", "fragment",
                                         "skip", "skip", "skip"]


def test_headings_open_slides_and_code_after_the_first_item_is_a_fragment():
    cells = [md("# 02 · T"), md("## 1 · One\n\nText."), code("a = 1"), md("Then:"), code("b = 2"),
             md("### A sub-section"), code("c = 3"), md("## 2 · Two")]
    assert slides.slide_types(cells) == ["slide", "slide", "fragment", "-", "fragment", "subslide", "fragment",
                                         "slide"]


def test_a_long_section_continues_on_sub_slides_that_each_fit():
    block = "\n".join(f"y{i} = {i}" for i in range(12))  # 12 lines of code and 12 of output per cell
    cells = [md("# 03 · T"), md("## 1 · Long")]
    cells += [code(block, [stdout("\n".join(str(i) for i in range(12)))]) for _ in range(6)]
    kinds = slides.slide_types(cells)
    assert kinds[:2] == ["slide", "slide"] and kinds.count("subslide") >= 2
    # every sub-slide's estimated height fits the budget
    height = 0.0
    for cell, kind in zip(cells[1:], kinds[1:], strict=True):
        height = slides.cell_height(cell) if kind in {"slide", "subslide"} else height + slides.cell_height(cell)
        assert height <= slides.BUDGET


def test_a_lead_in_paragraph_moves_with_its_code():
    big = "\n".join(f"z{i} = {i}" for i in range(20))
    cells = [md("# 04 · T"), md("## 1 · S"), code(big), md("The next cell shows the trap:"), code(big)]
    assert slides.slide_types(cells)[3:] == ["subslide", "fragment"]


def test_heights_grow_with_wrapped_lines_tables_and_images():
    short, long = code("x = 1"), code("x = 1", [stdout("word " * 200)])
    assert slides.cell_height(long) > slides.cell_height(short) + 5 * slides.OUT_LINE
    table = md("| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i} |" for i in range(10)))
    assert slides.cell_height(table) > slides.cell_height(md("| a | b |\n|---|---|\n| 1 | 1 |")) + 200
    # an image is drawn at its size in pixels (1200x300 fits as it is), scaled down to the width and to
    # IMAGE_MAX_H: the figure's part of the cell is what the stylesheet draws, plus its margin
    drawn = {(1200, 300): 300, (2432, 300): 150, (800, 1200): slides.IMAGE_MAX_H}
    for (width, height), px in drawn.items():
        figure = code("plot()", [figure_output(width, height)])
        assert px <= slides.cell_height(figure) - slides.cell_height(code("plot()")) <= px + 16, (width, height)


def figure_output(width, height, **metadata):
    return {"output_type": "display_data", "data": {"image/png": _png(width, height), "text/plain": "<Figure>"},
            "metadata": metadata}


def test_an_image_counts_as_tall_as_the_stylesheet_draws_it():
    # a width/height in the output's metadata does not count: the stylesheet draws the pixels (width: auto)
    small = code("show()", [figure_output(1000, 1000, **{"image/png": {"width": 150, "height": 150}})])
    assert slides.cell_height(small) >= slides.IMAGE_MAX_H
    assert "width: auto; height: auto" in slides.CSS
    # markdown images (attachments too) are scaled and capped like output images
    assert re.search(r"\.jp-RenderedMarkdown img[^}]*max-height: " + f"{slides.IMAGE_MAX_H}px", slides.CSS)
    words = "Some words about the diagram. " * 10
    for (width, height), px in {(900, 500): slides.IMAGE_MAX_H, (300, 100): 100}.items():
        cell = nbformat.v4.new_markdown_cell(f"{words}\n\n![diagram](attachment:d.png)",
                                             attachments={"d.png": {"image/png": _png(width, height)}})
        assert px <= slides.cell_height(cell) - slides.cell_height(md(words)) <= px + 24, (width, height)
    unknown = md("![diagram](figure.png)")  # a file: its size is unknown here, so it counts as a big figure
    assert slides.cell_height(unknown) >= slides.IMAGE_MAX_H


def test_a_fence_right_after_a_line_of_text_is_code_and_a_long_one_is_cut():
    body = "\n".join(f"torchrun --nproc-per-node=2 train.py --epoch {i}" for i in range(25))
    tight, loose = f"Run it:\n```bash\n{body}\n```", f"Run it:\n\n```bash\n{body}\n```"
    assert slides.markdown_blocks(tight) == slides.markdown_blocks(loose) == ["Run it:", f"```bash\n{body}\n```"]
    assert slides.markdown_height(tight) == slides.markdown_height(loose) > 25 * slides.CODE_LINE
    assert slides.markdown_blocks("```\na\n```\nafter") == ["```\na\n```", "after"]
    long = "\n".join(f"step_{i}()" for i in range(60))
    nb = nbformat.v4.new_notebook(cells=[md("# 08 · T"), md(f"## 1 · Launch\n\nRun it:\n```bash\n{long}\n```")])
    for cell, kind in zip(nb.cells, slides.slide_types(nb.cells), strict=True):
        cell.metadata["slideshow"] = {"slide_type": kind}
    deck = slides.deck_notebook(nb)
    fenced = [c.source for c in deck.cells if "step_" in c.source]
    assert len(fenced) >= 2 and all(slides.cell_height(c) <= slides.BUDGET for c in deck.cells)
    assert all(part.endswith("```") and "```bash\nstep_" in part for part in fenced)
    assert re.findall(r"step_\d+", "".join(fenced)) == [f"step_{i}" for i in range(60)]


def _png(width: int, height: int) -> str:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x00" * width for _ in range(height))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def test_a_code_cell_taller_than_a_slide_is_cut_into_sub_slides_in_the_deck():
    program = "\n".join([*(f"a{i} = {i}" for i in range(30)), "", *(f"b{i} = {i}" for i in range(30))])
    nb = nbformat.v4.new_notebook(cells=[md("# 05 · T"), md("## 1 · S"), code(program, [stdout("done\n")])])
    for cell, kind in zip(nb.cells, slides.slide_types(nb.cells), strict=True):
        cell.metadata["slideshow"] = {"slide_type": kind}
    deck = slides.deck_notebook(nb)
    parts = [c for c in deck.cells if c.cell_type == "code"]
    assert len(parts) >= 2 and all(slides.cell_height(c) <= slides.BUDGET for c in parts)
    assert "\n".join(c.source for c in parts).split() == program.split()  # nothing lost, nothing added
    assert parts[-1].outputs and not any(c.outputs for c in parts[:-1])
    assert parts[1].source.startswith("b0 = 0"), "cut at the blank line"
    assert [c.metadata.slideshow.slide_type for c in parts[1:]] == ["subslide"] * (len(parts) - 1)
    assert len({c.id for c in deck.cells}) == len(deck.cells)
    assert nb.cells[2].source == program, "the notebook itself is left as it is"


def test_long_outputs_tables_and_lists_are_cut_to_fit_too():
    lines = [f"step {i}: loss {1 / (i + 1):.4f}" for i in range(80)]
    table = "| epoch | loss |\n|---|---|\n" + "\n".join(f"| {i} | {i / 7:.3f} |" for i in range(40))
    items = "\n".join(f"- point {i}, which takes a few words to say" for i in range(40))
    nb = nbformat.v4.new_notebook(cells=[md("# 07 · T"), code("train()", [stdout("\n".join(lines) + "\n")]),
                                         md("## 1 · Table\n\n" + table), md(items)])
    for cell, kind in zip(nb.cells, slides.slide_types(nb.cells), strict=True):
        cell.metadata["slideshow"] = {"slide_type": kind}
    deck = slides.deck_notebook(nb)
    assert len(deck.cells) > 6 and all(slides.cell_height(c) <= slides.BUDGET for c in deck.cells)
    printed = "".join(o["text"] for c in deck.cells if c.cell_type == "code" for o in c.outputs)
    assert printed.split("\n")[:-1] == lines
    parts = [c.source for c in deck.cells if "| epoch | loss |" in c.source]
    assert len(parts) >= 2 and all(part.split("\n")[1] == "|---|---|" for part in parts)
    assert sum(part.count("\n| ") for part in parts) == 40
    assert sum(c.source.count("- point") for c in deck.cells) == 40
    only_outputs = [c for c in deck.cells if slides.OUTPUT_ONLY in c.metadata.get("tags", [])]
    html = slides.export_notebook(nb, "T")
    assert only_outputs and html.count('jp-InputArea-editor"') == 1, "output-only pieces show no empty editor"


def test_a_cut_output_keeps_its_kind_and_a_long_traceback_is_cut_too():
    warnings = {"output_type": "stream", "name": "stderr", "text": "".join(f"warning {i}\n" for i in range(80))}
    pieces = [o for group in slides._output_pieces([warnings]) for o in group]
    assert len(pieces) >= 2 and {o["name"] for o in pieces} == {"stderr"}
    frames = [f"  File \"train.py\", line {i}, in step{i}\n    \x1b[32mstep{i + 1}()\x1b[0m" for i in range(40)]
    error = {"output_type": "error", "ename": "RuntimeError", "evalue": "boom",
             "traceback": ["\x1b[31mRuntimeError\x1b[0m Traceback", *frames, "RuntimeError: boom"]}
    groups = slides._output_pieces([nbformat.from_dict(error)])
    pieces = [o for group in groups for o in group]
    assert len(groups) >= 2 and {o["output_type"] for o in pieces} == {"error"}
    assert all(sum(map(slides.output_height, group)) <= slides.BUDGET - slides.CELL_GAP for group in groups)
    assert "\n".join(line for o in pieces for line in o["traceback"]) == "\n".join(error["traceback"])


def test_math_is_found_where_mathjax_typesets_it_and_only_there():
    def has_math(*cells):
        return slides._has_math(nbformat.v4.new_notebook(cells=list(cells)))

    def shown(mime, text):
        return code("show()", [{"output_type": "display_data", "data": {mime: text, "text/plain": "<x>"},
                                "metadata": {}}])

    assert has_math(md("Inline $x^2$."))
    assert has_math(md("The error:\n\n$$\n\\frac{1}{n}\\sum_i e_i^2\n$$"))
    assert has_math(md("\\begin{align}\na &= b\n\\end{align}"))
    assert has_math(md("Plain."), shown("text/latex", "$\\displaystyle \\frac{1}{2}$"))
    assert has_math(shown("text/markdown", "the rate $\\eta$"))
    assert not has_math(md("Every worker reads `$MASTER_ADDR` and `$MASTER_PORT`."))
    assert not has_math(md("```bash\necho $RANK $WORLD_SIZE\n```"), code("x = '$a$'"))
    nb = nbformat.v4.new_notebook(cells=[md("# 06 · T"), shown("text/latex", "$\\frac{1}{2}$")])
    assert "MathJax.js" in slides.export_notebook(nb, "T")


def test_a_widget_shows_its_picture_or_text_never_its_repr():
    view = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    bare = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
            "data": {"application/vnd.jupyter.widget-view+json": view, "text/plain": "VBox(children=(IntSlider(…"}}
    readable = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                "data": {"application/vnd.jupyter.widget-view+json": view, "text/plain": "Explorer: relu, depth 10"}}
    [note] = slides.slide_outputs(code("ui", [bare]))
    assert note == {"output_type": "stream", "name": "stdout", "text": slides.WIDGET_NOTE}
    [kept] = slides.slide_outputs(code("ui", [readable]))
    assert kept["data"] == {"text/plain": "Explorer: relu, depth 10"}


def test_the_deck_template_names_no_network_resource():
    nb = nbformat.v4.new_notebook(cells=[md("# 06 · T\n\nSome $x^2$ math."), code("print(1)", [stdout("1\n")])])
    nb.cells[0].metadata["slideshow"] = {"slide_type": "slide"}
    html = slides.export_notebook(nb, "T")
    assert "reveal.js" in html and "MathJax.js" in html
    for url in re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html) + re.findall(r"@import\s+url\(([^)]+)", html):
        assert not re.match(r"(https?:)?//", url), url
    assert "require.js" not in html and "jquery" not in html.lower() and "mermaid" not in html


# --- every chapter's deck, in a browser ------------------------------------------------------------------------

@functools.cache
def synced(ch, language="en"):
    """The chapter as ``tools.course sync`` makes it (its Chinese edition as sync writes it), once per worker
    (the tests here only read it)."""
    if language != "en":
        return nbformat.read(ch.path_in(language), as_version=4)
    return course.synced(ch, nbformat.read(ch.path, as_version=4))


def banned_text(nb) -> list[str]:
    """Lines that must not be visible: the setup cell's and the reference solutions' own lines (those that
    no shown cell also has), and widget reprs."""
    shown, hidden = [], []
    for cell in nb.cells:
        kind = slides.hidden_kind(cell)
        target = hidden if kind == "skip" and cell.cell_type == "code" else shown
        target.append(cell.source)
        for o in cell.get("outputs", []):
            target.append(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")))
    shown_text = _squash("\n".join(shown))
    lines = {_squash(line) for text in hidden for line in text.split("\n")}
    return [*ALWAYS_BANNED, *sorted(line for line in lines if len(line) >= 16 and line not in shown_text)]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _local(url: str) -> bool:
    parts = urlparse(url)
    return parts.scheme in {"file", "data", "blob", "about"} or parts.hostname in {"127.0.0.1", "localhost", "::1"}


#: Lays every slide out at once, each where reveal.js shows it and with all its fragments visible (one
#: layout pass: navigating slide by slide costs a layout of the whole deck per slide), waits for the fonts
#: that the text now shown asks for (a face used only on a later slide, such as semibold italic, is not
#: loaded yet: measured in a fallback font, and its request cancelled when the slides hide again), then
#: measures each.
WALK = """
async () => {
  const R = window.Reveal;
  R.configure({transition: 'none'});
  const all = document.createElement('style');
  all.textContent = `.reveal .slides section { display: block !important; transform: none !important; }
    .reveal .slides .fragment { visibility: visible !important; opacity: 1 !important; }`;
  document.head.appendChild(all);
  document.body.getBoundingClientRect();  // lay the slides out now: their text asks for its fonts
  await document.fonts.ready;
  const scale = R.getScale();
  const box = document.querySelector('.reveal .slides').getBoundingClientRect();
  const shown = new Map();  // element -> rendered and visible (display, visibility, ancestors included)
  const isShown = el => {
    if (!shown.has(el)) shown.set(el, el.checkVisibility({visibilityProperty: true}));
    return shown.get(el);
  };
  const out = [];
  for (const slide of R.getSlides()) {
    const at = R.getIndices(slide);
    let top = Infinity, bottom = -Infinity, minFont = Infinity, small = '', text = '';
    const cut = [];
    for (const el of [slide, ...slide.querySelectorAll('*')]) {
      // inside a formula only the text counts: MathJax's own layout boxes reach beyond what it draws
      if (!isShown(el) || (el.parentElement && el.parentElement.closest('.MathJax, .MathJax_Display'))) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      top = Math.min(top, r.top);
      bottom = Math.max(bottom, r.bottom);
      const name = () => el.tagName.toLowerCase() + (typeof el.className === 'string' && el.className.trim()
        ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
      if (r.right > box.right + 1 || r.left < box.left - 1)
        cut.push(`${name()} sticks out by ${Math.round(Math.max(r.right - box.right, box.left - r.left) / scale)} px`);
      if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== 'visible')
        cut.push(`${name()} hides ${el.scrollWidth - el.clientWidth} px of its lines`);
    }
    // what the audience reads: every visible text node, in order, and the size it is drawn at
    const walker = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!isShown(el)) continue;
      text += node.textContent;
      if (!node.textContent.trim()) continue;
      const px = parseFloat(getComputedStyle(el).fontSize) * scale;
      if (px < minFont) { minFont = px; small = el.textContent.trim().slice(0, 50); }
    }
    const heading = slide.querySelector('h1, h2, h3');
    out.push({where: `${at.h}/${at.v}`, title: heading ? heading.textContent.trim().slice(0, 60) : '',
              top: (top - box.top) / scale, bottom: (bottom - box.top) / scale, height: box.height / scale,
              cut, minFont, small, text});
  }
  all.remove();
  // and the deck is navigable: the last slide is reachable and is the last one counted
  R.slide(R.getHorizontalSlides().length - 1, 0);
  return {scale, slides: out, total: R.getTotalSlides(), last: R.isLastSlide() || R.getIndices().h > 0,
          fonts: document.fonts.check('16px "Source Sans Pro"'),
          // a CJK font is installed when text set in it measures differently from the fallback's
          cjk: (() => { const c = document.createElement('canvas').getContext('2d'), w = f => {
                  c.font = f; return c.measureText('Tensor 0123 gradient').width; };
                return ['SC', 'TC'].every(v => w(`20px "Noto Sans CJK ${v}", monospace`) !== w('20px monospace')); })(),
          math: document.querySelectorAll('.MathJax, .MathJax_Display').length,
          mathErrors: document.querySelectorAll('.MathJax_Error, merror').length};
}
"""


def _deck(language: str, ch: course.Chapter):
    """Every deck is a case; a Chinese deck beyond the two editions a plain run re-runs is marked ``slow``
    (``python -m pytest --slow tests/test_slides.py`` walks them all)."""
    from conftest import is_default_edition

    slow = language != "en" and not is_default_edition(Path(language) / ch.file)
    return pytest.param(language, ch, marks=[pytest.mark.slow] if slow else [], id=f"{language}-{ch.number}")


DECKS = [_deck(language, ch) for language in course.LANGUAGES for ch in CHAPTERS]
WALK_TEST = "test_every_slide_fits_reads_well_and_needs_no_network"


@pytest.fixture(scope="module")
def decks(request, tmp_path_factory):
    """The decks whose cases this run selected, exported once."""
    selected = [item.callspec.params for item in request.session.items
                if getattr(item, "originalname", "") == WALK_TEST]
    out = tmp_path_factory.mktemp("slides")
    made = {}
    for language in course.LANGUAGES:
        chosen = [p["ch"] for p in selected if p["language"] == language]
        if chosen:
            paths = course.write_decks(chosen, out, language)
            made.update({(language, c.number): path for c, path in zip(chosen, paths, strict=True)})
    return made


@pytest.fixture(scope="module")
def walked(decks, browser):
    """Every deck opened in one headless Chromium page at 1280x720, every slide measured, every request
    logged."""
    results = {}
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        log = {"requests": [], "failed": [], "errors": []}
        page.on("request", lambda request: log["requests"].append(request.url))
        page.on("requestfailed", lambda request: log["failed"].append(request.url))
        page.on("pageerror", lambda exc: log["errors"].append(str(exc)))
        for key, path in decks.items():
            for entries in log.values():
                entries.clear()
            page.goto(path.as_uri(), wait_until="commit")
            page.wait_for_function("window.Reveal && Reveal.isReady()", timeout=30_000)
            results[key] = {**page.evaluate(WALK), **{k: list(v) for k, v in log.items()}}
    finally:
        context.close()
    return results


def slide_counts(html: str) -> tuple[int, int]:
    """(slides, sub-slides) of a deck: <section>s at depth 1 and 2."""
    depth = tops = subs = 0
    for tag in re.findall(r"<section\b[^>]*>|</section>", html):
        if tag.startswith("<section"):
            depth += 1
            tops += depth == 1
            subs += depth == 2
        else:
            depth -= 1
    assert depth == 0
    return tops, subs


def test_every_chapter_exports_to_a_deck(decks):
    for ch in CHAPTERS:
        nb = synced(ch)
        kinds = [c.metadata["slideshow"]["slide_type"] for c in nb.cells]
        sections = sum(c.cell_type == "markdown" and c.source.startswith("## ") for c in nb.cells)
        assert kinds.count("slide") == 1 + sections, "one slide for the title and one per section"
        tops, subs = slide_counts(decks["en", ch.number].read_text())
        assert tops == 1 + sections and subs >= kinds.count("slide") + kinds.count("subslide"), ch.number
    for (language, number), path in decks.items():  # a Chinese deck: the same sections, its own sub-slides
        assert slide_counts(path.read_text())[0] == slide_counts(decks["en", number].read_text())[0], language
    assets = decks["en", CHAPTERS[0].number].parent / "_assets"
    assert (assets / "reveal" / "dist" / "reveal.js").exists() and (assets / "mathjax" / "MathJax.js").exists()
    assert (assets.parent / "index.html").exists()
    for (language, _number), path in decks.items():
        if language != "en":
            assert path.parent == assets.parent / language and (path.parent / "index.html").exists()
            assert not (path.parent / "_assets").exists(), "the Chinese decks share the English decks' assets"


@pytest.mark.parametrize(("language", "ch"), DECKS)
def test_every_slide_fits_reads_well_and_needs_no_network(walked, language, ch):
    deck = walked[language, ch.number]
    assert deck["slides"], "no slides"
    assert not [u for u in deck["requests"] if not _local(u)], "requests that leave the machine"
    assert not [u for u in deck["failed"] if _local(u) and not u.startswith("about:")], deck["failed"][:3]
    assert deck["total"] == len(deck["slides"]) and deck["last"], "the deck does not navigate to its end"
    assert not deck["errors"], deck["errors"][:3]
    assert deck["fonts"], "the deck's font (Source Sans Pro, copied next to the deck) did not load"
    if language != "en":
        assert deck["cjk"], "no Noto Sans CJK SC/TC for the Chinese text: apt-get install fonts-noto-cjk"
    nb = synced(ch, language)
    if slides._has_math(nb):
        assert deck["math"] and not deck["mathErrors"], "MathJax (local copy) did not typeset the formulas"
    banned = banned_text(nb)
    problems = []
    for s in deck["slides"]:
        where = f"slide {s['where']} ({s['title']!r})"
        if s["bottom"] > s["height"] + 1 or s["top"] < -1:
            problems.append(f"{where}: content spans {s['top']:.0f}..{s['bottom']:.0f} px of {s['height']:.0f}")
        problems += [f"{where}: {c}" for c in s["cut"][:2]]
        if s["minFont"] < MIN_TEXT_PX:
            problems.append(f"{where}: text at {s['minFont']:.1f} px: {s['small']!r}")
        text = _squash(s["text"])
        problems += [f"{where}: shows {b!r}" for b in banned if b in text]
    assert not problems, f"{language} {ch.number}: {len(problems)} problems:\n" + "\n".join(problems[:40])
