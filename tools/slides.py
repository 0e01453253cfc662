"""Lecture slides: which cells go on which slide, and self-contained reveal.js decks.

    python -m tools.course slides [NN ...]   # write slides/NN_topic.slides.html for these chapters (default: all)

Two parts, one size model:

* :func:`slide_types` decides every cell's ``slideshow`` metadata; ``tools/course.py`` stores it in the
  notebooks on ``sync``, where both the exported decks and RISE (live presenting in JupyterLab) read it.
  The setup cell, hidden reference solutions, bookkeeping cells (their source is collapsed), "Going further"
  blocks and the navigation cells are skipped, cells that only
  ``assert`` become speaker notes, ``## `` starts a slide and ``### `` a sub-slide, code cells after the
  first item of a sub-slide appear as fragments, and a sub-slide that would grow taller than the slide
  continues on the next sub-slide. Heights are estimated from the cells themselves (lines of code, lines
  of output after wrapping, paragraphs, list items and table rows of markdown, image sizes), with the
  same font sizes and widths as the deck's stylesheet below, so a chapter that changes later is split
  anew by the next ``sync``.
* :func:`export` writes the decks. reveal.js (with its fonts) comes from the ``sphinx-revealjs`` package
  and MathJax 2 from ``jupyter-server-mathjax``, both pinned in requirements.txt; they are copied next to
  the decks, so a deck opened from disk or from a USB stick loads nothing from the network. A cell
  taller than a whole slide (a long program, a long introduction) is cut into consecutive sub-slides, and
  a widget shows its picture or readable text, or else a line saying that it is live in JupyterLab,
  never a repr such as ``VBox(children=...``. The notebooks themselves are not changed.

The decks are laid out for 1280x720 (16:9) and scale to any screen; tests/test_slides.py opens every deck
in headless Chromium at that size and checks that each slide fits, that no line is cut off, that no text
is smaller than 13 px and that no request leaves the machine.
"""

from __future__ import annotations

import ast
import base64
import copy
import functools
import math
import os
import re
import shutil
import struct
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "slides"

# --- the deck's geometry and type sizes (CSS px in the 1280x720 slide; reveal.js scales the whole) ------
WIDTH, HEIGHT = 1280, 720
MARGIN = 0.04  # reveal.js keeps this fraction of the screen free around the slide: scale = 0.96 at 1280x720
PAD_X, PAD_Y = 24, 16  # padding inside every slide
TEXT_PX, CODE_PX, OUT_PX = 22, 16, 16  # markdown, code, output (effective size = px * 0.96 >= 15 px)
H1_PX, H2_PX, H3_PX = 40, 34, 28
TEXT_LH, CODE_LH = 1.4, 1.3  # line heights
CELL_GAP, BLOCK_GAP, LIST_INDENT = 8, 8, 32  # space below a cell and below a paragraph; list indent
#: Average advance of a character, in em: Source Sans Pro (0.42 measured over the chapters' prose; the
#: fallback fonts are wider) and the widest common monospace fonts (DejaVu Sans Mono, Menlo: 0.602);
#: rounded up so that estimates err on the tall side.
TEXT_EM, CODE_EM = 0.46, 0.61
CONTENT_W = WIDTH - 2 * PAD_X
MIN_SCRIPT_PX = 15  # smallest sub- or superscript in a formula (x 0.96 on screen: above 13 px)
IMAGE_MAX_H = 400  # images are scaled down to at most this height (never scrolled)
#: Height a sub-slide may fill. The rest of the 720 px is the padding and the estimate's safety margin.
BUDGET = HEIGHT - 2 * PAD_Y - 40

OUTPUT_ONLY = "slides-output-only"  # tag of a piece of a cut code cell that shows outputs only (decks only)
WIDGET_NOTE = "(interactive widget: live when this chapter is presented with RISE in JupyterLab)"
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_REPR = re.compile(r"^\s*[A-Za-z_]*\((children|value|description|layout)=")

