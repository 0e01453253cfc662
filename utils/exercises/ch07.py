"""Checks for chapter 07 · GPU placement and device pitfalls.

Every check runs on the CPU: the ``meta`` device (shapes and dtypes, no data) stands in for a second
device, and dtype conversion shows what ``.to()`` reaches. Meta is more lenient than CUDA: it runs matrix
products, convolutions, ``embedding``, ``gather`` and ``scatter_add_`` with a CPU operand without a word,
so the answer's calls on meta inputs run under :func:`utils.exercises.cuda_rules.same_device`, which refuses what CUDA
refuses (and accepts what it accepts: a 0-dim CPU number, a CPU index tensor for indexing). The checks
of exercises 1 and 2 also take the notebook's ``device`` and run the answer there, so on a GPU machine
the answer is tried on the GPU too.
The chapter's own helpers (:func:`utils.placement.strays`, the allocator's rounding rules) live in
:mod:`utils.placement`.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator

import torch
from torch import nn

from utils.checks import ExerciseFailed, exercise, expect
from utils.exercises.common import CUDA_IN_ERROR, HARD_CODED_DEVICE, calling, ks_distance, own_rng, randn
from utils.exercises.cuda_rules import same_device
from utils.exercises.observe import TorchCalls
from utils.i18n import N_, _
from utils.placement import _is_plain_tensor, _own_attributes, stray_attributes, stray_text

__all__ = ["check_movable", "check_noise"]

META = torch.device("meta")
CPU = torch.device("cpu")

# --- shared by the checks ---------------------------------------------------------------------------



def _device_arg(device: object) -> torch.device:
    """The ``device`` a check is given, as a ``torch.device`` (the CPU for None); a wrong one is the caller's error."""
    device = CPU if device is None else torch.device(device) if isinstance(device, str) else device
    if not isinstance(device, torch.device):
        raise TypeError(_("device must be a torch.device, a str or None, got {type}").format(
            type=type(device).__name__))
    if device.type == "meta":
        raise ValueError(_("device must hold data, such as the notebook's `device` (the check tries 'meta' "
                           "itself)"))
    return device


def _takes_device(run: Callable[..., None]) -> Callable[..., None]:
    """Check the ``device`` argument before the exercise runs, so a bad one is the caller's error."""

    @functools.wraps(run)
    def checked(answer: object, device: torch.device | str | None = None) -> None:
        return run(answer, _device_arg(device))

    checked.judge = lambda answer, device=None: run.judge(answer, _device_arg(device))  # type: ignore[attr-defined]
    return checked


def _device_rng_kept(device: torch.device) -> contextlib.AbstractContextManager:
    """Keep the random state of a CUDA ``device`` too, where the learner's code may draw numbers."""
    return torch.random.fork_rng(devices=[device.index or 0]) if device.type == "cuda" else contextlib.nullcontext()


#: What to do when a forward mixes the input's device with the CPU (the advice of ``same_device``).
_ELSEWHERE_ADVICE = N_(
    "a tensor it uses stayed on the CPU, created inside forward without device=x.device (torch.eye(n), "
    "torch.ones(n), ...), or kept where .to() cannot see it. Create new tensors with device=x.device (or "
    "torch.ones_like(x), x.new_ones(...)), and keep the module's constants in buffers")


_NOISE_ELSEWHERE_ADVICE = N_(
    "a tensor created inside forward without device=x.device lands on the default device (the CPU): create "
    "the noise with torch.randn_like(x), or with device=x.device and dtype=x.dtype")


#: How torch refuses to read the values of a meta tensor (.item(), .tolist(), .numpy()).
_READS_VALUES = re.compile(r"item\(\)|copy out of meta|to numpy", re.IGNORECASE)


