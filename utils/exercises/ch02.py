"""Checks for chapter 02 · Parameters: access, initialization, lazy init.

Each check builds its own small, seeded networks on the CPU and leaves the global random generator as it
found it. Every answer runs on a flat network, on a nested one (a layer a level down, or inside a custom
module) and on a bare layer given as the network itself, and Exercises 1 and 3 on layers with and without a
bias: a walk that stops at the top level, or that acts only on a container's children, shows. One layer (or
the example input) is float64, a stand-in for "another device": an answer that assigns a freshly made tensor
keeps neither the layer's dtype nor its device, and float64 shows it on any machine. Exercises 2 and 3 also
run the answer on a network and an example on ``meta`` (no data, no cost), where a dry run on a tensor made
with the default device fails as it would on a GPU. Every initialized parameter must still be trainable
(requires grad, not an inference tensor). Distributions are checked by their family (a Kolmogorov–Smirnov
distance to the uniform or normal law), not only by their std. A hint says what was observed
(:class:`~utils.exercises.observe.TorchCalls` sees what the answer asked torch for, outside the network's own
forward); where the cause cannot be told from that, it says so.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections import Counter
from collections.abc import Callable

import torch
from torch import nn

from utils.checks import exercise, expect, learner_code
from utils.exercises.common import ks_distance, ks_limit, translated
from utils.exercises.observe import TorchCalls
from utils.i18n import N_, _

__all__ = ["check_init_xavier", "check_initialize_lazy", "check_lazy_optimizer"]


class _Projection(nn.Linear):
    """A subclass of nn.Linear, like the ``out_proj`` inside ``nn.MultiheadAttention`` (whose class is
    ``NonDynamicallyQuantizableLinear``): its name does not say "Linear", so a test on the name misses it."""


def _expect_trainable(layers: dict[int | str, nn.Module]) -> None:
    """Every parameter of these layers still requires grad, and none is an inference tensor."""
    for i, layer in layers.items():
        for name, p in layer.named_parameters():
            expect(not p.is_inference(),
                   _("layer {index}'s {name} is an inference tensor, which autograd can never train: the dry run ran "
                     "under torch.inference_mode(), so the lazy layer made its parameters there. Run it plainly or "
                     "under torch.no_grad()").format(index=i, name=name))
            expect(p.requires_grad,
                   _("layer {index}'s {name} no longer requires grad, so it would never train: leave requires_grad as "
                     "it is. To fill a parameter in place, use nn.init (it turns gradient recording off by itself) "
                     "or make the edit inside `with torch.no_grad():`").format(index=i, name=name))


def _kept(net: nn.Sequential, indices: tuple[int, ...]) -> dict[int, list[torch.Tensor]]:
    """Copies of the parameters of the modules ``net[i]`` that the answer must leave alone."""
    return {i: [p.detach().clone() for p in net[i].parameters()] for i in indices}


def _changed(net: nn.Sequential, kept: dict[int, list[torch.Tensor]]) -> list[str]:
    """The class names of the kept modules whose parameters changed (or were removed or added)."""
    return [type(net[i]).__name__ for i, before in kept.items()
            if not (len(now := list(net[i].parameters())) == len(before) and all(map(torch.equal, now, before)))]


def _expect_dry_run_where_the_example_is(answer: Callable[..., object], call: str, net: nn.Sequential) -> None:
    """Run ``answer(net, example)`` with ``net`` (lazy, on meta, first layer LazyLinear(8)) and a (4, 5) example
    on meta, a stand-in for a GPU: the dry run must have given the first layer its (8, 5) weight there."""
    error = None
    with _watching(net) as seen:
        try:
            answer(net, torch.empty(4, 5, device="meta"))
        except Exception as err:  # noqa: BLE001 - raised again below, as a hint that names what was seen
            error = err
    made = [name for name, kwargs, _args, t in seen.made if kwargs.get("device") is None and t.device.type == "cpu"]
    advice = (_("your function made a tensor with torch.{function} without device=, on the default device (the "
                "CPU), while the network and the example are elsewhere: run the dry run on example_input "
                "itself").format(function=made[0]) if made
              else _("run the dry run on example_input itself, where it is"))
    with learner_code(_("{call} with the network and the example on the 'meta' device").format(call=call), advice):
        if error is not None:
            raise error
    expect(net[0].weight.shape == (8, 5), _("on the 'meta' device, the dry run did not run: {advice}").format(
        advice=advice))


#: Errors an answer raises when the network is a single layer, not a container.
_NOT_A_CONTAINER = {
    "object is not iterable": N_("the network here is a single layer, not a container, and `for m in net` needs a "
                                 "container: walk it with net.modules() or net.apply(...), which include net "
                                 "itself"),
    "object is not subscriptable": N_("the network here is a single layer, not a container, and net[i] needs a "
                                      "container: walk it with net.modules() or net.apply(...), which include net "
                                      "itself"),
}


def _std_matches(weight: torch.Tensor, std: float) -> bool:
    """The sample std of ``weight`` is within five standard errors of ``std`` (and the mean near 0)."""
    w = weight.detach().double()
    n = w.numel()
    return abs(w.std().item() - std) <= 5 * std / math.sqrt(2 * n) and abs(w.mean().item()) <= 5 * std / math.sqrt(n)


def _standardized(layers: list[nn.Linear], std: Callable[[nn.Linear], float]) -> torch.Tensor:
    """Every layer's weights divided by the std the scheme gives that layer, pooled into one sample."""
    return torch.cat([m.weight.detach().double().flatten() / std(m) for m in layers])