#: The deck's whole stylesheet (besides reveal.css and the pygments colours): JupyterLab's 240 kB of CSS is
#: not loaded, so every size that matters is set here, next to the numbers the height estimate uses.
CSS = f"""
html, body, main {{ height: 100%; margin: 0; background: #fff; }}
.reveal {{ font-family: 'Source Sans Pro', Helvetica, Arial, sans-serif; font-size: {TEXT_PX}px; color: #222; }}
.reveal .slides {{ text-align: left; }}
.reveal .slides section {{ padding: {PAD_Y}px {PAD_X}px; box-sizing: border-box; line-height: {TEXT_LH}; }}
.reveal .slides section.stack {{ padding: 0; }}
.reveal .slide-number {{ font-size: 16px; background: transparent; color: #555; left: 8px; right: auto; }}
.reveal .controls {{ color: #2a76dd; }}
.reveal .progress {{ color: #2a76dd; }}
.reveal a {{ color: #2a76dd; text-decoration: none; }}
.reveal a.anchor-link, .reveal .jp-Collapser {{ display: none; }}
.reveal .jp-Cell {{ margin: 0 0 {CELL_GAP}px 0; }}
.reveal p, .reveal ul, .reveal ol, .reveal table, .reveal blockquote {{ margin: 0 0 {BLOCK_GAP}px 0; }}
.reveal ul, .reveal ol {{ padding-left: {LIST_INDENT}px; }}
.reveal li {{ margin: 0 0 2px 0; }}
.reveal h1, .reveal h2, .reveal h3, .reveal h4 {{ font-weight: 600; line-height: 1.2; margin: 0 0 10px 0;
  text-transform: none; color: #1a1a1a; }}
.reveal h1 {{ font-size: {H1_PX}px; }}
.reveal h2 {{ font-size: {H2_PX}px; }}
.reveal h3, .reveal h4 {{ font-size: {H3_PX}px; }}
.reveal code, .reveal pre {{ font-family: 'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace; }}
.reveal code {{ font-size: 0.9em; background: #f0f0f0; border-radius: 3px; padding: 0 3px; }}
.reveal pre {{ font-size: {CODE_PX}px; line-height: {CODE_LH}; white-space: pre-wrap; overflow-wrap: anywhere;
  overflow: visible; margin: 0; padding: 0; box-shadow: none; width: auto; }}
.reveal pre code {{ font-size: inherit; background: transparent; padding: 0; display: inline; max-height: none;
  overflow: visible; white-space: inherit; }}
.reveal .jp-RenderedMarkdown pre {{ background: #f5f5f5; border: 1px solid #e2e2e2; border-radius: 4px;
  padding: 5px 8px; margin: 0 0 {BLOCK_GAP}px 0; }}
.reveal .jp-InputArea-editor {{ background: #f5f5f5; border: 1px solid #e2e2e2; border-radius: 4px;
  padding: 4px 8px; }}
.reveal .highlight {{ background: transparent; margin: 0; }}
.reveal .jp-OutputArea-output pre {{ font-size: {OUT_PX}px; padding: 2px 8px; }}
.reveal [data-mime-type="application/vnd.jupyter.stderr"] {{ background: #fff0f0; }}
.reveal .jp-RenderedImage {{ padding: 0 8px; }}
.reveal .jp-RenderedImage img, .reveal .jp-RenderedMarkdown img {{ max-width: 100%; max-height: {IMAGE_MAX_H}px;
  width: auto; height: auto; margin: 0; border: 0; box-shadow: none; }}
.reveal table {{ border-collapse: collapse; font-size: {TEXT_PX - 2}px; }}
.reveal th, .reveal td {{ border-bottom: 1px solid #d0d0d0; padding: 2px 8px; text-align: left;
  vertical-align: top; }}
.reveal th {{ font-weight: 600; }}
.reveal blockquote {{ border-left: 4px solid #ddd; padding-left: 12px; color: #444; }}
.reveal .MathJax_Display {{ margin: 4px 0 !important; }}
.typesetting .reveal .slides {{ width: {WIDTH}px; }}
.typesetting .reveal .slides section.typeset {{ display: block !important; }}
.reveal .ansi-red-fg {{ color: #c0392b; }} .reveal .ansi-green-fg {{ color: #1e8449; }}
.reveal .ansi-yellow-fg {{ color: #9a7d0a; }} .reveal .ansi-blue-fg {{ color: #2471a3; }}
.reveal .ansi-magenta-fg {{ color: #884ea0; }} .reveal .ansi-cyan-fg {{ color: #148f77; }}
.reveal .ansi-bold {{ font-weight: 600; }}
"""

#: The Chinese decks' fonts: Noto Sans CJK (Debian's ``fonts-noto-cjk``, installed with the environment) for the
#: characters Source Sans Pro and DejaVu Sans Mono lack, in the script's own variant.
CJK_FONT = {"zh-Hans": "Noto Sans CJK SC", "zh-Hant": "Noto Sans CJK TC"}


def language_css(language: str) -> str:
    if language not in CJK_FONT:
        return ""
    font = CJK_FONT[language]
    return (f".reveal {{ font-family: 'Source Sans Pro', '{font}', sans-serif; }}\n"
            f".reveal code, .reveal pre {{ font-family: 'DejaVu Sans Mono', '{font}', monospace; }}\n")