@contextlib.contextmanager
def _on_meta(what: str, advice: str, called: str = "", hint: str = "") -> Iterator[None]:
    """Run the block on meta inputs under CUDA's device rules (``same_device``, ``advice`` for a call mixing devices).

    Another error becomes a hint on ``what`` that names its likely cause without quoting PyTorch's wording. With
    ``called``, an error that does not come from the device (``NotImplementedError``, a hard-coded CUDA device) is
    reported on ``called`` with ``hint``."""
    try:
        with same_device("x", hint=_(advice)):
            yield
    except ExerciseFailed:
        raise
    except Exception as err:
        if called and (isinstance(err, NotImplementedError) or CUDA_IN_ERROR.search(str(err))):
            with calling(called, hint):
                raise
        error = type(err).__name__
        expect(False, _(
            "{what} raised {error} (tensors on two devices): a tensor it uses stayed on the "
            "CPU, created inside forward without device=x.device, or kept where .to() cannot see it"
        ).format(what=what, error=error) if "device" in str(err) else _(
            "{what} raised {error}: forward reads values into Python (.item(), .tolist(), .numpy()), which a "
            "meta tensor does not have, and which on a GPU is a copy to the host and a wait on every call. "
            "Keep the computation in tensor operations"
        ).format(what=what, error=error) if _READS_VALUES.search(str(err)) else _(
            "{what} raised {error}: forward must work on any device").format(what=what, error=f"{error}: {err}"))


# --- Exercise 1 ------------------------------------------------------------------------------------