@contextlib.contextmanager
def _watching(net: nn.Module):
    """:class:`TorchCalls` over an answer, paused inside the network's forward: what a dry run does there (a lazy
    layer's default init) is torch's, not the answer's."""
    with TorchCalls() as seen:
        handles = (net.register_forward_pre_hook(lambda module, args: setattr(seen, "paused", True), prepend=True),
                   net.register_forward_hook(lambda module, args, out: setattr(seen, "paused", False)))
        try:
            yield seen
        finally:
            for handle in handles:
                handle.remove()


def _swap(seen: TorchCalls) -> str:
    """How a parameter's data was swapped for another tensor, as far as the check saw."""
    return (_("your function assigned a new tensor to .data, which swaps it in instead of filling the "
              "parameter's own.") if ".data=" in seen.names
            else _("its data was swapped for another tensor (how is not known from here)."))


# ---------------------------------------------------------------- Exercise 1


def _xavier_std(m: nn.Linear) -> float:
    return math.sqrt(2.0 / (m.in_features + m.out_features))


#: Errors an Exercise 1 answer raises, and what each tells.
_XAVIER_ERRORS = {
    "object has no attribute 'weight'": N_("your function reached a module without a weight (ReLU has none): test "
                                           "the module first, isinstance(m, nn.Linear)"),
    "object has no attribute 'bias'": N_("your function reached a module without a bias (ReLU has none): test the "
                                         "module first, isinstance(m, nn.Linear)"),
    "'NoneType' object has no attribute": N_("a None reached nn.init: a layer built with bias=False has m.bias None. "
                                             "Skip its bias (if m.bias is not None), but still initialize its weight"),
    "fewer than 2 dimensions": N_("Xavier was given a tensor of fewer than 2 dimensions (a bias, or LayerNorm's 1-D "
                                  "weight): Xavier fills a 2-D weight, a bias needs nn.init.zeros_, and the test "
                                  "isinstance(m, nn.Linear) keeps other layers out"),
}


class _Block(nn.Module):
    """A custom block, not a container class: a LayerNorm and a linear layer kept as attributes."""

    def __init__(self, width: int, out: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, out)


def _why_left_alone(init_fn: Callable[[nn.Module], object], what: str, *, bare: bool) -> str:
    """The hint for ``what``, a layer ``init_fn`` left as it was, with why where a probe can tell: it may act only
    on a container's children. Probed on fresh layers: one given to apply itself, one inside an nn.Sequential."""
    changed = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        for wrap in (False, True):
            layer = nn.Linear(40, 30)
            before = layer.weight.detach().clone()
            try:
                (nn.Sequential(layer) if wrap else layer).apply(init_fn)
            except Exception:  # noqa: BLE001 - a probe: an error here tells nothing more
                return _("{layer} was left as it was, while the layers of a flat nn.Sequential were initialized: "
                         "why is not known from here. apply calls your function on every module, the root "
                         "included").format(layer=what)
            changed.append(not torch.equal(layer.weight, before))
    if changed == [False, True] and bare:
        return _("{layer} was left as it was, while the layers of a flat nn.Sequential were initialized; the same "
                 "layer inside an nn.Sequential is initialized: your function initializes a container's children, "
                 "not m itself. apply already calls it on every module, at every depth and on the root: test m "
                 "itself with isinstance(m, nn.Linear) and fill m.weight and m.bias").format(layer=what)
    if changed == [False, True]:
        return _("{layer} was left as it was, while the layers of a flat nn.Sequential were initialized. A bare "
                 "nn.Linear given to apply is left as it is too, while the same layer inside an nn.Sequential is "
                 "initialized: your function initializes a container's children, not m itself. apply already "
                 "calls it on every module, at every depth and on the root: test m itself with "
                 "isinstance(m, nn.Linear) and fill m.weight and m.bias").format(layer=what)
    return _("{layer} was left as it was, while the layers of a flat nn.Sequential were initialized: why is not "
             "known from here. apply calls your function on every module, at every depth and on the root: act on "
             "m itself whenever isinstance(m, nn.Linear)").format(layer=what)


def _expect_xavier_layer(what: str, layer: nn.Linear, *, has_bias: bool) -> None:
    """``layer`` has Xavier-uniform weights (std and bound) and, if it has a bias, a zero one."""
    weight = getattr(layer, "weight", None)
    expect(isinstance(weight, torch.Tensor), _("{layer} has no weight tensor now: fill it in place with "
                                               "nn.init.xavier_uniform_(m.weight)").format(layer=what))
    if has_bias:
        expect(getattr(layer, "bias", None) is not None,
               _("{layer}'s bias is None now: assigning m.bias = None removes the parameter instead of filling it. "
                 "Fill it in place with nn.init.zeros_(m.bias)").format(layer=what))
        expect(bool((layer.bias == 0).all()),
               _("{layer} still has non-zero biases: set them with nn.init.zeros_(m.bias)").format(layer=what))
    std = _xavier_std(layer)
    expect(_std_matches(weight, std),
           _("{layer} has weights of std {std}; Xavier gives sqrt(2 / (fan_in + fan_out)) = "
             "{expected}. Use nn.init.xavier_uniform_ with its default gain").format(
                 layer=what, std=format(weight.std().item(), ".4f"), expected=format(std, ".4f")))
    expect(weight.abs().max().item() <= math.sqrt(3) * std * (1 + 1e-6),
           _("{layer} has weights beyond the Xavier-uniform bound sqrt(6 / (fan_in + fan_out)) = {bound}: "
             "use the uniform variant (xavier_uniform_), not xavier_normal_").format(
                 layer=what, bound=format(math.sqrt(3) * std, ".4f")))


