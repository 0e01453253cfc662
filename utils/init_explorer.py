"""The init explorer: what an initialization scheme does to the signal in a deep stack of layers.

Used by chapter 02 (§ 4). Three layers, each usable without the next:

* :func:`explore` (pure, CPU, seeded) builds a stack of ``depth`` linear layers, the first
  ``fan_in → width`` and the others ``width → width``, initializes every weight with one scheme
  (biases are zero, so the weights alone decide), pushes a batch of standard-normal inputs through it
  and returns an :class:`ExplorerResult`: the first layer's weights, the std the scheme's formula
  predicts for them, and the mean and std of every layer's **pre-activation** ``y_l = W_l x_l`` (the
  layer's output before its activation), with the theoretical std where there is a closed form
  (ReLU and linear).
* :func:`draw` turns one or several results into a matplotlib ``Figure``: the weight histogram and the
  per-layer pre-activation std on a log axis whose range is fixed (:data:`STD_LIMITS`), the same for
  every setting, so that two settings compare honestly. Values beyond the range are drawn on its edge
  with a triangle.
* :func:`build_ui` wires ipywidgets controls to :func:`explore` and :func:`draw` and returns an
  :class:`InitExplorer`; changing any control recomputes (in JupyterLab or programmatically). Where the
  notebook is not live (GitHub, an HTML export, slides) the explorer shows a picture of its current view
  and a one-line summary instead of the widget.

matplotlib and ipywidgets are imported inside the functions that need them, so importing this module
costs nothing beyond torch.

>>> r = explore("kaiming_normal", fan_in=256, width=256, depth=10)
>>> 0.5 < float(r.pre_stds[-1] / r.pre_stds[0]) < 2   # stays about constant
True
>>> float(explore("normal_0.01").pre_stds[-1]) < 1e-8  # collapses
True
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from utils._validate import check_choice, check_int
from utils.i18n import L_, N_, _

if TYPE_CHECKING:  # pragma: no cover - typing only
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "ACTIVATIONS",
    "MAX_DEPTH",
    "SCHEMES",
    "STD_LIMITS",
    "WIDTHS",
    "ExplorerResult",
    "InitExplorer",
    "build_ui",
    "draw",
    "explore",
    "init_weight_",
    "weight_std",
]

#: Scheme name → label shown in the widget (English here and in the figure's legend; the widget and the summary
#: line show it through ``_()``). Every scheme fills a weight of shape ``(fan_out, fan_in)``.
SCHEMES: dict[str, str] = {
    "normal_0.01": N_("normal, std 0.01 (too small)"),
    "normal_1": N_("normal, std 1 (too large)"),
    "default": N_("PyTorch's nn.Linear default"),
    "xavier_uniform": N_("Xavier uniform"),
    "xavier_normal": N_("Xavier normal"),
    "kaiming_uniform": N_("Kaiming uniform"),
    "kaiming_normal": N_("Kaiming normal"),
}

#: Activation applied after every layer. ``"linear"`` means none.
ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "linear")

#: Layer widths the widget offers.
WIDTHS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)

#: The deepest stack the widget offers.
MAX_DEPTH = 30

#: The std axis of :func:`draw`, fixed for every setting: an axis that rescaled to the data would turn
#: Kaiming's nearly flat line (1.4 → 1.1) into a steep fall. Every principled scheme (PyTorch's default,
#: Xavier, Kaiming) stays inside it for every setting the widget offers; only the deliberately bad
#: ``normal_*`` schemes leave it, and their points are then drawn on the edge.
STD_LIMITS: tuple[float, float] = (1e-15, 1e15)

#: The std axis' tick marks: every third power of ten, 1 included, and their labels (10⁻¹⁵ ... 10¹⁵).
_STD_TICKS: tuple[float, ...] = tuple(10.0**k for k in range(-15, 16, 3))
_STD_TICK_LABELS: tuple[str, ...] = tuple("10" + str(k).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
                                          for k in range(-15, 16, 3))

#: E[phi(y)^2] / Var(y) for a zero-mean symmetric y: the share of the *second moment* that the activation
#: keeps, which is what the next layer's variance depends on. (ReLU keeps half of the second moment; of
#: the variance it keeps only 1/2 - 1/(2 pi) ~ 0.34, because its output has a positive mean.)
_SECOND_MOMENT_KEPT = {"relu": 0.5, "linear": 1.0}


_check_choice = check_choice


def weight_std(scheme: str, fan_in: int, fan_out: int, activation: str = "relu") -> float:
    """The std that ``scheme``'s formula gives a weight of shape ``(fan_out, fan_in)``.

    ``default`` is what ``nn.Linear.reset_parameters`` does to the weight, ``kaiming_uniform_(a=sqrt(5))``:
    gain ``sqrt(2 / (1 + 5))``, so U(-1/sqrt(fan_in), 1/sqrt(fan_in)), std ``1/sqrt(3 fan_in)``. Xavier
    uses gain 1 (``nn.init``'s default), std ``sqrt(2/(fan_in+fan_out))``. Kaiming uses the gain of
    ``activation`` in fan-in mode, std ``gain/sqrt(fan_in)``. A uniform and a normal scheme of the same
    family have the same std.
    """
    _check_choice(scheme, "scheme", tuple(SCHEMES))
    _check_choice(activation, "activation", ACTIVATIONS)
    fan_in = check_int(fan_in, "fan_in", 1)
    fan_out = check_int(fan_out, "fan_out", 1)
    if scheme == "normal_0.01":
        return 0.01
    if scheme == "normal_1":
        return 1.0
    if scheme == "default":
        return 1.0 / math.sqrt(3 * fan_in)
    if scheme.startswith("xavier"):
        return math.sqrt(2.0 / (fan_in + fan_out))
    return nn.init.calculate_gain(activation) / math.sqrt(fan_in)


def init_weight_(
    weight: torch.Tensor, scheme: str, activation: str = "relu", generator: torch.Generator | None = None
) -> torch.Tensor:
    """Fill the 2-D ``weight`` in place with ``scheme`` (one of :data:`SCHEMES`) and return it."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise TypeError(_("weight must be a 2-D tensor, got {type}").format(type=type(weight).__name__))
    _check_choice(scheme, "scheme", tuple(SCHEMES))
    _check_choice(activation, "activation", ACTIVATIONS)
    g = generator
    if scheme == "normal_0.01":
        return nn.init.normal_(weight, 0.0, 0.01, generator=g)
    if scheme == "normal_1":
        return nn.init.normal_(weight, 0.0, 1.0, generator=g)
    if scheme == "default":
        return nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=g)
    if scheme == "xavier_uniform":
        return nn.init.xavier_uniform_(weight, generator=g)
    if scheme == "xavier_normal":
        return nn.init.xavier_normal_(weight, generator=g)
    if scheme == "kaiming_uniform":
        return nn.init.kaiming_uniform_(weight, nonlinearity=activation, generator=g)
    return nn.init.kaiming_normal_(weight, nonlinearity=activation, generator=g)