def _stacks(t: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> bool:
    """``t`` holds both ``mean`` and ``std``, stacked or concatenated in either order."""
    if t.numel() != 2 * mean.numel() or t.is_meta:
        return False
    flat = t.detach().reshape(-1)
    return any(torch.equal(flat, torch.stack(pair, dim=dim).reshape(-1))
               for pair in ((mean, std), (std, mean)) for dim in (0, 1))


def _holds(t: torch.Tensor, values: torch.Tensor) -> bool:
    """``t`` holds ``values`` in any shape: ``(4,)``, or ``(1, 4)`` to broadcast."""
    return t.numel() == values.numel() and torch.equal(t.detach().reshape(-1), values)


def _overrides_to(model: nn.Module) -> bool:
    return any(getattr(type(model), name) is not getattr(nn.Module, name) for name in ("to", "_apply"))


def _chained(linears: list[nn.Linear], width: int) -> list[nn.Linear]:
    """``linears`` in the order they can run from an input of ``width`` features (each one's input width is the
    previous one's output width), whatever order they were registered in; as registered if no such order."""
    left, chain = list(linears), []
    while left:
        step = next((m for m in left if m.in_features == width), None)
        if step is None:
            return linears
        chain.append(step)
        left.remove(step)
        width = step.out_features
    return chain


#: The two configurations every answer is built with: (mean, std, widths). The second has other sizes and
#: a single layer (no ReLU at all).
_MOVABLE_CASES = (
    ([1.0, -2.0, 0.5, 3.0], [0.5, 2.0, 1.0, 4.0], (4, 8, 6, 3)),
    ([0.25, -1.0, 2.0], [1.5, 0.5, 3.0], (3, 2)),
)

_STANDARDIZES = N_("forward(self, x) standardizes x, then runs the layers")


@_takes_device
@exercise("Exercise 1 · Make .to() move everything")
@own_rng
def check_movable(cls: type[nn.Module], device: torch.device | str | None = None) -> None:
    """``cls(mean, std, widths)``: standardize with constant ``mean``/``std``, then Linear layers.

    ``forward(x)`` computes ``(x - mean) / std`` and feeds it through ``Linear(widths[0], widths[1])``,
    ``Linear(widths[1], widths[2])``, ... with a ReLU between layers (none after the last). Right after
    construction, ``.to(device)`` or ``.to(dtype)`` must move every tensor the module uses, and ``mean``
    and ``std`` are each a buffer of its own, saved in the ``state_dict``. ``device`` (default: the CPU) is
    where the answer is also run and compared with its CPU output. Every property is checked with two
    configurations (sizes and depths).
    """
    for mean, std, widths in _MOVABLE_CASES:
        mean, std = torch.tensor(mean), torch.tensor(std)
        build = functools.partial(_built, cls, mean, std, widths)
        model = build()
        expect(isinstance(model, nn.Module), _("the class must subclass nn.Module"))
        _expect_movable_after_construction(model, build)
        x = randn(5, widths[0], seed=0)
        _expect_standardized_mlp(model, x, mean, std, widths)
        _expect_gradient_into_every_layer(model, x)
        _expect_constants_in_buffers_of_their_own(model, mean, std)
        _expect_moved_to_meta(model, widths)
        _expect_same_output_on(device, build(), x)
        _expect_dtype_converted(build, x)


def _built(cls: type[nn.Module], mean: torch.Tensor, std: torch.Tensor, widths: tuple[int, ...],
           dtype: torch.dtype | None = None) -> nn.Module:
    """``cls(mean, std, widths)`` on copies of the constants, then ``.to(dtype)`` if one is given."""
    with calling(_("building cls(mean, std, widths={widths})").format(widths=widths),
                  _("the constructor takes (mean, std, widths) and calls super().__init__() first")):
        model = cls(mean.clone(), std.clone(), widths)
        return model if dtype is None else model.to(dtype)


def _expect_movable_after_construction(model: nn.Module, build: Callable[[], nn.Module]) -> None:
    """Right after construction every tensor is on the CPU, where mean and std arrived, and ``.to()`` reaches it."""
    placed = sorted({t.device.type for t in [*model.parameters(), *model.buffers()]} - {"cpu"})
    expect(
        not placed,
        _("right after construction some tensors are on {device}, but mean and std "
          "arrived on the CPU: {cause}").format(device=placed[0] if placed else "", cause=_(HARD_CODED_DEVICE)))
    left = stray_attributes(model)
    lists = [stray_text(where, container) for where, container in left if container is not None]
    plain = [stray_text(where, container) for where, container in left if container is None]
    expect(
        not lists,
        _(".to() right after construction cannot see inside {names}: keep the layers in an "
          "nn.ModuleList (or nn.Sequential / nn.ModuleDict) and the constants in buffers").format(
              names=", ".join(lists)))
    if plain and _overrides_to(model):
        _expect_no_moving_override(build(), plain)
    expect(
        not plain,
        (_(".to() right after construction leaves {names} behind: use self.register_buffer(name, tensor). "
           "Overriding .to() or _apply does not fix it: tensor.to() returns a new tensor (the result must be "
           "kept), and .cuda(), .double() and .half() do not call .to() at all.")
         if _overrides_to(model) else
         _(".to() right after construction leaves {names} behind: use self.register_buffer(name, tensor).")
         ).format(names=", ".join(plain)))


def _expect_no_moving_override(probe: nn.Module, plain: list[str]) -> None:
    """An override of ``.to()`` or ``_apply`` that moves the plain tensors still leaves them out of the state_dict."""
    with calling("model.to('meta')", _("an override of .to() or _apply must still move the module")):
        probe.to(META)
    expect(
        not all(v.is_meta for _name, v in _own_attributes(probe) if _is_plain_tensor(v)),
        (_("your override moves {names}, but a plain attribute is not saved in the "
           "state_dict: use self.register_buffer(name, tensor), which nn.Module moves and saves by itself")
         if type(probe)._apply is not nn.Module._apply else
         _("your override moves {names}, but .cuda(), .double() and .half() call _apply, not .to(), so "
           "they miss them, and a plain attribute is not saved in the state_dict: use "
           "self.register_buffer(name, tensor), which nn.Module moves and saves by itself")
         ).format(names=", ".join(plain)))


def _expect_standardized_mlp(model: nn.Module, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                             widths: tuple[int, ...]) -> None:
    """forward leaves ``x`` as it was and runs ``(x - mean) / std`` through Linear layers of ``widths`` and ReLUs."""
    given = x.clone()
    with calling(_("calling the model on a (5, {width}) batch").format(width=widths[0]), _(_STANDARDIZES)):
        y = model(x)
    expect(
        torch.equal(x, given),
        _("forward changed its input in place (x -= mean, x.sub_(...)): the caller's batch changes with it, and "
          "a second call would standardize it twice. Compute (x - self.mean) / self.std as a new tensor"))
    expect(
        isinstance(y, torch.Tensor) and y.shape == (5, widths[-1]),
        _("widths {widths} on a batch of 5 give shape (5, {width}); got {shape}").format(
            widths=widths, width=widths[-1], shape=getattr(y, "shape", type(y).__name__)))
    linears = _chained([m for m in model.modules() if isinstance(m, nn.Linear)], widths[0])
    want_layers = list(zip(widths, widths[1:], strict=False))
    expect(
        [(m.in_features, m.out_features) for m in linears] == want_layers,
        _("expected registered Linear layers {expected}, found {found}").format(
            expected=want_layers, found=[(m.in_features, m.out_features) for m in linears]))
    with torch.no_grad():
        expected = (x - mean) / std
        for layer in linears:
            expected = torch.relu(layer(expected)) if layer is not linears[-1] else layer(expected)
    expect(
        torch.allclose(y, expected, atol=1e-6),
        _("forward must compute (x - mean) / std, then the layers with a ReLU between them (none after the last)"))


def _expect_gradient_into_every_layer(model: nn.Module, x: torch.Tensor) -> None:
    """The output's gradient reaches the input and every Linear layer's parameters."""
    x_grad = x.clone().requires_grad_()
    with calling(_("backward through the model's output"), _(_STANDARDIZES)):
        if (out := model(x_grad)).requires_grad:
            out.sum().backward()
    cut = [f"{name}.{kind}" for name, m in model.named_modules() if isinstance(m, nn.Linear)
           for kind, p in m.named_parameters() if p.grad is None] + ["x"] * (x_grad.grad is None)
    model.zero_grad(set_to_none=True)
    expect(
        not cut,
        _("no gradient reaches {names} from the output: something in forward cuts the graph (torch.no_grad(), "
          ".detach() or .data), so training would not reach them").format(names=", ".join(cut)))


def _expect_constants_in_buffers_of_their_own(model: nn.Module, mean: torch.Tensor, std: torch.Tensor) -> None:
    """mean and std are each a buffer of its own (not stacked, not a parameter), saved in the state_dict."""
    stacked = next(((name, t) for name, t in [*model.named_parameters(), *model.named_buffers()]
                    if _stacks(t, mean, std)), None)
    expect(
        stacked is None,
        _("mean and std are stacked into one tensor, {name} of shape "
          "{shape}: the task asks for each in a buffer of its own, "
          "self.register_buffer('mean', mean) and self.register_buffer('std', std)").format(
              name=stacked[0] if stacked else "", shape=tuple(stacked[1].shape) if stacked else ()))
    constants = [p for p in model.parameters() if _holds(p, mean) or _holds(p, std)]
    expect(
        not any(p.requires_grad for p in constants),
        _("mean and std are constants: register them as buffers, not nn.Parameter (an optimizer would train them)"))
    expect(
        not constants,
        _("mean and std are constants: register them as buffers. A frozen nn.Parameter (requires_grad=False) is "
          "still a parameter: model.parameters() yields it, so it goes to the optimizer, counts among the "
          "model's parameters, and model.requires_grad_() (unfreezing the model) makes it trainable again"))
    saved = model.state_dict().values()
    expect(
        any(_holds(t, mean) for t in saved) and any(_holds(t, std) for t in saved),
        _("mean and std must be saved with the model: register them as persistent buffers (the default, "
          "persistent=True)"))


def _expect_moved_to_meta(model: nn.Module, widths: tuple[int, ...]) -> None:
    """``.to('meta')`` returns the model with every tensor on meta, and a meta input then gives a meta output."""
    with calling("model.to('meta')", _("do not override .to(); register tensors so that nn.Module moves them")):
        moved = model.to(META)
    expect(moved is model, _(".to() on a module must return the module itself"))
    behind = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device != META]
    expect(not behind, _("after .to('meta') these stayed behind: {names}").format(names=behind))
    with _on_meta(_("after .to('meta'), forward on a meta input"), _ELSEWHERE_ADVICE):
        out = model(torch.empty(7, widths[0], device=META))
    expect(
        isinstance(out, torch.Tensor) and out.device == META and out.shape == (7, widths[-1]),
        _("after .to('meta') the output of a meta input must be on 'meta'"))