def _kind(layer: nn.Linear) -> str:
    return _("a subclass of nn.Linear") if type(layer) is not nn.Linear else _("an nn.Linear")


def _layer_label(i: int, layer: nn.Linear) -> str:
    """How a hint names the linear layer ``net[i]``: its index, class and sizes."""
    return _("layer {index} ({kind}, {n_in}→{n_out})").format(
        index=i, kind=_kind(layer), n_in=layer.in_features, n_out=layer.out_features)


def _apply_on_mixed_network(init_fn: Callable[[nn.Module], object]):
    """``net.apply(init_fn)`` on a seeded mix of layers: the net, the others' values, the parameters, the calls."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # net.apply only visits the modules: the last two (not linear, with weights of 3 and 2 dimensions)
        # never run, they are there to be left alone
        net = nn.Sequential(
            nn.Linear(300, 200), nn.ReLU(), _Projection(200, 150), nn.LayerNorm(150),
            nn.Linear(150, 100, dtype=torch.float64), nn.Conv1d(4, 4, 3), nn.Embedding(10, 8),
        )
        with torch.no_grad():
            for p, value in zip(list(net[3].parameters()) + list(net[5:].parameters()), (2.0, 0.5, 0.25, 0.75, 1.5),
                                strict=True):
                p.fill_(value)
        others = _kept(net, (3, 5, 6))  # to be left alone
        before = {name: (p, p.dtype, p.detach().clone(), p.data_ptr()) for name, p in net.named_parameters()}
        with learner_code(
            _("net.apply(init_xavier) on a network of Linear, ReLU, a subclass of nn.Linear, LayerNorm, Conv1d and "
              "Embedding"),
            _("not known from here: apply calls your function on the ReLU, LayerNorm, Conv1d and Embedding as well "
              "as on the linear layers"),
            translated(_XAVIER_ERRORS),
        ), TorchCalls() as seen:
            net.apply(init_fn)
    return net, others, before, seen


def _expect_same_parameters(i: int, layer: nn.Linear, before: dict, seen: TorchCalls) -> None:
    """Layer ``i``'s weight and bias are still there, the same Parameter objects, with the dtype they had."""
    what = _layer_label(i, layer)
    for name in ("weight", "bias"):
        fill = "nn.init.xavier_uniform_(m.weight)" if name == "weight" else "nn.init.zeros_(m.bias)"
        expect(getattr(layer, name, None) is not None,
               _("{layer}'s {name} is None now: assigning m.{name} = None removes the parameter instead of "
                 "filling it. Fill it in place with {fill}").format(layer=what, name=name, fill=fill))
        parameter, dtype, _values, _memory = before[f"{i}.{name}"]
        expect(getattr(layer, name) is parameter,
               _("{layer}'s {name} is a new Parameter object: fill the layer's own tensor in place "
                 "(nn.init.xavier_uniform_(m.weight), nn.init.zeros_(m.bias)); an optimizer or a tie made "
                 "earlier still holds the old one").format(layer=what, name=name))
        expect(getattr(layer, name).dtype == dtype,
               _("{layer}'s {name} is {dtype} now: {swap} Fill the layer's own tensor in place with nn.init, which "
                 "keeps its dtype and device").format(swap=_swap(seen),
                     layer=_("layer {index} ({kind}, {n_in}→{n_out}, {dtype})").format(
                         index=i, kind=_kind(layer), n_in=layer.in_features, n_out=layer.out_features, dtype=dtype),
                     name=name, dtype=getattr(layer, name).dtype))


def _expect_own_memory(i: int, layer: nn.Linear, before: dict, seen: TorchCalls) -> None:
    """Layer ``i``'s weight and bias still use the memory they were built with."""
    for name in ("weight", "bias"):
        expect(getattr(layer, name).data_ptr() == before[f"{i}.{name}"][3],
               _("{layer}'s {name} is the same Parameter but no longer uses its own memory: {swap} A state_dict() "
                 "or a view taken earlier no longer follows it. Fill it in place: nn.init.xavier_uniform_(m.weight), "
                 "nn.init.zeros_(m.bias)").format(layer=_layer_label(i, layer), name=name, swap=_swap(seen)))


