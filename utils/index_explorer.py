"""Where does each element go? ``gather`` and ``scatter`` as explicit source → destination maps.

Three layers, each usable on its own:

* :func:`index_mapping` is plain Python: for a data shape, an ``index`` tensor, a ``dim`` and an
  operation, it lists every element that moves as a pair ``(src_position, dst_position)``.
  :func:`explore` runs the real PyTorch operation on small integer tensors, checks that it agrees with
  that list, and returns everything in an :class:`IndexMap`.
* :func:`draw_index_map` draws an :class:`IndexMap` as three coloured grids (what is read, the index,
  the result); an element keeps its colour wherever it goes, and arrows can be added.
* :func:`build_explorer` wires both into an ipywidgets UI: choose ``dim``, edit or randomize the
  index, toggle gather / scatter.

The *data shape* is the shape of the big tensor on the far side of the index:

=========  ===========================================  ===========================================
op         PyTorch call                                 data shape is the shape of
=========  ===========================================  ===========================================
gather     ``out = data.gather(dim, index)``            ``data``, which is read; ``out`` has the
                                                        index's shape
scatter    ``out = data.scatter(dim, index, src)``      ``data``, which is written into; ``src``
                                                        has the index's shape here
=========  ===========================================  ===========================================

For ``gather`` the pairs are ``(position in data, position in out)``; for ``scatter`` they are
``(position in src, position in out)``. Both are listed in the row-major order of the index.

Used by chapter 06 (Gather and scatter): its explorer section builds the widget, and the cells after
it assert on what the callback computes.

Wherever a notebook is not live (GitHub, an HTML export, slides, a notebook opened without running
it) an :class:`IndexExplorer` shown as a cell's value displays its drawing (PNG) and a readable line
(text), never the ``VBox(children=...)`` repr of its widgets. matplotlib and ipywidgets are imported
inside the functions that need them, so importing this module costs nothing beyond ``import torch``.
"""

from __future__ import annotations

import html
import io
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from utils._validate import check_bool, check_int, check_str
from utils.i18n import L_, _

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "OPS",
    "IndexExplorer",
    "IndexMap",
    "build_explorer",
    "collisions",
    "draw_index_map",
    "explore",
    "format_index",
    "index_mapping",
    "parse_index",
    "random_index",
]

#: The two operations the explorer knows.
OPS = ("gather", "scatter")

Position = tuple[int, ...]
Pair = tuple[Position, Position]

#: Value of an output cell that no scatter write reached (sources count from 0, so it never clashes).
UNWRITTEN = -1


# --- validation --------------------------------------------------------------------------------------

def _check_shape(input_shape: object) -> tuple[int, ...]:
    if isinstance(input_shape, torch.Tensor) or not isinstance(input_shape, Sequence):
        raise TypeError(_("input_shape must be a sequence of ints, got {type}").format(
            type=type(input_shape).__name__))
    shape = tuple(input_shape)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise TypeError(_("input_shape must contain ints only, got {shape}").format(shape=repr(shape)))
    if not shape:
        raise ValueError(_("input_shape must have at least one dimension"))
    if any(s < 1 for s in shape):
        raise ValueError(_("input_shape must be positive in every dimension, got {shape}").format(shape=repr(shape)))
    return shape


def _check_dim(dim: object, ndim: int) -> int:
    check_int(dim, "dim", low=-(2**63))
    if not -ndim <= dim < ndim:
        raise ValueError(_("dim must be in [{low}, {high}] for a {ndim}-D tensor, got {dim}").format(
            low=-ndim, high=ndim - 1, ndim=ndim, dim=dim))
    return dim % ndim


def _check_op(op: object) -> str:
    if op not in OPS:
        raise ValueError(_("op must be one of {ops}, got {op}").format(ops=OPS, op=repr(op)))
    return str(op)


def _larger_outside_dim(shape: Sequence[int], data_shape: Sequence[int], dim: int) -> int | None:
    """The first dimension other than ``dim`` where an index of ``shape`` is larger than the data (PyTorch's
    rule for gather and scatter), or None if it fits."""
    return next((d for d, (n, m) in enumerate(zip(shape, data_shape, strict=True)) if d != dim and n > m), None)


