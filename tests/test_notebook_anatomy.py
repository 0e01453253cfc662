"""Every chapter follows the one anatomy, and its committed outputs are a complete, clean reference."""

from __future__ import annotations

import ast
import functools
import re

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from conftest import HARDWARE_TAGS
from tools import course, device_dtypes, slides

PRESENT = [c for c in course.CHAPTERS if c.path.exists()]
CHAPTERS = [c for c in PRESENT if c.number != "00"]
REQUIRED_HEADINGS = ["## What you will learn", "## Summary", "## Exercises", "## Further reading"]


@functools.cache
def load(ch):
    """The chapter as committed, read once per worker (the tests here only read it)."""
    return nbformat.read(ch.path, as_version=4)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def tags(cell):
    return set(cell.metadata.get("tags", []))


@pytest.mark.usefixtures("mdpo")
def test_generated_parts_are_up_to_date():
    assert course.stale() == [], "run: python -m tools.course sync"


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_setup_cell_comes_first(ch):
    first = code_cells(load(ch))[0]
    assert "setup" in tags(first)
    assert first.source.startswith(course.SETUP)
    assert "nbval-ignore-output" in tags(first), "the setup cell prints versions and devices"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_sections_of_the_anatomy(ch):
    text = "\n".join(c.source for c in load(ch).cells if c.cell_type == "markdown")
    positions = [text.find(h) for h in REQUIRED_HEADINGS]
    assert -1 not in positions, f"missing: {[h for h, p in zip(REQUIRED_HEADINGS, positions, strict=True) if p < 0]}"
    assert positions == sorted(positions), "sections out of order"
    assert "assert " in "\n".join(c.source for c in code_cells(load(ch))), "claims are checked by asserts"


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_reference_outputs_come_from_one_clean_run(ch):
    cells = code_cells(load(ch))
    counts = [c.execution_count for c in cells]
    assert counts == list(range(1, len(cells) + 1)), "re-run with: python -m tools.course execute " + ch.number
    for c in cells:
        for out in c.outputs:
            if out.output_type == "error":
                assert "raises-exception" in tags(c), f"unexpected error in committed output: {c.source[:60]}"
            text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"(/tmp/|/home/|/work/|/Users/|\\\\Users\\\\)", text), (
                f"a machine-specific path in a committed output: {text[:120]}"
            )


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_hardware_cells_are_tagged_and_guarded(ch):
    for c in code_cells(load(ch)):
        tagged = bool(tags(c) & HARDWARE_TAGS.keys())
        guarded = "requires(" in c.source
        assert tagged == guarded, f"a hardware tag and an `if requires(...)` guard go together: {c.source[:80]}"


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_no_sys_path_patching(ch):
    for c in code_cells(load(ch)):
        assert "sys.path" not in c.source, "import utils as an installed package; never patch sys.path"


def buried_heading(markdown: str) -> str | None:
    """The first `##` or `###` heading after a cell's first line (up to 3 spaces before it, as Markdown
    allows), outside code fences; None if there is none."""
    fence = None
    for i, line in enumerate(markdown.split("\n")):
        opener = re.match(r" {0,3}(`{3,}|~{3,})", line)
        if opener and (fence is None or line.strip().startswith(fence)):
            fence = None if fence else opener.group(1)[:3]
        elif fence is None and i and re.match(r" {0,3}#{2,3}(\s|$)", line):
            return line
    return None


def test_a_buried_heading_is_found_as_markdown_renders_it():
    assert buried_heading("# Title\n\n  ## indented, still a heading") == "  ## indented, still a heading"
    assert buried_heading("Text\n### Sub") == "### Sub"
    assert buried_heading("## First line starts the cell\nText") is None
    assert buried_heading("Config:\n```yaml\n## a comment in the file\n```\nText") is None
    assert buried_heading("Text\n    ## four spaces: code") is None
    assert buried_heading("Text\n#### deeper headings stay in the cell") is None


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_each_heading_starts_its_own_cell(ch):
    # Slides are cut at cells: a `##` section or `###` sub-section buried inside a cell gets no slide.
    for c in load(ch).cells:
        if c.cell_type == "markdown":
            assert buried_heading(c.source) is None, f"split this cell at its heading: {c.source[:60]!r}"


COMPARED_SKIP = {"setup", "nbval-ignore-output", "nbval-skip", *HARDWARE_TAGS}


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_chapter_ends_by_asserting_its_lessons_ran_on_device(ch):
    cells = load(ch).cells
    summary = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## Summary"))
    last = [c for c in cells[:summary] if c.cell_type == "code"][-1]
    assert not tags(last) & COMPARED_SKIP, "the last lesson cell is compared, so a CUDA run checks it too"
    assert "bookkeeping" in tags(last), "the cell asserting where the lessons ran is tagged bookkeeping"
    assert "device" in last.source and "assert" in last.source, last.source[:200]