@dataclass(frozen=True)
class ExplorerResult:
    """What :func:`explore` measured. Tensors are on the CPU; ``pre_*`` have one entry per layer.

    ``pre_stds_theory`` is float64 (it spans more than float32's range); the others have the default
    dtype (float32).

    "Pre-activation" is a layer's output before its activation, ``y_l = W_l x_l`` (the biases are
    zero): the quantity the variance recursion of Xavier and Kaiming is about.
    """

    scheme: str
    activation: str
    fan_in: int
    width: int
    depth: int
    weights: torch.Tensor = field(repr=False)
    """The first layer's weights, flattened (``fan_in * width`` values)."""
    weight_std_theory: float
    """The std :func:`weight_std` predicts for those weights."""
    pre_means: torch.Tensor = field(repr=False)
    """Mean of each layer's pre-activation over the batch and the units."""
    pre_stds: torch.Tensor = field(repr=False)
    """Std of each layer's pre-activation."""
    pre_stds_theory: torch.Tensor | None = field(repr=False)
    """The std the variance recursion predicts (ReLU and linear only; ``None`` for tanh)."""

    @property
    def label(self) -> str:
        return SCHEMES[self.scheme]


def explore(
    scheme: str = "kaiming_normal",
    *,
    fan_in: int = 256,
    width: int = 256,
    depth: int = 10,
    activation: str = "relu",
    batch: int = 256,
    seed: int = 0,
) -> ExplorerResult:
    """Initialize a ``depth``-layer stack with ``scheme`` and measure the signal layer by layer.

    The input is ``batch`` rows of standard-normal noise (variance 1). The theory line follows
    ``Var(y_1) = fan_in * s_1**2`` and ``Var(y_l) = width * s_l**2 * k * Var(y_{l-1})``, with ``s_l`` the
    weight std of layer ``l`` and ``k = E[phi(y)**2] / Var(y)`` the share of the second moment the
    activation keeps (1/2 for ReLU, 1 for linear). Everything runs on the CPU (whatever the default
    device) from ``torch.Generator().manual_seed(seed)``, so a result is the same on every machine.
    """
    _check_choice(scheme, "scheme", tuple(SCHEMES))
    _check_choice(activation, "activation", ACTIVATIONS)
    fan_in = check_int(fan_in, "fan_in", 1, 4096)
    width = check_int(width, "width", 1, 4096)
    depth = check_int(depth, "depth", 1, 100)
    batch = check_int(batch, "batch", 2, 65536)
    seed = check_int(seed, "seed", 0, 2**64 - 1)  # what manual_seed accepts

    gen = torch.Generator().manual_seed(seed)
    act = {"relu": torch.relu, "tanh": torch.tanh, "linear": lambda t: t}[activation]
    means, stds, theory = [], [], []
    first_weights = torch.empty(0, device="cpu")
    var = 1.0  # variance of the input
    with torch.no_grad():
        x = torch.randn(batch, fan_in, generator=gen, device="cpu")
        n_in = fan_in
        for layer in range(depth):
            weight = init_weight_(torch.empty(width, n_in, device="cpu"), scheme, activation, generator=gen)
            if layer == 0:
                first_weights = weight.flatten().clone()
            y = x @ weight.T  # the pre-activation
            means.append(y.mean().item())
            stds.append(y.std().item())
            s = weight_std(scheme, n_in, width, activation)
            var = n_in * s**2 * (1.0 if layer == 0 else _SECOND_MOMENT_KEPT.get(activation, math.nan)) * var
            theory.append(math.sqrt(var))
            x = act(y)
            n_in = width
    return ExplorerResult(
        scheme=scheme,
        activation=activation,
        fan_in=fan_in,
        width=width,
        depth=depth,
        weights=first_weights,
        weight_std_theory=weight_std(scheme, fan_in, width, activation),
        pre_means=torch.tensor(means, device="cpu"),
        pre_stds=torch.tensor(stds, device="cpu"),
        pre_stds_theory=None if activation not in _SECOND_MOMENT_KEPT
        else torch.tensor(theory, dtype=torch.float64, device="cpu"),
    )


