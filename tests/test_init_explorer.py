"""The init explorer: its statistics match the theory, its figure is drawn, and its widgets are wired."""

from __future__ import annotations

import math
import warnings

import matplotlib
import pytest
import torch
from torch import nn

from utils import init_explorer as ie

matplotlib.use("Agg")  # no display needed; the explorer never picks a backend itself


@pytest.mark.parametrize("scheme", list(ie.SCHEMES))
@pytest.mark.parametrize("activation", ie.ACTIVATIONS)
def test_weights_have_the_std_the_formula_gives(scheme, activation):
    r = ie.explore(scheme, fan_in=512, width=256, depth=1, activation=activation)
    assert r.weights.shape == (512 * 256,)
    assert r.weight_std_theory == ie.weight_std(scheme, 512, 256, activation)
    assert abs(r.weights.std().item() / r.weight_std_theory - 1) < 0.02
    assert abs(r.weights.mean().item()) < 4 * r.weight_std_theory / math.sqrt(r.weights.numel())


def test_theory_values_by_hand():
    assert ie.weight_std("default", 300, 7) == pytest.approx(1 / 30)
    assert ie.weight_std("xavier_normal", 300, 100) == pytest.approx(math.sqrt(2 / 400))
    assert ie.weight_std("kaiming_uniform", 200, 7, "relu") == pytest.approx(0.1)
    assert ie.weight_std("kaiming_normal", 200, 7, "linear") == pytest.approx(1 / math.sqrt(200))
    assert ie.weight_std("kaiming_normal", 200, 7, "tanh") == pytest.approx(5 / 3 / math.sqrt(200))


def test_default_scheme_is_what_nn_linear_really_does():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = nn.Linear(300, 200)
        torch.manual_seed(0)
        weight = ie.init_weight_(torch.empty(200, 300), "default")
    assert torch.equal(layer.weight.detach(), weight)  # the same draws: the same distribution, exactly
    assert layer.weight.abs().max().item() <= 1 / math.sqrt(300)
    assert abs(layer.weight.std().item() / ie.weight_std("default", 300, 200) - 1) < 0.02


def test_relu_keeps_half_of_the_second_moment_not_of_the_variance():
    y = torch.randn(200_000, generator=torch.Generator().manual_seed(0))
    x = torch.relu(y)
    assert ie._SECOND_MOMENT_KEPT["relu"] == 0.5
    assert abs(x.pow(2).mean().item() - 0.5) < 0.01
    assert abs(x.var().item() - (0.5 - 1 / (2 * math.pi))) < 0.01  # ~0.34, not 0.5


def test_kaiming_keeps_the_signal_for_relu_and_a_small_normal_kills_it():
    kaiming = ie.explore("kaiming_normal", fan_in=256, width=256, depth=10, activation="relu")
    small = ie.explore("normal_0.01", fan_in=256, width=256, depth=10, activation="relu")
    large = ie.explore("normal_1", fan_in=256, width=256, depth=10, activation="relu")
    assert kaiming.pre_stds.shape == small.pre_stds.shape == (10,)
    # Kaiming: about constant, at the predicted sqrt(2) (finite width lets it drift a little).
    assert torch.allclose(kaiming.pre_stds_theory, torch.full((10,), math.sqrt(2), dtype=torch.float64))
    assert 0.5 < (kaiming.pre_stds[-1] / kaiming.pre_stds[0]).item() < 2
    # Too small: shrinks by sqrt(256 * 1e-4 / 2) ~ 0.11 a layer; too large: grows by ~11 a layer.
    assert (small.pre_stds[-1] / small.pre_stds[0]).item() < 1e-6
    assert (large.pre_stds[-1] / large.pre_stds[0]).item() > 1e6
    # The measurement follows the theory within a factor of 2 at every layer, even over 9 decades.
    for r in (kaiming, small, large):
        assert (r.pre_stds.double().log() - r.pre_stds_theory.log()).abs().max().item() < math.log(2)
        assert (r.pre_means.abs() < 0.2 * r.pre_stds).all()


def test_xavier_suits_linear_layers_but_halves_the_variance_under_relu():
    linear = ie.explore("xavier_normal", depth=8, activation="linear")
    relu = ie.explore("xavier_normal", depth=8, activation="relu")
    assert 0.5 < (linear.pre_stds[-1] / linear.pre_stds[0]).item() < 2
    assert (relu.pre_stds[-1] / relu.pre_stds[0]).item() < 0.15  # 0.5 ** (7 / 2) ~ 0.09 in theory


