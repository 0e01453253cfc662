"""A learner's and a teacher's view: JupyterLab in headless Chromium runs a chapter, moving a widget redraws
its figure, and RISE presents a chapter as a live slideshow.

Both tests share one JupyterLab server (the ``lab`` fixture below) and one Chromium, the ``browser`` fixture of
conftest.py (this module is one work unit, ``SHARED_WORKER`` in conftest.py, so both run on the same worker).
Needs Chromium (Debian/Ubuntu: `apt-get install chromium-headless-shell`,
which it prefers: the same engine without windows, lighter to start and run; else `chromium` or Chrome) and the
`playwright` package from requirements.txt (it drives the system's Chromium; it downloads no browser). Without them
the tests are skipped with that message, unless ``--require-browser`` (set by CI) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

import nbformat
import pytest

from tools import course

CHAPTER = course.BY_NUMBER["02"]  # the init explorer (a slider and dropdowns redrawing a figure), and formulas
# The explorer's figure: an ipywidgets Image (or an image inside an Output widget).
IMAGE = "img.widget-image, .widget-output img"
FIGURE = ".jp-CodeCell img.widget-image, .jp-CodeCell .widget-output img"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
]
#: The browsers the tests drive, in order of preference: Chromium's headless shell (the same engine without
#: windows, lighter to start and run), Chromium, Chrome.
CHROMIUMS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
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


def chromium_or_skip(required: bool = False) -> str:
    """The system's Chromium, with playwright to drive it; else skip (or fail, where ``required``: the option
    ``--require-browser``)."""
    path = next(filter(None, map(shutil.which, CHROMIUMS)), None)
    problem = None
    if path is None:
        problem = "Chromium not found (Debian/Ubuntu: apt-get install chromium-headless-shell)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "playwright not installed (pip install -r requirements.txt)"
    if problem:
        if required:
            pytest.fail(f"browser test required but {problem}")
        pytest.skip(problem)
    return path


def excerpt() -> nbformat.NotebookNode:
    """The chapter's opening (title, navigation, what you will learn, the setup) and its explorer section,
    with the generated parts and slide metadata as ``sync`` makes them: what a learner and a teacher see of
    the chapter, at a fraction of the cost of running and rendering all of it."""
    nb = course.synced(CHAPTER, nbformat.read(CHAPTER.path, as_version=4))
    explorer = next(i for i, c in enumerate(nb.cells) if "build_ui(" in c.source)
    footer = [c for c in nb.cells if "nav-footer" in c.metadata.get("tags", [])]
    nb.cells = nb.cells[:4] + nb.cells[explorer - 1:explorer + 1] + footer
    assert "setup" in nb.cells[3].metadata["tags"] and nb.cells[4].source.startswith("## ")
    course._set_slideshow(nb, nb.cells)
    return nb


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``jupyter lab`` on loopback, serving the chapter's excerpt from a temporary folder (autosave must not
    touch the checkout), with every Jupyter folder (settings, trust signatures, connection files) in it, not
    in the user's. Yields ``(base URL, token, folder)`` once it answers."""
    root = tmp_path_factory.mktemp("lab")
    (root / CHAPTER.file).write_text(nbformat.writes(excerpt()), encoding="utf-8")
    settings = root / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}), encoding="utf-8")
    # No build check: the page would ask the server whether JupyterLab needs rebuilding, and the server would
    # ask yarn (a Node.js process) to find out. Nothing here is ever rebuilt.
    (root / "config" / "labconfig").mkdir(parents=True)
    (root / "config" / "labconfig" / "page_config.json").write_text(
        json.dumps({"buildCheck": False, "buildAvailable": False}), encoding="utf-8")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTER_RUNTIME_DIR=str(root / "rt"), JUPYTERLAB_WORKSPACES_DIR=str(root / "ws"),
               JUPYTERLAB_SETTINGS_DIR=str(root / "settings"), CUDA_VISIBLE_DEVICES="")
    with open(root / "lab.log", "w", encoding="utf-8") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
             "--LabApp.extension_manager=readonly", "--LabApp.news_url=None",
             # its kernels talk through Unix sockets, as nbval's do (conftest.py says why); on Linux, where the
             # temporary folder's path is short enough for a socket's
             *(["--KernelManager.transport=ipc"] if sys.platform.startswith("linux") else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    log = (root / "lab.log").read_text(encoding="utf-8", errors="replace")
                    pytest.fail("JupyterLab did not start: " + log[-2000:])
                time.sleep(0.2)
        yield base, token, root
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def notebook(lab, browser):
    """The chapter open in JupyterLab, in one page that both tests use (loading JupyterLab costs seconds)."""
    base, token, _ = lab
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    # the notebook names its kernel, so JupyterLab starts it without asking
    page.goto(f"{base}/lab/tree/{CHAPTER.file}?token={token}")
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
    root = lab[2]
    assert (root / "data" / "nbsignatures.db").is_file()
    # and its kernel talks to JupyterLab through Unix sockets, on Linux
    transports = {json.loads(f.read_text())["transport"] for f in (root / "rt").glob("kernel-*.json")}
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
        kinds = [c.metadata["slideshow"]["slide_type"] for c in excerpt().cells]
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
