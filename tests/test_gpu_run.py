"""tools.gpu_run, the record of what the GPU cells print on a real GPU: what it takes from an executed notebook (the
run itself is nbclient's, on a GPU machine)."""

import nbformat
import pytest
import torch

from tools import gpu_run


def executed(*cells):
    nb = nbformat.v4.new_notebook()
    for source, tags, outputs in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["tags"] = tags
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        nb.cells.append(cell)
    return nb


def test_a_gpu_cell_is_recorded_as_the_text_it_printed_or_its_error():
    nb = executed(
        ("print(1)", [], [{"output_type": "stream", "name": "stdout", "text": "on the CPU\n"}]),
        ("timed", ["requires-cuda", "nbval-ignore-output"], [
            {"output_type": "stream", "name": "stdout", "text": "fp32: 51.2 TFLOP/s\n"},
            {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
            {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}, "metadata": {}},
            {"output_type": "execute_result", "data": {"text/plain": "42"}, "metadata": {}, "execution_count": 2}]),
        ("two", ["requires-multi-gpu"], [
            {"output_type": "error", "ename": "AssertionError", "evalue": "not faster", "traceback": []}]),
    )
    cells = gpu_run.gpu_cells(nb)
    assert cells == nb.cells[1:]
    assert [gpu_run.printed(c) for c in cells] == ["fp32: 51.2 TFLOP/s\n<Figure>\n42\n", "AssertionError: not faster\n"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_nothing_is_recorded(tmp_path):
    with pytest.raises(SystemExit, match="no CUDA GPU"):
        gpu_run.record([], tmp_path / "gpu_run.json")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_chapter_is_refused_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit):
        gpu_run.main([str(tmp_path / "gpu_run.json"), "08", "99"])
    assert "no chapter 99" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