def _validate(input_shape: object, index: object, dim: object, op: object) -> tuple[tuple[int, ...], int, str]:
    """Apply PyTorch's rules for gather / scatter (with ``src`` of the index's shape)."""
    shape = _check_shape(input_shape)
    op = _check_op(op)
    if not isinstance(index, torch.Tensor):
        raise TypeError(_("index must be a torch.Tensor, got {type}").format(type=type(index).__name__))
    if index.dtype not in (torch.int64, torch.int32):
        raise TypeError(_("index must hold int64 (or int32) values, got {dtype}").format(dtype=index.dtype))
    if index.dim() != len(shape):
        raise ValueError(_("index must have as many dimensions as the data ({ndim}), got {got}").format(
            ndim=len(shape), got=index.dim()))
    dim = _check_dim(dim, len(shape))
    d = _larger_outside_dim(index.shape, shape, dim)
    if d is not None:
        raise ValueError(
            _("index is larger than the data along dimension {d} ({size} > {data_size}); "
              "only dimension dim={dim} may be larger").format(d=d, size=index.shape[d], data_size=shape[d], dim=dim)
        )
    if index.numel():
        low, high = int(index.min()), int(index.max())
        bad = low if low < 0 else high
        if low < 0 or high >= shape[dim]:
            raise ValueError(_("index holds {value}, out of range for dimension {dim} of size {size}").format(
                value=bad, dim=dim, size=shape[dim]))
    return shape, dim, op


# --- the mapping --------------------------------------------------------------------------------------

def index_mapping(input_shape: Sequence[int], index: torch.Tensor, dim: int, op: str) -> list[Pair]:
    """Every element that ``op`` moves, as ``(src_position, dst_position)`` pairs, in index order.

    ``gather``: ``out[p] = data[p with p[dim] replaced by index[p]]``, so each pair is
    ``(p with p[dim] = index[p], p)``. ``scatter``: ``out[p with p[dim] replaced by index[p]] = src[p]``,
    so each pair is ``(p, p with p[dim] = index[p])``. Computed with plain Python loops.

    >>> index_mapping((2, 3), torch.tensor([[2], [0]]), dim=1, op="gather")
    [((0, 2), (0, 0)), ((1, 0), (1, 0))]

    Raises TypeError / ValueError (naming the argument) for anything PyTorch would refuse.
    """
    _, dim, op = _validate(input_shape, index, dim, op)
    return _pairs(index, dim, op)


def _pairs(index: torch.Tensor, dim: int, op: str) -> list[Pair]:
    flat = index.reshape(-1).tolist()
    pairs: list[Pair] = []
    for pos, k in zip(itertools.product(*(range(n) for n in index.shape)), flat, strict=True):
        moved = pos[:dim] + (int(k),) + pos[dim + 1 :]
        pairs.append((moved, pos) if op == "gather" else (pos, moved))
    return pairs


def collisions(pairs: Sequence[Pair]) -> dict[Position, list[Position]]:
    """Destinations written more than once, each with the sources that compete for it (in order).

    Only ``scatter`` has them; which write wins is not specified (see :func:`explore`).
    """
    targets: dict[Position, list[Position]] = {}
    for src, dst in pairs:
        targets.setdefault(dst, []).append(src)
    return {dst: srcs for dst, srcs in targets.items() if len(srcs) > 1}


@dataclass(frozen=True)
class IndexMap:
    """One gather or scatter, with the tensors involved and the element map checked against PyTorch.

    ``source`` is what is read (gather: the data; scatter: ``src``), holding ``0, 1, 2, ...`` in
    row-major order so that a value names its cell. ``output`` is the result: for scatter, the data
    starts as :data:`UNWRITTEN` (-1) everywhere, so a ``-1`` left in it was never written.
    """

    op: str
    dim: int
    index: torch.Tensor
    source: torch.Tensor
    output: torch.Tensor
    pairs: list[Pair] = field(repr=False)

    @property
    def collisions(self) -> dict[Position, list[Position]]:
        """Output cells written by more than one source element (scatter only)."""
        return collisions(self.pairs)

    @property
    def rule(self) -> str:
        """The operation as an indexing formula, e.g. ``out[i][j] = data[i][index[i][j]]``."""
        ndim = self.index.dim()
        letters = list("ijklmn"[:ndim]) if ndim <= 6 else [f"i{d}" for d in range(ndim)]
        pos = "".join(f"[{c}]" for c in letters)
        moved = "".join(f"[index{pos}]" if d == self.dim else f"[{c}]" for d, c in enumerate(letters))
        if self.op == "gather":
            return f"out{pos} = data{moved}"
        return f"out{moved} = src{pos}"