def _expect_same_output_on(device: torch.device, fresh: nn.Module, x: torch.Tensor) -> None:
    """After ``.to(device)`` the model gives on ``device`` the output it gives on the CPU."""
    with torch.no_grad():
        reference = fresh(x)
        with calling(_("running the model on {device} after .to({type})").format(
                device=device, type=repr(device.type)), "", on=device):
            on_device = fresh.to(device)(x.to(device))
    expect(
        on_device.device.type == device.type and torch.allclose(on_device.cpu(), reference, atol=1e-3),
        _("after .to({type}) the model must give the same output there, on {device}").format(
            type=repr(device.type), device=device.type))


def _expect_dtype_converted(build: Callable[..., nn.Module], x: torch.Tensor) -> None:
    """``.to(torch.float64)`` converts every parameter and buffer and the output, ``.to(torch.bfloat16)`` the output.

    bfloat16 too: float64 wins every type promotion, so a float32 tensor made in forward hides behind it."""
    wide = build(torch.float64)
    expect(
        all(t.dtype == torch.float64 for t in [*wide.parameters(), *wide.buffers()]),
        _(".to(torch.float64) must convert every parameter and buffer"))
    with calling(_("calling the float64 model on a float64 batch"),
                  _("create nothing with a fixed dtype in forward")):
        out64 = wide(x.double())
    expect(out64.dtype == torch.float64, _("after .to(torch.float64) the output must be float64"))
    fixed = _("create nothing with a fixed dtype in forward: x.float(), or a tensor made without dtype=x.dtype, "
              "is float32, which a bfloat16 (or float16) model's layers refuse")
    narrow = build(torch.bfloat16)
    with calling(_("calling the model after .to(torch.bfloat16) on a bfloat16 batch"), fixed):
        out16 = narrow(x.bfloat16())
    expect(out16.dtype == torch.bfloat16,
           _("after .to(torch.bfloat16) the output must be bfloat16: {cause}").format(cause=fixed))


