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