def explore(input_shape: Sequence[int], index: torch.Tensor, dim: int, op: str) -> IndexMap:
    """Run ``op`` for real (on the CPU, whatever the default device) and return it with its element map,
    checked element by element.

    Raises RuntimeError if PyTorch and :func:`index_mapping` ever disagree (a bug, not a user error).
    With repeated indices a scatter keeps *one* of the competing values, and this check accepts any
    of them: PyTorch does not say which write wins.
    """
    shape, dim, op = _validate(input_shape, index, dim, op)
    index = index.detach().to("cpu", torch.int64)
    pairs = _pairs(index, dim, op)
    if op == "gather":
        source = torch.arange(math.prod(shape), device="cpu").reshape(shape)
        output = source.gather(dim, index)
        ok = output.shape == index.shape and all(int(output[dst]) == int(source[src]) for src, dst in pairs)
    else:
        source = torch.arange(index.numel(), device="cpu").reshape(index.shape)
        output = torch.full(shape, UNWRITTEN, device="cpu").scatter(dim, index, source)
        writers: dict[Position, set[int]] = {}
        for src, dst in pairs:
            writers.setdefault(dst, set()).add(int(source[src]))
        ok = all(
            int(output[pos]) in writers.get(pos, {UNWRITTEN})
            for pos in itertools.product(*(range(n) for n in shape))
        )
    if not ok:
        raise RuntimeError(f"torch.{op} disagrees with index_mapping for dim={dim}, index={index.tolist()}")
    return IndexMap(op=op, dim=dim, index=index, source=source, output=output, pairs=pairs)


# --- drawing ------------------------------------------------------------------------------------------

def _as_grid(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1, -1) if t.dim() == 1 else t


def _cell(pos: Position) -> tuple[int, int]:
    """(row, column) of a 1-D or 2-D position in its drawn grid."""
    return (0, pos[0]) if len(pos) == 1 else (pos[0], pos[1])