# The deck: reveal.js from the local copy next to it, no jQuery, require.js, mermaid or widget manager.
TEMPLATE = r"""
{%- extends 'base.html.j2' -%}
{%- block header -%}
<!DOCTYPE html>
<html lang="{{ resources.course.lang }}">
<head>
<meta charset="utf-8" />
<meta name="viewport" content="width=device-width, initial-scale=1.0" />
<title>{{ resources.course.title | escape_html_keep_quotes }}</title>
<link rel="stylesheet" href="{{ resources.course.assets }}/reveal/dist/reveal.css">
<link rel="stylesheet" href="{{ resources.course.assets }}/reveal/dist/theme/fonts/source-sans-pro/source-sans-pro.css">
{% for css in resources.inlining.css -%}
<style type="text/css">
{{ css }}
</style>
{% endfor %}
<style type="text/css">
{{ resources.course.css }}
</style>
{%- if resources.course.math %}
<script type="text/x-mathjax-config">
MathJax.Hub.Config({
  tex2jax: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
            processEscapes: true, processEnvironments: true},
  "HTML-CSS": {availableFonts: [], preferredFont: null, webFont: "STIX-Web", imageFont: null,
               linebreaks: {automatic: false}, EqnChunk: 10000, EqnChunkFactor: 1, EqnChunkDelay: 0},
  "fast-preview": {disabled: true},
  messageStyle: "none",
  showMathMenu: false,
  showProcessingMessages: false,
  skipStartupTypeset: true,
  menuSettings: {assistiveMML: false}
});
MathJax.Hub.Register.StartupHook("mml Jax Ready", function () {
  // superscripts of superscripts stay readable from the back row (TeX would shrink them to half size)
  MathJax.ElementJax.mml.math.prototype.defaults.scriptminsize = "{{ resources.course.min_script }}";
  MathJax.ElementJax.mml.mstyle.prototype.defaults.scriptminsize = "{{ resources.course.min_script }}";
});
</script>
<script src="{{ resources.course.assets }}/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"></script>
{%- endif %}
</head>
{%- endblock header -%}

{#- the lab template runs pygments' (escaped) output through bleach as well: slow, and nothing to clean -#}
{% block input %}
<div class="jp-CodeMirrorEditor jp-Editor jp-InputArea-editor" data-type="inline">
<div class="cm-editor cm-s-jupyter">
{{ cell.source | highlight_code(metadata=cell.metadata) }}
</div>
</div>
{%- endblock input %}

{%- block body_header -%}
<body class="jp-Notebook" data-jp-theme-light="true" data-jp-theme-name="JupyterLab Light">
<main>
<div class="reveal">
<div class="slides">
{%- endblock body_header -%}

{%- block body_footer -%}
</div>
</div>
</main>
<script src="{{ resources.course.assets }}/reveal/dist/reveal.js"></script>
<script src="{{ resources.course.assets }}/reveal/plugin/notes/notes.js"></script>
<script>
function startDeck() {
  Reveal.initialize(Object.assign({{ resources.course.reveal | json_dumps }}, {plugins: [RevealNotes]}));
}
if (window.MathJax) {
  // Typeset every formula once, while the slides that have formulas are displayed at the deck's width
  // (MathJax measures what it draws, and cannot in a hidden slide), then start the deck.
  document.querySelectorAll(".reveal .slides section").forEach(function (section) {
    if (!section.querySelector("section") && /\$|\\\(|\\\[|\\begin\{/.test(section.textContent)) {
      section.classList.add("typeset");
      section.parentElement.classList.add("typeset");
    }
  });
  document.documentElement.classList.add("typesetting");
  MathJax.Hub.Queue(["Typeset", MathJax.Hub], function () {
    document.documentElement.classList.remove("typesetting");
    startDeck();
  });
} else {
  startDeck();
}
</script>
</body>
{%- endblock body_footer -%}

{%- block footer -%}
</html>
{%- endblock footer -%}
"""

#: RISE's settings for every chapter (notebook metadata ``rise``, written by ``sync``): reveal.js's white
#: theme, whose fonts ship with RISE (its default theme fetches Google fonts), as in the exported decks,
#: and scrolling for a slide that grows during the lecture (a cell re-run with a longer output).
RISE_SETTINGS = {"theme": "white", "scroll": True}

REVEAL_CONFIG = {
    "width": WIDTH,
    "height": HEIGHT,
    "margin": MARGIN,
    "center": False,
    "hash": True,
    "controls": True,
    "progress": True,
    "slideNumber": "c/t",
    "transition": "slide",
}


# --- which cells appear, and where -------------------------------------------------------------------------

def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def is_solution(cell) -> bool:
    """A reference solution: a code cell collapsed with ``"jupyter": {"source_hidden": true}``."""
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def _code(source: str) -> str:
    return "\n".join(line for line in source.split("\n") if not line.lstrip().startswith(("%", "!")))


def only_asserts(cell) -> bool:
    """A code cell whose statements are all ``assert``: its claim is tested, not shown."""
    return cell["cell_type"] == "code" and _only_asserts(cell["source"])


@functools.lru_cache(maxsize=4096)
def _only_asserts(source: str) -> bool:  # cached: every edition has the English code
    try:
        body = ast.parse(_code(source)).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(stmt, ast.Assert) for stmt in body)


def hidden_kind(cell) -> str | None:
    """``"skip"``, ``"notes"`` or ``None`` (the cell is shown)."""
    tags = _tags(cell)
    if tags & {"nav-header", "nav-footer", "setup"} or is_solution(cell):
        return "skip"
    if cell["cell_type"] == "code" and not cell["source"].strip():
        return "skip"
    if cell["cell_type"] == "raw":
        return "skip"
    if only_asserts(cell) and not cell.get("outputs"):
        return "notes"
    return None


#: A "Going further" block: a markdown cell starting with this heading and the cells after it, up to the next
#: ``## `` heading. JupyterLab shows it folded (``tools/course.py`` marks the heading collapsed).
GOING_FURTHER = "### Going further:"
FOLDED = "jp-MarkdownHeadingCollapsed"  # the mark sync gives that heading (the Chinese editions keep it)