def _expect_initialized(i: int, layer: nn.Linear, before: dict) -> None:
    """Layer ``i`` was not left as it was built (it is linear: layer 0, a subclass, a float64 one)."""
    if not all(torch.equal(getattr(layer, name), before[f"{i}.{name}"][2]) for name in ("weight", "bias")):
        return
    if i == 0:
        why = _("why is not known from here. Check that your test matches an nn.Linear and that you fill "
                "m.weight and m.bias themselves (nn.init's functions work in place), not a copy")
    elif i == 2:
        why = _("it differs from layer 0 by its class. Test the layer with isinstance(m, nn.Linear), not "
                "type(m) == nn.Linear or its class name (a subclass need not have 'Linear' in its name)")
    else:
        why = _("it differs from layer 0 by its dtype, float64, and its place; why your function skipped it "
                "is not known from here")
    expect(False, (_("{layer} was left as it was: net.apply(init_xavier) changed neither its weight nor its "
                     "bias: {why}") if i == 0 else
                   _("{layer} was left as it was: net.apply(init_xavier) changed neither its weight nor its "
                     "bias, while layer 0 (an nn.Linear) was initialized: {why}")).format(
                         layer=_layer_label(i, layer), why=why))


def _expect_xavier_values(i: int, layer: nn.Linear) -> None:
    """Layer ``i`` has zero biases, and weights of Xavier's std within the Xavier-uniform bound."""
    expect(bool((layer.bias == 0).all()),
           _("{layer} still has non-zero biases: set them with nn.init.zeros_(m.bias)").format(
               layer=_layer_label(i, layer)))
    std = _xavier_std(layer)
    expect(_std_matches(layer.weight, std),
           _("layer {index}'s weights have std {std}; Xavier gives "
             "sqrt(2 / (fan_in + fan_out)) = {expected}. Use nn.init.xavier_uniform_ with its default gain").format(
                 index=i, std=format(layer.weight.std().item(), ".4f"), expected=format(std, ".4f")))
    expect(layer.weight.abs().max().item() <= math.sqrt(3) * std * (1 + 1e-6),
           _("layer {index}'s weights exceed the Xavier-uniform bound sqrt(6 / (fan_in + fan_out)) = "
             "{bound}: use the uniform variant (xavier_uniform_), not xavier_normal_").format(
                 index=i, bound=format(math.sqrt(3) * std, ".4f")))


def _expect_uniform_law(linears: list[nn.Linear]) -> None:
    """The weights, pooled and standardized, follow a uniform law on [-b, b] (a KS test)."""
    pooled = _standardized(linears, _xavier_std) / math.sqrt(3)  # U(-1, 1) if the answer is right
    expect(ks_distance(pooled, lambda x: ((x + 1) / 2).clamp(0, 1)) <= ks_limit(pooled.numel()),
           _("the weights have the right std and stay inside the bound, but they are not uniformly distributed "
             "on [-b, b]: Xavier-uniform is a uniform law, use nn.init.xavier_uniform_"))


def _expect_others_left_alone(net: nn.Sequential, others: dict[int, list[torch.Tensor]]) -> None:
    """The modules that are not linear (LayerNorm, Conv1d, Embedding) keep their values."""
    changed = _changed(net, others)
    expect(not changed,
           _("the {modules} changed: initialize linear layers only and leave every other module alone; "
             "isinstance(m, nn.Linear) is the test").format(
                 modules=functools.reduce(lambda modules, module: _("{modules} and the {module}").format(
                     modules=modules, module=module), changed) if changed else ""))


def _expect_bias_free_layer(init_fn: Callable[[nn.Module], object]) -> None:
    """A linear layer built with bias=False (m.bias None) gets Xavier weights: the answer skips its bias only."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        no_bias = nn.Sequential(nn.Linear(200, 100, bias=False))
        with learner_code(
            _("net.apply(init_xavier) on a network with an nn.Linear(200, 100, bias=False)"),
            _("not known from here: what is new in this network is a linear layer built with bias=False"),
            translated(_XAVIER_ERRORS),
        ):
            no_bias.apply(init_fn)
    weight = getattr(no_bias[0], "weight", None)
    expect(isinstance(weight, torch.Tensor) and weight.shape == (100, 200) and _std_matches(weight, math.sqrt(2 / 300)),
           _("an nn.Linear(200, 100, bias=False) did not get Xavier weights: a layer without a bias is a linear layer "
             "too. Test m.bias is not None only around nn.init.zeros_(m.bias), and initialize every weight"))


def _expect_every_depth_and_root(init_fn: Callable[[nn.Module], object]) -> None:
    """Linear layers at every depth and bare ones get Xavier values; a nested LayerNorm is left alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        nested = nn.Sequential(nn.Sequential(nn.Linear(120, 240), nn.ReLU()), _Block(240, 60))
        with torch.no_grad():
            nested[1].norm.weight.fill_(2.0)
            nested[1].norm.bias.fill_(0.5)
        norm = [p.detach().clone() for p in nested[1].norm.parameters()]
        bare, bare_no_bias = nn.Linear(250, 90), nn.Linear(90, 250, bias=False)
        where = {
            _("layer 0.0 (an nn.Linear, 120→240, inside an inner nn.Sequential)"): nested[0][0],
            _("layer 1.proj (an nn.Linear, 240→60, an attribute of a custom module)"): nested[1].proj,
            _("a bare nn.Linear(250, 90) given to apply itself"): bare,
            _("a bare nn.Linear(90, 250, bias=False) given to apply itself"): bare_no_bias,
        }
        built = {what: {n: p.detach().clone() for n, p in layer.named_parameters()} for what, layer in where.items()}
        for root in (nested, bare, bare_no_bias):
            kind = (_("a nested network (a custom module inside nn.Sequential)") if root is nested
                    else _("a bare layer"))
            with learner_code(
                _("{module}.apply(init_xavier) on {network}").format(module=type(root).__name__, network=kind),
                _("not known from here: the flat network passed, what is new is {network}").format(network=kind),
                translated(_XAVIER_ERRORS),
            ):
                root.apply(init_fn)
    for what, layer in where.items():
        params = dict(layer.named_parameters())
        if params.keys() == built[what].keys() and all(map(torch.equal, params.values(), built[what].values())):
            expect(False, _why_left_alone(init_fn, what, bare=layer is bare or layer is bare_no_bias))
        _expect_xavier_layer(what, layer, has_bias=layer is not bare_no_bias)
    expect(
        all(map(torch.equal, nested[1].norm.parameters(), norm)),
        _("the LayerNorm inside the custom module changed: initialize linear layers only (isinstance(m, nn.Linear))"),
    )


