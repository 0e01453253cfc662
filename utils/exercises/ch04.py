"""Checks for chapter 04 · Custom layers."""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Callable, Iterable, Iterator
from unittest import mock

import torch
from torch import nn

from utils.checks import exercise, expect, learner_code
from utils.exercises.common import randn, shape_of
from utils.i18n import N_, _

__all__ = ["check_half_fourier", "check_norm1d", "check_weight_norm_linear"]

_ANY_DEVICE = N_(
    "create every tensor in forward on the input's device and in its dtype (torch.zeros(..., device=x.device, "
    "dtype=x.dtype), torch.arange(n, device=x.device)) or derive it from x (torch.zeros_like(x), x.new_ones(...)); "
    "the check ran your forward as on a GPU machine, where a tensor made without device= lands on the CPU while "
    "x is on the GPU, so a tensor made without device= was not where x is"
)

_INDEXING = (torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_put_, torch.Tensor.index_put)
_MOVES = (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.type_as, torch.Tensor.copy_)


@contextlib.contextmanager
def _made_elsewhere(left_behind: Iterable[torch.Tensor] = ()) -> Iterator[None]:
    """Run the learner's forward on CPU inputs as if it ran on a GPU machine.

    There, a tensor made without ``device=`` lands on the CPU while the input is on the GPU. Here every tensor
    is on the CPU, so this mode tracks which ones stand for "made without device=" (factories called without
    ``device=``, and what is computed from those alone) and refuses what CUDA refuses: an operation that mixes
    such a tensor with one of the input's, unless it is a number (a 0-dim tensor, which CUDA kernels take from
    the CPU), an index (``x[idx]`` takes a CPU index tensor), or an explicit move (``.to(x.device)``,
    ``.to(x)``, ``.copy_``). The values are real, so a right answer gives the right numbers. ``left_behind``: tensors
    that stand for what a move of the layer to the GPU leaves on the CPU (plain tensor attributes).
    """
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    far: dict[int, weakref.ref] = {id(t): weakref.ref(t) for t in left_behind}

    def is_far(t: torch.Tensor) -> bool:
        ref = far.get(id(t))
        return ref is not None and ref() is t

    def tensors(tree: object) -> list[torch.Tensor]:
        return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]

    class _Elsewhere(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            given = tensors((args, kwargs))
            if func in _INDEXING and args:           # an index may be elsewhere; the indexed tensor and values not
                checked = [args[0], *tensors((args[2:], kwargs))]
            elif func in _MOVES:
                checked = []
            else:
                checked = given
            far_here = [t for t in checked if is_far(t)]
            if any(t.dim() > 0 for t in far_here) and len(far_here) < len(checked):
                raise RuntimeError(_(
                    "Expected all tensors to be on the same device, but found at least two devices: the input's "
                    "and another one (a tensor made without device=)"))
            out = func(*args, **kwargs)
            if kwargs.get("device") is not None:
                return out
            if func is torch.Tensor.copy_ or func is torch.Tensor.cuda:
                result_far = func is torch.Tensor.copy_ and is_far(args[0])
            elif func in _MOVES:
                targets = [a for a in (*args[1:], *kwargs.values()) if not isinstance(a, bool)]
                devices = [a for a in targets if isinstance(a, (torch.device, str, int))]
                others = [a for a in targets if isinstance(a, torch.Tensor)]
                result_far = (not devices) and (all(map(is_far, others)) if others else is_far(args[0]))
                if not result_far and out is args[0] and is_far(out):
                    out = out.clone()                # on a GPU machine the move gives a new tensor
            elif func in _INDEXING and args:
                result_far = is_far(args[0])
            else:
                result_far = not given or all(is_far(t) for t in given)
            if result_far:
                for t in tensors(out):
                    far[id(t)] = weakref.ref(t)
            return out

    with _Elsewhere():
        yield


_NORM_SHAPES = N_(
    "the error is in your forward. If it is about sizes: the batch statistics x.mean(dim=0) and "
    "x.var(dim=0, correction=0) have shape (num_features,), like running_mean, running_var, weight and bias "
    "(keepdim=True gives (1, num_features), which an in-place update of a (num_features,) buffer refuses)"
)
_STAY = N_("stay in torch (torch.fft), not NumPy, so that autograd can follow and any device works; "
           "slice with an int: n // 2")


def _expect_where_the_input_is(layer: nn.Module, x: torch.Tensor, expected: torch.Tensor) -> None:
    """Run as on a GPU machine, the layer's output is on the input's device, with the expected values."""
    with learner_code(_("calling your layer as on a GPU machine, where tensors made without device= are elsewhere"),
                      _(_ANY_DEVICE)), _made_elsewhere():
        y = layer(x)
    expect(isinstance(y, torch.Tensor) and y.device == x.device and y.shape == expected.shape
           and torch.allclose(y, expected, atol=1e-5),
           _("the output must be on the input's device, with the same values, whatever the default device: "
             "{advice}").format(advice=_(_ANY_DEVICE)))


def _weight_norm_reference(x, direction, scale, bias):
    weight = scale[:, None] * direction / direction.norm(dim=1, keepdim=True)
    return x @ weight.T + bias


def _built_weight_norm(cls: type[nn.Module], n_in: int, n_out: int, x: torch.Tensor) -> nn.Module:
    """``cls(n_in, n_out)``, called once on ``x`` as built: its parameters' shapes and a usable start."""
    with learner_code(_("building WeightNormLinear({n_in}, {n_out})").format(n_in=n_in, n_out=n_out),
                      _("the error is in your __init__")):
        layer = cls(n_in, n_out)
    expect(isinstance(layer, nn.Module), _("WeightNormLinear must subclass nn.Module"))
    with learner_code(_("calling WeightNormLinear({n_in}, {n_out}) on a {shape} input").format(
            n_in=n_in, n_out=n_out, shape=tuple(x.shape)),
            _("the error is in your forward. If it is about sizes: direction is (out, in); its row norms, "
              "direction.norm(dim=1, keepdim=True), are (out, 1), one per row (without keepdim they are (out,) and "
              "divide the columns); scale[:, None] is (out, 1) too; and y = x @ W.T needs W.T, of shape (in, out)")):
        first = layer(x)  # an unfinished answer stops here, with NotImplementedError
    shapes = {name: tuple(p.shape) for name, p in layer.named_parameters()}
    wanted = {"direction": (n_out, n_in), "scale": (n_out,), "bias": (n_out,)}
    expect(shapes == wanted,
           _("cls({n_in}, {n_out}) must register exactly the parameters {wanted}; got {shapes}. "
             "Wrap each tensor in nn.Parameter and assign it as an attribute.").format(
                 n_in=n_in, n_out=n_out, wanted=wanted, shapes=shapes))
    start = layer.direction.detach()
    finite_out = not (isinstance(first, torch.Tensor) and first.is_floating_point()) or bool(first.isfinite().all())
    expect(bool(start.isfinite().all() and (start.norm(dim=1) > 0).all()) and finite_out,
           _("a new layer must be usable as it is, whatever its size: WeightNormLinear({n_in}, {n_out}) starts with a "
             "direction row of zeros (or its output is not finite). Start direction random (torch.randn(out_features, "
             "in_features) * in_features ** -0.5, say); a row of zeros has no direction, and dividing it by its norm "
             "gives nan (an identity start, torch.eye(out_features, in_features), has zero rows when out_features > "
             "in_features)").format(n_in=n_in, n_out=n_out))
    return layer


def _weight_norm_values(layer: nn.Module, x: torch.Tensor, direction, scale, bias) -> torch.Tensor:
    """Set the layer's parameters, call it on ``x``, compare with the formula; the expected output."""
    n_out, n_in = direction.shape
    with torch.no_grad():
        layer.direction.copy_(direction)
        layer.scale.copy_(scale)
        layer.bias.copy_(bias)
    with learner_code(_("calling WeightNormLinear({n_in}, {n_out}) on a {shape} input").format(
            n_in=n_in, n_out=n_out, shape=tuple(x.shape)), _("the error is in your forward")):
        y = layer(x)
    expected = _weight_norm_reference(x, direction, scale, bias)
    expect(isinstance(y, torch.Tensor) and y.shape == expected.shape,
           _("a batch of {count} inputs of width {n_in} must give shape {shape}; got {actual}").format(
               count=x.shape[0], n_in=n_in, shape=tuple(expected.shape), actual=shape_of(y)))
    expect(torch.allclose(y, expected, atol=1e-5),
           _("wrong values: W = scale[:, None] * direction / direction.norm(dim=1, keepdim=True) (each row of "
             "direction divided by its own norm), then y = x @ W.T + bias"))
    return expected


def _expect_any_leading_dimensions(layer: nn.Module, x: torch.Tensor) -> None:
    """Leading dimensions pass through, none included: (2, 6, 5) gives (2, 6, 3), and (5,) gives (3,)."""
    with learner_code(_("calling your layer on a (2, 6, 5) input"),
                      _("x @ W.T + bias works for any number of leading dimensions: do not flatten or index them")):
        y3 = layer(randn(2, 6, 5, seed=5))
    expect(shape_of(y3) == "(2, 6, 3)", _("leading dimensions must pass through: an input of shape (2, 6, 5) gives "
                                      "(2, 6, 3); got {shape}").format(shape=shape_of(y3)))
    with learner_code(_("calling your layer on one input of shape (5,), without a batch dimension"),
                      _("x @ W.T + bias works for any number of leading dimensions, none included: do not flatten "
                        "or index them")):
        y1 = layer(x[0])
    expect(shape_of(y1) == "(3,)", _("with no leading dimension, an input of shape (5,) gives (3,), as nn.Linear does; "
                                 "got {shape}").format(shape=shape_of(y1)))


def _expect_length_of_direction_ignored(layer: nn.Module, x: torch.Tensor, expected: torch.Tensor) -> None:
    """Scaling ``direction`` leaves the output as it is: only its direction counts."""
    direction = layer.direction.detach().clone()
    with torch.no_grad():
        layer.direction.mul_(3.0)
    with learner_code(_("calling your layer after scaling direction by 3"), _("the error is in your forward")):
        scaled = layer(x)
    expect(torch.allclose(scaled, expected, atol=1e-5),
           _("scaling direction must not change the output: only its direction counts, its length is "
             "normalized away"))
    with torch.no_grad():
        layer.direction.copy_(direction)


def _weight_norm_gradients(layer: nn.Module, x: torch.Tensor, direction, scale, bias) -> None:
    """The input and every parameter get the right gradient; a missing history is named before backward()."""
    layer.zero_grad(set_to_none=True)
    with learner_code(_("calling your layer on a {shape} input").format(shape=tuple(x.shape)),
                      _("the error is in your forward")):
        y = layer(x)
    expect(isinstance(y, torch.Tensor) and y.grad_fn is not None,
           _("your layer's output has no gradient history (its grad_fn is None): nothing in it reaches autograd, "
             "so no parameter would ever be trained. Something in forward cut the computation out of autograd: "
             "torch.no_grad() around it, or .data, .detach() or a torch.tensor(...) copy of every parameter, does "
             "that"))
    x_leaf = x.clone().requires_grad_(True)
    with learner_code(_("back-propagating through your layer"), _("the error is in your forward")):
        (layer(x_leaf) ** 2).sum().backward()
    x_ref, *leaves = [t.clone().requires_grad_(True) for t in (x, direction, scale, bias)]
    (_weight_norm_reference(x_ref, *leaves) ** 2).sum().backward()
    expect(x_leaf.grad is not None,
           _("no gradient reached the input: forward cut x out of autograd (x.detach(), x.data, or torch.no_grad() "
             "around its use), so no layer before this one would be trained"))
    expect(torch.allclose(x_leaf.grad, x_ref.grad, atol=1e-4),
           _("the gradient with respect to the input is wrong: is part of the computation taken under "
             "torch.no_grad(), from .data, or detached?"))
    for name, reference in zip(("direction", "scale", "bias"), leaves, strict=True):
        grad = getattr(layer, name).grad
        expect(grad is not None,
               _("no gradient reached {quoted}: forward must use the parameter itself. Reading "
                 "self.{name}.data or self.{name}.detach() gives the right numbers but cuts it out of "
                 "autograd, so it is never trained").format(quoted=repr(name), name=name))
        expect(torch.allclose(grad, reference.grad, atol=1e-4),
               _("the gradient of {name} is wrong: is part of the computation (e.g. the norm) taken "
                 "under torch.no_grad(), from .data, or detached?").format(name=repr(name)))


def _expect_weight_norm(cls: type[nn.Module], x: torch.Tensor, parameters: tuple) -> tuple[nn.Module, torch.Tensor]:
    """``cls(in, out)`` for the sizes of ``parameters``: a usable start, the formula's values, the right gradients."""
    layer = _built_weight_norm(cls, x.shape[-1], parameters[0].shape[0], x)
    expected = _weight_norm_values(layer, x, *parameters)
    _weight_norm_gradients(layer, x, *parameters)
    return layer, expected


def _expect_float64_after_double(layer: nn.Module, x: torch.Tensor) -> None:
    """Converted with ``.double()``, the layer gives a float64 output for a float64 input."""
    double = copy.deepcopy(layer).double()
    with learner_code(_("calling your layer, converted with .double(), on a float64 input"), _(_ANY_DEVICE)):
        y64 = double(x.double())
    expect(isinstance(y64, torch.Tensor) and y64.dtype == torch.float64,
           _("after .double(), a float64 input must give a float64 output; got {dtype}: {advice}").format(
               dtype=getattr(y64, "dtype", type(y64).__name__), advice=_(_ANY_DEVICE)))


def _expect_nothing_left_behind(layer: nn.Module, x: torch.Tensor, expected: torch.Tensor) -> None:
    """No tensor the layer uses is a plain attribute, which a move to a GPU leaves where it was made."""
    plain = [name for name, value in vars(layer).items() if isinstance(value, torch.Tensor)]
    if not plain:
        return
    moved_hint = _("self.{names} is a tensor kept as a plain attribute: .to() leaves it where it was made, so on "
                   "a GPU it meets the input on another device. Register it as a buffer "
                   "(self.register_buffer(...)), or use a Python number").format(names=", self.".join(plain))
    with learner_code(_("calling your layer as after a move to a GPU, which leaves a plain tensor attribute on "
                        "the CPU"), moved_hint), _made_elsewhere(left_behind=[getattr(layer, p) for p in plain]):
        y_moved = layer(x)
    expect(isinstance(y_moved, torch.Tensor) and torch.allclose(y_moved, expected, atol=1e-5), moved_hint)


@exercise("Exercise 1 · A weight-normalized linear layer")
def check_weight_norm_linear(cls: type[nn.Module]) -> None:
    """``cls(in_features, out_features)`` with parameters ``direction``, ``scale``, ``bias``.

    ``forward(x) = x @ W.T + bias`` with ``W = scale[:, None] * direction / ‖direction row‖``, and
    gradients must reach all three parameters (a forward that reads ``.data`` or ``.detach()`` of a
    parameter computes the right numbers but never trains it), for two sizes (5 → 3, and 2 → 4, wider than
    long). It runs on any device and dtype.
    """
    x = randn(4, 5, seed=4)
    layer, expected = _expect_weight_norm(cls, x, (randn(3, 5, seed=1), randn(3, seed=2).abs() + 0.5, randn(3, seed=3)))
    # A second size, wider than it is long (out_features > in_features).
    _expect_weight_norm(cls, randn(3, 2, seed=6), (randn(4, 2, seed=7), randn(4, seed=8).abs() + 0.5, randn(4, seed=9)))
    _expect_any_leading_dimensions(layer, x)
    _expect_length_of_direction_ignored(layer, x, expected)

    # Wherever it is moved: float64, and an input on a device other than the default one.
    _expect_float64_after_double(layer, x)
    _expect_where_the_input_is(layer, x, expected)
    _expect_nothing_left_behind(layer, x, expected)


def _expect_half_fourier_of(layer: nn.Module, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """For ``shape`` and ``dtype``: fft's first n // 2 coefficients, in the input's precision, and their gradient."""
    x = randn(*shape, seed=sum(shape), dtype=dtype).requires_grad_(True)
    with learner_code(_("calling your layer on a {dtype} input of shape {shape} that requires grad").format(
            dtype=dtype, shape=shape), _(_STAY)):
        out = layer(x)
    n = shape[-1]
    want = torch.fft.fft(x.detach(), dim=-1)[..., : n // 2]
    expect(isinstance(out, torch.Tensor) and out.is_complex(),
           _("return the complex coefficients of torch.fft.fft, not their magnitudes or real parts"))
    # rfft keeps n // 2 + 1 coefficients; for an odd n so does fft(x)[..., :ceil(n / 2)], which is not rfft
    rfft = out.shape[-1] == n // 2 + 1 and n % 2 == 0
    expect(out.shape == want.shape,
           (_("an input of shape {shape} must give {expected} (the first n // 2 = {half} "
              "coefficients along the last dimension; n // 2 rounds down for odd n); got {actual}. "
              "torch.fft.rfft keeps n // 2 + 1 of them, one too many.") if rfft else
            _("an input of shape {shape} must give {expected} (the first n // 2 = {half} "
              "coefficients along the last dimension; n // 2 rounds down for odd n); got {actual}.")).format(
                  shape=shape, expected=tuple(want.shape), half=n // 2, actual=tuple(out.shape)))
    expect(out.dtype == want.dtype,
           _("a {dtype} input gives {expected} coefficients in torch.fft; got {actual}. Do not fix the "
             "dtype (complex64) in forward; follow the input's (a NumPy detour also loses it)").format(
                 dtype=x.dtype, expected=want.dtype, actual=out.dtype))
    expect(torch.allclose(out.detach(), want, atol=1e-5),
           _("wrong values: apply torch.fft.fft along the last dimension only, then keep [..., : n // 2]"))
    if n < 2:
        return
    hint = _("no gradient reaches the input: the layer must be differentiable (stay in torch, no NumPy)")
    expect(out.requires_grad, hint)
    with learner_code(_("back-propagating through your layer"), _(_STAY)):
        out.abs().sum().backward()
    expect(x.grad is not None and bool(x.grad.abs().sum() > 0), hint)
    x_ref = x.detach().clone().requires_grad_(True)
    torch.fft.fft(x_ref, dim=-1)[..., : n // 2].abs().sum().backward()
    expect(torch.allclose(x.grad, x_ref.grad, atol=1e-4),
           _("the gradient with respect to the input is wrong: part of the computation is detached or "
             "taken outside torch"))


@exercise("Exercise 2 · The first half of the Fourier coefficients")
def check_half_fourier(cls: type[nn.Module]) -> None:
    """``cls()(x)`` returns ``torch.fft.fft(x)`` along the last dim, first ``n // 2`` coefficients.

    Odd lengths (``n // 2`` rounds down), float64 inputs (complex128 out), and an output on the input's
    device whatever the default device.
    """
    with learner_code(_("building HalfFourier()"), _("the error is in your __init__")):
        layer = cls()
    expect(isinstance(layer, nn.Module), _("HalfFourier must subclass nn.Module"))
    expect(len(list(layer.parameters())) == 0, _("this layer has nothing to learn: it needs no parameters"))
    for shape, dtype in [((3, 8), torch.float32), ((2, 3, 9), torch.float32), ((4, 3), torch.float32),
                         ((1, 1), torch.float32), ((2, 7), torch.float64), ((6,), torch.float32)]:
        _expect_half_fourier_of(layer, shape, dtype)
    x = randn(3, 8, seed=60)
    _expect_where_the_input_is(layer, x, torch.fft.fft(x)[..., :4])


_NORM_STATE = {"weight": 1.0, "bias": 0.0, "running_mean": 0.0, "running_var": 1.0}
_RESET = N_("reset_parameters() sets weight to ones, bias to zeros, running_mean to zeros and running_var to ones, "
            "in place (fill_, zero_, nn.init.ones_) under torch.no_grad()")


def _norm_tensors(layer: nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: getattr(layer, name, None) for name in _NORM_STATE}


def _built(cls: type[nn.Module], what: str, n: int, causes: dict[str, str] | None = None,
           **kwargs) -> tuple[nn.Module, tuple[dict | None, dict | None]]:
    """``cls(n, **kwargs)``, and its four tensors before and after the last ``reset_parameters()`` call on it (``None,
    None`` without one); patched on the class, ``cls.reset_parameters(self)`` counts too."""
    original, seen = getattr(cls, "reset_parameters", None), []

    def watched(self, *args, **kw):
        before = _norm_tensors(self)
        result = original(self, *args, **kw)
        seen.append((self, before, _norm_tensors(self)))
        return result

    with learner_code(what, _("the error is in reset_parameters(), which the given __init__ calls: {reset}").format(
            reset=_(_RESET)), causes=causes):
        if not callable(original):
            return cls(n, **kwargs), (None, None)
        with mock.patch.object(cls, "reset_parameters", watched):
            layer = cls(n, **kwargs)
    calls = [(before, after) for module, before, after in seen if module is layer]
    return layer, (calls[-1] if calls else (None, None))


def _first_seen(value: torch.Tensor, near_misses: list[tuple[torch.Tensor, str]]) -> str | None:
    """The hint of the first near miss whose result ``value`` is: what the check saw the answer compute."""
    return next((hint for result, hint in near_misses if torch.allclose(value, result, atol=1e-5)), None)


def _expect_registered(layer: object, n: int) -> None:
    """A module with reset_parameters(), parameters weight and bias, buffers running_mean and running_var, all (n,)."""
    expect(isinstance(layer, nn.Module), _("Norm1d must subclass nn.Module"))
    expect(callable(getattr(layer, "reset_parameters", None)),
           _("define a method reset_parameters(): to_empty() gives memory without values, and {reset}").format(
               reset=_(_RESET)))
    params, buffers = dict(layer.named_parameters()), dict(layer.named_buffers())
    expect(set(params) == {"weight", "bias"},
           _("register exactly two parameters, weight and bias; got {names}. The running statistics "
             "are state that is not trained: register them with self.register_buffer(...)").format(
                 names=sorted(params)))
    missing = [name for name in ("running_mean", "running_var") if name not in buffers]
    expect(not missing,
           _("{names} must be buffers: self.register_buffer(name, tensor). A plain tensor attribute is not "
             "moved by .to() or to_empty() and not saved in state_dict()").format(names=missing))
    expect(all(t.shape == (n,) for t in _norm_tensors(layer).values()),
           _("weight, bias, running_mean and running_var all have shape ({n},)").format(n=n))


def _expect_kept_by_reset(n: int, built: str, watched: tuple[dict | None, dict | None], ok: Callable) -> None:
    """``reset_parameters()`` fills the tensors ``__init__`` made, where ``ok`` (on meta, in float64) says they are."""
    before, after = watched
    expect(before is not None,
           _("__init__ must end by calling self.reset_parameters(), as the given __init__ does: to_empty() gives "
             "memory without values, and reset_parameters() is the one place that sets them"))
    replaced = [name for name in _NORM_STATE if after[name] is not before[name]]
    elsewhere = sorted({f"{t.device.type}, {t.dtype}" for name, t in after.items()
                        if name in replaced and isinstance(t, torch.Tensor) and not ok(t)})
    expect(not replaced,
           _("Norm1d({n}, {built}): reset_parameters() replaced {names} by new tensors{where}. Fill the tensors "
             "__init__ made, in place (self.weight.fill_(1.0), self.running_mean.zero_(), ... under "
             "torch.no_grad()): new tensors are made on the default device and in the default dtype, not the "
             "layer's, and an optimizer built before, or a tie, keeps the old ones").format(
                 n=n, built=built, names=replaced,
                 where=_(" (made on {places})").format(places="; ".join(elsewhere)) if elsewhere else ""))
    changed = [name for name in _NORM_STATE if ok(before[name]) and not ok(after[name])]
    expect(not changed,
           _("Norm1d({n}, {built}): reset_parameters() gave {names} new memory elsewhere (.data = ... replaces a "
             "tensor's memory): fill the tensors __init__ made, in place, under torch.no_grad()").format(
                 n=n, built=built, names=changed))
    off = [name for name in _NORM_STATE if not ok(after[name])]
    expect(not off,
           _("Norm1d({n}, {built}) created {names} elsewhere in __init__, before reset_parameters() ran: keep the "
             "given __init__, which passes device and dtype to every tensor it creates").format(
                 n=n, built=built, names=off))


def _expect_reset_after_to_empty(layer: nn.Module) -> None:
    """After ``to_empty()``, whose memory holds leftovers, ``reset_parameters()`` sets all four tensors."""
    layer = layer.to_empty(device="cpu")
    with torch.no_grad():
        for t in _norm_tensors(layer).values():
            t.fill_(7.0)  # what uninitialized memory might hold
    with learner_code(_("calling reset_parameters() after to_empty(device='cpu')"), _(_RESET)):
        layer.reset_parameters()
    unset = [name for name, t in _norm_tensors(layer).items() if not torch.all(t == _NORM_STATE[name])]
    expect(not unset, _("after to_empty(device='cpu') and reset_parameters(), {names} still hold leftover values: "
                        "{reset}").format(names=unset, reset=_(_RESET)))


def _norm_gradients(mine: nn.Module, reference: nn.Module, ours: tuple, theirs: tuple, mode: str, why: str) -> None:
    """In ``mode``, ``nn.BatchNorm1d``'s gradients reach weight, bias and the input (``ours``: leaf and output)."""
    (leaf, y), (leaf_ref, y_ref) = ours, theirs
    expect(y.grad_fn is not None,
           _("in {mode} your layer's output has no gradient history (its grad_fn is None), although its input "
             "requires grad: nothing reaches autograd, so neither the weights nor anything before the layer would "
             "be trained. Something in forward cut the computation out of autograd, such as torch.no_grad() "
             "around it, or .data or .detach() of both the input and the parameters. Gradients flow in eval() "
             "mode too: fine-tuning with frozen normalization layers back-propagates through them").format(mode=mode))
    mine.zero_grad(set_to_none=True)
    reference.zero_grad(set_to_none=True)
    g = randn(*y_ref.shape, seed=30)
    with learner_code(_("back-propagating through your layer in {mode}").format(mode=mode),
                      _("the error is in your forward")):
        (y * g).sum().backward()
    (y_ref * g).sum().backward()
    for name in ("weight", "bias"):
        expect(getattr(mine, name).grad is not None,
               _("in {mode} no gradient reached {quoted}: forward must use the parameter itself, not "
                 "self.{name}.data or a detached copy").format(mode=mode, quoted=repr(name), name=name))
        expect(torch.allclose(getattr(mine, name).grad, getattr(reference, name).grad, atol=1e-4),
               _("in {mode} the gradient of {name} is wrong: is part of the computation detached or under "
                 "no_grad?").format(mode=mode, name=repr(name)))
    expect(leaf.grad is not None,
           _("in {mode} no gradient reached the input: forward cut x out of autograd (x.detach(), x.data, or "
             "torch.no_grad() around its use), so no layer before this one would be trained").format(mode=mode))
    expect(torch.allclose(leaf.grad, leaf_ref.grad, atol=1e-4),
           _("in {mode} the gradient with respect to the input is wrong: {cause}").format(mode=mode, cause=why))


def _expect_training_like_batch_norm(mine: nn.Module, reference: nn.Module) -> None:
    """Three training batches: nn.BatchNorm1d's output, running statistics and (on the first) gradients."""
    weight, bias, eps, momentum = reference.weight.detach(), reference.bias.detach(), reference.eps, reference.momentum
    for step in range(3):
        xb = randn(8, reference.num_features, seed=20 + step) * 3 + 1
        mean, var, unbiased = xb.mean(dim=0), xb.var(dim=0, correction=0), xb.var(dim=0, correction=1)
        running = mine.running_mean.clone(), mine.running_var.clone()
        leaf, leaf_ref = xb.clone().requires_grad_(True), xb.clone().requires_grad_(True)
        with learner_code(_("calling your layer in training mode on an (8, 4) batch"), _(_NORM_SHAPES)):
            y = mine(leaf)
        y_ref = reference(leaf_ref)
        expect(shape_of(y) == str(tuple(xb.shape)), _("an (8, 4) batch must give an (8, 4) output; got {shape}").format(
            shape=shape_of(y)))
        if not torch.allclose(y, y_ref, atol=1e-5):
            expect(False, _first_seen(y.detach(), [
                ((xb - mean) / torch.sqrt(unbiased + eps) * weight + bias,
                 _("in training mode your layer normalized with the batch's unbiased variance (correction=1): "
                   "BatchNorm normalizes a batch with its biased variance, x.var(dim=0, correction=0); the "
                   "unbiased one goes into running_var")),
                ((xb - mean) / (torch.sqrt(var) + eps) * weight + bias,
                 _("eps was added outside the square root: (x - mean) / torch.sqrt(var + eps)")),
                ((xb - mean) / torch.sqrt(var + eps),
                 _("the output is normalized but not scaled and shifted: return normalized * weight + bias")),
            ]) or _("in training mode normalize with the batch's mean and biased variance (x.var(dim=0, "
                    "correction=0)), eps inside the square root, then * weight + bias"))
        if not (torch.allclose(mine.running_mean, reference.running_mean, atol=1e-5)
                and torch.allclose(mine.running_var, reference.running_var, atol=1e-5)):
            now = torch.cat([mine.running_mean, mine.running_var]).detach()
            expect(False, _first_seen(now, [
                (torch.cat([running[0].lerp(mean, 1 - momentum), running[1].lerp(unbiased, 1 - momentum)]),
                 _("the running statistics moved by 1 - momentum: in PyTorch momentum is the weight of the new "
                   "batch value, running = (1 - momentum) * running + momentum * value "
                   "(running.lerp_(value, momentum))")),
                (torch.cat([running[0].lerp(mean, momentum), running[1].lerp(var, momentum)]),
                 _("running_var was updated with the batch's biased variance: BatchNorm updates it with the "
                   "unbiased one, x.var(dim=0, correction=1)")),
            ]) or _("update the running statistics as running = (1 - momentum) * running + momentum * batch value "
                    "(running.lerp_(value, momentum)), the variance with correction=1 (unbiased)"))
        expect(mine.running_mean.grad_fn is None and mine.running_var.grad_fn is None,
               _("update the running statistics under torch.no_grad(): otherwise each in-place update records "
                 "the batch's graph in the buffer, and the next batches build on it"))
        if step == 0:
            _norm_gradients(mine, reference, (leaf, y), (leaf_ref, y_ref), _("training mode"),
                            _("the batch mean and variance are part of the computation; do not detach them"))


def _expect_eval_like_batch_norm(mine: nn.Module, reference: nn.Module) -> None:
    """In eval() mode the running statistics, left as they are, normalize the batch, and gradients flow."""
    mine.eval()
    reference.eval()
    weight, bias, eps = reference.weight.detach(), reference.bias.detach(), reference.eps
    frozen = {name: t.clone() for name, t in _norm_tensors(mine).items()}
    xe = randn(5, reference.num_features, seed=40) * 2
    leaf, leaf_ref = xe.clone().requires_grad_(True), xe.clone().requires_grad_(True)
    with learner_code(_("calling your layer in eval() mode on a (5, 4) batch"), _(_NORM_SHAPES)):
        ye = mine(leaf)
    ye_ref = reference(leaf_ref)
    expect(all(torch.equal(t, frozen[name]) for name, t in _norm_tensors(mine).items()),
           _("in eval() mode your forward changed the running statistics: update them only in training mode, "
             "under `if self.training:`"))
    expect(shape_of(ye) == str(tuple(xe.shape)),
           _("a (5, 4) batch must give a (5, 4) output; got {shape}").format(shape=shape_of(ye)))
    if not torch.allclose(ye, ye_ref, atol=1e-5):
        expect(False, _first_seen(ye.detach(), [
            ((xe - xe.mean(dim=0)) / torch.sqrt(xe.var(dim=0, correction=0) + eps) * weight + bias,
             _("in eval() mode your layer normalized with the batch's own statistics: in eval() mode (self.training "
               "is False) use running_mean and running_var")),
            ((xe - frozen["running_mean"]) / torch.sqrt(frozen["running_var"]) * weight + bias,
             _("in eval() mode eps is missing: it goes inside the square root as in training, "
               "(x - running_mean) / torch.sqrt(running_var + eps)")),
        ]) or _("in eval() mode (self.training is False) the output is (x - running_mean) / sqrt(running_var + eps) "
                "* weight + bias"))
    _norm_gradients(mine, reference, (leaf, ye), (leaf_ref, ye_ref), _("eval() mode"),
                    _("in eval() mode the output is (x - running_mean) / sqrt(running_var + eps) * weight + bias, "
                      "and the gradient flows through it as through any computation"))


def _expect_the_defaults(cls: type[nn.Module]) -> None:
    """``Norm1d(3)`` is ``nn.BatchNorm1d(3)`` in both modes (a small variance makes eps count, an offset momentum)."""
    narrow, default = _built(cls, _("building Norm1d({n})").format(n=3), 3)[0], nn.BatchNorm1d(3)
    xd = randn(8, 3, seed=42) * 0.1 + 1.0
    for training, calling in ((True, _("calling Norm1d({n}) in training mode on an (8, {n}) batch")),
                              (False, _("calling Norm1d({n}) in eval mode on an (8, {n}) batch"))):
        narrow.train(training)
        default.train(training)
        with learner_code(calling.format(n=3), _(_NORM_SHAPES)):
            yd = narrow(xd)
        expect(shape_of(yd) == "(8, 3)" and torch.allclose(yd, default(xd), atol=1e-5)
               and torch.allclose(narrow.running_mean, default.running_mean, atol=1e-6)
               and torch.allclose(narrow.running_var, default.running_var, atol=1e-6),
               _("Norm1d({n}), built without momentum or eps, must compute what nn.BatchNorm1d({n}) does: "
                 "keep the defaults the task gives, momentum=0.1 and eps=1e-5").format(n=3))


def _expect_float64_like_batch_norm(double: nn.Module, n: int) -> None:
    """Built with ``dtype=torch.float64``, the layer gives BatchNorm's float64 result on a float64 input."""
    x64 = randn(8, n, seed=50, dtype=torch.float64)
    with learner_code(_("calling Norm1d({n}, dtype=torch.float64) on a float64 input").format(n=n), _(_ANY_DEVICE)):
        y64 = double(x64)
    expect(isinstance(y64, torch.Tensor) and y64.dtype == torch.float64
           and torch.allclose(y64, nn.BatchNorm1d(n, dtype=torch.float64)(x64), atol=1e-9),
           _("a float64 layer on a float64 input must give BatchNorm's float64 result: {advice}").format(
               advice=_(_ANY_DEVICE)))


@exercise("Exercise 3 · A normalization layer built like the built-in ones")
def check_norm1d(cls: type[nn.Module]) -> None:
    """``cls(num_features, momentum=0.1, eps=1e-5, device=None, dtype=None)``, like ``nn.BatchNorm1d``; its
    ``__init__`` is given, the answer is ``reset_parameters()`` and ``forward()``.

    ``reset_parameters()`` fills the four tensors ``__init__`` made, in place, whatever their device and dtype
    (built on meta, in float64, after ``to_empty``); the forward pass matches ``nn.BatchNorm1d(num_features, eps,
    momentum)`` in training and evaluation mode: values, running statistics (updated in training mode only) and
    gradients to the input, weight and bias at width 4 with momentum=0.3, eps=0.1, values at width 3 with the
    defaults; the output lands on the input's device whatever the default device, and float64 works.
    """
    n = 4
    new_memory = {"set_data": _("reset_parameters() assigned .data = a tensor made elsewhere (on the default device, "
                                "while the layer is on meta): fill the tensors __init__ made, in place, under "
                                "torch.no_grad()")}
    on_meta, watched = _built(cls, _("building Norm1d({n}, device='meta')").format(n=n), n, new_memory, device="meta")
    _expect_registered(on_meta, n)
    _expect_kept_by_reset(n, "device='meta'", watched, lambda t: isinstance(t, torch.Tensor) and t.is_meta)
    double, watched = _built(cls, _("building Norm1d({n}, dtype=torch.float64)").format(n=n), n, dtype=torch.float64)
    _expect_kept_by_reset(n, "dtype=torch.float64", watched,
                          lambda t: isinstance(t, torch.Tensor) and t.dtype == torch.float64)
    _expect_reset_after_to_empty(on_meta)

    # The computation, against nn.BatchNorm1d: values, running statistics, gradients, evaluation mode.
    momentum, eps = 0.3, 0.1
    mine = _built(cls, _("building Norm1d({n}, momentum={momentum}, eps={eps})").format(
        n=n, momentum=momentum, eps=eps), n, momentum=momentum, eps=eps)[0]
    reference = nn.BatchNorm1d(n, eps=eps, momentum=momentum)
    with torch.no_grad():
        for module in (mine, reference):
            module.weight.copy_(randn(n, seed=11) + 2.0)
            module.bias.copy_(randn(n, seed=12))
    _expect_training_like_batch_norm(mine, reference)
    _expect_eval_like_batch_norm(mine, reference)
    _expect_the_defaults(cls)

    # Wherever it runs: on the input's device whatever the default device, and in float64.
    xh = randn(8, n, seed=45)
    _expect_where_the_input_is(mine.train(), xh, reference.train()(xh))
    _expect_float64_like_batch_norm(double, n)
