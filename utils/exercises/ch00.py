"""The warm-up check of chapter 00 · Course map, and :class:`TorchCalls`, which the checks of chapters 00–02 use
to see what an answer asked torch for: a hint names a cause only where the check saw it."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from utils.checks import exercise, expect, learner_code
from utils.i18n import _

__all__ = ["TorchCalls", "check_ones"]


def _call_name(func: object) -> str:
    """``"zeros"`` for ``torch.zeros``, ``".detach"`` for ``Tensor.detach``, ``".data"`` for reading ``x.data``,
    ``".data="`` for assigning it."""
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__name__", "")
    if name in ("__get__", "__set__") and owner is not None:  # a property read or written: x.data, x.data = y
        return "." + getattr(owner, "__name__", "") + ("=" if name == "__set__" else "")
    method = getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor."))
    return ("." if method else "") + name


class TorchCalls(TorchFunctionMode):
    """Inside ``with TorchCalls() as seen:``, what the code asked torch for (a torch function mode sees every
    torch function and tensor method; it costs no import):

    * ``names``: each call's name, ``"zeros"``, ``".detach"`` (a method), ``".data"`` (a property read),
      ``".data="`` (a property written);
    * ``no_grad``: whether a call ran with gradient recording off (``torch.no_grad()``, ``inference_mode``);
    * ``numpy``: whether a NumPy array was handed to torch;
    * ``made``: ``(name, kwargs, args, tensor)`` for each tensor a factory function (``torch.zeros``,
      ``torch.tensor``, ...) made: :meth:`maker` finds the one a result was made by;
    * ``moves``: each move to a device (``.to(device)``, ``.cpu()``, ``.cuda()``; ``Module.to`` makes them too),
      and ``fixed_moves``, those to a device written out (``.cpu()``, ``.cuda()``, ``.to("cpu")``), which no
      input decides.

    While ``paused`` is true it records nothing: a check pauses it where torch works on its own behalf (a lazy
    layer's default init, inside the network's forward)."""

    def __init__(self) -> None:
        super().__init__()
        from torch.utils._device import _device_constructors

        self._factories = _device_constructors()
        self.names: set[str] = set()
        self.no_grad = self.numpy = False
        self.made: list[tuple[str, dict, tuple, torch.Tensor]] = []
        self.moves: list[str] = []
        self.fixed_moves: list[str] = []
        self.paused = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = _call_name(func)
        self.names.add(name)
        self.no_grad |= not torch.is_grad_enabled()
        self.numpy |= any(type(a).__module__ == "numpy" for a in (*args, *kwargs.values()))
        out = func(*args, **kwargs)
        if func in self._factories and isinstance(out, torch.Tensor):
            self.made.append((name, kwargs, args, out))
        devices = [a for a in (*args[1:], kwargs.get("device")) if isinstance(a, (str, torch.device))]
        move = f".to({str(devices[0])!r})" if name == ".to" and devices else f"{name}()" if name in (".cpu", ".cuda") \
            else None
        if move is not None and move not in self.moves:
            self.moves.append(move)
        if move is not None and move not in self.fixed_moves and (name != ".to" or isinstance(devices[0], str)):
            self.fixed_moves.append(move)
        return out

    def maker(self, result: torch.Tensor) -> tuple[str, dict, tuple] | None:
        """``(name, kwargs, args)`` of the factory call that made the memory ``result`` lives in, if one did."""
        if result.numel() == 0:
            return next(((n, k, a) for n, k, a, t in reversed(self.made) if t is result), None)
        ptr = result.untyped_storage().data_ptr()
        return next(((n, k, a) for n, k, a, t in reversed(self.made)
                     if t.numel() and t.untyped_storage().data_ptr() == ptr), None)


#: The sizes the warm-up tries: empty, a single entry, a few more (a constant answer fails some) and one
#: large size (an answer capped at some small size fails it).
SIZES = (0, 1, 3, 7, 100)

#: Conversions to another dtype, as the recorder names them.
_CONVERSIONS = (".double", ".half", ".bfloat16", ".int", ".long", ".short", ".bool", ".to", ".type")
#: Comparisons, which make booleans.
_COMPARISONS = (".__eq__", ".__ne__", ".__gt__", ".__ge__", ".__lt__", ".__le__", "eq", "ne", "gt", "ge", "lt", "le")


def _dtype_cause(result: torch.Tensor, seen: TorchCalls) -> str:
    """Why ``result`` is not float32, from what the answer was seen doing; else that it is not known."""
    made = seen.maker(result)
    if made is not None and made[1].get("dtype") is not None:
        return _("torch.{function} was given dtype={dtype}: leave dtype= out, float32 is the default").format(
            function=made[0], dtype=made[1]["dtype"])
    if seen.numpy or not result.untyped_storage().resizable():  # NumPy's memory (torch.from_numpy) is not resizable
        return _("a NumPy array went into torch, and the tensor keeps the array's dtype ({dtype}): build it with "
                 "torch, not from NumPy").format(dtype=result.dtype)
    if result.dtype == torch.bool and any(c in seen.names for c in _COMPARISONS):
        return _("a comparison makes booleans, and True is not 1.0: build the ones themselves")
    if made is not None and not result.dtype.is_floating_point:
        return _("torch.{function} was given integers (1, not 1.0), so it made an integer tensor: give it 1.0, or "
                 "use torch.ones(n)").format(function=made[0])
    converted = sorted(c for c in _CONVERSIONS if c in seen.names)
    if converted:
        return _("your answer converted the tensor ({calls}): leave it float32").format(calls=", ".join(converted))
    return _("why is not known from here: torch.ones(n) makes float32 ones")


@exercise("Warm-up · a tensor of ones")
def check_ones(answer) -> None:
    """``answer(n)`` must return a 1-D float32 tensor of shape ``(n,)`` filled with ones, for every n >= 0."""
    for n in SIZES:
        with learner_code(_("calling ones({n})").format(n=n), _("ones(n) takes one int, n, and returns a tensor")), \
                TorchCalls() as seen:
            result = answer(n)
        expect(
            isinstance(result, torch.Tensor),
            _("ones({n}) must return a torch.Tensor, got {type}: build it with torch").format(
                n=n, type=type(result).__name__),
        )
        expect(
            result.shape == (n,),
            _("ones({n}) must have shape ({n},), got {shape}: one dimension of length n").format(
                n=n, shape=tuple(result.shape)),
        )
        expect(
            result.dtype == torch.float32,
            _("ones({n}) must be float32, like torch.ones(n), got {dtype}: {cause}").format(
                n=n, dtype=result.dtype, cause=_dtype_cause(result, seen)),
        )
        expect(
            result.device.type != "meta",
            _("ones({n}) returned a tensor on the meta device, which has shapes but no values: build it on the CPU, "
              "without device=").format(n=n),
        )
        wrong = (result != 1).nonzero().flatten()
        if wrong.numel():
            i = int(wrong[0])
            expect(
                False,
                _("every entry of ones({n}) must be 1, but {count} of {n} are not: entry {i} is {value}").format(
                    n=n, count=wrong.numel(), i=i, value=result[i].item()),
            )
