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

A benchmark, not a test: its figures depend on the machine and its load. Nothing here is run by ``pytest``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from statistics import median

import nbformat
from nbclient import NotebookClient

from tools.course import BY_NUMBER, CHAPTERS, SETUP

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
FIRST_USE = {
    "the setup cell alone": "",
    "+ one optimizer step (torch._dynamo)": STEP,
    "+ one torch.compile call (eager backend)": COMPILE,
    "+ one operation on the meta device (sympy)": META,
    "+ torch.use_deterministic_algorithms": DETERMINISM,
    "+ all four": "\n".join((STEP, COMPILE, META, DETERMINISM)),
    "+ one matplotlib figure": PLOT,
    "+ one optimizer step and one figure": f"{STEP}\n{PLOT}",
}


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
    args = parser.parse_args(argv)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    floor_nb = notebook("import torch")
    if args.first_use:  # (label, the notebook, its folder)
        runs = [(f"{name:44s}", notebook(SETUP, code), Path(".")) for name, code in FIRST_USE.items()]
    else:
        chapters = [BY_NUMBER[n] for n in args.numbers] if args.numbers else list(CHAPTERS)
        runs = [(f"{ch.number} {ch.path.stem:28s}", nbformat.read(ch.path, as_version=4), ch.path.parent)
                for ch in chapters]
    boot = None
    for label, source, folder in runs:
        floors, times, launch = [], [], []
        for _ in range(args.repeats):
            floors.append(run_all(nbformat.from_dict(floor_nb), "."))
            nb = nbformat.from_dict(source)
            times.append(run_all(nb, str(folder)))
            launch.append(sum(cell_seconds(c) for c in nb.cells
                              if c.cell_type == "code" and "torchrun(" in c.source and "requires(" not in c.source))
        pairs = list(zip(times, floors, strict=True))
        line = (f"{label} {median(t / f for t, f in pairs):4.2f} x floor "
                f"(fastest run {min(times):5.2f} s, floor {min(floors):.2f} s)")
        if any(launch):
            boot = boot or min(startup(AGENT) for _ in range(3)) + min(startup(WORKER) for _ in range(3))
            line += (f"; torchrun cell {min(launch):.2f} s, of which its interpreters' start-up {boot:.2f} s; "
                     f"without it {median((t - boot) / f for t, f in pairs):.2f} x floor")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