def test_device_cells_follow_names_from_cell_to_cell_in_the_order_statements_run():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("net = make().to(device)\nif ready:\n    y = net(x)\nz = y * 2"),
        nbformat.v4.new_code_cell("print(z)"),        # z comes from y, y from net, net from device
        nbformat.v4.new_code_cell("print(len('ab'))"),
        nbformat.v4.new_code_cell("print(z)", metadata={"tags": ["nbval-ignore-output"]}),  # not compared
    ])
    assert course.device_cells(nb) == (2, 3)


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_no_lesson_puts_a_dtype_mps_lacks_on_device(ch):
    """On a Mac ``device`` is ``mps:0``, which refuses float64 and complex128 (TypeError): a lesson shows a dtype
    change with float16, and does float64 work on the CPU (tools/device_dtypes.py)."""
    found = device_dtypes.problems(load(ch))
    assert not found, "float64 or complex128 on `device`, which MPS lacks:\n" + "\n".join(found)


def test_the_mps_dtype_reading_follows_the_data_from_device():
    def found(*sources):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        return [line.split(": ", 1)[1].split("  (")[0] for line in device_dtypes.problems(nb)]

    setup = "device = try_gpu()\nx = torch.randn(2, 3).to(device)\nnet = nn.Linear(3, 2).to(device)"
    # what chapters 01, 02, 04, 06 and 07 did before they were fixed: every one is found
    assert found(setup, "twin = torch.empty_like(torch.ones(2, 3, dtype=torch.float64, device=device), device='meta')",
                 "assert x.to(device, copy=True) is not x and x.to(torch.float64) is not x",
                 "in_f64 = Zoo().to(device, torch.float64)",
                 "moved = copy.deepcopy(net).double()\nfirst = net[0].weight if False else net.weight.double()",
                 "seq = torch.arange(8.0, dtype=torch.float64).reshape(2, 4)\ny = seq.to(device)",
                 "exact = sum(x.flip(0).double().tolist())",
                 "for p in net.parameters():\n    p.data = p.data.to(dtype=torch.float64)",
                 "def check(layer, inputs):\n    return copy.deepcopy(layer).double()(inputs.double())",
                 "check(nn.Tanh(), x)") == [
        "torch.ones(2, 3, dtype=torch.float64, device=device)", "x.to(torch.float64)",
        "Zoo().to(device, torch.float64)", "copy.deepcopy(net).double()", "net.weight.double()", "seq.to(device)",
        "x.flip(0).double()", "p.data.to(dtype=torch.float64)", "inputs.double()"]
    # float16 on device, float64 on the CPU or on meta, and what has left the device: nothing to find
    assert found(setup, "half = copy.deepcopy(net).half()\nh = x.to(device, torch.float16)",
                 "ref = x.cpu().double()\nexact = sum(x.double().tolist()) if False else sum(x.tolist())",
                 "y = x.detach().to('cpu', torch.float64)\nm = copy.deepcopy(net).to('cpu', torch.float64)",
                 "with torch.device('meta'):\n    shadow = nn.Linear(4, 1).to(torch.float64)",
                 "t = torch.empty_like(x, device='meta', dtype=torch.float64)",
                 "x = x.cpu()\nx64 = x.double()",
                 "probes = torch.randn(64, 4, dtype=torch.float64)\nrank = torch.linalg.matrix_rank(probes)",
                 ) == ["x.double()"]  # only the line written to be found: x was still on device there


