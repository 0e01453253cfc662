"""ruff over the helpers, the tests, the tools and the notebooks' code (ruff reads .ipynb natively)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache",
         "utils", "tests", "tools", "notebooks", "conftest.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_helper_module_says_which_chapters_use_it():
    import ast
    import re

    silent = []
    for path in sorted((ROOT / "utils").rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if not re.search(r"\b[Cc]hapters?\b|every chapter", doc):
            silent.append(str(path.relative_to(ROOT)))
    assert silent == [], f"say in the module docstring which chapters use: {silent}"