def _on_axis(values: Sequence[float]) -> tuple[list[float], list[int], list[int]]:
    """``values`` clipped to :data:`STD_LIMITS`, and the positions that fell below / above it.

    0 (an underflow) counts as below; inf and nan (an overflow) count as above.
    """
    low, high = STD_LIMITS
    shown, below, above = [], [], []
    for i, v in enumerate(values):
        v = float(v)
        if math.isnan(v) or v > high:
            above.append(i)
            v = high
        elif v < low:
            below.append(i)
            v = low
        shown.append(v)
    return shown, below, above


def _std_axis(ax: Axes, depth: int) -> None:
    """The fixed log axis for the std, and integer layer ticks."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator

    ax.set_yscale("log")
    ax.set_ylim(*STD_LIMITS)
    ax.yaxis.set_major_locator(FixedLocator(list(_STD_TICKS)))
    # Plain-text superscripts: matplotlib's own log labels are TeX ($10^{-15}$), which it parses again at
    # every redraw (a third of the time a redraw takes); these look the same.
    ax.yaxis.set_major_formatter(FixedFormatter(list(_STD_TICK_LABELS)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlim(0.5, depth + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True, min_n_ticks=1))
    ax.xaxis.set_minor_locator(NullLocator())


def draw(results: ExplorerResult | Sequence[ExplorerResult], fig: Figure | None = None) -> Figure:
    """Draw one or several results: weight histograms (left), std of each layer's pre-activation (right).

    Dashed lines are the theory: the weight std on the left, the variance recursion on the right (drawn
    only where it has a closed form, so not for tanh; the title then says so). The right panel's axis
    is fixed to :data:`STD_LIMITS` whatever the data; a point beyond it sits on the edge as a triangle
    (▼ below, ▲ above). With ``fig=None`` a new pyplot figure is created; otherwise ``fig`` (a matplotlib
    ``Figure``) is cleared and reused.
    """
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    if isinstance(results, ExplorerResult):
        results = [results]
    if not isinstance(results, Sequence) or not results or not all(isinstance(r, ExplorerResult) for r in results):
        raise TypeError(_("results must be an ExplorerResult or a non-empty sequence of them"))
    if fig is not None and not isinstance(fig, Figure):
        raise TypeError(_("fig must be a matplotlib Figure or None, got {type}").format(type=type(fig).__name__))
    if fig is None:
        fig = plt.figure(figsize=(10, 3.6))
    else:
        fig.clear()
    ax_w, ax_a = fig.subplots(1, 2)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    clipped = False
    for i, r in enumerate(results):
        c = colors[i % len(colors)]
        ax_w.hist(r.weights.numpy(), bins=80, density=True, histtype="step", color=c, label=r.label)
        for sign in (-1, 1):
            ax_w.axvline(sign * r.weight_std_theory, color=c, ls="--", lw=0.8)
        layers = list(range(1, r.depth + 1))
        shown, below, above = _on_axis(r.pre_stds.tolist())
        ax_a.plot(layers, shown, "o-", color=c, ms=3, label=r.label)
        for where, marker in ((below, "v"), (above, "^")):
            if where:
                clipped = True
                ax_a.plot([layers[k] for k in where], [shown[k] for k in where], marker, color=c, ms=7,
                          clip_on=False, ls="none")
        if r.pre_stds_theory is not None:
            ax_a.plot(layers, _on_axis(r.pre_stds_theory.tolist())[0], "--", color=c, lw=0.8)
    first = results[0]
    # Titles at y=1.0: where matplotlib puts them anyway (no tick labels above the panels), but given,
    # which spares it measuring every tick label to check: about a tenth of each redraw.
    ax_w.set_title(f"first layer's weights ({first.width}×{first.fan_in}); dashed: ±theory std", fontsize=9, y=1.0)
    ax_w.set_xlabel("weight value")
    ax_w.set_ylabel("density")
    ax_w.legend(fontsize=8)
    _std_axis(ax_a, max(r.depth for r in results))
    activations = ", ".join(sorted({r.activation for r in results}, key=ACTIVATIONS.index))
    has_theory = [r.pre_stds_theory is not None for r in results]
    note = "dashed: theory" if all(has_theory) else "no theory for tanh" if not any(has_theory) else \
        "dashed: theory, none for tanh"
    ax_a.set_title(f"std of each layer's pre-activation, {activations} ({note})", fontsize=9, y=1.0)
    if clipped:
        ax_a.text(0.02, 0.96, "▲ ▼ beyond the axis", transform=ax_a.transAxes, fontsize=8, va="top")
    ax_a.set_xlabel("layer")
    ax_a.set_ylabel("std (log scale)")
    ax_a.grid(True, which="major", alpha=0.3)
    # Fixed margins, wide enough for the fixed tick labels (tight_layout would measure every tick label
    # and double the drawing time); tests/test_init_explorer.py checks that no label overlaps another.
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.14, top=0.91, wspace=0.25)
    return fig


def _png(fig: Figure) -> bytes:
    """``fig`` rendered as PNG bytes, what an ``ipywidgets.Image`` shows."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


