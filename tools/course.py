"""The one list of chapters, and everything generated from it.

    python -m tools.course sync          # rewrite badges, navigation, Colab setup block, slide
                                         # metadata and the README's chapter table
    python -m tools.course check         # exit 1 if any of those is stale (tests run this)
    python -m tools.course execute [NN ...]
                                         # re-run notebooks and save their outputs (the reference)

Outputs are always regenerated on the CPU (``CUDA_VISIBLE_DEVICES`` is emptied for the kernel) so the
committed reference is the same whatever machine a maintainer uses.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import nbformat

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
README = ROOT / "README.md"

#: The repository, named once. Badges, the Colab install line and the README derive from it.
REPO = "torch-building-blocks/course"
BRANCH = "main"


@dataclass(frozen=True)
class Chapter:
    number: str
    file: str
    title: str
    prerequisites: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return NOTEBOOKS / self.file


CHAPTERS = (
    Chapter("00", "00_index.ipynb", "Course map"),
    Chapter("01", "01_layers_and_blocks.ipynb", "Layers and blocks"),
    Chapter("02", "02_parameters.ipynb", "Parameters: access, initialization, lazy init", ("01",)),
    Chapter("03", "03_parameter_tying.ipynb", "Parameter tying", ("02",)),
    Chapter("04", "04_custom_layers.ipynb", "Custom layers", ("02",)),
    Chapter("05", "05_saving_and_loading.ipynb", "Saving and loading", ("02", "04")),
    Chapter("06", "06_gpu_placement.ipynb", "GPU placement and device pitfalls", ("01", "02")),
    Chapter("07", "07_gather_and_scatter.ipynb", "Gather and scatter", ("01",)),
    Chapter("08", "08_multi_gpu_timing.ipynb", "Timing on several devices", ("06",)),
    Chapter("09", "09_data_parallel_training.ipynb", "Data-parallel training with torchrun", ("05", "08")),
)
BY_NUMBER = {c.number: c for c in CHAPTERS}

COLAB_SETUP = f"""\
# Setup. On Colab, first install this course's helpers (Colab's own torch is kept).
import sys

if "google.colab" in sys.modules:
    %pip install --quiet "git+https://github.com/{REPO}@{BRANCH}"
