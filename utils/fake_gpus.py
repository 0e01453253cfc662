"""A pretend machine with GPUs, on a virtual clock: the one test double for device and timing code.

Used by chapter 07 (section 8 simulates a CUDA, an Apple and an Intel machine to compare
device-choosing code), by chapter 09's cells (a pretend two-GPU machine, a launch queue) and its
exercise check (a learner's timer is judged on fake GPUs, so the check needs no hardware and no real
time), and by the test suite (device helpers, the doctor, the timing helpers).

Inside ``with fake_gpus(2) as gpus:`` PyTorch reports two CUDA devices (``torch.accelerator`` and
``torch.cuda`` agree), and ``torch.cuda.synchronize`` / ``torch.accelerator.synchronize`` wait on the
fake devices instead of real ones, and so does ``synchronize()`` on a device's ``current_stream`` or
``default_stream`` (one work queue per device). The machine has a current device, as a real one does:
``torch.cuda.device(d)``, ``torch.cuda.set_device(d)`` and their ``torch.accelerator`` twins
(``device_index``, ``set_device_index``) select it, ``current_device()`` reads it, and a
``synchronize()`` without a device waits for it. Work is modelled the way a GPU runs it: :meth:`FakeGPUs.launch`
returns at once and the device is busy for a while after, :meth:`FakeGPUs.sync` advances the clock
to the moment that device is idle. Time is virtual (:meth:`FakeGPUs.clock`), so a test that asserts
"this timer waited for both devices" cannot fail because the machine running it is busy.
Everything is undone on leaving the block (``unittest.mock.patch``), also after an exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

import torch

from utils._validate import check_int, check_number
from utils.devices import GPU_TYPES
from utils.i18n import _

__all__ = ["FakeGPUs", "fake_gpus"]


class FakeGPUs:
    """``count`` devices of ``kind`` with a virtual clock; see the module docstring.

    ``kind`` is usually a GPU type (``"cuda"``, ``"xpu"``, ``"mps"``); another accelerator type such as
    ``"mtia"`` shows how the helpers treat an accelerator that is not a GPU.
    """

    def __init__(self, count: int = 2, kind: str = "cuda") -> None:
        self.count = check_int(count, "count")
        if not isinstance(kind, str) or kind in ("cpu", "meta"):
            raise ValueError(_("kind must name an accelerator such as {kinds}, got {kind}").format(
                kinds=", ".join(GPU_TYPES), kind=repr(kind)))
        torch.device(kind)  # an unknown device type raises here, naming it
        self.kind = kind
        self.now = 0.0
        self.busy_until = [0.0] * self.count
        #: Every device a synchronize call waited for, in order.
        self.synced: list[torch.device] = []
        #: The current device's index (what a bare ``"cuda"`` and a bare ``synchronize()`` mean).
        self.current = 0

    def clock(self) -> float:
        """The virtual time in seconds; pass it where a timer function is expected."""
        return self.now

    def device(self, index: int) -> torch.device:
        return torch.device(self.kind, check_int(index, "index", 0, max(self.count - 1, 0)))

    def launch(self, index: int, seconds: float) -> None:
        """Queue ``seconds`` of work on device ``index``; returns at once, like a kernel launch."""
        index = check_int(index, "index", 0, max(self.count - 1, 0))
        seconds = check_number(seconds, "seconds")
        self.busy_until[index] = max(self.now, self.busy_until[index]) + seconds

    def host(self, seconds: float) -> None:
        """Spend ``seconds`` on the host (Python, the CPU): the clock moves on, the devices keep working."""
        self.now += check_number(seconds, "seconds")

    def idle(self, index: int) -> bool:
        """Whether device ``index`` has finished all its queued work by now."""
        return self.busy_until[check_int(index, "index", 0, max(self.count - 1, 0))] <= self.now

    def exchange(self, index: int) -> int:
        """Make device ``index`` current (a negative index: no change); return the index current before.
        Stands in for torch's ``_exchange_device``, which ``torch.cuda.device`` and ``set_device`` use."""
        if index < 0:
            return -1
        if index >= self.count:
            raise RuntimeError(f"invalid device ordinal {index}: {self.count} fake {self.kind} device(s)")
        before, self.current = self.current, index
        return before

    def current_index(self) -> int:
        """Stand-in for ``torch.cuda.current_device()``."""
        if not self.count:
            raise RuntimeError(f"current device asked for, but this (fake) machine has no {self.kind} device")
        return self.current

    def sync(self, device: torch.device | str | int | None = None) -> None:
        """Stand-in for ``torch.cuda.synchronize``: wait for one device (``None``: the current one)."""
        if device is None:
            index = self.current
        elif isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            device = torch.device(device)
            if device.type != self.kind:
                raise ValueError(f"synchronize called with {device}, but the fake GPUs are {self.kind}")
            index = device.index or 0
        if not self.count:
            raise RuntimeError(f"synchronize called, but this (fake) machine has no {self.kind} device")
        if not 0 <= index < self.count:
            raise RuntimeError(f"invalid device ordinal {index}: {self.count} fake {self.kind} device(s)")
        self.synced.append(torch.device(self.kind, index))
        self.now = max(self.now, self.busy_until[index])

    def stream(self, index: int) -> _FakeStream:
        """Stand-in for ``current_stream(d)`` and ``default_stream(d)``: each device has one queue here."""
        if not 0 <= index < self.count:
            raise RuntimeError(f"invalid device ordinal {index}: {self.count} fake {self.kind} device(s)")
        return _FakeStream(self, index)