def test_tanh_has_no_closed_form_but_is_measured():
    r = ie.explore("kaiming_normal", depth=4, activation="tanh")
    assert r.pre_stds_theory is None
    assert r.pre_stds.shape == (4,) and (r.pre_stds > 0).all()


def test_results_are_reproducible_and_depend_on_the_seed():
    a, b = ie.explore("default", depth=3, seed=1), ie.explore("default", depth=3, seed=1)
    c = ie.explore("default", depth=3, seed=2)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.pre_stds, b.pre_stds)
    assert not torch.equal(a.weights, c.weights)


def test_explore_runs_on_the_cpu_whatever_the_default_device():
    expected = ie.explore("kaiming_normal", fan_in=16, width=16, depth=3, seed=2**64 - 1)
    with torch.device("meta"):
        r = ie.explore("kaiming_normal", fan_in=16, width=16, depth=3, seed=2**64 - 1)
    for name in ("weights", "pre_means", "pre_stds", "pre_stds_theory"):
        assert getattr(r, name).device.type == "cpu" and torch.equal(getattr(r, name), getattr(expected, name))
    assert (r.weights.dtype, r.pre_stds.dtype, r.pre_stds_theory.dtype) == (torch.float32,) * 2 + (torch.float64,)


def test_explore_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ie.explore("kaiming_uniform", depth=2)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"scheme": "he"}, ValueError, "scheme"),
        ({"scheme": 3}, TypeError, "scheme"),
        ({"activation": "gelu"}, ValueError, "activation"),
        ({"fan_in": 0}, ValueError, "fan_in"),
        ({"width": 2.0}, TypeError, "width"),
        ({"depth": True}, TypeError, "depth"),
        ({"depth": 0}, ValueError, "depth"),
        ({"batch": 1}, ValueError, "batch"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 2**64}, ValueError, "seed"),  # beyond what manual_seed accepts
    ],
)
def test_explore_rejects_bad_input(kwargs, error, name):
    with pytest.raises(error, match=name):
        ie.explore(**kwargs)


def test_init_weight_rejects_bad_input():
    with pytest.raises(TypeError, match="weight"):
        ie.init_weight_(torch.empty(3), "default")
    with pytest.raises(ValueError, match="scheme"):
        ie.init_weight_(torch.empty(3, 3), "orthogonal")


def test_draw_returns_a_figure_with_both_panels():
    import matplotlib.pyplot as plt

    results = [ie.explore(s, depth=4) for s in ("normal_0.01", "kaiming_normal")]
    fig = ie.draw(results)
    try:
        ax_w, ax_a = fig.axes
        assert len(ax_a.get_lines()) == 4  # measured and theory, per result
        assert ax_a.get_yscale() == "log"
        assert [t.get_text() for t in ax_w.get_legend().get_texts()] == [r.label for r in results]
        again = ie.draw(ie.explore("default", depth=2, activation="tanh"), fig=fig)
        assert again is fig and len(fig.axes) == 2 and len(fig.axes[1].get_lines()) == 1
    finally:
        plt.close(fig)
    with pytest.raises(TypeError, match="results"):
        ie.draw([])
    with pytest.raises(TypeError, match="results"):
        ie.draw("kaiming_normal")
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        ie.draw(results, fig=123)


# --- the figure tells the truth (issue: an axis that rescaled made a flat line look like a fall) ---

def _std_panel(results):
    import matplotlib.pyplot as plt

    fig = ie.draw(results)
    plt.close(fig)
    return fig, fig.axes[1]


def _visible_ticks(axis, low, high):
    return [t for t in axis.get_ticklocs() if low <= t <= high]


