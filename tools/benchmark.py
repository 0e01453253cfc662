"""What a learner's *Restart & Run All* costs, against the floor: a fresh kernel that only imports torch.

    python -m tools.benchmark [NN ...] [--repeats 5]

Each notebook runs top to bottom in a fresh kernel, as Jupyter runs it (nbclient, CUDA hidden, as in the
reference run); the floor is a fresh kernel running ``import torch``, measured just before each chapter run. A
shared machine's speed drifts from minute to minute, so each ratio is a chapter run over the floor run beside it,
and the report gives the median of ``--repeats`` such ratios (and the fastest chapter run). For a cell
that launches ``torchrun`` (chapter 10), the report also gives the cell's own time and the time the job's
interpreters take to start (measured by starting the same interpreters with nothing to do: the agents, then their
workers, two at a time, as the job starts them), and the chapter's figure without that start-up.

``--first-use`` measures, the same way, what torch costs the first time a lesson touches a part of it: notebooks
made of the chapters' generated setup cell and one small cell each (an optimizer step, a ``torch.compile`` call,
a plot, ...). They bound what any chapter that teaches such a thing can reach.

A chapter's own floor is that kind of notebook too: the setup cell and the first-use cell of each part of torch
its lessons use (:data:`TOPICS`, found in the lesson cells that run on a CPU; the Exercises' cells are not lessons).
Each chapter's line gives its time over that floor as well, the goal being at most 1.25. ``--loads`` shows, for
each chapter, which cell first imported each of the costly parts of torch (:data:`LOADS`): a part that an
exercise's check imports before any lesson does is loaded for the checks alone.

A benchmark, not a test: its figures depend on the machine and its load. Nothing here is run by ``pytest``.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from statistics import median

import nbformat
from nbclient import NotebookClient

from tools.course import BY_NUMBER, CHAPTERS, GPU_TAGS, SETUP

# What the interpreters of chapter 10's job import before they do any work: torchrun's agents, then the
# workers (utils.ddp_train imports torch._dynamo first: see its main()).
AGENT = "import torch.distributed.run"
WORKER = "import utils.ddp_train, torch._dynamo"

# One small cell per part of torch that a lesson pulls in on first use (after the setup cell).
STEP = ("net = torch.nn.Linear(4, 2)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "net(torch.ones(1, 4)).sum().backward()\nopt.step()")
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"
COMPILE = "torch.compile(lambda x: x.sin() + 1, backend='eager')(torch.ones(3))"
META = "torch.ones(2, device='meta') + 1"
DETERMINISM = "torch.use_deterministic_algorithms(True)"
TIMER = "from torch.utils import benchmark\nbenchmark.Timer('x + 1', globals={'x': torch.ones(3)}).blocked_autorange()"
# A torchrun job as chapter 10 starts its first (two agents, one gloo worker each) whose workers only meet.
TORCHRUN = ("import tempfile\nfrom pathlib import Path\nfrom utils.launch import torchrun\n"
            "with tempfile.TemporaryDirectory() as job:\n"
            "    Path(job, 'meet.py').write_text('import torch._dynamo, torch.distributed as dist\\n'\n"
            "                                    'dist.init_process_group(\"gloo\")\\ndist.barrier()\\n'\n"
            "                                    'dist.destroy_process_group()\\n')\n"
            "    torchrun('--nproc-per-node=1', '--log-dir=logs', 'meet.py', machines=2, cwd=job)")
FIRST_USE = {
    "the setup cell alone": "",
    "+ one optimizer step (torch._dynamo)": STEP,
    "+ one torch.compile call (eager backend)": COMPILE,
    "+ one operation on the meta device (sympy)": META,
    "+ torch.use_deterministic_algorithms": DETERMINISM,
    "+ all four": "\n".join((STEP, COMPILE, META, DETERMINISM)),
    "+ one matplotlib figure": PLOT,
    "+ one torch.utils.benchmark measurement": TIMER,
    "+ one torchrun job (two agents, gloo)": TORCHRUN,
    "+ one optimizer step and one figure": f"{STEP}\n{PLOT}",
}


#: The parts of torch that a lesson pays for on first use: (a pattern of the lesson cells that use it, the module
#: whose import shows that they did, its first-use cell).
TOPICS = {
    "optimizer": (r"optim\.\w+\(", "torch._dynamo", STEP),
    "compile": (r"torch\.compile\(", "torch._dynamo", COMPILE),
    "meta": (r"""device=["']meta["']|torch\.device\(["']meta["']\)|\.to\(["']meta["']\)""", "torch._dynamo", META),
    "determinism": (r"use_deterministic_algorithms\(", "torch._dynamo", DETERMINISM),
    "figure": (r"plt\.|explore\(|build_explorer\(", "matplotlib.pyplot", PLOT),
    "benchmark": (r"benchmark\.Timer\(", "torch.utils.benchmark", TIMER),
    "torchrun": (r"torchrun\(", None, TORCHRUN),  # the job runs in other processes: nothing to see here
}
#: The modules whose first import is dear (see ``--first-use``), watched by ``--loads``.
LOADS = ("torch._dynamo", "sympy", "torch._inductor.config", "matplotlib.pyplot", "torch.utils.benchmark")
EXERCISES = " (Exercises)"


def _in_exercises(cells: list) -> list[bool]:
    """For each cell, whether it sits in the Exercises section (from its ``## Exercises`` heading to the next one)."""
    flags, inside = [], False
    for cell in cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            inside = cell.source.startswith("## Exercises")
        flags.append(inside)
    return flags


def lesson_topics(nb: nbformat.NotebookNode) -> dict[str, list[str]]:
    """For each of :data:`TOPICS` a lesson uses, the ids of the lesson cells that use it. A lesson cell is a code
    cell outside the Exercises section that runs on a CPU (no hardware tag)."""
    found: dict[str, list[str]] = {}
    for cell, in_exercises in zip(nb.cells, _in_exercises(nb.cells), strict=True):
        if cell.cell_type != "code" or in_exercises or GPU_TAGS & set(cell.metadata.get("tags", [])):
            continue
        for topic, (pattern, _, _) in TOPICS.items():
            if re.search(pattern, cell.source):
                found.setdefault(topic, []).append(cell.id)
    return found


def paid_topics(nb: nbformat.NotebookNode, loads: dict[str, str]) -> list[str]:
    """The :data:`TOPICS` the chapter's lessons use and pay for: a lesson cell imported the module that shows it
    (``loads``: see :func:`first_loads`). A lesson that only names an optimizer, say to show the error an empty
    parameter list raises, pays nothing."""
    by_lessons = {m for m, cell in loads.items() if not cell.endswith(EXERCISES)}
    return [t for t in lesson_topics(nb) if TOPICS[t][1] in (None, *by_lessons)]


def topic_floor(topics: list[str]) -> nbformat.NotebookNode:
    """The setup cell and the first-use cell of each of ``topics``."""
    return notebook(SETUP, *(TOPICS[t][2] for t in topics))


def first_loads(nb: nbformat.NotebookNode, path: str) -> dict[str, str]:
    """Run ``nb`` once with an IPython hook that notes, after each cell, which of :data:`LOADS` are imported:
    for each, the id of the cell that imported it, and ``" (Exercises)"`` where that cell is an exercise's."""
    watch = ("import sys, IPython\n_loads = {}\ndef _note(result):\n"
             f"    for m in {LOADS!r}:\n"
             "        if m in sys.modules and m not in _loads: _loads[m] = result.execution_count\n"
             "IPython.get_ipython().events.register('post_run_cell', _note)")
    probe = nbformat.from_dict(nb)
    probe.cells = [nbformat.v4.new_code_cell(watch), *probe.cells, nbformat.v4.new_code_cell("print(_loads)")]
    run_all(probe, path)
    counts = ast.literal_eval(probe.cells[-1].outputs[0]["text"])
    by_count = {cell.execution_count: cell.id + (EXERCISES if in_exercises else "")
                for cell, in_exercises in zip(probe.cells, _in_exercises(probe.cells), strict=True)
                if cell.cell_type == "code" and cell.execution_count}
    return {m: by_count[n] for m, n in counts.items()}


def notebook(*sources: str) -> nbformat.NotebookNode:
    """A notebook of one code cell per non-empty source."""
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources if s])


