"""The JupyterLab of the browser tests (tests/test_browser.py): one server on loopback, serving an excerpt of
a chapter from a temporary folder, with its kernel started through the test run's kernel server.

Why a module of its own. Starting JupyterLab costs about 2.5 s of CPU, and the test run has a moment when
one core has nothing to do: its first seconds, while the kernel server imports torch and no test can
start. So ``conftest.py`` starts this server then, on the run's main process (:func:`start`), and hands
its address to the workers through ``$BROWSER_TEST_LAB`` (:func:`from_environment`); the test's fixture
starts one itself where the run has none (its arguments did not name tests/test_browser.py by path).

Only the standard library, nbformat and the other tools: the main process imports this before any test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat

from tools import course, kernel_server

ENV = "BROWSER_TEST_LAB"
#: The browsers the tests drive, in order of preference: Chromium's headless shell (the same engine without
#: windows, lighter to start and run), Chromium, Chrome.
CHROMIUMS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
CHAPTER = course.BY_NUMBER["02"]  # the init explorer (a slider and dropdowns redrawing a figure), and formulas

#: ``jupyter lab``, minus two costs of its start that the tests never use. jsonschema's optional IRI checker:
#: Jupyter's event schemas use no IRI format, and its grammar (rfc3987-syntax) takes over a second to build
#: (conftest.py skips it in the test workers too). And the npm registry, which JupyterLab asks yarn for (a
#: Node.js process) as it is imported: only installing an extension needs it.
LAB = """
import sys
sys.modules["rfc3987_syntax"] = None
import jupyterlab.commands
jupyterlab.commands._yarn_config = lambda logger: {"yarn config": {}, "npm config": {}}
from jupyterlab.labapp import main
sys.exit(main())
"""


@dataclass
class Lab:
    base: str
    token: str
    root: Path  # the folder it serves, with its configuration and log
    pid: int

    @property
    def nb(self) -> nbformat.NotebookNode:
        """The notebook it serves, as written (JupyterLab may have saved outputs into the file since)."""
        return excerpt()

    def url(self, ch: course.Chapter) -> str:
        return f"{self.base}/lab/tree/{ch.file}?token={self.token}"

    def ready(self, timeout: float = 60) -> None:
        """Return once the server answers; raise with the end of its log if it does not within ``timeout``
        seconds, or has exited."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=1)
                return
            except OSError:
                if time.monotonic() > deadline or not _alive(self.pid):
                    log = (self.root / "lab.log").read_text(encoding="utf-8", errors="replace")[-2000:]
                    raise RuntimeError("JupyterLab did not start: " + log) from None
                time.sleep(0.1)


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


def start(root: Path) -> tuple[subprocess.Popen, Lab]:
    """Start JupyterLab serving the chapter's excerpt from ``root`` (an empty folder: autosave must not touch
    the checkout); return at once, before it answers (:meth:`Lab.ready` waits)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / CHAPTER.file).write_text(nbformat.writes(excerpt()), encoding="utf-8")
    settings = root / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    _write_json(settings / "notification.jupyterlab-settings", {"fetchNews": "false", "checkForUpdates": False})
    # No build check: the page would ask the server whether JupyterLab needs rebuilding, and the server would
    # ask yarn (a Node.js process) for its configuration to find out. Nothing here is ever rebuilt.
    labconfig = root / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    _write_json(labconfig / "page_config.json", {"buildCheck": False, "buildAvailable": False})
    port, token = _free_port(), secrets.token_hex(16)
    # The notebook's kernel, "python3", starts through the test run's kernel server like nbval's kernels (a
    # fork that has imported torch already; conftest.py), or the usual way where the run has none.
    kernel = root / "share" / "kernels" / "python3"
    kernel.mkdir(parents=True)
    _write_json(kernel / "kernel.json", {"argv": kernel_server.launcher_argv(), "display_name": "Python 3 (ipykernel)",
                                         "language": "python", "metadata": {"debugger": True}})
    # Every Jupyter folder in ``root``: the notebook's trust signatures (data), the secrets and connection files
    # (runtime) go there, not into the user's ~/.local/share/jupyter.
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / "config"), JUPYTER_DATA_DIR=str(root / "data"),
               JUPYTER_RUNTIME_DIR=str(root / "rt"),
               JUPYTER_PATH=os.pathsep.join(filter(None, [str(root / "share"), os.environ.get("JUPYTER_PATH")])),
               JUPYTERLAB_WORKSPACES_DIR=str(root / "ws"), JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
               CUDA_VISIBLE_DEVICES="")
    env.pop(ENV, None)
    with open(root / "lab.log", "w", encoding="utf-8") as log:
        server = subprocess.Popen(
            [sys.executable, "-c", LAB, "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
             f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
             "--LabApp.extension_manager=readonly", "--LabApp.news_url=None",
             "--ServerApp.jpserver_extensions={'jupyter_lsp': False, 'jupyter_server_terminals': False}",
             # its kernels' sockets are files next to their connection files, in root: TCP ports, chosen and
             # bound a moment apart, can be taken by another process in between (conftest.py says more). On
             # Linux, where the temporary folder's path is short enough for a socket's.
             *(["--KernelManager.transport=ipc"] if sys.platform.startswith("linux") else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    return server, Lab(f"http://127.0.0.1:{port}", token, root, server.pid)


def stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def to_environment(lab: Lab) -> str:
    return json.dumps({"base": lab.base, "token": lab.token, "root": str(lab.root), "pid": lab.pid})


def from_environment(environ=os.environ) -> Lab | None:
    """The JupyterLab this test run started for its workers (``$BROWSER_TEST_LAB``), if any."""
    raw = environ.get(ENV)
    if not raw:
        return None
    fields = json.loads(raw)
    return Lab(fields["base"], fields["token"], Path(fields["root"]), int(fields["pid"]))


def chromium() -> str | None:
    """The system's Chromium (the first of ``CHROMIUMS`` on the PATH), or None."""
    return next(filter(None, map(shutil.which, CHROMIUMS)), None)


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (on Linux, an exited child not yet reaped counts as gone)."""
    if Path("/proc/self/stat").exists():
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return True