# --- Exercise 2 ------------------------------------------------------------------------------------

class _Draws(TorchCalls):
    """:class:`TorchCalls` that also notes the devices of the generators random draws are given (``generator=``):
    ``meta`` accepts any generator, where a GPU would refuse a CPU one."""

    def __init__(self) -> None:
        super().__init__()
        self.generators: list[torch.device] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        generator = (kwargs or {}).get("generator")
        if isinstance(generator, torch.Generator):
            self.generators.append(generator.device)
        return super().__torch_function__(func, types, args, kwargs)


class _FalsyEval(functools.partial):
    """Stands in for a layer's ``eval`` method: calls it, but is false as a condition (a bound method is
    always true), so a forward that tests ``if self.eval:`` shows itself."""

    def __bool__(self) -> bool:
        return False


_SIGMA_CONSTRUCTOR = N_("the constructor takes sigma and calls super().__init__() first")
_ON_ZEROS = N_("calling the layer in training mode on torch.zeros(20_000)")
_IN_EVAL = N_("calling the layer in eval mode")


@_takes_device
@exercise("Exercise 2 · Noise that follows its input")
@own_rng
def check_noise(cls: type[nn.Module], device: torch.device | str | None = None) -> None:
    """``cls(sigma)``: in training mode add ``sigma`` times standard normal noise; in eval mode, identity.

    The noise is fresh on every call, independent for every element, and created on the input's device
    with its dtype, from that device's own generator; the gradient passes to ``x`` as through ``x + noise``,
    and the input itself is not modified. ``device`` (default: the CPU) is where the answer is also run.
    """
    with calling(_("building cls(0.5)"), _(_SIGMA_CONSTRUCTOR)):
        layer = cls(0.5)
    expect(isinstance(layer, nn.Module), _("the class must subclass nn.Module"))
    noisy = _expect_fresh_noise_in_training(layer)
    std = _expect_independent_normal_noise(noisy)
    _expect_noise_per_element_of_a_batch(layer)
    with calling(_("calling the layer on torch.ones(20_000)"), ""):
        shifted = layer(torch.ones(20_000))
    expect(abs(shifted.mean().item() - 1) < 0.02, _("add the noise to the input (x + noise), do not replace it"))
    _expect_gradient_passes(layer)
    _expect_other_sigma(cls, std)
    _expect_identity_in_eval(layer)
    _expect_noise_on_the_input_device(layer)
    _expect_noise_of_the_input_dtype(layer)
    with _device_rng_kept(device), calling(_("calling the layer on an input on {device}").format(device=device), "",
                                            on=device):
        there = layer(torch.zeros(3, 4, device=device))
    expect(
        isinstance(there, torch.Tensor) and there.device.type == device.type and there.shape == (3, 4),
        _("an input on {device} must give an output there").format(device=device))