class _FakeStream:
    """A fake device's one work queue: ``synchronize()`` waits for it as :meth:`FakeGPUs.sync` does."""

    def __init__(self, gpus: FakeGPUs, index: int) -> None:
        self._gpus, self.device_index = gpus, index

    @property
    def device(self) -> torch.device:
        return self._gpus.device(self.device_index)

    def synchronize(self) -> None:
        self._gpus.sync(self.device_index)

    def query(self) -> bool:
        return self._gpus.idle(self.device_index)


@contextlib.contextmanager
def fake_gpus(count: int = 2, kind: str = "cuda") -> Iterator[FakeGPUs]:
    """Make PyTorch report ``count`` GPUs of ``kind`` inside the block (``count=0``: no accelerator)."""
    gpus = FakeGPUs(count, kind)
    present = count > 0
    accelerator = torch.device(kind) if present else None
    patches = [
        mock.patch.object(torch.accelerator, "is_available", lambda: present),
        mock.patch.object(torch.accelerator, "current_accelerator", lambda check_available=False: accelerator),
        mock.patch.object(torch.accelerator, "device_count", lambda: count),
        mock.patch.object(torch.accelerator, "synchronize", gpus.sync),
        mock.patch.object(torch.cuda, "is_available", lambda: present and kind == "cuda"),
        mock.patch.object(torch.cuda, "device_count", lambda: count if kind == "cuda" else 0),
        mock.patch.object(torch.cuda, "synchronize", gpus.sync if kind == "cuda" else _no_cuda),
        # the current device: torch's own functions parse the argument, then call these
        mock.patch.object(torch._C, "_accelerator_exchangeDevice", gpus.exchange, create=True),
        mock.patch.object(torch._C, "_accelerator_maybeExchangeDevice", gpus.exchange, create=True),
        mock.patch.object(torch._C, "_accelerator_setDeviceIndex", gpus.exchange, create=True),
        mock.patch.object(torch._C, "_accelerator_getDeviceIndex", gpus.current_index, create=True),
        mock.patch.object(torch.accelerator, "current_stream", lambda device=None, /: gpus.stream(
            torch.accelerator._get_device_index(device, optional=True))),
    ]
    if kind == "cuda":
        patches += [
            mock.patch.object(torch.cuda, "current_stream", lambda device=None: gpus.stream(_cuda_index(device, True))),
            mock.patch.object(torch.cuda, "default_stream", lambda device=None: gpus.stream(_cuda_index(device, True))),
            mock.patch.object(torch.cuda, "_exchange_device", gpus.exchange),
            mock.patch.object(torch.cuda, "_maybe_exchange_device", gpus.exchange),
            mock.patch.object(torch.cuda, "set_device", lambda device: gpus.exchange(_cuda_index(device))),
            mock.patch.object(torch.cuda, "current_device", gpus.current_index),
        ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield gpus


def _cuda_index(device, optional: bool = False) -> int:
    # torch's own parsing (refuses the CPU; optional: None is the current device), looked up when called
    return torch.cuda._get_device_index(device, optional=optional)


def _no_cuda(device=None) -> None:
    raise RuntimeError("synchronize called, but this (fake) machine has no cuda device")