def run_all(nb: nbformat.NotebookNode, path: str) -> float:
    """Seconds from asking for a kernel to its shutdown after the last cell, as nbclient runs a notebook (a
    *Restart* pays the shutdown of the kernel it replaces). The cells' timings land in ``nb``."""
    client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=True,
                            resources={"metadata": {"path": path}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def cell_seconds(cell: nbformat.NotebookNode) -> float:
    timing = cell.metadata.get("execution", {})
    start, end = (datetime.fromisoformat(timing[k].replace("Z", "+00:00"))
                  for k in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


def startup(code: str, count: int = 2) -> float:
    """Seconds for ``count`` interpreters started together to run ``code`` and exit."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]
    if any(p.wait() for p in procs):
        raise RuntimeError(f"{code!r} failed")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.benchmark", description=__doc__.split("\n")[0])
    parser.add_argument("numbers", nargs="*", help="chapter numbers such as 01 02 (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each notebook and of the floor")
    parser.add_argument("--first-use", action="store_true", help="time torch's first-use costs instead of chapters")
    parser.add_argument("--loads", action="store_true",
                        help="show which cell first imports each costly part of torch, instead of timing")
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    floor_nb = notebook("import torch")
    chapters = [BY_NUMBER[n] for n in args.numbers] if args.numbers else list(CHAPTERS)
    if args.loads:
        for ch in chapters:
            loads = first_loads(nbformat.read(ch.path, as_version=4), str(ch.path.parent))
            print(f"{ch.number} {ch.path.stem:28s}", ", ".join(f"{m}: {c}" for m, c in loads.items()) or "none",
                  flush=True)
        return 0
    if args.first_use:  # (label, the notebook, its folder)
        runs = [(f"{name:44s}", notebook(SETUP, code), Path(".")) for name, code in FIRST_USE.items()]
    else:
        runs = [(f"{ch.number} {ch.path.stem:28s}", nbformat.read(ch.path, as_version=4), ch.path.parent)
                for ch in chapters]
    boot = None
    for label, source, folder in runs:
        floors, times, launch, own = [], [], [], []
        loads = {} if args.first_use else first_loads(source, str(folder))
        topics = paid_topics(source, loads)
        for_checks = [m for m, cell in loads.items() if cell.endswith(EXERCISES)]
        for _ in range(args.repeats):
            floors.append(run_all(nbformat.from_dict(floor_nb), "."))
            if topics:
                own.append(run_all(topic_floor(topics), "."))
            nb = nbformat.from_dict(source)
            times.append(run_all(nb, str(folder)))
            launch.append(sum(cell_seconds(c) for c in nb.cells
                              if c.cell_type == "code" and "torchrun(" in c.source and "requires(" not in c.source))
        pairs = list(zip(times, floors, strict=True))
        line = (f"{label} {median(t / f for t, f in pairs):4.2f} x floor "
                f"(fastest run {min(times):5.2f} s, floor {min(floors):.2f} s)")
        if not args.first_use:
            own = own or floors
            line += (f"; {median(t / f for t, f in zip(times, own, strict=True)):4.2f} x its topics' floor "
                     f"({', '.join(topics) or 'none'}: {min(own):.2f} s)")
        if for_checks:
            line += f"; imported for the checks alone: {', '.join(for_checks)}"
        if any(launch):
            boot = boot or min(startup(AGENT) for _ in range(3)) + min(startup(WORKER) for _ in range(3))
            line += (f"; torchrun cell {min(launch):.2f} s, of which its interpreters' start-up {boot:.2f} s; "
                     f"without it {median((t - boot) / f for t, f in pairs):.2f} x floor")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