def _expect_fresh_noise_in_training(layer: nn.Module) -> torch.Tensor:
    """In training mode the output (returned) has the input's shape, differs from it, and changes on every call."""
    x = torch.zeros(20_000)
    with calling(_(_ON_ZEROS), _("forward(self, x) returns x plus sigma times standard normal noise")):
        noisy = layer(x)
        again = layer(x)
    expect(
        torch.equal(x, torch.zeros(20_000)),
        _("forward changed its input: return x + noise as a new tensor (no x.add_(...) or x += ... on the input)"))
    expect(
        isinstance(noisy, torch.Tensor) and noisy.shape == x.shape,
        _("the output must have the input's shape {expected}; got {shape}").format(
            expected=tuple(x.shape), shape=getattr(noisy, "shape", type(noisy).__name__)))
    if torch.equal(noisy, x):
        _fail_without_noise(layer, x)
    expect(not torch.equal(noisy, again),
           _("draw fresh noise on every call in training mode (no fixed seed in forward)"))
    return noisy


def _fail_without_noise(layer: nn.Module, x: torch.Tensor) -> None:
    """Fail an answer that adds no noise in training mode, with the cause the check sees where it sees one."""
    with calling(_("calling the layer in training mode on torch.ones(20_000)"), ""):
        on_ones = layer(torch.ones(20_000))
    expect(
        not isinstance(on_ones, torch.Tensor) or torch.equal(on_ones, torch.ones(20_000)),
        _("on torch.zeros(20_000) the output stayed all zeros, and on ones it changed: the noise is multiplied "
          "into x. Add it: return x + sigma * noise"))
    with calling(_(_IN_EVAL), ""):
        in_eval = layer.eval()(x)
    layer.train()
    expect(
        not isinstance(in_eval, torch.Tensor) or torch.equal(in_eval, x),
        _("the noise comes in eval mode and not in training mode: the condition is the wrong way round. "
          "Add the noise when self.training is True"))
    layer.eval = _FalsyEval(nn.Module.eval, layer)
    with calling(_(_ON_ZEROS), ""):
        probe = layer(x)
    del layer.eval
    expect(
        not isinstance(probe, torch.Tensor) or torch.equal(probe, x),
        _("forward tests self.eval, a method, and a method is always true: test self.training instead"))
    expect(
        False,
        _("in training mode (the default) the output must differ from the input: add the noise when "
          "self.training is True"))


