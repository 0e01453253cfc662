"""Helpers for chapter 07 · GPU placement and device pitfalls, and chapter 08 · Operating a GPU.

:func:`strays` lists what ``module.to()`` cannot reach (plain tensor attributes, containers of modules or
tensors). :func:`allocator_block_bytes` and :func:`allocator_segment_bytes` write down the CUDA caching
allocator's default rounding rules, and :func:`adam_step_peak` what one foreach Adam step holds at its
peak: the formulas of chapter 08's GPU memory cells, checked here on the CPU by ``tests/test_placement.py``.
Chapter 07's exercise checks use :func:`strays` too. Importing this module does no work.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from utils._validate import check_int
from utils.i18n import _

__all__ = ["ALLOCATOR_BLOCK", "adam_step_peak", "allocator_block_bytes", "allocator_segment_bytes", "stray_attributes",
           "stray_text", "strays"]

MiB = 2**20


@functools.cache
def _module_internals() -> frozenset[str]:
    """The attributes every ``nn.Module`` keeps in its ``__dict__`` (registries of parameters, hooks...)."""
    return frozenset(vars(nn.Module()))


def strays(module: nn.Module) -> list[str]:
    """Attributes that ``module.to()`` cannot reach: plain tensors and containers of modules or tensors.

    Walks every registered sub-module and returns names such as ``'mean (plain tensor attribute)'`` or
    ``'block.layers (list of modules or tensors)'``, in the order the attributes were set. An empty list
    means ``.to()`` moves everything the modules hold as attributes. ``nn.Module``'s own registries
    (``_parameters``, ``_buffers``, ``_modules``, the hooks) are not strays; a learner's ``self._mean``
    is. A container whose modules are all registered anyway (a second name for them) or hold no tensor
    (``nn.ReLU()``) is not a stray either: ``.to()`` moves modules in place and misses nothing there.
    The texts are in the language of :func:`utils.set_language`; :func:`stray_attributes` gives the same
    findings as data.
    """
    return [stray_text(where, container) for where, container in stray_attributes(module)]


def stray_text(where: str, container: str | None) -> str:
    """How :func:`strays` names one finding of :func:`stray_attributes`."""
    if container is None:
        return f"{where} (plain tensor attribute)"  # labels a notebook compares, as data: not translated
    return f"{where} ({container} of modules or tensors)"


def stray_attributes(module: nn.Module) -> list[tuple[str, str | None]]:
    """What :func:`strays` finds, as ``(dotted name, container)``: ``container`` is the container's type name
    (``"list"``, ``"tuple"``, ``"dict"``...) for a container of modules or tensors, ``None`` for a plain tensor."""
    if not isinstance(module, nn.Module):
        raise TypeError(_("module must be an nn.Module, got {type}").format(type=type(module).__name__))
    registered = {id(m) for m in module.modules()}

    def missed(value: object) -> bool:
        if isinstance(value, torch.Tensor):  # even a registered buffer's alias: .to() replaces the buffer
            return True
        # .to() moves a registered module in place, so a second name for it is fine; so is a module that
        # holds no tensor at all (an nn.ReLU)
        return isinstance(value, nn.Module) and id(value) not in registered and any(
            True for _ in (*value.parameters(), *value.buffers()))

    found: list[tuple[str, str | None]] = []
    for where, value in _own_attributes(module):
        if _is_plain_tensor(value):
            found.append((where, None))
        elif isinstance(value, (list, tuple, set, frozenset, dict)):
            items = value.values() if isinstance(value, dict) else value
            if any(missed(v) for v in items):
                found.append((where, type(value).__name__))
    return found


def _own_attributes(module: nn.Module) -> Iterator[tuple[str, object]]:
    """``(dotted name, value)`` of the attributes set on every sub-module, ``nn.Module``'s registries left out."""
    internal = _module_internals()
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if name not in internal:
                yield (f"{prefix}.{name}" if prefix else name), value