def going_further(cells: Sequence) -> set[int]:
    """The indices of the cells in "Going further" blocks: from a markdown cell that starts with
    ``### Going further:`` (or, in a Chinese edition, the heading it translates, which keeps its folded mark)
    up to the next ``## `` heading. The slides show the core path only."""
    inside, found = False, set()
    for i, cell in enumerate(cells):
        first = cell["source"].lstrip().split("\n", 1)[0] if cell["cell_type"] == "markdown" else ""
        if first.startswith("## "):
            inside = False
        if first.startswith(GOING_FURTHER) or (first.startswith("### ") and cell.get("metadata", {}).get(FOLDED)):
            inside = True
        if inside:
            found.add(i)
    return found


def heading_kind(cell) -> str | None:
    if cell["cell_type"] != "markdown":
        return None
    first = cell["source"].lstrip().split("\n", 1)[0]
    if first.startswith("## "):
        return "slide"
    if first.startswith("### "):
        return "subslide"
    return None


# --- how tall a cell is on a slide ------------------------------------------------------------------------

def _wide(text: str) -> int:
    """How many characters of ``text`` are wide (Chinese characters and full-width punctuation): a monospace font
    gives them two columns, a proportional one about 1 em."""
    return 0 if text.isascii() else sum(unicodedata.east_asian_width(c) in "WF" for c in text)


def _columns(line: str) -> int:
    line = line.expandtabs(4)
    return len(line) + _wide(line)


def _wrapped(lines: Iterable[str], per_line: int) -> int:
    return sum(max(1, math.ceil(_columns(line) / per_line)) for line in lines)


CODE_CPL = int((CONTENT_W - 16) / (CODE_PX * CODE_EM))  # characters per line of code and output
OUT_CPL = int((CONTENT_W - 16) / (OUT_PX * CODE_EM))
CODE_LINE = CODE_PX * CODE_LH
OUT_LINE = OUT_PX * CODE_LH


def _png_size(b64: str) -> tuple[int, int] | None:
    try:
        head = base64.b64decode(b64[:64])
    except ValueError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def slide_outputs(cell) -> list[dict]:
    """The outputs as a deck shows them: a widget's view (dead outside JupyterLab) gives way to its
    picture or readable text, and a bare widget repr such as ``VBox(children=...`` to :data:`WIDGET_NOTE`."""
    out = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if _WIDGET_VIEW in data:
            output = copy.deepcopy(output)
            data = output["data"]
            del data[_WIDGET_VIEW]
            text = data.get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if not set(data) - {"text/plain"} and (not text or _WIDGET_REPR.match(text)):
                output = nbformat.v4.new_output("stream", name="stdout", text=WIDGET_NOTE)
        out.append(output)
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _text_of(output: dict) -> str | None:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    elif output.get("output_type") == "error":
        text = _ANSI.sub("", "\n".join(output.get("traceback", [])))
    else:
        data = output.get("data", {})
        if any(k.startswith("image/") for k in data):
            return None
        text = data.get("text/plain", "")
    return "".join(text) if isinstance(text, list) else text


def image_height(png: str | list | None, width: float) -> float:
    """How tall the stylesheet draws an image: at its size in pixels (a ``width``/``height`` in the
    output's metadata is overridden), scaled down to ``width`` and to :data:`IMAGE_MAX_H`. An image whose
    size is unknown (not a PNG, a file, a URL) counts as 640x480."""
    size = _png_size(png if isinstance(png, str) else "".join(png)) if png else None
    w, h = size or (640, 480)
    return h * min(1.0, width / w, IMAGE_MAX_H / h)


def output_height(output: dict) -> float:
    data = output.get("data", {})
    if "image/png" in data:
        return image_height(data["image/png"], CONTENT_W - 16) + 12
    if any(k.startswith("image/") for k in data):
        return IMAGE_MAX_H + 8
    text = _text_of(output) or ""
    lines = text.rstrip("\n").split("\n")
    return _wrapped(lines, OUT_CPL) * OUT_LINE + 4


def code_height(source: str) -> float:
    return _wrapped(source.rstrip("\n").split("\n"), CODE_CPL) * CODE_LINE + 8 + 2 + 4


_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPH = re.compile(r"(\*\*|__|\*|_(?=\w)|(?<=\w)_)")
_MATH = re.compile(r"\$([^$]+)\$")
#: TeX that draws taller than a line of text: fractions, roots, big operators, scripts on scripts
_TALL_TEX = re.compile(r"\\(frac|tfrac|dfrac|sqrt|sum|prod|int|underbrace|overbrace|begin)\b|[_^]\{[^}]*[_^]")


def _tex_width(tex: str) -> int:
    """Roughly how many characters' width a formula takes (its TeX source is much longer)."""
    tex = re.sub(r"\\(?:text|mathrm|operatorname|mathbb|mathcal|mathbf)\s*\{([^}]*)\}", r"\1", tex)
    tex = re.sub(r"\\[a-zA-Z]+", "x", tex)  # a command is about one glyph
    return len(re.sub(r"[{}^_\\]|\\[,;!]", "", tex).replace(" ", ""))


