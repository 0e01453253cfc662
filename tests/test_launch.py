"""The three ways in (local, Binder, Colab), tested as far as this machine allows (the lecture slides:
tests/test_slides.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
import pytest

from tools import course

ROOT = Path(__file__).resolve().parents[1]
BROWSER_TEST_ONLY = {"playwright", "greenlet"}  # not needed on Binder
#: what builds the web edition (python -m tools.course site), not needed on Binder either
SITE_ONLY = {"sphinx", "myst-nb", "myst-parser", "sphinx-book-theme", "pydata-sphinx-theme", "sphinx-copybutton",
             "jieba"}


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        assert version, f"{path.name}: {line!r} is not pinned exactly"
        out[name.lower()] = version
    return out


def test_requirements_pin_everything_and_install_the_project():
    text = (ROOT / "requirements.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", text, re.M), "torch must be pinned exactly"
    assert re.search(r"^-e \.$", text, re.M), "requirements.txt installs this project (editable)"
    assert pins(ROOT / "requirements.txt")  # every line is an exact pin (asserted inside)


def test_binder_pins_follow_requirements():
    local, binder = pins(ROOT / "requirements.txt"), pins(ROOT / "binder" / "requirements.txt")
    assert binder.pop("torch") == local.pop("torch") + "+cpu", "Binder gets the CPU build of the same torch"
    for name in BROWSER_TEST_ONLY | SITE_ONLY:
        local.pop(name)
    assert binder == local
    text = (ROOT / "binder" / "requirements.txt").read_text()
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    # Binder's Python is one the project supports (pyproject's requires-python), not "the one running here".
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert re.fullmatch(r"python-3\.(1[0-3])", runtime), runtime
    assert 'requires-python = ">=3.10"' in (ROOT / "pyproject.toml").read_text()
    post = (ROOT / "binder" / "postBuild").read_text()
    assert post.startswith("#!/bin/bash") and "set -euo pipefail" in post and "--editable ." in post
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)


def test_every_badge_points_at_the_one_repository():
    for ch in course.CHAPTERS:
        header = nbformat.read(ch.path, as_version=4).cells[1]
        assert header.metadata["tags"] == ["nav-header"]
        links = re.findall(r"\]\((https://(?:colab|mybinder)[^)]*)\)", header.source)
        urls = [u for u in links if not u.endswith(".svg")]  # the badge images themselves
        assert len(urls) == 2 and all(course.REPO in u and ch.file in u for u in urls)


def test_colab_setup_does_nothing_off_colab():
    ns: dict = {}
    code = course.SETUP.split("import torch")[0].replace("%pip", "raise RuntimeError #")
    exec(compile(code, "<setup>", "exec"), ns)  # would raise if the guard let it through


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a checkout")
def test_colab_install_command_installs_utils_into_a_fresh_environment(tmp_path):
    """The setup cell's Colab command, pointed at a local clone, installs `utils`, and the setup runs with it.

    Colab already has torch, Jupyter and the rest, so the new environment must see *this* environment's
    packages, whatever kind this one is (a virtual environment, one made with --system-site-packages, or a
    plain interpreter). ``venv``'s own ``system_site_packages`` would give it the *base* interpreter's packages
    instead (possibly no torch and an old setuptools), so the new environment gets a ``.pth`` file listing the
    site-packages folders this interpreter imports from. The helpers are built with the setuptools found there
    (no download during the test), and nothing but them may be installed.
    """
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # the commit under test, as the branch the command names (a checkout on another branch has no local main)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "-B", "main"], check=True)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    new_site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    Path(new_site, "running-environment.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")

    # The very command of the setup cell, with the repository URL swapped for the clone.
    command = next(line for line in course.SETUP.splitlines() if "%pip install" in line).strip()
    spec = re.search(r'"([^"]+)"', command).group(1)
    spec = re.sub(r"^git\+https://github\.com/[^@]+@", f"git+file://{clone}@", spec)
    assert spec.startswith("git+file://"), spec
    pip = [str(py), "-m", "pip", "--disable-pip-version-check"]  # as %pip runs the kernel's own pip
    # --no-warn-conflicts: after installing, pip reads the requirements of every package it can see (a third of
    # its time here) to check what it installed and the packages that depend on it. The helpers require nothing
    # (asserted below) and nothing requires them, so the check could never warn; what is installed is the same.
    subprocess.run([*pip, "install", "--quiet", "--no-build-isolation", "--no-warn-conflicts", spec], check=True)
    installed = sorted(p.name.split("-")[0] for p in env_dir.rglob("*.dist-info"))
    assert installed == ["torch_building_blocks"], installed  # the helpers, and nothing else
    assert "dependencies = []" in (ROOT / "pyproject.toml").read_text(), "Colab's torch must never be replaced"

    # The chapters' generated setup cell (without the Colab install) runs there and finds every helper,
    # the freshly installed ones.
    setup = course.SETUP.replace("%pip install", "pass  #")
    code = setup + (
        "\nimport utils, utils.checks, utils.checkpoint, utils.timing, utils.exercises.ch01"
        "\nprint(utils.__file__)\nprint('ok', device)"
    )
    result = subprocess.run([str(py), "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    *_, where, last = result.stdout.strip().splitlines()
    assert where.startswith(str(env_dir)), where
    assert last == "ok cpu", result.stdout


def test_ci_runs_the_readmes_commands_in_a_fresh_virtual_environment():
    """CI does what the README tells a newcomer: a new venv, the setup command in it, the web edition's build
    (which the browser tests read), then the test command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup, test = re.findall(r"```bash\n(.+?)\n```", readme[readme.index("## Two commands"):])[:2]
    site = re.findall(r"```bash\n(.+?)\n```", readme[readme.index("## Read it on the web"):])[0]
    site = site.split("#", 1)[0].strip()
    assert site == "python -m tools.course site", site
    steps = setup.split(" && ")
    assert steps[0] == "python -m venv .venv" and steps[1] == ". .venv/bin/activate", setup
    assert steps[2] == "python -m pip install -r requirements.txt" and "jupyter lab" in steps[3], setup
    assert test == "python -m pytest", test
    ci_text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # the one addition, for the workflow's latest-tools job alone: the newest test tools replace their pins
    upgrade = 'if [ -n "${UPGRADE:-}" ]; then\n  python -m pip install --quiet --upgrade $UPGRADE\nfi\n'
    assert ci_text.count(upgrade) == 1, ci_text
    assert ci_text.index("-r requirements.txt") < ci_text.index(upgrade) < ci_text.index(f"\n{test}")
    ci = [line.strip() for line in ci_text.replace(upgrade, "").splitlines()]
    commands = [line for line in ci if line and not line.startswith(("#", "if", "apt", "DEBIAN", "fi", "set ", "cd ",
                                                                      "export", "fonts="))]
    assert commands == ["rm -rf .venv", "python3 -m venv .venv", ". .venv/bin/activate",
                        "python -m pip install --quiet -r requirements.txt", site, test], commands


def test_a_weekly_job_runs_the_suite_on_the_newest_test_tools():
    """A release of pytest, xdist, nbval or pytest-timeout that changes how the suite runs (pytest 9.2 dropped the
    marks that kept a notebook on one xdist worker) turns CI red the week it ships, not when the pins are raised."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "tests.yml").read_text(encoding="utf-8"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert "push" in triggers and any(len(s["cron"].split()) == 5 for s in triggers["schedule"]), triggers
    job = workflow["jobs"]["latest-tools"]
    assert "pull_request" in job["if"] and "schedule" not in job["if"], job["if"]  # on push and on the schedule
    assert set(job["env"]["UPGRADE"].split()) == {"pytest", "pytest-xdist", "nbval", "pytest-timeout"}
    assert {"run": "bash .ci/run"} in job["steps"]  # the README's commands, then the upgrade (.ci/run)
    for name in ("cpu", "gpu", "gpu-2"):  # the pinned jobs would repeat last push's run
        assert "github.event_name != 'schedule'" in workflow["jobs"][name]["if"], name
