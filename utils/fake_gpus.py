"""A pretend machine with GPUs, on a virtual clock: the one test double for device and timing code.

Used by chapter 07 (section 8 simulates a CUDA, an Apple and an Intel machine to compare
device-choosing code), by chapter 09's cells (a pretend two-GPU machine, a launch queue) and its
exercise check (a learner's timer is judged on fake GPUs, so the check needs no hardware and no real
time), and by the test suite (device helpers, the doctor, the timing helpers).

Inside ``with fake_gpus(2) as gpus:`` PyTorch reports two CUDA devices (``torch.accelerator`` and
``torch.cuda`` agree), and ``torch.cuda.synchronize`` / ``torch.accelerator.synchronize`` wait on the
fake devices instead of real ones, and so does ``synchronize()`` on a device's ``current_stream`` or
``default_stream`` (one work queue per device), and ``torch.cuda.Event`` marks a point in a device's queue
(``record``, ``query``, ``synchronize``, ``wait``, ``elapsed_time``: see :class:`FakeEvent`). The machine has a
current device, as a real one does:
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

__all__ = ["FakeEvent", "FakeGPUs", "fake_gpus"]


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
        #: Every device a synchronize call waited for, in order (an event's ``synchronize`` counts for its device).
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


class FakeEvent:
    """Stand-in for ``torch.cuda.Event`` on a fake GPU: ``record()`` puts a mark in a device's queue, which the
    device passes once the work queued before it is done.

    As CUDA's events: ``synchronize()`` waits until the mark is passed, ``query()`` says whether it is (an event
    never recorded counts as passed), ``wait(stream)`` makes work queued later on ``stream`` wait for the mark, and
    ``elapsed_time(end)`` is the milliseconds between two passed marks; it refuses events made without
    ``enable_timing=True`` or never recorded (``ValueError``) and marks not yet passed (``RuntimeError``).
    """

    def __init__(self, gpus: FakeGPUs, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self._gpus, self.enable_timing = gpus, enable_timing
        self.at: float | None = None  # when the device passes the mark (virtual seconds)
        self.device_index: int | None = None

    def record(self, stream: _FakeStream | None = None) -> None:
        index = self._gpus.current_index() if stream is None else stream.device_index
        self.device_index, self.at = index, max(self._gpus.now, self._gpus.busy_until[index])

    def query(self) -> bool:
        return self.at is None or self.at <= self._gpus.now

    def synchronize(self) -> None:
        if self.at is not None:
            self._gpus.synced.append(self._gpus.device(self.device_index))
            self._gpus.now = max(self._gpus.now, self.at)

    def wait(self, stream: _FakeStream | None = None) -> None:
        if self.at is not None:
            index = self._gpus.current_index() if stream is None else stream.device_index
            self._gpus.busy_until[index] = max(self._gpus.busy_until[index], self.at)

    def elapsed_time(self, end: FakeEvent) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self.at is None or end.at is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        if not (self.query() and end.query()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return (end.at - self.at) * 1000.0


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
            mock.patch.object(torch.cuda, "Event", lambda *args, **kwargs: FakeEvent(gpus, *args, **kwargs)),
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