class InitExplorer:
    """The live explorer: :attr:`controls`, an :attr:`image`, and the last :attr:`result`.

    Built by :func:`build_ui`. Every change of a control's ``value`` (from the browser or from code)
    calls :meth:`update`, which recomputes :attr:`result`, draws :attr:`figure` and shows it, as a PNG,
    in the :attr:`image` widget. Display the object as a cell's last expression: live, Jupyter shows
    the widget; where widgets cannot be shown (GitHub, an HTML export or slides without widget state,
    a plain-text console) the same output carries a picture of the current view and a one-line
    :meth:`summary`.
    """

    def __init__(self, controls: dict[str, Any], image: Any, widget: Any) -> None:
        self.controls = controls
        self.image = image
        self.widget = widget
        self.result: ExplorerResult | None = None
        self.figure: Figure | None = None
        self.n_updates = 0

    def params(self) -> dict[str, Any]:
        """The keyword arguments of :func:`explore` that the controls currently select."""
        return {name: control.value for name, control in self.controls.items()}

    def update(self, change: object = None) -> ExplorerResult:
        """Recompute with the current controls and redraw; ``change`` is the traitlets event (unused)."""
        import matplotlib.pyplot as plt

        params = self.params()
        scheme = params.pop("scheme")
        self.result = explore(scheme, **params)
        self.n_updates += 1
        fig = draw(self.result)
        try:
            # An Image widget's value is synced state, not printed output: it updates from any
            # callback, in tests, and when a notebook runs without a browser.
            self.image.value = _png(fig)
        finally:
            plt.close(fig)  # the Image widget shows it; pyplot must not show the figure again later
        self.figure = fig
        return self.result

    def summary(self) -> str:
        """One readable line: what the explorer shows now."""
        r = self.result
        if r is None:
            return L_("Init explorer (not drawn yet)")
        return L_("Init explorer: {label}, {activation}, fan_in {fan_in}, width {width}, depth {depth}; "
                  "pre-activation std {first} at layer 1, {last} at layer {depth}. Run the notebook to move the "
                  "controls.").format(
            label=_(r.label), activation=r.activation, fan_in=r.fan_in, width=r.width, depth=r.depth,
            first=f"{r.pre_stds[0].item():.3g}", last=f"{r.pre_stds[-1].item():.3g}",
        )

    def __repr__(self) -> str:
        return self.summary()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude, **kwargs) or {})
        bundle["text/plain"] = self.summary()  # not the container's `VBox(children=(...` repr
        if self.image.value:
            bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle


