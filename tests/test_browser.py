"""A learner's and a teacher's view: JupyterLab in headless Chromium runs a chapter, moving a widget redraws
its figure, and RISE presents a chapter as a live slideshow.

Both tests share one JupyterLab server (tools/lab.py: the test run starts it early, see conftest.py) and
one Chromium, the ``browser`` fixture of conftest.py, which tests/test_slides.py uses too (both modules are
one xdist group, so all of them run on the same worker). Needs Chromium (Debian/Ubuntu: `apt-get install
chromium-headless-shell`, which it prefers: the same engine without windows, lighter to start and run; else
`chromium` or Chrome) and the `playwright` package from requirements.txt (it drives the system's Chromium;
it downloads no browser). Without them the tests are skipped with that message, unless REQUIRE_BROWSER=1
(set by CI), which turns the skip into a failure. tests/test_slides.py uses the same Chromium for the
exported decks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tools import lab as lab_server

pytestmark = pytest.mark.xdist_group("browser")

CHAPTER = lab_server.CHAPTER  # the init explorer (a slider and dropdowns redrawing a figure), and formulas
# The explorer's figure: an ipywidgets Image (or an image inside an Output widget).
IMAGE = "img.widget-image, .widget-output img"
FIGURE = ".jp-CodeCell img.widget-image, .jp-CodeCell .widget-output img"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
]
#: Images in the notebooks' generated navigation header: content, fetched by JupyterLab's own view of
#: the notebook wherever it is opened (a lecture without network shows their alt text instead).
BADGES = ("colab.research.google.com/assets/colab-badge.svg", "mybinder.org/badge_logo.svg")


#: Where RISE's slideshow stands (RISE bundles reveal.js, so this reads the DOM): the current slide's
#: index, the number of slides and the text of the current (sub-)slide.
PRESENT = """() => {
  const top = document.querySelector('.reveal .slides > section.present');
  if (top === null) return null;
  const slides = [...top.parentElement.children].filter(e => e.tagName === 'SECTION');
  const leaf = top.querySelector(':scope > section.present') || top;
  return {h: slides.indexOf(top), slides: slides.length, text: leaf.innerText};
}"""


def chromium_or_skip() -> str:
    """The system's Chromium, with playwright to drive it; else skip (or fail under REQUIRE_BROWSER=1)."""
    path = lab_server.chromium()
    problem = None
    if path is None:
        problem = "Chromium not found (Debian/Ubuntu: apt-get install chromium-headless-shell)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "playwright not installed (pip install -r requirements.txt)"
    if problem:
        if os.environ.get("REQUIRE_BROWSER") == "1":
            pytest.fail(f"browser test required but {problem}")
        pytest.skip(problem)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab on loopback for the module, serving the chapter's excerpt (tools/lab.py): the one the
    test run started at its beginning for the workers (conftest.py), else one of its own. It starts while
    Chromium does; :func:`notebook` waits until it answers."""
    early = lab_server.from_environment()
    if early is not None:
        yield early  # the test run stops it
        return
    server, lab = lab_server.start(tmp_path_factory.mktemp("lab"))
    try:
        yield lab
    finally:
        lab_server.stop(server)


def test_the_labs_address_reaches_the_workers_whole():
    lab = lab_server.Lab("http://127.0.0.1:8123", "0123abcd", Path("/tmp/some lab"), 4321)
    assert lab_server.from_environment({lab_server.ENV: lab_server.to_environment(lab)}) == lab
    assert lab_server.from_environment({}) is None


def test_a_lab_that_stopped_is_reported_at_once_with_its_log(tmp_path):
    (tmp_path / "lab.log").write_text("OSError: [Errno 98] Address already in use")
    gone = subprocess.run([sys.executable, "-S", "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    lab = lab_server.Lab("http://127.0.0.1:9", "t", tmp_path, int(gone.stdout))  # port 9: nothing answers
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start: OSError: .Errno 98. Address already in use"):
        lab.ready(timeout=60)
    assert time.monotonic() - started < 30, "it waited for the deadline, not for the process"


@pytest.fixture(scope="module")
def notebook(lab, browser):
    """The chapter open in JupyterLab, in one page that both tests use (loading JupyterLab costs seconds)."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    lab.ready()
    page.goto(lab.url(CHAPTER))  # the notebook names its kernel, so JupyterLab starts it without asking
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    yield page
    page.close()