def _expect_independent_normal_noise(noisy: torch.Tensor) -> float:
    """The noise on zeros is independent for every element and normal with mean 0 and std 0.5; returns its std."""
    sizes = noisy.detach().abs().unique().numel()  # independent float draws almost never repeat a size
    expect(
        sizes > 1,
        _("every element needs its own noise: all 20000 elements of the output are the same number, one draw "
          "broadcast over x (a noise of shape (1,) or ()). Draw it with x's full shape: torch.randn_like(x)"))
    expect(
        sizes > 0.9 * noisy.numel(),
        _("the noise repeats itself: its 20000 elements have only {sizes} different sizes. Draw every element "
          "independently: torch.randn_like(x)").format(sizes=sizes))
    mean, std = noisy.mean().item(), noisy.std().item()
    expect(abs(std - 0.5) < 0.02, _("sigma=0.5 must give noise of std 0.5; got {std}").format(std=f"{std:.3f}"))
    expect(abs(mean) < 0.02, _("the noise must have mean 0; got {mean}").format(mean=f"{mean:.3f}"))
    distance = ks_distance(noisy / 0.5, torch.special.ndtr)
    expect(
        distance < 0.025,
        _("the noise has std 0.5 but is not normally distributed (its distribution is {distance} away from "
          "the normal one): draw it with torch.randn_like(x), which draws from the standard normal").format(
              distance=f"{distance:.3f}"))
    return std


def _expect_noise_per_element_of_a_batch(layer: nn.Module) -> None:
    """On a (64, 32) batch the output has the batch's shape, and no row or column of noise is shared."""
    with calling(_("calling the layer on a (64, 32) batch"), _("draw noise of x's full shape")):
        batch = layer(torch.zeros(64, 32))
    expect(
        isinstance(batch, torch.Tensor) and batch.shape == (64, 32),
        _("the output must have the input's shape (64, 32)"))
    expect(
        not torch.equal(batch[0], batch[1]) and not torch.equal(batch[:, 0], batch[:, 1]),
        _("every element of a batch needs its own noise: draw it with x's full shape (torch.randn_like(x)), "
          "not one row or one column shared by the batch"))


def _expect_gradient_passes(layer: nn.Module) -> None:
    """In training mode the gradient of ``layer(x).sum()`` with respect to ``x`` is all ones, as for ``x + noise``."""
    x, calls = torch.zeros(64, requires_grad=True), TorchCalls()
    with calls, calling(_("calling the layer in training mode on an input that requires grad"), ""):
        out = layer(x)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.sum().backward()
    expect(
        x.grad is not None,
        _("no gradient reaches x through the layer, so the layers before it would not learn: x.detach(), x.data "
          "or torch.no_grad() cut it off. Return x itself plus the noise: x + sigma * torch.randn_like(x)"))
    expect(
        bool(x.grad.count_nonzero()) or "normal" not in calls.names,
        _("the gradient through the layer is zero: torch.normal(x, sigma) does not pass gradients to its mean x, "
          "so the layers before it would not learn. Add the noise to x instead: x + sigma * torch.randn_like(x)"))
    expect(
        torch.equal(x.grad, torch.ones_like(x)),
        _("the gradient of sum(output) with respect to x must be all ones, as through x + noise: add the noise "
          "to x, and compute the noise without x"))


def _expect_other_sigma(cls: type[nn.Module], std_at_half: float) -> None:
    """A second layer, ``cls(2.0)``, has noise of std 2, passes the gradient, and returns its input in eval mode."""
    with calling(_("building cls(2.0)"), _(_SIGMA_CONSTRUCTOR)):
        layer = cls(2.0)
    with calling(_("calling cls(2.0) in training mode on torch.zeros(20_000)"), ""):
        noisy = layer(torch.zeros(20_000))
    std = noisy.std().item() if isinstance(noisy, torch.Tensor) and noisy.is_floating_point() else float("nan")
    if abs(std - std_at_half) < 0.02:
        expect(
            abs(std - 2.0) < 0.08,
            _("the noise has std {std} for sigma=2.0, the same as for sigma=0.5: forward does not use the "
              "sigma given to the constructor. Scale the noise by self.sigma").format(std=f"{std:.3f}"))
    expect(abs(std - 2.0) < 0.08, _("sigma=2.0 must give noise of std 2.0; got {std}").format(std=f"{std:.3f}"))
    _expect_gradient_passes(layer)
    with calling(_("cls(2.0).eval(), then calling it"), _("in eval mode return x")):
        layer.eval()
        kept = layer(torch.ones(5))
    expect(
        isinstance(kept, torch.Tensor) and torch.equal(kept, torch.ones(5)),
        _("in eval mode (layer.eval()) return the input unchanged, whatever sigma"))


