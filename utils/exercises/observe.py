"""What an answer asked torch for: :class:`TorchCalls`, the spy the checks of chapters 00–02 share, so that a hint
names a cause only when the check saw it (``.detach``, ``.data``, recording switched off, a tensor made without
``device=`` or ``dtype=``, a conversion, a move)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["TorchCalls"]


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



#: Conversions to another dtype, as the recorder names them.