def _is_plain_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)


#: The CUDA caching allocator rounds every request up to a multiple of this many bytes.
ALLOCATOR_BLOCK = 512
_SMALL_REQUEST = 1 * MiB  # requests up to 1 MiB share 2 MiB segments ("small pool")
_SMALL_SEGMENT = 2 * MiB
_MEDIUM_REQUEST = 10 * MiB  # requests below 10 MiB get a 20 MiB segment
_MEDIUM_SEGMENT = 20 * MiB
_LARGE_ROUNDING = 2 * MiB  # larger requests get a segment of their own, rounded up to 2 MiB


def allocator_block_bytes(nbytes: int) -> int:
    """The least that ``torch.cuda.memory_allocated()`` grows by when a tensor of ``nbytes`` bytes is created.

    The caching allocator rounds each request up to a multiple of :data:`ALLOCATOR_BLOCK` (512) bytes;
    an empty tensor allocates nothing. It can count more: a request above 1 MiB served from a larger
    cached block takes the whole block unless more than 1 MiB would be left over, so the growth is at
    least this and, for such requests, at most 1 MiB more. These are the defaults:
    ``PYTORCH_CUDA_ALLOC_CONF`` can change them (``roundup_power2_divisions``, ``expandable_segments``).

    >>> allocator_block_bytes(4), allocator_block_bytes(512), allocator_block_bytes(513)
    (512, 512, 1024)
    """
    nbytes = check_int(nbytes, "nbytes")
    return -(-nbytes // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK


def allocator_segment_bytes(nbytes: int) -> int:
    """What ``torch.cuda.memory_reserved()`` grows by for a request of ``nbytes`` that the cache cannot serve.

    The allocator then asks the driver (``cudaMalloc``) for a whole segment and keeps the rest of it for
    later requests: 2 MiB for requests up to 1 MiB, 20 MiB for requests below 10 MiB, and for larger
    ones the request rounded up to a multiple of 2 MiB. Defaults, as for :func:`allocator_block_bytes`.

    >>> allocator_segment_bytes(4) // 2**20, allocator_segment_bytes(3 * 2**20) // 2**20
    (2, 20)
    """
    size = allocator_block_bytes(nbytes)
    if size == 0:
        return 0
    if size <= _SMALL_REQUEST:
        return _SMALL_SEGMENT
    if size < _MEDIUM_REQUEST:
        return _MEDIUM_SEGMENT
    return -(-size // _LARGE_ROUNDING) * _LARGE_ROUNDING


def adam_step_peak(param_numels: Iterable[int], element_size: int = 4, others: Iterable[int] = ()) -> dict[str, int]:
    """Bytes allocated at the peak of one ``torch.optim.Adam(..., foreach=True)`` step, term by term.

    ``param_numels`` are the sizes of the trainable parameters, ``element_size`` their bytes per number,
    ``others`` the byte sizes of other tensors alive during the step (the batch). At the peak, inside
    ``optimizer.step()``, every parameter has its value, its gradient, Adam's two running averages and
    the temporary ``sqrt(exp_avg_sq)`` that the foreach implementation computes for all parameters at
    once: five tensors of its size, each rounded by :func:`allocator_block_bytes`. Activations are
    already freed by then (``backward`` released them). Returns ``{"parameters", "gradients",
    "Adam state", "Adam's temporary", "others"}``; the peak is the sum. Not counted here: what the
    process held before (the cuBLAS workspace among it), which the chapter measures as a baseline.
    """
    element_size = check_int(element_size, "element_size", 1)
    numels = [check_int(n, "param_numels[i]") for n in param_numels]
    blocks = sum(allocator_block_bytes(n * element_size) for n in numels)
    return {
        "parameters": blocks,
        "gradients": blocks,
        "Adam state": 2 * blocks,
        "Adam's temporary": blocks,
        "others": sum(allocator_block_bytes(check_int(b, "others[i]")) for b in others),
    }