def _visible(text: str) -> tuple[float, int]:
    """(characters of prose, characters of inline code) that a markdown line shows."""
    text = _LINK.sub(r"\1", text)
    code = sum(len(m) for m in re.findall(r"`([^`]*)`", text))
    prose = re.sub(r"`[^`]*`", "", text)
    formulas = sum(_tex_width(m) for m in _MATH.findall(prose))
    prose = _EMPH.sub("", _MATH.sub("", prose))
    return len(prose) + _wide(prose) * (1 / TEXT_EM - 1) + 1.3 * formulas, code


def _prose_lines(text: str, width: float, px: float) -> int:
    prose, code = _visible(text)
    # inline code is set in monospace at 0.9 em, with a little padding per span
    chars = prose + code * (0.9 * CODE_EM / TEXT_EM) + text.count("`") * 0.4
    per_line = width / (px * TEXT_EM) - 4  # a line breaks before a word that does not fit: ~4 characters lost
    return max(1, math.ceil(chars / per_line))


def _line_px(text: str, px: float) -> float:
    """Height of one line of prose: taller where inline math stacks (a fraction, a root, a sum)."""
    tall = any(_TALL_TEX.search(m) for m in _MATH.findall(text))
    return px * TEXT_LH * (1.35 if tall else 1.0)


def markdown_blocks(source: str) -> list[str]:
    """Paragraphs, lists, tables, headings and fenced code of a markdown cell: blank lines part them, and
    a fence is a block of its own (it may follow a paragraph's line directly, as in CommonMark)."""
    blocks: list[str] = []
    current: list[str] = []
    fence = False

    def flush():
        if current:
            blocks.append("\n".join(current))
            current.clear()

    for line in source.strip().split("\n"):
        marker = line.lstrip().startswith("```")
        if marker and not fence:
            flush()
        if line.strip() or fence:
            current.append(line)
        else:
            flush()
        if marker:
            fence = not fence
            if not fence:
                flush()
    flush()
    return blocks


_ITEM = re.compile(r"^\s*([-*+]|\d+[.)]) ")
_IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^\s)>]*)[^)]*\)")


def _attached_png(src: str, attachments: dict | None):
    """The PNG of ``![...](attachment:name)``, or None (a file or a URL: its size is unknown here)."""
    name = src.removeprefix("attachment:")
    return (attachments or {}).get(name, {}).get("image/png") if name != src else None


def block_height(block: str, attachments: dict | None = None) -> float:
    lines = block.split("\n")
    first = lines[0].lstrip()
    if first.startswith("```"):
        body = [line for line in lines[1:] if not line.lstrip().startswith("```")]
        return _wrapped(body, CODE_CPL) * CODE_LINE + 12 + BLOCK_GAP
    if first.startswith("$$"):
        rows = max(1, block.count("\\\\") + 1)
        return rows * TEXT_PX * TEXT_LH * (2.0 if _TALL_TEX.search(block) else 1.3) + 12 + BLOCK_GAP
    sources = _IMAGE.findall(block)
    if sources:  # images, scaled like output images, each counted as a line of its own; then the words
        rest = _IMAGE.sub("", block)
        words = block_height(rest) if rest.strip() else BLOCK_GAP
        return sum(image_height(_attached_png(src, attachments), CONTENT_W) + 8 for src in sources) + words
    if first.startswith("|"):
        rule = re.compile(r"^\s*\|[-:| ]+\|\s*$")
        height = BLOCK_GAP
        for row in (line for line in lines if line.strip().startswith("|") and not rule.match(line)):
            cells = row.strip().strip("|").split("|")
            # the columns share the width; the cell with the most lines decides the row's height
            width = CONTENT_W / max(1, len(cells)) - 16
            worst = max(_prose_lines(c.strip(), width, TEXT_PX - 2) for c in cells)
            height += worst * _line_px(row, TEXT_PX - 2) + 5
        return height
    height = 0.0
    heading = re.match(r"^(#{1,6}) ", first)
    if heading:
        px = {1: H1_PX, 2: H2_PX}.get(len(heading.group(1)), H3_PX)
        height += _prose_lines(first[len(heading.group(0)):], CONTENT_W, px * 1.1) * px * 1.2 + 10
        lines = lines[1:]
        if not lines:
            return height
    # a paragraph, or a list whose items start with "- ", "* " or "1. " (continuation lines are joined)
    items: list[str] = []
    for line in lines:
        if _ITEM.match(line) or not items:
            items.append(line)
        else:
            items[-1] += " " + line.strip()
    listed = any(_ITEM.match(item) for item in items)
    width = CONTENT_W - (LIST_INDENT if listed else 0)
    for item in items:
        height += _prose_lines(item.strip(), width, TEXT_PX) * _line_px(item, TEXT_PX) + 2 * listed
    return height + BLOCK_GAP


def markdown_height(source: str, attachments: dict | None = None) -> float:
    return sum(block_height(block, attachments) for block in markdown_blocks(source))