@exercise("Exercise 1 · An init function for Module.apply")
def check_init_xavier(init_fn: Callable[[nn.Module], object]) -> None:
    """``net.apply(init_fn)`` gives every linear layer Xavier-uniform weights and zero biases, in place."""
    expect(callable(init_fn), _("pass the function itself, e.g. check_init_xavier(init_xavier)"))
    net, others, before, seen = _apply_on_mixed_network(init_fn)
    linears = {0: net[0], 2: net[2], 4: net[4]}
    _expect_trainable(linears)
    for i, layer in linears.items():
        _expect_same_parameters(i, layer, before, seen)
    for i, layer in linears.items():
        _expect_own_memory(i, layer, before, seen)
        _expect_initialized(i, layer, before)
        _expect_xavier_values(i, layer)
    _expect_uniform_law(list(linears.values()))
    _expect_others_left_alone(net, others)
    _expect_bias_free_layer(init_fn)
    _expect_every_depth_and_root(init_fn)


# ---------------------------------------------------------------- Exercise 2


def _kaiming_std(m: nn.Linear) -> float:
    return math.sqrt(2.0 / m.in_features)


#: Errors an Exercise 2 answer raises, and what each tells.
_LAZY_ERRORS = {
    "uninitialized parameter": N_("a lazy layer's weight has no shape until the network has seen an input: run "
                                  "net(example_input) once, with the example itself (its width, dtype and device), "
                                  "before any nn.init call"),
    "must have the same dtype": N_("the network met an input of another dtype: run the dry run on example_input "
                                   "itself (its width, dtype and device), not on a tensor made for it"),
    "cannot be multiplied": N_("the network met an input of another width than the one its dry run saw: run the dry "
                               "run on example_input itself (its width, dtype and device)"),
}


#: nn.init's uniform schemes, as TorchCalls names them.
_UNIFORM = {"kaiming_uniform_", "xavier_uniform_", "uniform_"}


def _initialize_lazy_network(initialize: Callable[[nn.Module, torch.Tensor], nn.Module]):
    """``initialize(net, example)`` on a seeded float64 lazy net: the net, the norm's values, result, calls."""
    f64 = {"dtype": torch.float64}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # A LayerNorm (not lazy, with a scale and shift of its own) is there to be left alone.
        # The middle LazyLinear sits in a nested nn.Sequential: only a walk over every module reaches it.
        net = nn.Sequential(nn.LazyLinear(256, **f64), nn.LayerNorm(256, **f64), nn.ReLU(),
                            nn.Sequential(nn.LazyLinear(128, **f64), nn.ReLU()), nn.LazyLinear(10, **f64))
        with torch.no_grad():
            net[1].weight.fill_(2.0)
            net[1].bias.fill_(0.5)
        norm = _kept(net, (1,))  # to be left alone
        example = torch.rand(4, 300, **f64)
        with learner_code(
            _("initialize_lazy(net, example_input) on a network of LazyLinear layers (one in a nested "
              "nn.Sequential) and a LayerNorm (float64, like its input)"),
            _("not known from here"),
            translated(_LAZY_ERRORS),
        ), _watching(net) as seen:
            out = initialize(net, example)
    return net, norm, out, seen


def _kaiming_miss(i: int | str, layer: nn.Linear, n_in: int, n_out: int) -> str:
    """Why layer ``i``'s weights have another std than Kaiming's, as far as their std and bound tell."""
    got = layer.weight.std().item()
    default_std = 1 / math.sqrt(3 * n_in)  # nn.Linear's default: U(-b, b) with b = 1/sqrt(fan_in)
    looks_default = math.isclose(got, default_std, rel_tol=0.05)
    in_default_bound = layer.weight.abs().max().item() <= math.sqrt(3) * default_std * (1 + 1e-6)
    if looks_default and in_default_bound and i == "3.0":
        return _("That is nn.Linear's default, 1/sqrt(3 fan_in) = {std}: this layer sits in a "
                 "nested nn.Sequential, and net.children() (or `for m in net`) visits the top level only. "
                 "Walk every module: net.modules() or net.apply(init)").format(std=format(default_std, ".4f"))
    if looks_default and in_default_bound:
        return _("That is nn.Linear's default, 1/sqrt(3 fan_in) = {std}: your init never "
                 "ran. Dry run first, then test isinstance(m, nn.Linear): after the dry run each LazyLinear "
                 "has become an nn.Linear (a test on nn.LazyLinear finds none), and before it "
                 "type(m) == nn.Linear skips a LazyLinear").format(std=format(default_std, ".4f"))
    if looks_default:
        return _("That std, 1/sqrt(3 fan_in) = {std}, is what a=sqrt(5) gives (nn.Linear's own "
                 "slope, gain sqrt(1/3)): for ReLU use nonlinearity='relu' (slope a=0)").format(
                     std=format(default_std, ".4f"))
    if math.isclose(got, math.sqrt(2 / n_out), rel_tol=0.05):
        return _("That is sqrt(2 / fan_out): use mode='fan_in' (the default)")
    return _("Use nn.init.kaiming_normal_(m.weight, nonlinearity='relu')")


