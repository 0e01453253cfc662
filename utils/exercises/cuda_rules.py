"""CUDA's device rules, played on a machine without a GPU: the stand-ins the device checks of chapters 06 and 07 run
under.

A check cannot put a learner's answer on a GPU the machine lacks, so it puts the inputs on ``meta`` (or keeps them on
the CPU and makes ``meta`` the default device) and watches every torch call: :func:`same_device` refuses a call that
mixes two devices where CUDA would refuse it, and :func:`default_device_elsewhere` sends a tensor made without
``device=`` where a GPU machine's CPU tensors would be. What CUDA accepts (a number on the CPU, an index it moves to
the data) goes through. Kept apart from :mod:`utils.checks`, which is what every chapter's checks read.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from utils.checks import ExerciseFailed
from utils.i18n import _

__all__ = ["default_device_elsewhere", "same_device"]


@contextlib.contextmanager
def default_device_elsewhere(device: str = "meta") -> Iterator[None]:
    """Run the block with ``device`` as the default device, to show code that ignores its input's device.

    Inputs stay on the CPU: a tensor the learner's code makes without ``device=`` lands on ``device`` and
    meets the CPU inputs, as on a GPU machine a tensor made on the CPU meets GPU inputs. One exception
    keeps the roles faithful: a number (a 0-dim tensor such as ``torch.tensor(eps)``) made without
    ``device=`` stays on the CPU, because GPU kernels accept CPU numbers. And as CUDA moves a CPU index
    tensor to the data it indexes (``x[idx]``, ``x[idx] = v``, ``index_put_``), an index made on ``device``
    is moved to the CPU input it indexes: out of ``meta`` that raises ``NotImplementedError`` ("Cannot copy
    out of meta tensor"; the call works on a GPU, but there are no values to compute with), where torch
    itself would read the meta index as if it held numbers. Used by chapter 06.
    """
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_leaves

    class _NumbersOnTheCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if (getattr(func, "__name__", "") in _INDEXED and len(args) > 1 and isinstance(args[0], torch.Tensor)
                    and args[0].device.type != device):
                args = (args[0], _host_tensors_moved(args[1], args[0].device, device, torch.Tensor), *args[2:])
            made = func(*args, **kwargs)
            if (isinstance(made, torch.Tensor) and made.dim() == 0 and made.device.type == device
                    and "device" not in kwargs
                    and not any(isinstance(leaf, torch.Tensor) for leaf in tree_leaves((args, kwargs)))):
                return func(*args, **kwargs, device="cpu")
            return made

    with torch.device(device), _NumbersOnTheCpu():
        yield


def same_device(name: str, host: str = "cpu", hint: str | None = None) -> contextlib.AbstractContextManager:
    """A torch function mode that refuses, as CUDA does, a call mixing tensors on two devices.

    Stand-in devices let a check run on a machine without a GPU, but they are more lenient than CUDA in
    places (a meta kernel runs ``scatter_add_`` with a CPU ``src``), so inside ``with same_device("x"):``
    every torch function and Tensor method first looks at the devices of its tensors, and raises
    :class:`ExerciseFailed` where CUDA would stop. It lets through what CUDA accepts:

    * a number on ``host`` (a 0-dim tensor) mixed with tensors elsewhere (``x * torch.tensor(2.0)``);
    * index tensors on ``host`` for data elsewhere in advanced indexing (``x[idx]``, ``x[idx] = v``,
      ``index_put_``, with or without ``accumulate``): CUDA moves them to the data, and so does this mode before
      the call. Host data read with an index elsewhere is refused, as on CUDA. (``gather``, ``scatter*``,
      ``index_select``, ``index_add_`` and the like take no index on another device, on CUDA nor here.)
      Moving an index out of ``meta`` raises ``NotImplementedError`` ("Cannot copy out of meta tensor"): the
      call works on a GPU, but the stand-in has no values to compute with;
    * a 0-dim value on ``host`` for ``masked_fill`` and ``index_fill``, which CUDA reads as a number (the meta
      kernels refuse it, so this mode moves it to the data first);
    * conversions, which move data on purpose (``.to``, ``copy_``, ``new_tensor``, ``type_as``, ...).

    ``name`` is the learner's argument whose device counts (it appears in the hint), ``host`` the device that
    plays the default device (the CPU): ``"cpu"`` when the inputs are on ``meta``, ``"meta"`` when they stay
    on the CPU under :func:`default_device_elsewhere`. ``hint`` replaces the default advice (create new
    tensors on ``name``'s device). Used by chapters 06 and 07.
    """
    if not isinstance(name, str) or not name:
        raise TypeError("name must be a non-empty str")
    advice = hint if hint is not None else _(
        "create every new tensor on {name}.device: torch.zeros(..., device={name}.device), "
        "{name}.new_zeros(...) or torch.zeros_like({name}). A tensor made without device= lands on the default "
        "device (the CPU), not where the data is"
    ).format(name=name)
    return _same_device_mode()(name, host, advice)


#: Calls that may take tensors on two devices on CUDA: conversions, and reading with an index (CUDA moves
#: index tensors to the data's device).
_CONVERSIONS = frozenset({"to", "copy_", "new_tensor", "type_as", "expand_as", "view_as", "reshape_as", "__getitem__"})
#: Writes through an index: the index may stay on the host, the written value may not (apart from a number).
_INDEX_WRITES = frozenset({"__setitem__", "index_put", "index_put_"})
#: Advanced indexing, whose index tensors CUDA moves to the data's device (``make_info`` in ATen).
_INDEXED = frozenset({"__getitem__", "__setitem__", "index_put", "index_put_"})
#: Fills whose value, a 0-dim tensor, CUDA reads as a number wherever it is; meta kernels refuse a CPU one.
_FILLS = {"masked_fill": 2, "masked_fill_": 2, "index_fill": 3, "index_fill_": 3}


def _host_tensors_moved(index: object, to: object, host: str, tensor_type: type) -> object:
    """``index`` (a tensor, or a tuple or list holding tensors) with its tensors on ``host`` moved to ``to``, as CUDA
    moves an index tensor, or a 0-dim value it reads as a number."""
    if isinstance(index, tensor_type):
        return index.to(to) if index.device.type == host else index
    if isinstance(index, (tuple, list)):
        return type(index)(_host_tensors_moved(item, to, host, tensor_type) for item in index)
    return index


def _tensors_in(obj: object, tensor_type: type) -> list:
    """Every tensor in ``obj`` and the tuples, lists and dicts inside it (torch's pytree leaves)."""
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(obj) if isinstance(leaf, tensor_type)]


@functools.cache
def _same_device_mode() -> type:
    """The class behind :func:`same_device`, made on first use: importing this module stays free of torch."""
    import torch
    from torch.overrides import TorchFunctionMode

    class SameDevice(TorchFunctionMode):
        def __init__(self, name: str, host: str, advice: str) -> None:
            super().__init__()
            self.name, self.host, self.advice = name, host, advice

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            called = getattr(func, "__name__", "")
            host = self.host
            if called == "__getitem__" and args and args[0].device.type == host and any(
                    t.device.type != host for t in _tensors_in(args[1:], torch.Tensor)):
                raise ExerciseFailed(_(
                    "a tensor on the default device (the CPU) was indexed with a tensor on {name}.device; "
                    "on a GPU it stops with 'indices should be either on cpu or on the same device as the indexed "
                    "tensor': {advice}").format(name=self.name, advice=self.advice))
            if called in _INDEXED and len(args) > 1 and args[0].device.type != host:
                # as CUDA does: host index tensors go to the data (out of meta: NotImplementedError, no data)
                args = (args[0], _host_tensors_moved(args[1], args[0].device, host, torch.Tensor), *args[2:])
            at = _FILLS.get(called)
            if at is not None and len(args) > at and args[0].device.type != host:
                # a number on the host: CUDA reads its value (out of meta: NotImplementedError, no data)
                args = (*args[:at], _host_tensors_moved(args[at], args[0].device, host, torch.Tensor), *args[at + 1:])
            if called in _CONVERSIONS:
                checked: list[object] = []
            elif called in _INDEX_WRITES:  # the value must be on the data's device; the index need not be
                index = args[1] if len(args) > 1 else kwargs.get("indices")
                value = args[2] if len(args) > 2 else kwargs.get("values", kwargs.get("value"))
                indexed = bool(_tensors_in(index, torch.Tensor))
                checked = [args[0] if args else None, value] if indexed else []
            else:
                checked = [args, kwargs]
            devices = {t.device for t in _tensors_in(checked, torch.Tensor) if t.dim() > 0 or t.device.type != host}
            if len(devices) > 1:
                raise ExerciseFailed(_(
                    "{function}() got tensors on {name}.device and on the default device (the CPU); on a GPU it "
                    "stops with 'Expected all tensors to be on the same device': {advice}").format(
                        function=called, name=self.name, advice=self.advice))
            return func(*args, **kwargs)

    return SameDevice