def cell_height(cell) -> float:
    """Estimated height of a cell on a slide, in CSS px of the 1280x720 slide."""
    if cell["cell_type"] == "markdown":
        return markdown_height(cell["source"], cell.get("attachments")) + CELL_GAP
    if cell["cell_type"] != "code":
        return 0.0
    source = 0.0 if OUTPUT_ONLY in _tags(cell) else code_height(cell["source"])
    return source + sum(output_height(o) for o in slide_outputs(cell)) + CELL_GAP


def slide_types(cells: Sequence) -> list[str]:
    """The ``slideshow.slide_type`` of every cell, from the cells alone.

    The first cell (the title) opens the deck; a ``## `` heading opens a slide and ``### `` a sub-slide.
    Hidden cells are ``skip`` or ``notes`` (:func:`hidden_kind`). Shown cells fill the current sub-slide
    while the estimated height (:func:`cell_height`) fits :data:`BUDGET`; the cell that would overflow it
    opens a new sub-slide instead, and so does a markdown cell whose code cell right after it would not fit
    with it (a lead-in stays with its code). A code cell that is not the first cell of its sub-slide is a
    fragment: the teacher shows it with the next key press.
    """
    kinds: list[str] = []
    further = going_further(cells)
    shown = [i for i, cell in enumerate(cells) if hidden_kind(cell) is None and i not in further]
    heights = {i: cell_height(cells[i]) for i in shown}
    used = 0.0
    for i, cell in enumerate(cells):
        hidden = "skip" if i in further else hidden_kind(cell)
        if hidden:
            kinds.append(hidden)
            continue
        k = shown.index(i)
        nxt = shown[k + 1] if k + 1 < len(shown) else None
        head = "slide" if not kinds or all(x in {"skip", "notes"} for x in kinds) else heading_kind(cell)
        if head:
            kinds.append(head)
            used = heights[i]
            continue
        need = heights[i]
        if cell["cell_type"] == "markdown" and nxt is not None and cells[nxt]["cell_type"] == "code" \
                and heading_kind(cells[nxt]) is None:
            need += heights[nxt]
        if used > 0 and used + min(need, BUDGET) > BUDGET:
            kinds.append("subslide")
            used = heights[i]
        else:
            kinds.append("fragment" if cell["cell_type"] == "code" and used > 0 else "-")
            used += heights[i]
    return kinds


# --- the decks ---------------------------------------------------------------------------------------------