def _expect_kaiming_layer(i: int | str, layer: nn.Linear, n_in: int, n_out: int, seen: TorchCalls) -> None:
    """Layer ``i`` was materialized as (n_out, n_in) in float64, with Kaiming-normal weights and a zero bias."""
    expect(layer.weight.shape == (n_out, n_in),
           _("layer {index} must have weight shape {shape}, it has {actual}: run the "
             "dry run on example_input itself").format(
                 index=i, shape=(n_out, n_in), actual=tuple(layer.weight.shape)))
    expect(getattr(layer, "bias", None) is not None,
           _("layer {index}'s bias is None now: assigning m.bias = None removes the bias instead of zeroing it. Fill "
             "it in place with nn.init.zeros_(m.bias)").format(index=i))
    expect(layer.weight.dtype == layer.bias.dtype == torch.float64,
           _("layer {index}'s parameters are {dtype} now, the network was float64: {swap} Fill m.weight in place "
             "with nn.init.kaiming_normal_, which keeps its dtype and device").format(
                 index=i, dtype=layer.weight.dtype, swap=_swap(seen)))
    std = _kaiming_std(layer)
    if not _std_matches(layer.weight, std):
        expect(False, _("layer {index}'s weights have std {std}, Kaiming normal for ReLU gives sqrt(2 / fan_in) = "
                        "{expected}. {why}").format(index=i, std=format(layer.weight.std().item(), ".4f"),
                                                    expected=format(std, ".4f"),
                                                    why=_kaiming_miss(i, layer, n_in, n_out)))
    expect(bool((layer.bias == 0).all()), _("layer {index}'s bias must be zero (nn.init.zeros_)").format(index=i))


def _expect_normal_law(layers: list[nn.Linear], seen: TorchCalls) -> None:
    """The weights, pooled and standardized, follow a normal law (a KS test)."""
    pooled = _standardized(layers, _kaiming_std)  # N(0, 1) if the answer is right
    expect(ks_distance(pooled, torch.special.ndtr) <= ks_limit(pooled.numel()),
           _("the weights have the right std but are not normally distributed: Kaiming *normal* is asked for, and "
             "your function drew them with {calls}: use nn.init.kaiming_normal_").format(
                 calls=", ".join(sorted(_UNIFORM & seen.names)))
           if _UNIFORM & seen.names else
           _("the weights have the right std but are not normally distributed: Kaiming *normal* is asked for, use "
             "nn.init.kaiming_normal_"))