def test_widget_redraws_in_jupyterlab(lab, notebook, tmp_path):
    page = notebook
    # the kernel started and connected ("No Kernel | Initializing" until then: Run All would do nothing)
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"ipykernel\) \| Idle$")).wait_for(timeout=60_000)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    # The live explorer: a code cell whose output holds widget controls and a drawn figure. A cell that
    # fails first (Run All stops there) fails the test with its traceback, not with a timeout.
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    page.locator(f"{FIGURE}, .jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").first.wait_for(
        timeout=90_000)
    assert errors.count() == 0, errors.first.inner_text()[-2000:]
    figure = page.locator(FIGURE).first
    cell = page.locator(".jp-CodeCell", has=page.locator(IMAGE)).first
    before = figure.get_attribute("src")

    slider = cell.locator(".noUi-handle")
    if slider.count():
        slider.first.focus()
        page.keyboard.press("ArrowRight")
    else:
        select = cell.locator("select").first
        options = select.locator("option").all_inner_texts()
        current = select.input_value()
        select.select_option(next(o for o in options if o != current))
    page.wait_for_function(
        """([selector, before]) => {
            const img = document.querySelector(selector);
            return img !== null && img.src !== before;
        }""",
        arg=[FIGURE, before],
        timeout=60_000,
    )
    page.screenshot(path=str(tmp_path / "after.png"))
    assert errors.count() == 0, errors.first.inner_text()
    assert (tmp_path / "after.png").stat().st_size > 10_000
    # the notebook's trust signature went to the lab's own data folder, not to the user's (~/.local/share/jupyter)
    assert (lab.root / "data" / "nbsignatures.db").is_file()
    # and its kernel talks to JupyterLab through Unix sockets (tools/lab.py), on Linux
    transports = {json.loads(f.read_text())["transport"] for f in (lab.root / "rt").glob("kernel-*.json")}
    assert transports == ({"ipc"} if sys.platform.startswith("linux") else {"tcp"}), transports


def test_rise_presents_the_chapter_as_a_live_slideshow(lab, notebook, tmp_path):
    """The README's way in: select the first cell, press RISE's toolbar button (or Alt+R); RISE shows the
    generated slides (skipping what the metadata skips), typesets the formulas, and fetches nothing."""
    page = notebook
    requests: list[str] = []

    def log(request):
        requests.append(request.url)

    page.on("request", log)
    try:
        page.locator(".jp-Notebook:visible .jp-Cell").first.click()  # RISE starts at the selected cell
        page.locator('.jp-NotebookPanel:visible [data-command="RISE:preview"]').first.click()
        frame = page.wait_for_selector(f'iframe[src*="/rise/{CHAPTER.file}"]', timeout=60_000).content_frame()
        frame.wait_for_function(f"({PRESENT})() !== null", timeout=60_000)
        first = frame.evaluate(PRESENT)
        assert f"{CHAPTER.number} · {CHAPTER.title}".lower() in first["text"].lower(), first["text"][:200]
        kinds = [c.metadata["slideshow"]["slide_type"] for c in lab.nb.cells]
        assert first["slides"] == kinds.count("slide")
        frame.locator(".reveal").first.press("ArrowRight")
        frame.wait_for_function(f"({PRESENT})().h === 1", timeout=10_000)
        assert "what you will learn" in frame.evaluate(PRESENT)["text"].lower()
        # RISE hides the cells the metadata skips (navigation, the setup, the reference solution), and only them
        skipped = frame.evaluate("""() => [...document.querySelectorAll('.reveal .slides .jp-Cell')]
            .filter(cell => getComputedStyle(cell).display === 'none').map(cell => cell.textContent)""")
        assert len(skipped) == kinds.count("skip")
        assert any("google.colab" in text for text in skipped), "the setup cell is on a slide"
        frame.wait_for_selector("mjx-container", state="attached", timeout=30_000)  # formulas, typeset offline
        page.screenshot(path=str(tmp_path / "rise.png"))
    finally:
        page.remove_listener("request", log)
    outside = [u for u in requests if urlparse(u).hostname not in {"127.0.0.1", "localhost"}
               and urlparse(u).scheme in {"http", "https"} and not u.endswith(BADGES)]
    assert not outside, f"the live slideshow fetched from the network: {outside[:5]}"