def _package_dir(name: str) -> Path:
    """A package's folder, found without importing it (importing sphinx_revealjs imports Sphinx)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name} is not installed: python -m pip install -r requirements.txt")
    return Path(next(iter(spec.submodule_search_locations)))


def asset_sources() -> dict[str, Path]:
    """Where the environment keeps reveal.js (sphinx-revealjs) and MathJax 2 (jupyter-server-mathjax)."""
    return {
        "reveal": _package_dir("sphinx_revealjs") / "_static" / "revealjs",
        "mathjax": _package_dir("jupyter_server_mathjax") / "static",
    }


_REVEAL_FILES = ("LICENSE", "dist/reveal.css", "dist/reveal.js", "dist/theme/fonts/source-sans-pro",
                 "plugin/notes/notes.js")


def copy_assets(assets: Path) -> Path:
    """Copy reveal.js and MathJax next to the decks, into ``assets`` (what a deck loads, nothing else)."""
    src = asset_sources()
    for rel in _REVEAL_FILES:
        source, target = src["reveal"] / rel, assets / "reveal" / rel
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    shutil.copytree(src["mathjax"], assets / "mathjax", dirs_exist_ok=True)  # its menus in the browser's language
    return assets


def _exporter():
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter
    from nbconvert.exporters.templateexporter import TemplateExporter
    from nbconvert.filters.highlight import Highlight2HTML
    from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
    from traitlets.config import Config

    class DeckExporter(SlidesExporter):
        """nbconvert's slides, minus the BeautifulSoup pass of ``HTMLExporter.from_notebook_node`` over the
        finished page (alt texts and tab stops for notebook pages): it costs more than the rendering."""

        def from_notebook_node(self, nb, resources=None, **kw):
            lang = nb.metadata.get("language_info", {})
            lexer = lang.get("pygments_lexer", lang.get("name"))
            self.register_filter("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
            resources = self._init_resources(resources)
            self.register_filter("filter_data_type", WidgetsDataTypeFilter(
                notebook_metadata=self._nb_metadata, parent=self, resources=resources))
            html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
            return re.sub(r"<img (?![^>]*\balt=)", '<img alt="figure" ', html), resources

    return DeckExporter(
        extra_loaders=[DictLoader({"course_slides.html.j2": TEMPLATE})],
        template_file="course_slides.html.j2",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        config=Config({"CSSHTMLHeaderPreprocessor": {"style": "default"},
                       "TagRemovePreprocessor": {"enabled": True, "remove_input_tags": {OUTPUT_ONLY}}}),
    )


def _piece(cell, k, kind: str, **fields):
    part = copy.deepcopy(cell)
    part["id"] = f"{cell.get('id', 'cell')}-slide{k}"
    part["metadata"]["slideshow"] = {"slide_type": kind}
    part.update(fields)
    return part


def _cut_output(output: dict, lines: list[str]) -> dict:
    """A piece of a long text output: a traceback stays an error (its colours kept), a stream keeps its
    name (stderr keeps its background), any other text is printed."""
    if output.get("output_type") == "error":
        return nbformat.v4.new_output("error", ename=output.get("ename", ""), evalue=output.get("evalue", ""),
                                      traceback=lines)
    return nbformat.v4.new_output("stream", name=output.get("name", "stdout"), text="\n".join(lines) + "\n")


def _output_pieces(outputs: list) -> list[list]:
    """Outputs in groups that each fit a slide; a long text output or traceback is cut between its lines."""
    room = BUDGET - CELL_GAP
    parts = []
    for output in outputs:
        text = _text_of(output)
        if text is None or output_height(output) <= room:
            parts.append(output)
            continue
        if output.get("output_type") == "error":  # cut with its colours, measured without them
            text = "\n".join(output.get("traceback", []))
        chunk: list[str] = []
        for line in text.rstrip("\n").split("\n"):
            if chunk and _wrapped((_ANSI.sub("", x) for x in [*chunk, line]), OUT_CPL) * OUT_LINE + 4 > room:
                parts.append(_cut_output(output, chunk))
                chunk = []
            chunk.append(line)
        parts.append(_cut_output(output, chunk))
    groups: list[list] = [[]]
    for output in parts:
        if groups[-1] and sum(map(output_height, [*groups[-1], output])) > room:
            groups.append([])
        groups[-1].append(output)
    return groups


def _split_code(cell, first_kind: str) -> list:
    """A code cell taller than a slide, cut into pieces that fit: the source at blank lines where it can,
    the outputs with the last piece where they fit, else on pieces of their own."""
    lines = cell["source"].rstrip("\n").split("\n")
    pieces: list[list[str]] = [[]]
    for line in lines:
        trial = pieces[-1] + [line]
        if pieces[-1] and code_height("\n".join(trial)) + CELL_GAP > BUDGET:
            # prefer to cut after the last blank line of the piece, if that leaves it at least half full
            piece = pieces[-1]
            blank = max((k for k, text in enumerate(piece) if not text.strip()), default=-1)
            if blank > len(piece) // 2:
                pieces[-1], carry = piece[: blank + 1], piece[blank + 1 :]
                pieces.append(carry + [line])
            else:
                pieces.append([line])
        else:
            pieces[-1] = trial
    cells = [_piece(cell, k, first_kind if k == 0 else "subslide", source="\n".join(piece).strip("\n"), outputs=[])
             for k, piece in enumerate(pieces)]
    groups = _output_pieces(slide_outputs(cell)) if cell.get("outputs") else []
    if groups and code_height(cells[-1]["source"]) + sum(map(output_height, groups[0])) + CELL_GAP <= BUDGET:
        cells[-1]["outputs"] = groups.pop(0)
    for group in groups:
        part = _piece(cell, len(cells), "subslide", source="", outputs=group)
        part["metadata"]["tags"] = [*part["metadata"].get("tags", []), OUTPUT_ONLY]
        cells.append(part)
    return cells


def _split_block(block: str, attachments: dict | None) -> list[str]:
    """A table cut between rows (each part keeps the header), fenced code between lines (each part is
    fenced), a list between items; else the block."""
    lines = block.split("\n")
    head: list[str] = []
    tail: list[str] = []
    if lines[0].lstrip().startswith("|") and len(lines) > 3:
        head, rows = lines[:2], lines[2:]
    elif lines[0].lstrip().startswith("```"):
        head, rows = lines[:1], lines[1:]
        tail = [rows.pop() if rows and rows[-1].lstrip().startswith("```") else "```"]
    elif _ITEM.match(lines[0]):
        rows = []
        for line in lines:
            if _ITEM.match(line) or not rows:
                rows.append(line)
            else:
                rows[-1] += "\n" + line
    else:
        return [block]
    parts: list[list[str]] = [[]]
    for row in rows:
        if parts[-1] and block_height("\n".join([*head, *parts[-1], row, *tail]), attachments) + CELL_GAP > BUDGET:
            parts.append([])
        parts[-1].append(row)
    return ["\n".join([*head, *part, *tail]) for part in parts]


#: ``\text{fan\_in}``: JupyterLab's MathJax 3 reads the escape inside ``\text``, MathJax 2 prints the backslash
_TEXT_ESCAPES = re.compile(r"\\text\{[^{}]*\\_[^{}]*\}")


def _split_markdown(cell, first_kind: str) -> list:
    """A markdown cell taller than a slide (a section's long introduction), cut between its blocks."""
    pieces: list[list[str]] = [[]]
    attachments = cell.get("attachments")
    for part in (part for block in markdown_blocks(cell["source"]) for part in _split_block(block, attachments)):
        if pieces[-1] and markdown_height("\n\n".join([*pieces[-1], part]), attachments) + CELL_GAP > BUDGET:
            pieces.append([])
        pieces[-1].append(part)
    return [_piece(cell, k, first_kind if k == 0 else "subslide", source="\n\n".join(piece))
            for k, piece in enumerate(pieces)]


def deck_notebook(nb):
    """The notebook as the deck shows it: widget views resolved, cells taller than a slide cut into
    sub-slides, hidden cells out."""
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.cells:
        kind = cell.get("metadata", {}).get("slideshow", {}).get("slide_type", "-")
        if kind == "skip":
            continue
        if cell["cell_type"] == "code":
            cell["outputs"] = slide_outputs(cell)
        else:
            cell["source"] = _TEXT_ESCAPES.sub(lambda m: m.group(0).replace("\\_", "_"), cell["source"])
        if kind != "notes" and cell_height(cell) > BUDGET:
            cells.extend((_split_code if cell["cell_type"] == "code" else _split_markdown)(cell, kind))
            continue
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    return nb


#: code spans and fences (MathJax leaves ``<code>`` and ``<pre>`` alone), and what MathJax typesets:
#: ``$...$``, ``$$...$$`` (across lines too), ``\(``, ``\[`` and ``\begin{...}`` environments
_CODE_SPANS = re.compile(r"(`+)[\s\S]*?\1")
_TEX = re.compile(r"\$\$[\s\S]+?\$\$|\$[^$\n]+\$|\\\(|\\\[|\\begin\{")


def _has_math(nb) -> bool:
    """Whether the deck needs MathJax: TeX in a markdown cell or in a text/latex or text/markdown output."""
    for cell in nb.cells:
        texts = [cell["source"]] if cell["cell_type"] == "markdown" else []
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            texts += [data.get("text/latex", ""), data.get("text/markdown", "")]
        if any(_TEX.search(_CODE_SPANS.sub("", "".join(text))) for text in texts):
            return True
    return False


def export_notebook(nb, title: str, exporter=None, assets: str = "_assets", language: str = "en") -> str:
    """One deck's HTML (the notebook's slide metadata as it is), in ``language`` (``en``, ``zh-Hans``, ...)."""
    exporter = exporter or _exporter()
    deck = deck_notebook(nb)
    resources = {
        "course": {"title": title, "assets": assets, "css": CSS + language_css(language), "reveal": REVEAL_CONFIG,
                   "math": _has_math(deck), "min_script": f"{MIN_SCRIPT_PX}px", "lang": language},
    }
    html, _ = exporter.from_notebook_node(deck, resources=resources)
    return html


def export(decks: Sequence[tuple[str, str, nbformat.NotebookNode]], out: Path = OUT,
           index: dict[str, str] | None = None, language: str = "en", assets: Path | None = None) -> list[Path]:
    """Write one self-contained deck per ``(name, title, notebook)`` into ``out`` as ``name.slides.html``, and an
    ``index.html`` listing every deck in ``out``, titled from ``index`` (deck file name -> title). ``language`` is
    the decks' language. reveal.js and MathJax go to ``assets`` (default: ``out/_assets``; the Chinese decks share
    the English decks' copy). The notebooks' slide metadata is used as it is (``tools.course`` brings it up to
    date first). One exporter renders them all: its templates compile once (the rendering is pure Python, so
    threads would not make it faster).
    """
    out.mkdir(parents=True, exist_ok=True)
    assets = copy_assets(assets or out / "_assets")
    exporter = _exporter()
    paths = []
    for name, title, nb in decks:
        path = out / f"{name}.slides.html"
        html = export_notebook(nb, title, exporter=exporter, assets=os.path.relpath(assets, out), language=language)
        path.write_text(html, encoding="utf-8")
        paths.append(path)
    _write_index(out, {**{p.name: t for p, (_, t, _) in zip(paths, decks, strict=True)}, **(index or {})}, language)
    return paths


#: The index page's words, per language.
INDEX_WORDS = {
    "en": ("Lecture slides", "Arrow keys move between slides, <kbd>S</kbd> opens the speaker view, <kbd>F</kbd> "
                             "full screen, <kbd>Esc</kbd> the overview."),
    "zh-Hans": ("课堂幻灯片", "方向键翻页，<kbd>S</kbd> 打开演讲者视图，<kbd>F</kbd> 全屏，<kbd>Esc</kbd> 总览。"),
    "zh-Hant": ("課堂投影片", "方向鍵翻頁，<kbd>S</kbd> 開啟演講者檢視，<kbd>F</kbd> 全螢幕，<kbd>Esc</kbd> 總覽。"),
}


def _write_index(out: Path, titles: dict[str, str], language: str = "en") -> None:
    from html import escape

    heading, keys = INDEX_WORDS[language]
    decks = sorted(out.glob("*.slides.html"))
    rows = "\n".join(f'<li><a href="{p.name}">{escape(titles.get(p.name, p.stem))}</a></li>' for p in decks)
    (out / "index.html").write_text(
        f"<!DOCTYPE html>\n<html lang=\"{language}\"><head><meta charset=\"utf-8\"><title>{heading}</title>"
        "<style>body{font:20px/1.5 sans-serif;margin:40px}</style></head>\n"
        f"<body><h1>{heading}</h1>\n<ul>\n{rows}\n</ul>\n<p>{keys}</p></body></html>\n",
        encoding="utf-8",
    )