def _expect_bare_lazy_layer(initialize: Callable[[nn.Module, torch.Tensor], nn.Module]) -> None:
    """A bare lazy layer given as the network is returned with Kaiming-normal weights and a zero bias."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        bare = nn.LazyLinear(200, dtype=torch.float64)
        with learner_code(
            _("initialize_lazy(layer, example_input) with a bare nn.LazyLinear(200) as the network and a (2, 150) "
              "example"),
            _("not known from here: the network passed, what is new is a single layer given as the network"),
            translated({**_NOT_A_CONTAINER, **_LAZY_ERRORS}),
        ):
            out = initialize(bare, torch.rand(2, 150, dtype=torch.float64))
    expect(out is bare, _("given a bare layer as the network, return that layer: return the network you were given"))
    expect(not isinstance(bare.weight, nn.parameter.UninitializedParameter),
           _("a bare nn.LazyLinear given as the network is still uninitialized: run it on example_input once"))
    got, std = bare.weight.std().item(), _kaiming_std(bare)
    default_std = 1 / math.sqrt(3 * 150)
    if not _std_matches(bare.weight, std) and math.isclose(got, default_std, rel_tol=0.05):
        expect(False, _("a bare nn.LazyLinear(200) given as the network kept nn.Linear's default init (std {std}, "
                        "1/sqrt(3 fan_in) = {default_std}), while the layers inside a network were initialized: "
                        "your walk leaves out net itself. net.children() (and `for m in net`) yield only the modules "
                        "inside it; net.modules() and net.apply(init) include net").format(
                            std=format(got, ".4f"), default_std=format(default_std, ".4f")))
    expect(_std_matches(bare.weight, std),
           _("a bare nn.LazyLinear(200) given as the network has weights of std {std}, Kaiming normal for ReLU gives "
             "sqrt(2 / fan_in) = {expected}; the layers inside a network passed, and why this one differs is not known "
             "from here").format(std=format(got, ".4f"), expected=format(std, ".4f")))
    expect(bool((bare.bias == 0).all()), _("a bare nn.LazyLinear(200) given as the network kept a non-zero bias: "
                                           "zero it with nn.init.zeros_(m.bias)"))


@exercise("Exercise 2 · Initialize a lazy network")
def check_initialize_lazy(initialize: Callable[[nn.Module, torch.Tensor], nn.Module]) -> None:
    """``initialize(net, example)`` materializes every lazy layer, then gives it Kaiming-normal weights."""
    expect(callable(initialize), _("pass the function itself, e.g. check_initialize_lazy(initialize_lazy)"))
    net, norm, out, seen = _initialize_lazy_network(initialize)
    expect(out is net, _("return the network you were given (initialized in place)"))
    expect(not any(isinstance(p, nn.parameter.UninitializedParameter) for p in net.parameters()),
           _("some parameters are still uninitialized: call net(example_input) once to infer the shapes"))
    layers = {0: net[0], "3.0": net[3][0], 4: net[4]}
    _expect_trainable(layers)
    for (i, layer), (n_in, n_out) in zip(layers.items(), ((300, 256), (256, 128), (128, 10)), strict=True):
        _expect_kaiming_layer(i, layer, n_in, n_out, seen)
    _expect_normal_law(list(layers.values()), seen)
    expect(not _changed(net, norm),
           _("the LayerNorm changed: initialize the linear layers only (isinstance(m, nn.Linear))"))
    _expect_bare_lazy_layer(initialize)
    # The same on 'meta', a stand-in for a GPU: the dry run must use the example where it is.
    _expect_dry_run_where_the_example_is(
        initialize, "initialize_lazy(net, example_input)",
        nn.Sequential(nn.LazyLinear(8, device="meta"), nn.ReLU(), nn.LazyLinear(2, device="meta")),
    )


# ---------------------------------------------------------------- Exercise 3

#: The weight decay Exercise 3 asks for on every parameter with two or more dimensions.
WEIGHT_DECAY = 1e-4


def _optimizer(make_optimizer, seed: int, build: Callable[[], tuple[nn.Module, torch.Tensor]], what: str,
               causes: dict[str, str]):
    """Build a network and an example from ``seed`` and run ``make_optimizer(net, example)``; return the network,
    the optimizer and the names of the calls the answer made before the network's first forward (the dry run): a
    hint then says whether the groups were chosen before it. A warning the answer's optimizer raises (a parameter
    listed twice) is kept from the notebook: the hint says it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net, example = build()
        before: list[set[str]] = []
        handle = net.register_forward_pre_hook(
            lambda module, args: before.append(set(seen.names)) if not before else None, prepend=True)
        try:
            with learner_code(what, _("not known from here"), translated(causes)), TorchCalls() as seen, \
                    warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                opt = make_optimizer(net, example)
        finally:
            handle.remove()
    return net, opt, (before[0] if before else None)


def _expect_groups(opt: object, net: nn.Module, before_dry_run: set[str] | None, where: str, more: str = "") -> None:
    """``opt`` is an SGD with lr 0.1 over exactly the parameters of ``net`` (materialized), each in one group and
    listed once, with weight decay on those of two or more dimensions only. ``before_dry_run``: the calls the answer
    made before the dry run. ``where`` is the message that each hint goes into, at its ``{hint}`` ("" for the first
    network: the hint as it is); ``more`` is a sentence added to the hint for a parameter left out."""

    def at(hint: str) -> str:
        return where.format(hint=hint) if where else hint

    expect(opt is not net, at(_("return the optimizer, not the network")))
    expect(isinstance(opt, torch.optim.SGD),
           at(_("return a torch.optim.SGD, not {type}").format(type=type(opt).__name__)))
    expect(not any(isinstance(p, nn.parameter.UninitializedParameter) for p in net.parameters()),
           at(_("the network's parameters are still uninitialized: call net(example_input) once (the dry run)")))
    _expect_trainable({name or "net": m for name, m in net.named_modules()
                       if next(m.parameters(recurse=False), None) is not None})
    expect(all(g["lr"] == 0.1 for g in opt.param_groups), at(_("use lr=0.1 for every group")))
    held = [p for g in opt.param_groups for p in g["params"]]
    named = list(net.named_parameters())
    strangers = [p for p in held if not any(p is q for _, q in named)]
    copies = any(any(p.shape == q.shape and torch.equal(p, q) for _, q in named) for p in strangers)
    expect(not strangers, at(_("the optimizer holds copies of the network's parameters (the same values in other "
                               "tensors), which no forward uses: pass the parameters themselves, from "
                               "net.parameters() or net.named_parameters()") if copies else
                             _("the optimizer holds tensors that are not the network's parameters: pass the "
                               "parameters themselves, from net.parameters() or net.named_parameters()")))
    for name, p in named:
        expect(any(p is q for q in held),
               at((_("the optimizer does not hold {name}: every parameter must be in a group. {more}") if more
                   else _("the optimizer does not hold {name}: every parameter must be in a group")).format(
                       name=name, more=more)))
    count = Counter(id(p) for p in held)
    twice = [(name, count[id(p)]) for name, p in named if count[id(p)] > 1]
    expect(not twice, at(_("{name} is listed {count} times in one group: PyTorch only warns, then every step "
                           "updates it {count} times. List each parameter once (net.parameters() does: it yields "
                           "each parameter once, however deep)").format(
                               name=twice[0][0] if twice else "", count=twice[0][1] if twice else 0)))
    decay = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    matrices = [(name, p) for name, p in named if p.dim() >= 2]
    flat = [(name, p) for name, p in named if p.dim() < 2]
    if all(decay[id(p)] == 0 for _, p in matrices):
        looked = sorted({".ndim", ".dim", ".size", ".shape"} & (before_dry_run or set()))
        expect(not any(decay[id(p)] != 0 for _, p in flat),
               at(_("weight decay goes to the 1-D parameters and not to the matrices: the condition is upside down "
                    "(decay p.dim() >= 2)")))
        expect(not looked, at(_("no weight matrix gets weight decay: your function read the parameters' shapes "
                                "({calls}) before the dry run, and a lazy layer's placeholder reports p.ndim == 1 "
                                "whatever its final shape. Dry run first, then group").format(
                                    calls=", ".join(looked))))
        expect(False, at(_("no weight matrix gets weight decay, though the groups were chosen after the dry run: "
                           "check the condition that picks them; a weight matrix has p.dim() == 2")))
    for name, p in matrices:
        expect(decay[id(p)] == WEIGHT_DECAY,
               at(_("{name} (a {dims}-D weight matrix) must get weight_decay={weight_decay}, it gets "
                    "{decay}").format(name=name, dims=p.dim(), weight_decay=WEIGHT_DECAY, decay=decay[id(p)])))
    for name, p in flat:
        expect(decay[id(p)] == 0,
               at(_("{name} is 1-D (a bias or a normalization scale): it must get weight_decay=0, it gets "
                    "{decay}. Put every parameter with p.dim() < 2 in a group without decay").format(
                        name=name, decay=decay[id(p)])))