def draw_index_map(view: IndexMap, *, arrows: bool = False) -> Figure:
    """Draw ``view`` as three grids — what is read, the index, the result — and return the Figure.

    Every source element has its own colour, up to 20 of them (matplotlib's ``tab20`` palette; beyond
    that the colours repeat and the numbers in the cells tell elements apart); the index cell that
    moves it and the output cell it lands in share that colour. Grey cells take part in nothing
    (gather: never read; scatter: never written, value -1). A thick black frame marks an output cell
    that several scatter writes compete for. With ``arrows=True`` an arrow joins every source cell to
    its destination.

    Each grid cell is one ``Rectangle`` patch with one text label, so the figure holds exactly
    ``source.numel() + index.numel() + output.numel()`` of each. Only 1-D and 2-D views can be drawn.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import ConnectionPatch, Rectangle

    if not isinstance(view, IndexMap):
        raise TypeError(_("view must be an IndexMap (from explore), got {type}").format(type=type(view).__name__))
    if view.index.dim() not in (1, 2):
        raise ValueError(_("view must be 1-D or 2-D to be drawn, got {ndim}-D").format(ndim=view.index.dim()))
    check_bool(arrows, "arrows")

    cmap = plt.get_cmap("tab20")
    grey, clash = "#e6e6e6", "black"
    source, index, output = (_as_grid(t) for t in (view.source, view.index, view.output))

    def colour_of(value: int) -> Any:
        return cmap(value % cmap.N)

    # Colour of each source element = its own value (0, 1, 2, ...): a value names its cell.
    index_colour = {}  # position in the index grid -> colour
    if view.op == "gather":
        for src, dst in view.pairs:
            index_colour[_cell(dst)] = colour_of(int(view.source[src]))
        read = {_cell(src) for src, _dst in view.pairs}
        source_colour = {cell: colour_of(int(source[cell])) for cell in read}
        output_colour = dict(index_colour)
    else:
        for src, _dst in view.pairs:
            index_colour[_cell(src)] = colour_of(int(view.source[src]))
        source_colour = dict(index_colour)
        output_colour = {}
        for r, c in itertools.product(range(output.shape[0]), range(output.shape[1])):
            if int(output[r, c]) != UNWRITTEN:
                output_colour[(r, c)] = colour_of(int(output[r, c]))
    clashes = {_cell(dst) for dst in view.collisions}

    widths = [max(t.shape[1], 1) for t in (source, index, output)]
    rows = max(t.shape[0] for t in (source, index, output))
    fig, axes = plt.subplots(
        1, 3, figsize=(0.55 * sum(widths) + 2.4, 0.55 * rows + 1.5), gridspec_kw={"width_ratios": widths}
    )
    if view.op == "gather":
        titles = ["data (read)", f"index (dim={view.dim})", f"out = data.gather({view.dim}, index)"]
    else:
        titles = ["src", f"index (dim={view.dim})", f"out = data.scatter({view.dim}, index, src)"]
    grids = [(source, source_colour), (index, index_colour), (output, output_colour)]
    for ax, title, (grid, colours) in zip(axes, titles, grids, strict=True):
        n_rows, n_cols = grid.shape
        for r, c in itertools.product(range(n_rows), range(n_cols)):
            is_clash = grid is output and (r, c) in clashes
            ax.add_patch(
                Rectangle(
                    (c - 0.5, r - 0.5), 1, 1, facecolor=colours.get((r, c), grey),
                    edgecolor=clash if is_clash else "white", linewidth=3 if is_clash else 1.5,
                    zorder=2 if is_clash else 1,  # the frame drawn over its white-edged neighbours
                )
            )
            ax.text(c, r, str(int(grid[r, c])), ha="center", va="center", fontsize=10, zorder=3)
        ax.set_xlim(-0.5, max(n_cols, 1) - 0.5)
        ax.set_ylim(rows - 0.5, -0.5)
        ax.set_aspect("equal")
        ax.set_xticks(range(n_cols))
        ax.set_yticks(range(n_rows))
        ax.tick_params(length=0, labelsize=8)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(title, fontsize=10, y=1.0)  # where it goes anyway; given, matplotlib skips a search
    fig.suptitle(f"{view.op}, dim={view.dim}:  {view.rule}", fontsize=11)
    if arrows:
        start, end = axes[0], axes[2]
        for src, dst in view.pairs:
            (r0, c0), (r1, c1) = _cell(src), _cell(dst)
            fig.add_artist(
                ConnectionPatch(
                    xyA=(c0, r0), coordsA=start.transData, xyB=(c1, r1), coordsB=end.transData,
                    arrowstyle="->", color="0.25", linewidth=0.8, alpha=0.7, shrinkA=6, shrinkB=9,
                    connectionstyle="arc3,rad=-0.12",  # curved, so arrows along one row stay apart
                )
            )
    fig.tight_layout()
    return fig


# --- the interactive explorer -------------------------------------------------------------------------

def format_index(index: torch.Tensor) -> str:
    """A 1-D or 2-D index as editable text: one row per line, entries separated by spaces."""
    if not isinstance(index, torch.Tensor) or index.dim() not in (1, 2):
        raise ValueError(_("index must be a 1-D or 2-D tensor"))
    rows = [index.tolist()] if index.dim() == 1 else index.tolist()
    return "\n".join(" ".join(str(v) for v in row) for row in rows)


def parse_index(text: str, ndim: int) -> torch.Tensor:
    """Read an index written as rows of integers (lines or ``;`` separate rows; spaces or commas entries).

    ``ndim`` (1 or 2) is the number of dimensions wanted. Raises ValueError naming ``text`` when the
    text is not a rectangular grid of integers.
    """
    check_str(text, "text", empty=True)
    if ndim not in (1, 2):
        raise ValueError(_("ndim must be 1 or 2, got {ndim}").format(ndim=repr(ndim)))
    lines = [line for line in text.replace(";", "\n").splitlines() if line.strip()]
    try:
        rows = [[int(v) for v in line.replace(",", " ").split()] for line in lines]
    except ValueError:
        raise ValueError(_("text must hold integers only, got {text}").format(text=repr(text))) from None
    if not rows or any(len(row) != len(rows[0]) for row in rows):
        raise ValueError(_("text must be a non-empty grid with the same number of entries on every row, got {text}")
                         .format(text=repr(text)))
    if ndim == 1:
        if len(rows) != 1:
            raise ValueError(_("text must be a single row for a 1-D index, got {count} rows").format(count=len(rows)))
        return torch.tensor(rows[0], dtype=torch.int64, device="cpu")
    return torch.tensor(rows, dtype=torch.int64, device="cpu")


def random_index(
    input_shape: Sequence[int], dim: int, shape: Sequence[int], generator: torch.Generator
) -> torch.Tensor:
    """A random valid index of ``shape`` for data of ``input_shape`` along ``dim``, drawn on the CPU from
    ``generator`` (a CPU ``torch.Generator``)."""
    data_shape = _check_shape(input_shape)
    dim = _check_dim(dim, len(data_shape))
    if isinstance(shape, torch.Tensor) or not isinstance(shape, Sequence) or \
            not all(isinstance(n, int) and not isinstance(n, bool) for n in shape):
        raise TypeError(_("shape must be a sequence of ints, got {shape}").format(shape=repr(shape)))
    if len(shape) != len(data_shape) or any(n < 0 for n in shape):
        raise ValueError(_("shape must be {ndim} sizes >= 0 (one per data dimension), got {shape}").format(
            ndim=len(data_shape), shape=tuple(shape)))
    if _larger_outside_dim(shape, data_shape, dim) is not None:
        raise ValueError(_("shape {shape} is larger than the data {data_shape} outside dimension dim={dim}").format(
            shape=tuple(shape), data_shape=data_shape, dim=dim))
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise TypeError(_("generator must be a CPU torch.Generator, got {generator}").format(generator=repr(generator)))
    return torch.randint(0, data_shape[dim], tuple(shape), generator=generator, device="cpu")


class IndexExplorer:
    """The live explorer: controls, a message line and the drawing, plus the state they produce.

    Attributes a test or notebook can drive: ``dim``, ``op`` (ToggleButtons), ``index_text``
    (Textarea), ``randomize`` (Button), ``arrows`` (Checkbox). After every change :meth:`update`
    recomputes ``view`` (the :class:`IndexMap`, ``None`` while the controls describe something PyTorch
    would refuse; ``error`` then says why), redraws ``image`` (PNG) and counts ``redraws``. A refused
    choice also clears ``image`` and ``figure``, so no earlier drawing stays under the new message.

    Display it as the last line of a cell (``explorer``): a live notebook shows the controls, and
    everywhere else the cell keeps the drawing and the line :meth:`describe` returns.
    """

    def __init__(
        self, input_shape: Sequence[int], index: torch.Tensor | None, dim: int, op: str, seed: int
    ) -> None:
        import ipywidgets as widgets

        self.input_shape = _check_shape(input_shape)
        ndim = len(self.input_shape)
        if ndim not in (1, 2):
            raise ValueError(_("input_shape must be 1-D or 2-D for the explorer, got {shape}").format(
                shape=repr(self.input_shape)))
        self._generator = torch.Generator().manual_seed(seed)
        if index is None:
            index = random_index(self.input_shape, dim, self.input_shape, self._generator)
        self.view: IndexMap | None = None
        self.figure: Figure | None = None
        self.error: str | None = None
        self.redraws = 0

        self.op = widgets.ToggleButtons(options=list(OPS), value=_check_op(op), description="op")
        self.dim = widgets.ToggleButtons(options=list(range(ndim)), value=_check_dim(dim, ndim), description="dim")
        self.index_text = widgets.Textarea(
            value=format_index(index), description="index", continuous_update=False,
            layout=widgets.Layout(width="18em", height=f"{2 + index.shape[0] if index.dim() == 2 else 3}em"),
        )
        self.randomize = widgets.Button(
            description=_("Randomize index"), icon="random", layout=widgets.Layout(width="auto")
        )
        self.arrows = widgets.Checkbox(value=False, description=_("arrows"))
        self.message = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.widget = widgets.VBox(
            [
                widgets.HBox([self.op, self.dim]),
                widgets.HBox([self.index_text, widgets.VBox([self.randomize, self.arrows])]),
                self.message,
                self.image,
            ]
        )
        for control in (self.op, self.dim, self.index_text, self.arrows):
            control.observe(lambda _change: self.update(), names="value")
        self.randomize.on_click(lambda _button: self.shuffle())
        self.update()

    def shuffle(self) -> None:
        """Replace the index with a random valid one (keeping its shape when the shape rule allows)."""
        dim = self.dim.value
        try:
            shape = tuple(parse_index(self.index_text.value, len(self.input_shape)).shape)
        except ValueError:
            shape = self.input_shape
        if _larger_outside_dim(shape, self.input_shape, dim) is not None:
            shape = self.input_shape
        self.index_text.value = format_index(random_index(self.input_shape, dim, shape, self._generator))

    def update(self) -> None:
        """The callback: recompute the map from the controls, redraw, and report."""
        import matplotlib.pyplot as plt

        try:
            index = parse_index(self.index_text.value, len(self.input_shape))
            view = explore(self.input_shape, index, self.dim.value, self.op.value)
        except ValueError as err:
            # Nothing of the previous drawing may stay under a message about another choice.
            self.view, self.figure, self.error = None, None, str(err)
            self.image.value = b""
            self.image.layout.display = "none"
            not_drawn = _("Not drawn: {error}").format(error=html.escape(str(err)))
            self.message.value = f"<span style='color:#b00'>{not_drawn}</span>"
            return
        figure = draw_index_map(view, arrows=self.arrows.value)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=80)
        plt.close(figure)  # the PNG is shown by the Image widget; keep pyplot from showing it again
        self.view, self.figure, self.error = view, figure, None
        self.image.value = buffer.getvalue()
        self.image.layout.display = None
        self.redraws += 1
        values = {"count": len(view.pairs), "rule": html.escape(view.rule), "clashes": len(view.collisions)}
        if view.collisions:
            self.message.value = _("{count} elements moved. Rule: <code>{rule}</code>; {clashes} output cell(s) "
                                   "written more than once (black frame)").format(**values)
        else:
            self.message.value = _("{count} elements moved. Rule: <code>{rule}</code>").format(**values)

    def describe(self) -> str:
        """One readable line: what the explorer shows now (or why it draws nothing)."""
        if self.view is None:
            return L_("Index explorer for data of shape {shape}: not drawn ({error})").format(
                shape=self.input_shape, error=self.error)
        view = self.view
        values = {"op": view.op, "dim": view.dim, "shape": self.input_shape, "index_shape": tuple(view.index.shape),
                  "rule": view.rule, "count": len(view.pairs), "clashes": len(view.collisions)}
        if view.collisions:
            return L_("Index explorer: {op} along dim={dim} of data of shape {shape} with an index of shape "
                      "{index_shape}: {rule}; {count} elements moved; {clashes} output cell(s) written more than "
                      "once. Run the notebook to use the controls.").format(**values)
        return L_("Index explorer: {op} along dim={dim} of data of shape {shape} with an index of shape "
                  "{index_shape}: {rule}; {count} elements moved. Run the notebook to use the controls.").format(
            **values)

    def __repr__(self) -> str:
        return self.describe()

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, object]:
        """The live widget, plus a drawing and a readable line for every place that cannot show it."""
        widget_bundle = getattr(self.widget, "_repr_mimebundle_", None)  # ipywidgets 8; 7 displays itself
        bundle: dict[str, object] = dict(widget_bundle() or {}) if widget_bundle else {}
        if "application/vnd.jupyter.widget-view+json" not in bundle and getattr(self.widget, "model_id", None):
            bundle["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": self.widget.model_id,
            }
        bundle["text/plain"] = self.describe()
        if self.image.value:
            bundle["image/png"] = bytes(self.image.value)
        return bundle


def build_explorer(
    input_shape: Sequence[int] = (3, 4),
    index: torch.Tensor | None = None,
    dim: int = 1,
    op: str = "gather",
    seed: int = 0,
) -> IndexExplorer:
    """Build the interactive explorer for data of ``input_shape`` (1-D or 2-D); draws once at once.

    ``index`` defaults to a random valid index of the data's shape (from a CPU generator seeded with
    ``seed``; the Randomize button draws from the same generator). Works without a frontend: set a
    control's ``.value`` (or call ``.randomize.click()``) and the callback runs.
    """
    shape = _check_shape(input_shape)
    check_int(seed, "seed", 0, 2**64 - 1)  # the non-negative seeds manual_seed accepts
    if index is not None and not isinstance(index, torch.Tensor):
        raise TypeError(_("index must be a torch.Tensor or None, got {type}").format(type=type(index).__name__))
    _check_dim(dim, len(shape))
    _check_op(op)
    return IndexExplorer(shape, index, dim, op, seed)