def test_unknown_chapter_numbers_are_refused_before_anything_runs(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(course, "execute", ran.append)
    monkeypatch.setattr(course, "sync", ran.append)
    for command in ("execute", "sync", "slides"):
        with pytest.raises(SystemExit) as exit_:
            course.main([command, "01", "99"])
        assert exit_.value.code == 2 and "unknown chapter '99'" in capsys.readouterr().err
    assert ran == []


def test_the_tools_and_helpers_read_and_write_text_as_utf8_whatever_the_locale():
    # Text read or written without an encoding follows the locale: a notebook's "←" cannot be written on a
    # Windows (cp1252) or C locale, and `sync` would leave the file empty. Binary modes need no encoding.
    unnamed = []
    for path in [*course.ROOT.glob("tools/*.py"), *course.ROOT.glob("utils/**/*.py"), course.ROOT / "conftest.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name not in {"open", "read_text", "write_text"} or isinstance(node.func, ast.Attribute) and \
                    getattr(node.func.value, "id", "") == "os":  # os.open: a file descriptor, no text
                continue
            mode = node.args[1] if name == "open" and len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            binary = isinstance(mode, ast.Constant) and "b" in str(mode.value)
            if not binary and not any(k.arg == "encoding" for k in node.keywords):
                unnamed.append(f"{path.relative_to(course.ROOT)}:{node.lineno}")
    assert not unnamed, f"name encoding='utf-8': {unnamed}"


def test_most_compared_cells_work_on_the_chosen_device():
    used = compared = 0
    for ch in CHAPTERS:
        u, c = course.device_cells(load(ch))
        used, compared = used + u, compared + c
    assert used >= 0.6 * compared, f"{used} of {compared} compared cells work on `device` (target: 60 %)"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_prerequisites_are_only_the_generated_ones(ch):
    # Chapter numbers, titles and prerequisites live in tools/course.py; the nav header shows them.
    learn = next(c for c in load(ch).cells if c.cell_type == "markdown" and "## What you will learn" in c.source)
    assert not re.search(r"\]\(\d\d_[a-z_]+\.ipynb\)", learn.source), "prerequisites are generated: remove the link"
    assert not re.search(r"(?i)before you start:?\*? *chapters? \d", learn.source)


def exercise_checks(nb) -> list[str]:
    """The exercise checks the chapter imports (``from utils.exercises.chNN import check_..., ...``)."""
    names = []
    for c in code_cells(nb):
        for node in ast.walk(ast.parse(TransformerManager().transform_cell(c.source))):  # magics as IPython runs them
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("utils.exercises."):
                names += [a.asname or a.name for a in node.names if a.name.startswith("check_")]
    return names


@pytest.mark.parametrize("ch", PRESENT, ids=lambda c: c.number)
def test_every_exercise_shows_a_rejection_and_has_a_hidden_reference(ch):
    # Each exercise: its check shown catching a plausible mistake (`print(rejection(check, Wrong))`), and a
    # reference solution, collapsed, that calls every check (each prints ✓ under nbval).
    nb = load(ch)
    checks = exercise_checks(nb)
    assert checks, "a chapter has exercises with checks from utils.exercises"
    sources = [c.source for c in code_cells(nb)]
    for name in checks:
        shown = any(re.search(rf"print\(rejection\(\s*{name}\b", s) for s in sources)
        assert shown, f"no print(rejection({name}, ...))"
    if ch.number == "00":
        return  # the index's warm-up shows its answer in the open
    hidden = [c for c in code_cells(nb) if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert hidden, "the reference solution is collapsed (jupyter.source_hidden)"
    for name in checks:
        assert any(re.search(rf"\b{name}\(", c.source) for c in hidden), f"the hidden reference never calls {name}"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_the_core_path_fits_one_sitting(ch):
    words, code = course.core_size(load(ch))
    assert words <= course.CORE_WORDS, f"core path: {words} words of prose (at most {course.CORE_WORDS})"
    assert code <= course.CORE_CODE_CELLS, f"core path: {code} code cells (at most {course.CORE_CODE_CELLS})"


def test_the_time_counts_exercises_by_their_headings_and_the_course_map_is_fixed():
    # The first exercise's cell imports every check and calls one: neither the import nor the call is an
    # exercise. Two `### Exercise` headings are 16 minutes; 5 words and no code cell round it to 15.
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        md("## What you will learn"), md("## Summary"), md("## Exercises"),
        md("### Exercise 1 · A"), code("from utils.exercises.ch99 import check_a, check_b\n\ncheck_a(a)"),
        md("### Exercise 2 · B"), code("check_b(b)"),
    ])
    assert course.core_size(nb) == (5, 0)
    assert course.sitting(nb) == ("about 15 min", "CPU")
    for ch in CHAPTERS:
        chapter = load(ch)
        words, cells = course.core_size(chapter)
        exercises = sum(c.cell_type == "markdown" and c.source.startswith("### Exercise") for c in chapter.cells)
        assert exercises >= 2, ch.number
        minutes = 5 * round((words / 150 + 1.5 * cells + 8 * exercises) / 5)
        assert course.sitting(chapter)[0] == f"about {minutes} min", ch.number
    assert course.sitting(load(course.CHAPTERS[0]))[0] == "about 10 min"  # the course map: no core path


def _bound_names(source: str) -> set[str]:
    tree = ast.parse(TransformerManager().transform_cell(source))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _used_names(source: str) -> set[str]:
    """Names the cell reads, less its functions' own parameters."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    params = {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - params


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_going_further_blocks_are_folded_and_the_core_path_never_needs_them(ch):
    cells = load(ch).cells
    further = slides.going_further(cells)
    core = {id(c) for c in course.core_path(load(ch))}
    only_there: set[str] = set()
    for i, c in enumerate(cells):
        if i in further:
            if c.cell_type == "markdown":
                head = c.source.startswith(slides.GOING_FURTHER)
                assert head == c.metadata.get("jp-MarkdownHeadingCollapsed", False), c.source[:60]
                inner = not head and re.match(r"#{2,3} ", c.source)
                assert not inner, f"a heading inside a Going-further block: {c.source[:60]}"
            elif c.cell_type == "code":
                only_there |= _bound_names(c.source)
        elif c.cell_type == "code" and id(c) in core:
            only_there -= _bound_names(c.source)
            needed = _used_names(c.source) & only_there
            assert not needed, f"the core path uses {sorted(needed)}, defined only in a Going-further block"


@pytest.mark.parametrize("ch", CHAPTERS, ids=lambda c: c.number)
def test_bookkeeping_is_tagged_folded_and_no_lesson(ch):
    nb = load(ch)
    for c in nb.cells:
        if "bookkeeping" in tags(c):
            assert c.metadata.get("jupyter", {}).get("source_hidden"), "sync folds bookkeeping cells"
        if c.cell_type == "markdown":
            assert not re.match(r"## \d+ · Where this ran", c.source), "bookkeeping is no numbered lesson"