def build_ui(
    scheme: str = "normal_0.01",
    *,
    fan_in: int = 256,
    width: int = 256,
    depth: int = 10,
    activation: str = "relu",
) -> InitExplorer:
    """Build the explorer's widgets, wire every control to :meth:`InitExplorer.update`, draw once.

    Works without a browser too: ``ui.controls["scheme"].value = "kaiming_normal"`` recomputes
    ``ui.result``.
    """
    import ipywidgets as widgets

    _check_choice(scheme, "scheme", tuple(SCHEMES))
    _check_choice(activation, "activation", ACTIVATIONS)
    for name, value in (("fan_in", fan_in), ("width", width)):
        if check_int(value, name, 1) not in WIDTHS:
            raise ValueError(_("{name} must be one of {choices}, got {value}").format(
                name=name, choices=WIDTHS, value=value))
    depth = check_int(depth, "depth", 1, MAX_DEPTH)

    style = {"description_width": "90px"}
    controls: dict[str, Any] = {
        "scheme": widgets.Dropdown(
            options=[(_(label), name) for name, label in SCHEMES.items()], value=scheme, description=_("init"),
            style=style
        ),
        "activation": widgets.ToggleButtons(options=list(ACTIVATIONS), value=activation, description=_("activation"),
                                            style=style),
        "fan_in": widgets.SelectionSlider(options=list(WIDTHS), value=fan_in, description=_("fan_in (input)"),
                                          continuous_update=False, style=style),
        "width": widgets.SelectionSlider(options=list(WIDTHS), value=width, description=_("width"),
                                         continuous_update=False, style=style),
        "depth": widgets.IntSlider(value=depth, min=1, max=MAX_DEPTH, description=_("depth"), continuous_update=False,
                                   style=style),
    }
    image = widgets.Image(format="png")
    box = widgets.VBox([widgets.HBox([controls["scheme"], controls["activation"]]),
                        widgets.HBox([controls["fan_in"], controls["width"], controls["depth"]]), image])
    ui = InitExplorer(controls, image, box)
    for control in controls.values():
        control.observe(ui.update, names="value")
    ui.update()
    return ui
