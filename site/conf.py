"""Sphinx configuration of the course's web edition; ``python -m tools.course site`` runs Sphinx with it, once per
edition (``COURSE_SITE_LANGUAGE``: en, zh-Hans or zh-Hant), on the sources tools/site.py prepares.

MyST-NB renders the notebooks with their committed outputs (never executed), in the book theme. Everything a page
loads comes with the site: the theme's files, MathJax 2 (copied next to the decks from jupyter-server-mathjax,
shared by the three editions), and no web font.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from docutils import nodes
from sphinx.search.zh import SearchChinese

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.site import EDITION_NAMES, FOLD, SPHINX_LANGUAGE, WORDS  # noqa: E402

EDITION = os.environ.get("COURSE_SITE_LANGUAGE", "en")
words = WORDS[EDITION]

project = html_title = words["title"]
language = SPHINX_LANGUAGE[EDITION]
root_doc = "index"
exclude_patterns = ["_notebooks", "**/.ipynb_checkpoints"]
smartquotes = False  # quotes as the notebook has them (and as code prints them)
extensions = ["myst_nb", "sphinx_copybutton"]

# --- the notebooks: as committed ---------------------------------------------------------------------------
nb_execution_mode = "off"
nb_ipywidgets_js = {}  # no widget state is committed; the widget's picture is an ordinary output
nb_code_prompt_show = words["show"]
nb_code_prompt_hide = words["hide"]
myst_enable_extensions = ["dollarmath", "attrs_block", "attrs_inline"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # a chapter's headings start at its title (#), then ## and ###

# --- the pages ------------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
templates_path = ["_templates"]
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_js_files = ["course.js"]
html_copy_source = False
html_show_sourcelink = False
html_show_sphinx = False
html_last_updated_fmt = None
html_context = {"default_mode": "light", "course_edition": EDITION, "course_editions": list(EDITION_NAMES.items()),
                "course_languages_label": words["languages"]}
html_theme_options = {
    "home_page_in_toc": True,
    "use_download_button": False,  # the chapter's own line of links has the notebook itself
    "use_fullscreen_button": False,
    "show_toc_level": 2,
    "navbar_persistent": [],  # the sidebar has the search field
    "article_header_end": ["language-switch.html", "article-header-buttons.html"],
    "footer_content_items": [],  # (the theme's default names an author and a copyright holder)
}
copybutton_selector = "div.cell_input div.highlight pre, div.highlight-python div.highlight pre"
copybutton_exclude = ".linenos, .gp"

# --- math: MathJax 2, local (Sphinx's default is a CDN) -------------------------------------------------------------
# Relative to _static/: the copy at _site/slides/_assets/mathjax, next to the decks, which the editions share.
mathjax_path = "../../slides/_assets/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
mathjax2_config = {
    # MyST marks each page's top section tex2jax_ignore; the formulas it parsed ($...$) have the class "math"
    "tex2jax": {"processClass": "math"},
    # STIX-Web, the web font jupyter-server-mathjax ships. The blank font MathJax shows while it loads is declared
    # at about:blank, which Chromium refuses with a console error: a local() that is never there fails quietly.
    "HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None,
                 "styles": {"@font-face": {"font-family": "MathJax_Blank", "src": "local('MathJax_Blank')"}}},
    "fast-preview": {"disabled": True},  # its quick preview is drawn in the TeX fonts, which are not shipped
    "menuSettings": {"assistiveMML": False},  # the hidden MathML would ask for the TeX fonts too
    "messageStyle": "none",
}


# --- Going further: a closed <details>, its heading the summary --------------------------------------------------

class folded(nodes.General, nodes.Element):
    """A Going-further block (tools/site.py labels its heading): shown closed, as JupyterLab shows it."""


class folded_title(nodes.General, nodes.TextElement):
    """The block's heading, which opens and closes it."""


def _visit_folded(self, node):
    self.body.append('<details class="going-further">\n')


def _depart_folded(self, node):
    self.body.append("</details>\n")


def _visit_title(self, node):
    self.body.append('<summary><h3 class="going-further-title">')


def _depart_title(self, node):
    self.body.append(f'<a class="headerlink" href="#{node["refid"]}" title="#">#</a></h3></summary>\n')


def _fold(app, doctree, docname):
    for section in list(doctree.findall(nodes.section)):
        if any(i.startswith(FOLD) for i in section["ids"]):
            title, body = section[0], section.children[1:]
            block = folded("", folded_title("", "", *title.children, refid=section["ids"][-1]), *body)
            section.children = []
            section += block


class _ChineseSearch(SearchChinese):
    """Sphinx 9.0's Chinese search, whose JavaScript names its stemmer after the language (``ChineseStemmer``, which
    does not exist: every page then raises a ReferenceError and the search finds nothing; sphinx-doc/sphinx#14229).
    Chinese words are not stemmed; Latin words are, by the English stemmer, on both sides."""

    language_name = "English"


def _mathjax2_only(app):
    """MyST writes its MathJax settings into the configuration of MathJax 3 or 4; this site loads MathJax 2."""
    app.config.mathjax3_config = app.config.mathjax4_config = None


def _search_words(app, config):
    """Chinese: jieba splits the text for the search index, keeping the course's terms whole (tools/site.py)."""
    words_file = Path(app.srcdir) / "_search_words.txt"
    if words_file.is_file():
        import jieba

        jieba.setLogLevel(logging.WARNING)  # (it reports loading its dictionary on stderr)
        config.html_search_options = {"dict": str(words_file)}


def setup(app):
    app.add_node(folded, html=(_visit_folded, _depart_folded))
    app.add_node(folded_title, html=(_visit_title, _depart_title))
    app.add_search_language(_ChineseSearch)
    app.connect("config-inited", _search_words)
    app.connect("builder-inited", _mathjax2_only, priority=900)  # after MyST's own handler
    app.connect("doctree-resolved", _fold)
