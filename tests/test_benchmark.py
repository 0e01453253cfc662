"""The chapter floors of ``tools.benchmark``: what a chapter's lessons pay for on first use (the timing itself is a
benchmark, run by hand; nothing here times anything)."""

import nbformat

from tools import benchmark


def _chapter(*cells):
    nb = nbformat.v4.new_notebook()
    for kind, source, *tags in cells:
        cell = (nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell)(source)
        cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


NB = _chapter(
    ("code", "opt = torch.optim.SGD(net.parameters(), lr=0.1)"),
    ("code", "with torch.device('meta'):\n    big = nn.Linear(10**6, 10**6)", "requires-cuda"),
    ("code", "explorer = build_explorer((3, 4), index=idx, dim=1, op='gather')"),
    ("code", "outputs = torchrun('--nproc-per-node=1', '-m', 'utils.ddp_train', machines=2, cwd=WORK)"),
    ("md", "## Exercises"),
    ("code", "torch.use_deterministic_algorithms(True)"),
)


def test_a_lesson_uses_what_its_cells_call_outside_the_exercises_and_on_a_cpu():
    found = benchmark.lesson_topics(NB)
    assert list(found) == ["optimizer", "figure", "torchrun"]
    assert found["optimizer"] == [NB.cells[0].id]


def test_a_topic_counts_only_where_a_lesson_imported_what_it_costs():
    ids = [c.id for c in NB.cells]
    both = {"torch._dynamo": ids[0], "matplotlib.pyplot": ids[2]}
    assert benchmark.paid_topics(NB, both) == ["optimizer", "figure", "torchrun"]
    # An optimizer named in a lesson that never builds one (the error of an empty parameter list) costs nothing,
    # and a module the checks import is not a lesson's. A torchrun job runs elsewhere: its cell is enough.
    assert benchmark.paid_topics(NB, {"matplotlib.pyplot": ids[2]}) == ["figure", "torchrun"]
    assert benchmark.paid_topics(NB, {"torch._dynamo": ids[5] + benchmark.EXERCISES}) == ["torchrun"]


def test_a_chapter_floor_is_the_setup_cell_and_one_first_use_cell_per_topic():
    floor = benchmark.topic_floor(["optimizer", "figure"])
    assert [c.source for c in floor.cells] == [benchmark.SETUP, benchmark.STEP, benchmark.PLOT]