@pytest.mark.parametrize(
    "settings",
    [
        [("kaiming_normal", "relu", 10)],
        [("normal_0.01", "relu", 10)],
        [("default", "linear", 3)],
        [("kaiming_normal", "tanh", 10)],
        [("normal_1", "relu", 20)],  # leaves the axis at the top
        [("normal_0.01", "relu", 10), ("default", "relu", 10), ("kaiming_normal", "relu", 10)],
    ],
)
def test_the_std_axis_is_the_same_for_every_setting(settings):
    results = [ie.explore(s, fan_in=64, width=64, depth=d, activation=a) for s, a, d in settings]
    _, ax = _std_panel(results)
    assert ax.get_yscale() == "log"
    assert ax.get_ylim() == pytest.approx(ie.STD_LIMITS)
    low, high = ie.STD_LIMITS
    assert _visible_ticks(ax.yaxis, low, high) == pytest.approx([10.0**k for k in range(-15, 16, 3)])
    labels = [t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
    assert labels == ["10⁻¹⁵", "10⁻¹²", "10⁻⁹", "10⁻⁶", "10⁻³", "10⁰", "10³", "10⁶", "10⁹", "10¹²", "10¹⁵"]
    for line in ax.get_lines():  # every point drawn lies on the axis (values beyond it sit on its edge)
        y = line.get_ydata()
        assert all(low <= v <= high for v in y)


def test_kaiming_looks_flat_next_to_a_collapse():
    # Kaiming's std drifts from 1.4 to 1.1 over 10 layers: on the fixed axis that is a small fraction of
    # the height, while the too-small normal falls through most of it.
    kaiming, small = (ie.explore(s, depth=10) for s in ("kaiming_normal", "normal_0.01"))
    span = math.log10(ie.STD_LIMITS[1] / ie.STD_LIMITS[0])
    fall = [math.log10(r.pre_stds[0].item() / r.pre_stds[-1].item()) / span for r in (kaiming, small)]
    assert fall[0] < 0.01 and fall[1] > 0.25


@pytest.mark.parametrize("activation", ie.ACTIVATIONS)
@pytest.mark.parametrize("fan_in", ie.WIDTHS)
def test_principled_schemes_stay_inside_the_axis_at_the_narrowest_width(fan_in, activation):
    # What STD_LIMITS promises, at the extreme settings: the narrowest layers fluctuate most (a sweep of
    # every width up to 256 found its lowest std, 7.9e-14 for "default"/relu/fan_in 64, at width 16), and the
    # deepest stack covers every depth (a shallower stack's stds are its first layers). Every fan_in.
    for scheme in ("default", "xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal"):
        r = ie.explore(scheme, fan_in=fan_in, width=16, depth=ie.MAX_DEPTH, activation=activation)
        assert (r.pre_stds > 10 * ie.STD_LIMITS[0]).all() and (r.pre_stds < ie.STD_LIMITS[1] / 10).all(), scheme
    shallow = ie.explore(scheme, fan_in=fan_in, width=16, depth=5, activation=activation)
    assert torch.equal(shallow.pre_stds, r.pre_stds[:5])


def test_points_beyond_the_axis_sit_on_its_edge_as_triangles():
    import math as m

    shown, below, above = ie._on_axis([1e-20, 0.0, 1.0, 1e20, m.inf, m.nan])
    assert shown == [1e-15, 1e-15, 1.0, 1e15, 1e15, 1e15] and below == [0, 1] and above == [3, 4, 5]
    fig, ax = _std_panel(ie.explore("normal_1", fan_in=64, width=64, depth=20))
    markers = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert len(markers) == 1 and set(markers[0].get_ydata()) == {ie.STD_LIMITS[1]}
    assert any("beyond the axis" in t.get_text() for t in ax.texts)
    _, inside = _std_panel(ie.explore("kaiming_normal", fan_in=64, width=64, depth=5))
    assert not inside.texts and all(line.get_marker() not in ("^", "v") for line in inside.get_lines())


@pytest.mark.parametrize("depth", [1, 2, 7, 10, 30])
def test_the_layer_axis_shows_integer_ticks_only(depth):
    _, ax = _std_panel(ie.explore("kaiming_normal", fan_in=16, width=16, depth=depth))
    low, high = ax.get_xlim()
    assert (low, high) == (0.5, depth + 0.5)
    ticks = _visible_ticks(ax.xaxis, low, high)
    assert ticks and all(float(t).is_integer() and 1 <= t <= depth for t in ticks)


def test_the_title_mentions_a_dashed_theory_only_when_one_is_drawn():
    def dashed(ax):
        return [line for line in ax.get_lines() if line.get_linestyle() == "--"]

    _, relu = _std_panel(ie.explore("kaiming_normal", fan_in=16, width=16, depth=3))
    assert "dashed: theory" in relu.get_title() and len(dashed(relu)) == 1
    _, tanh = _std_panel(ie.explore("kaiming_normal", fan_in=16, width=16, depth=3, activation="tanh"))
    assert "dashed" not in tanh.get_title() and "no theory for tanh" in tanh.get_title() and not dashed(tanh)
    both = [ie.explore("kaiming_normal", fan_in=16, width=16, depth=3, activation=a) for a in ("relu", "tanh")]
    _, mixed = _std_panel(both)
    assert "none for tanh" in mixed.get_title() and len(dashed(mixed)) == 1
    assert "pre-activation" in relu.get_title()  # what is plotted: W·x, before the activation


def _overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("dpi", [90, 100])  # the widget's PNG, and the inline figure
def test_no_label_overlaps_a_tick_label_and_all_text_fits(dpi):
    results = [ie.explore(s, fan_in=64, width=64, depth=d) for s, d in (("normal_1", 20), ("normal_0.01", 10))]
    fig, _ = _std_panel(results)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)  # the figure was closed: draw it on a fresh Agg canvas
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        canvas.draw()
    assert not [str(w.message) for w in caught if "missing from" in str(w.message)]  # every glyph in the font
    renderer = canvas.get_renderer()
    figure_box = fig.bbox
    ticks = [t.get_window_extent(renderer) for ax in fig.axes
             for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_visible() and t.get_text()]
    assert len(ticks) > 20
    for ax in fig.axes:
        labels = [ax.yaxis.label, ax.xaxis.label, ax.title]
        for label in labels:
            box = label.get_window_extent(renderer)
            assert not any(_overlaps(box, tick) for tick in ticks), label.get_text()
            assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1 and box.y1 <= figure_box.y1, label.get_text()
    # the right panel's tick labels and y label stay clear of the left panel
    left, right = fig.axes
    assert right.yaxis.label.get_window_extent(renderer).x0 > left.get_window_extent(renderer).x1
    right_ticks = [t.get_window_extent(renderer) for t in right.get_yticklabels() if t.get_text()]
    assert all(box.x0 > left.get_window_extent(renderer).x1 for box in right_ticks)
    titles = [ax.title.get_window_extent(renderer) for ax in fig.axes]
    assert not _overlaps(*titles)