"""


def colab_url(ch: Chapter) -> str:
    return f"https://colab.research.google.com/github/{REPO}/blob/{BRANCH}/notebooks/{ch.file}"


def binder_url(ch: Chapter) -> str:
    return f"https://mybinder.org/v2/gh/{REPO}/{BRANCH}?urlpath={quote('lab/tree/notebooks/' + ch.file, safe='')}"


def badges(ch: Chapter) -> str:
    return (
        f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(ch)}) "
        f"[![Launch on Binder](https://mybinder.org/badge_logo.svg)]({binder_url(ch)})"
    )


def _link(ch: Chapter) -> str:
    return f"[{ch.number} · {ch.title}]({ch.file})"


def navigation(ch: Chapter) -> str:
    i = CHAPTERS.index(ch)
    parts = []
    if i > 0:
        parts.append(f"← {_link(CHAPTERS[i - 1])}")
    if ch.number != "00":
        parts.append(f"[Course map]({CHAPTERS[0].file})")
    if i + 1 < len(CHAPTERS):
        parts.append(f"{_link(CHAPTERS[i + 1])} →")
    return " · ".join(parts)


def header_markdown(ch: Chapter) -> str:
    lines = [badges(ch), "", navigation(ch)]
    if ch.prerequisites:
        pre = ", ".join(_link(BY_NUMBER[p]) for p in ch.prerequisites)
        lines += ["", f"*Prerequisites:* {pre}"]
    return "\n".join(lines)


def footer_markdown(ch: Chapter) -> str:
    return "---\n" + navigation(ch)


def chapter_table(link_prefix: str = "notebooks/") -> str:
    rows = ["| # | Chapter | Prerequisites | Open |", "|---|---|---|---|"]
    for ch in CHAPTERS:
        pre = ", ".join(ch.prerequisites) or "—"
        open_ = f"[Colab]({colab_url(ch)}) · [Binder]({binder_url(ch)})"
        rows.append(f"| {ch.number} | [{ch.title}]({link_prefix}{ch.file}) | {pre} | {open_} |")
    return "\n".join(rows)


# --- applying it to notebooks ----------------------------------------------------------------------

def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _md_cell(cell_id: str, source: str, tag: str):
    cell = nbformat.v4.new_markdown_cell(source)
    cell["id"] = cell_id
    cell["metadata"] = {"tags": [tag]}
    return cell


def _slide_type(cell, index: int) -> str:
    tags = _tags(cell)
    if "nav-header" in tags or "nav-footer" in tags:
        return "skip"
    if index == 0:
        return "slide"
    if cell["cell_type"] == "markdown":
        first = cell["source"].lstrip().split("\n", 1)[0]
        if first.startswith("## "):
            return "slide"
        if first.startswith("### "):
            return "subslide"
    return "-"


def _with_colab_setup(source: str) -> str:
    """Put the canonical Colab block at the top of the setup cell, replacing an older one."""
    lines = source.split("\n")
    for k, line in enumerate(lines):
        if line.strip().startswith("%pip install"):
            lines = lines[k + 1 :]
            break
    rest = "\n".join(lines).lstrip("\n")
    return COLAB_SETUP + "\n" + rest


def synced(ch: Chapter, nb):
    """Return a copy of ``nb`` with its generated parts brought up to date."""
    nb = nbformat.from_dict(nb)
    cells = [c for c in nb.cells if not {"nav-header", "nav-footer"} & set(_tags(c))]
    if not cells or cells[0]["cell_type"] != "markdown" or not cells[0]["source"].startswith(f"# {ch.number} · "):
        raise ValueError(f"{ch.file}: the first cell must be the title '# {ch.number} · ...'")
    cells.insert(1, _md_cell("nav-header", header_markdown(ch), "nav-header"))
    cells.append(_md_cell("nav-footer", footer_markdown(ch), "nav-footer"))
    for cell in cells:
        if cell["cell_type"] == "code" and "setup" in _tags(cell):
            cell["source"] = _with_colab_setup(cell["source"])
        if cell["cell_type"] == "markdown" and "course-map" in _tags(cell):
            cell["source"] = "## The chapters\n\n" + chapter_table(link_prefix="")
    for i, cell in enumerate(cells):
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": _slide_type(cell, i)}
    nb.cells = cells
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    return nb


TABLE_RE = re.compile(r"(<!-- chapters:start -->\n).*?(<!-- chapters:end -->)", re.S)


def synced_readme(text: str) -> str:
    if not TABLE_RE.search(text):
        raise ValueError("README.md lacks the <!-- chapters:start --> / <!-- chapters:end --> markers")
    return TABLE_RE.sub(lambda m: m.group(1) + chapter_table() + "\n" + m.group(2), text)


def _dump(nb) -> str:
    return nbformat.writes(nb) + "\n"


def stale() -> list[str]:
    """Files whose generated parts are out of date (or chapters whose notebook is missing)."""
    out = []
    for ch in CHAPTERS:
        if not ch.path.exists():
            out.append(f"{ch.file} (missing)")
            continue
        text = ch.path.read_text()
        if _dump(synced(ch, nbformat.reads(text, as_version=4))) != text:
            out.append(ch.file)
    listed = {c.file for c in CHAPTERS}
    out += [f"{p.name} (not in CHAPTERS)" for p in sorted(NOTEBOOKS.glob("*.ipynb")) if p.name not in listed]
    readme = README.read_text()
    if synced_readme(readme) != readme:
        out.append("README.md")
    return out


def sync() -> None:
    for ch in CHAPTERS:
        if ch.path.exists():
            ch.path.write_text(_dump(synced(ch, nbformat.read(ch.path, as_version=4))))
    README.write_text(synced_readme(README.read_text()))


def execute(chapter: Chapter, timeout: int = 300) -> None:
    """Run a notebook top to bottom on the CPU and save its outputs as the new reference."""
    from nbclient import NotebookClient

    nb = synced(chapter, nbformat.read(chapter.path, as_version=4))
    env_before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(NOTEBOOKS)}},
            record_timing=False,
            store_widget_state=False,
        )
        client.execute()
    finally:
        if env_before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = env_before
    nb.metadata.pop("widgets", None)
    chapter.path.write_text(_dump(nb))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.course", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync", help="rewrite the generated parts of notebooks and README")
    sub.add_parser("check", help="exit 1 if a generated part is stale")
    run = sub.add_parser("execute", help="re-run notebooks on the CPU and save their outputs")
    run.add_argument("numbers", nargs="*", help="chapter numbers such as 01 02 (default: all)")
    args = parser.parse_args(argv)
    if args.command == "sync":
        sync()
        return 0
    if args.command == "check":
        bad = stale()
        for name in bad:
            print(f"stale: {name}")
        if bad:
            print("Run: python -m tools.course sync")
        return 1 if bad else 0
    numbers = args.numbers or [c.number for c in CHAPTERS if c.path.exists()]
    for number in numbers:
        if number not in BY_NUMBER:
            parser.error(f"unknown chapter {number!r}; known: {', '.join(BY_NUMBER)}")
        print(f"executing {BY_NUMBER[number].file} ...", flush=True)
        execute(BY_NUMBER[number])
    return 0


if __name__ == "__main__":
    sys.exit(main())