#: Errors an Exercise 3 answer raises, and what each tells.
_OPTIMIZER_ERRORS = {
    "uninitialized parameter": N_("a lazy layer's parameters have no shape (p.dim(), p.shape, p.numel()) until the "
                                  "dry run net(example_input)"),
    "more than one parameter group": N_("a parameter went into two groups: each parameter goes into exactly one "
                                        "group"),
}

#: Errors an answer raises on a network with a layer built with bias=False.
_NO_BIAS = {
    "optimizer can only optimize Tensors": N_("a None went into a group: a layer built with bias=False has m.bias "
                                              "None. Collect the parameters that exist (net.parameters() or "
                                              "net.named_parameters() leave a missing bias out)"),
}


def _optimizer_cases() -> list[tuple[int, Callable[[], tuple[nn.Module, torch.Tensor]], str, dict, str, str]]:
    """(seed, network and example, call, causes, hint's frame, more for a left-out parameter) of each network."""
    return [
        (0, lambda: (nn.Sequential(nn.LazyLinear(32), nn.LazyBatchNorm1d(), nn.ReLU(), nn.LazyLinear(4)),
                     torch.rand(8, 16)),
         _("lazy_optimizer(net, example_input) on a network of LazyLinear and LazyBatchNorm1d layers"),
         _OPTIMIZER_ERRORS, "", ""),
        (1, lambda: (nn.Sequential(nn.Sequential(nn.LazyLinear(24), nn.LazyBatchNorm1d(), nn.ReLU()),
                                   nn.LazyLinear(6, bias=False)), torch.rand(6, 10)),
         _("lazy_optimizer(net, example_input) on a nested network (an nn.Sequential inside an nn.Sequential, "
           "then a LazyLinear(6, bias=False)) and a (6, 10) example"),
         {**_NO_BIAS, **_OPTIMIZER_ERRORS}, _("on a nested network (an nn.Sequential inside an nn.Sequential), {hint}"),
         _("The flat network's parameters were all held, this one sits a level down: `for m in net` and "
           "net.children() see the top level only, net.parameters() and net.named_parameters() reach every depth")),
        (2, lambda: (nn.LazyLinear(5), torch.rand(3, 7)),
         _("lazy_optimizer(layer, example_input) with a bare nn.LazyLinear(5) as the network and a (3, 7) "
           "example"),
         {**_NOT_A_CONTAINER, **_OPTIMIZER_ERRORS}, _("with a bare nn.LazyLinear(5) as the network, {hint}"),
         _("The nested network's parameters were all held; here the network is the layer itself, and its "
           "parameters are its own: net.children() yields nothing, net.parameters() includes them")),
    ]


@exercise("Exercise 3 · An optimizer for a lazy network")
def check_lazy_optimizer(make_optimizer: Callable[[nn.Module, torch.Tensor], torch.optim.Optimizer]) -> None:
    """``make_optimizer(net, example)`` returns an SGD over the materialized parameters, decay on matrices."""
    expect(callable(make_optimizer), _("pass the function itself, e.g. check_lazy_optimizer(lazy_optimizer)"))
    for seed, build, what, causes, where, more in _optimizer_cases():
        net, opt, before = _optimizer(make_optimizer, seed, build, what, causes)
        _expect_groups(opt, net, before, where, more)
    _expect_dry_run_where_the_example_is(
        make_optimizer, "lazy_optimizer(net, example_input)",
        nn.Sequential(nn.LazyLinear(8, device="meta"), nn.LazyBatchNorm1d(device="meta")),
    )
