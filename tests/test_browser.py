"""A learner's view: JupyterLab in headless Chromium runs a chapter, and moving a widget redraws its figure.

Needs Chromium (Debian/Ubuntu: `apt-get install chromium`) and the `playwright` package from
requirements.txt (it drives the system's Chromium; it downloads no browser). Without them the test is
skipped with that message, unless REQUIRE_BROWSER=1 (set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tools import course

CHAPTER = course.BY_NUMBER["02"]  # the init explorer: a slider and dropdowns redrawing a figure
# The explorer's figure: an ipywidgets Image (or an image inside an Output widget).
IMAGE = "img.widget-image, .widget-output img"
FIGURE = ".jp-CodeCell img.widget-image, .jp-CodeCell .widget-output img"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
]


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    problem = None
    if path is None:
        problem = "Chromium not found (Debian/Ubuntu: apt-get install chromium)"
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on loopback, serving a copy of the chapter (autosave must not touch the checkout)."""
    shutil.copy(CHAPTER.path, tmp_path / CHAPTER.file)
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"), CUDA_VISIBLE_DEVICES="")
    log = open(tmp_path / "lab.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
         "--LabApp.extension_manager=readonly", "--LabApp.news_url=None"],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    log_text = (tmp_path / "lab.log").read_text()[-2000:]
                    raise RuntimeError("JupyterLab did not start: " + log_text) from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/lab/tree/{CHAPTER.file}?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_widget_redraws_in_jupyterlab(lab, tmp_path):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        try:
            page.goto(lab)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
            try:  # JupyterLab may ask which kernel to start
                page.get_by_role("button", name="Select", exact=True).click(timeout=3_000)
            except Exception:
                pass
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

            # The live explorer: a code cell whose output holds widget controls and a drawn figure.
            figure = page.locator(FIGURE).first
            figure.wait_for(timeout=90_000)
            cell = page.locator(".jp-CodeCell", has=page.locator(IMAGE)).first
            before = figure.get_attribute("src")
            page.screenshot(path=str(tmp_path / "before.png"))

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
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
            assert errors.count() == 0, errors.first.inner_text()
        finally:
            browser.close()
    assert (tmp_path / "after.png").stat().st_size > 10_000