def _expect_identity_in_eval(layer: nn.Module) -> None:
    """After ``layer.eval()`` the layer returns its input unchanged (it is put back in training mode after)."""
    with calling("layer.eval()", _("do not override eval() or train()")):
        layer.eval()
    x = torch.zeros(20_000)
    with calling(_(_IN_EVAL), _("in eval mode return x")):
        kept = layer(x)
    expect(
        isinstance(kept, torch.Tensor) and torch.equal(kept, x),
        _("in eval mode (layer.eval()) return the input unchanged"))
    layer.train()


def _expect_noise_on_the_input_device(layer: nn.Module) -> None:
    """A meta input gives a meta output, drawn with no generator of the layer's own."""
    with _Draws() as draws, _on_meta(_("calling the layer on an input on another device (meta)"),
                                     _NOISE_ELSEWHERE_ADVICE, called=_("calling the layer on a meta input"),
                                     hint=_("create the noise with torch.randn_like(x)")):
        on_meta = layer(torch.zeros(3, 4, device=META))
    expect(
        isinstance(on_meta, torch.Tensor) and on_meta.device == META and on_meta.shape == (3, 4),
        _("the output must be on the input's device: create the noise there (torch.randn_like(x), or "
          "device=x.device; a .to(...) whose result is not kept changes nothing)"))
    own = draws.generators[0].type if draws.generators else ""
    expect(
        not own,
        _("the noise is drawn with a generator of its own, which lives on the {device} device: "
          "an input on another device (a GPU) cannot use it, and torch refuses the draw. Leave out "
          "generator=...; the input's device has its own generator, seeded by torch.manual_seed").format(device=own))


def _dtype_cause(layer: nn.Module, dtype: torch.dtype) -> str:
    """Why an input of ``dtype`` gave an output of another dtype: a tensor the layer holds, or the noise's dtype.

    A floating tensor with dimensions takes part in type promotion (a 0-dim one does not), so a float32 ``sigma``
    of shape ``(1,)`` turns ``x + sigma * noise`` to float32 for a bfloat16 ``x``.
    """
    held = [*layer.named_parameters(), *layer.named_buffers(), *_own_attributes(layer)]
    name, value = next(((name, v) for name, v in held if isinstance(v, torch.Tensor) and v.dim() > 0
                        and v.is_floating_point() and torch.promote_types(v.dtype, dtype) != dtype), ("", None))
    if value is None:
        return _("create the noise with x's dtype too (torch.randn_like(x), or dtype=x.dtype)")
    return _("the layer keeps {name} as a {dtype} tensor of shape {shape}, which promotes "
             "x + sigma * noise to its dtype. Keep sigma a Python number, or cast it: "
             "self.{name}.to(x.dtype)").format(name=name, dtype=str(value.dtype).removeprefix("torch."),
                                                shape=tuple(value.shape))


def _expect_noise_of_the_input_dtype(layer: nn.Module) -> None:
    """A bfloat16 input gives a bfloat16 output, and a float64 input a float64 one."""
    for dtype in (torch.bfloat16, torch.float64):
        with calling(_("calling the layer on a {dtype} input").format(dtype=dtype),
                      _("create the noise with x's dtype")):
            typed = layer(torch.zeros(8, dtype=dtype))
        if not (isinstance(typed, torch.Tensor) and typed.dtype == dtype):
            expect(False, _("a {dtype} input gave a {got} output: {cause}").format(
                dtype=str(dtype).removeprefix("torch."), cause=_dtype_cause(layer, dtype),
                got=str(getattr(typed, "dtype", type(typed).__name__)).removeprefix("torch.")))