def test_widget_controls_are_wired_to_the_callback():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    ui = ie.build_ui("normal_0.01", depth=6)
    assert ui.n_updates == 1 and ui.result.scheme == "normal_0.01" and ui.result.depth == 6
    assert (ui.result.pre_stds[-1] / ui.result.pre_stds[0]).item() < 1e-4

    first_image = ui.image.value
    ui.controls["scheme"].value = "kaiming_normal"      # what a click in the browser does
    assert ui.image.value != first_image                # redrawn
    assert ui.n_updates == 2 and ui.result.scheme == "kaiming_normal"
    assert 0.5 < (ui.result.pre_stds[-1] / ui.result.pre_stds[0]).item() < 2
    assert torch.equal(ui.result.pre_stds, ie.explore("kaiming_normal", depth=6).pre_stds)

    for name, value in [("activation", "tanh"), ("fan_in", 64), ("width", 32), ("depth", 3)]:
        ui.controls[name].value = value
        assert getattr(ui.result, name) == value, name
    assert ui.n_updates == 6
    assert ui.result.weights.numel() == 64 * 32 and ui.result.pre_stds.shape == (3,)
    assert len(ui.figure.axes) == 2
    assert ui.image.format == "png" and ui.image.value[:8] == b"\x89PNG\r\n\x1a\n"  # what the browser shows
    assert plt.get_fignums() == before, "each redraw must close its pyplot figure"

    ui.controls["depth"].value = 3  # no change, no recompute
    assert ui.n_updates == 6
    assert ui.params() == {"scheme": "kaiming_normal", "activation": "tanh", "fan_in": 64, "width": 32, "depth": 3}
    assert "application/vnd.jupyter.widget-view+json" in ui._repr_mimebundle_()


def test_where_widgets_cannot_show_the_explorer_shows_a_picture_and_a_line():
    import base64

    ui = ie.build_ui("kaiming_normal", fan_in=64, width=64, depth=4)
    bundle = ui._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # live: the widget
    text = bundle["text/plain"]  # a console, or a page without a picture
    assert "VBox" not in text and "children" not in text
    assert text.startswith("Init explorer: Kaiming normal, relu, fan_in 64, width 64, depth 4")
    assert f"{ui.result.pre_stds[-1].item():.3g} at layer 4" in text
    assert repr(ui) == text
    png = base64.b64decode(bundle["image/png"])  # GitHub, an HTML export, slides: the current view
    assert png == ui.image.value and png[:8] == b"\x89PNG\r\n\x1a\n"
    ui.controls["activation"].value = "tanh"
    assert "tanh" in ui._repr_mimebundle_()["text/plain"]
    assert base64.b64decode(ui._repr_mimebundle_()["image/png"]) == ui.image.value != png


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [({"scheme": "he"}, ValueError, "scheme"), ({"width": 100}, ValueError, "width"),
     ({"depth": ie.MAX_DEPTH + 1}, ValueError, "depth"), ({"fan_in": "64"}, TypeError, "fan_in")],
)
def test_build_ui_rejects_bad_input(kwargs, error, name):
    with pytest.raises(error, match=name):
        ie.build_ui(**kwargs)
