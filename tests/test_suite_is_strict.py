"""Proof that the notebook suite compares outputs: edit one committed output and it fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "notebooks" / "01_layers_and_blocks.ipynb"


def first_cells(nb, n_checked: int):
    """The notebook cut after its first ``n_checked`` compared code cells (keeps the run short)."""
    kept, checked = [], 0
    for cell in nb.cells:
        kept.append(cell)
        if cell.cell_type == "code" and "nbval-ignore-output" not in cell.metadata.get("tags", []):
            checked += 1
            if checked == n_checked:
                break
    nb.cells = kept
    return nb


def test_editing_one_committed_output_fails_the_suite(tmp_path):
    # The untouched notebook passes: the main suite runs it. Here one copy differs in one output.
    nb = first_cells(nbformat.read(SOURCE, as_version=4), n_checked=2)
    target = [c for c in nb.cells if c.cell_type == "code"][1]
    out = next(o for o in target.outputs if o.output_type == "stream")
    assert "(2, 10)" in out.text
    out.text = out.text.replace("(2, 10)", "(2, 11)")
    nbformat.write(nb, tmp_path / "edited.ipynb")

    # The project's own configuration (strict nbval, its sanitizer), in one process.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
         "-n", "0", "-q", "-rf", "--nbval-sanitize-with", str(ROOT / "tests" / "sanitize.cfg"),
         "edited.ipynb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    assert "FAILED edited.ipynb::Cell 1" in report, report
    assert "1 failed, 2 passed" in report, report  # the edited cell alone: setup and the other cell pass
