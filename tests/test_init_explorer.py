"""The init explorer: its statistics match the theory, its figure is drawn, and its widgets are wired."""

from __future__ import annotations

import math

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
    torch.manual_seed(0)
    layer = nn.Linear(300, 200)
    bound = 1 / math.sqrt(300)
    assert layer.weight.abs().max().item() <= bound
    assert abs(layer.weight.std().item() / ie.weight_std("default", 300, 200) - 1) < 0.02


def test_kaiming_keeps_the_signal_for_relu_and_a_small_normal_kills_it():
    kaiming = ie.explore("kaiming_normal", fan_in=256, width=256, depth=10, activation="relu")
    small = ie.explore("normal_0.01", fan_in=256, width=256, depth=10, activation="relu")
    large = ie.explore("normal_1", fan_in=256, width=256, depth=10, activation="relu")
    assert kaiming.act_stds.shape == small.act_stds.shape == (10,)
    # Kaiming: about constant, at the predicted sqrt(2) (finite width lets it drift a little).
    assert torch.allclose(kaiming.act_stds_theory, torch.full((10,), math.sqrt(2), dtype=torch.float64))
    assert 0.5 < (kaiming.act_stds[-1] / kaiming.act_stds[0]).item() < 2
    # Too small: shrinks by sqrt(256 * 1e-4 / 2) ~ 0.11 a layer; too large: grows by ~11 a layer.
    assert (small.act_stds[-1] / small.act_stds[0]).item() < 1e-6
    assert (large.act_stds[-1] / large.act_stds[0]).item() > 1e6
    # The measurement follows the theory within a factor of 2 at every layer, even over 9 decades.
    for r in (kaiming, small, large):
        assert (r.act_stds.double().log() - r.act_stds_theory.log()).abs().max().item() < math.log(2)
        assert (r.act_means.abs() < 0.2 * r.act_stds).all()


def test_xavier_suits_linear_layers_but_halves_the_variance_under_relu():
    linear = ie.explore("xavier_normal", depth=8, activation="linear")
    relu = ie.explore("xavier_normal", depth=8, activation="relu")
    assert 0.5 < (linear.act_stds[-1] / linear.act_stds[0]).item() < 2
    assert (relu.act_stds[-1] / relu.act_stds[0]).item() < 0.15  # 0.5 ** (7 / 2) ~ 0.09 in theory


def test_tanh_has_no_closed_form_but_is_measured():
    r = ie.explore("kaiming_normal", depth=4, activation="tanh")
    assert r.act_stds_theory is None
    assert r.act_stds.shape == (4,) and (r.act_stds > 0).all()


def test_results_are_reproducible_and_depend_on_the_seed():
    a, b = ie.explore("default", depth=3, seed=1), ie.explore("default", depth=3, seed=1)
    c = ie.explore("default", depth=3, seed=2)
    assert torch.equal(a.weights, b.weights) and torch.equal(a.act_stds, b.act_stds)
    assert not torch.equal(a.weights, c.weights)


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


def test_widget_controls_are_wired_to_the_callback():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    ui = ie.build_ui("normal_0.01", depth=6)
    assert ui.n_updates == 1 and ui.result.scheme == "normal_0.01" and ui.result.depth == 6
    assert (ui.result.act_stds[-1] / ui.result.act_stds[0]).item() < 1e-4

    first_image = ui.image.value
    ui.controls["scheme"].value = "kaiming_normal"      # what a click in the browser does
    assert ui.image.value != first_image                # redrawn
    assert ui.n_updates == 2 and ui.result.scheme == "kaiming_normal"
    assert 0.5 < (ui.result.act_stds[-1] / ui.result.act_stds[0]).item() < 2
    assert torch.equal(ui.result.act_stds, ie.explore("kaiming_normal", depth=6).act_stds)

    for name, value in [("activation", "tanh"), ("fan_in", 64), ("width", 32), ("depth", 3)]:
        ui.controls[name].value = value
        assert getattr(ui.result, name) == value, name
    assert ui.n_updates == 6
    assert ui.result.weights.numel() == 64 * 32 and ui.result.act_stds.shape == (3,)
    assert len(ui.figure.axes) == 2
    assert ui.image.format == "png" and ui.image.value[:8] == b"\x89PNG\r\n\x1a\n"  # what the browser shows
    assert plt.get_fignums() == before, "each redraw must close its pyplot figure"

    ui.controls["depth"].value = 3  # no change, no recompute
    assert ui.n_updates == 6
    assert ui.params() == {"scheme": "kaiming_normal", "activation": "tanh", "fan_in": 64, "width": 32, "depth": 3}
    assert "application/vnd.jupyter.widget-view+json" in ui._repr_mimebundle_()


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [({"scheme": "he"}, ValueError, "scheme"), ({"width": 100}, ValueError, "width"),
     ({"depth": 31}, ValueError, "depth"), ({"fan_in": "64"}, TypeError, "fan_in")],
)
def test_build_ui_rejects_bad_input(kwargs, error, name):
    with pytest.raises(error, match=name):
        ie.build_ui(**kwargs)
