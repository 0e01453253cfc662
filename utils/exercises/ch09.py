"""Checks for chapter 09 · Timing on several devices.

Exercise 1 runs the learner's timing function on simulated GPUs (``utils.fake_gpus``: work launched on
a fake device finishes later on a virtual clock, and ``torch.cuda.synchronize`` /
``torch.accelerator.synchronize`` wait for it), so it works on any machine and cannot be fooled or
failed by the speed of the machine. Every device of the claim is tried in every role: the one whose
work must be waited for after ``fn``, and the one whose earlier work must not be billed to ``fn``; lists
with the CPU first or last, or one GPU that is not cuda:0, catch a device's place in the list taken for its index.
The pretend machine has a current device, as a real one does: an answer may select each GPU and then call
a bare ``synchronize()``, which is how ``torch.cuda.synchronize(d)`` works itself.
Exercise 2 is a benchmark report to judge row by row. Exercise 3 checks the learner's function on two
shapes on ``device``, then runs it on CPU copies under ``utils.timing.HostReads``, which notes the common
calls that need tensor values on the host (and so, on a GPU, wait for the device): its hints read the same
on a CPU and on a GPU, where notebooks compare them. Only after that, on a CUDA ``device``, the check runs
it under ``torch.cuda.set_sync_debug_mode("error")``, which catches some synchronizations that
``HostReads`` does not list (the check then says so, and that the call is unknown to it).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from utils.checks import exercise, expect, learner_code
from utils.exercises.common import shape_of
from utils.exercises.observe import TorchCalls
from utils.fake_gpus import FakeGPUs, fake_gpus
from utils.i18n import N_, _
from utils.timing import HostReads

__all__ = ["REASONS", "REPORT", "check_fixed_timer", "check_masked_mean", "check_report"]

CPU = torch.device("cpu")


# --- Exercise 1 · fix this timing code ------------------------------------------------------------

def _cuda(i: int) -> torch.device:
    return torch.device("cuda", i)


def _names(devices) -> str:
    return ", ".join(str(d) for d in devices) or _("no device")


class _Step:
    """The ``fn`` handed to the learner: a little host time, then work launched on fake devices.

    ``work`` maps a device index to the seconds launched there on every call; ``first_call`` is extra
    host time on the first call only (a one-time cost). Each call notes how many synchronizations had
    happened when it started, so the check can tell which devices were waited for after it.
    """

    def __init__(self, gpus: FakeGPUs, work: dict[int, float], first_call: float = 0.0, host: float = 1e-4) -> None:
        self.gpus, self.work, self.first_call = gpus, work, first_call
        self.host = host  # seconds of Python per call: launching is quick, but not free
        self.calls = 0
        self.synced_at_start: list[int] = []

    def __call__(self) -> None:
        self.calls += 1
        self.synced_at_start.append(len(self.gpus.synced))
        self.gpus.host(self.host + (self.first_call if self.calls == 1 else 0.0))
        for index, seconds in self.work.items():
            self.gpus.launch(index, seconds)

    @property
    def one_call(self) -> float:
        """What a steady-state call takes: its host time, then the longest queue of work."""
        return self.host + max(self.work.values(), default=0.0)


class _Clock:
    """The simulated clock handed to the learner; notes, at each reading, how many calls of fn and how
    many synchronizations had happened, so the check can tell what the timed window held."""

    def __init__(self, gpus: FakeGPUs, step: _Step) -> None:
        self.gpus, self.step = gpus, step
        self.reads: list[tuple[int, int]] = []  # (calls of fn so far, synchronizations so far)

    def __call__(self) -> float:
        self.reads.append((self.step.calls, len(self.gpus.synced)))
        return self.gpus.clock()

    def window(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """The readings that most likely start and stop the returned time: the last two."""
        return self.reads[-2], self.reads[-1]

    def synced_after_last_call(self) -> list[torch.device]:
        """Devices waited for between the start of the last timed call and the clock's stop reading."""
        (_, _), (calls, synced) = self.window()
        return self.gpus.synced[self.step.synced_at_start[calls - 1]:synced] if calls else []

    def synced_before_start(self) -> list[torch.device] | None:
        """Devices waited for between the last call before the clock started and that reading (None: no call)."""
        (calls, synced), _ = self.window()
        return self.gpus.synced[self.step.synced_at_start[calls - 1]:synced] if calls else None

    def timed_calls(self) -> int:
        (before, _), (after, _) = self.window()
        return after - before


class _CpuAsked:
    """Notes whether the learner's code handed the CPU to a call that takes GPUs only (``torch.cuda.device``,
    ``set_device``, ``synchronize`` and their ``torch.accelerator`` twins all parse their argument with
    ``_get_device_index``), so that the hint says "skip the CPU" only when that happened."""

    def __init__(self) -> None:
        self.asked = False
        self._cuda_index, self._accelerator_index = torch.cuda._get_device_index, torch.accelerator._get_device_index

    def _note(self, device: object) -> None:
        if isinstance(device, str | torch.device) and str(device).split(":")[0] == "cpu":
            self.asked = True

    def cuda_index(self, device: object, optional: bool = False, allow_cpu: bool = False) -> int:
        if not allow_cpu:
            self._note(device)
        return self._cuda_index(device, optional, allow_cpu)

    def accelerator_index(self, device: object, optional: bool = False) -> int:
        self._note(device)
        return self._accelerator_index(device, optional)


@contextlib.contextmanager
def _machine(count: int) -> Iterator[tuple[FakeGPUs, _CpuAsked]]:
    """``fake_gpus(count)`` of CUDA devices, noting whether a GPU-only call was handed the CPU. The
    synchronize stand-ins parse their argument as torch does, so that the CPU is refused as on a GPU."""
    with fake_gpus(count) as gpus, contextlib.ExitStack() as stack:
        cpu = _CpuAsked()
        patches = [
            (torch.cuda, "_get_device_index", cpu.cuda_index),
            (torch.accelerator, "_get_device_index", cpu.accelerator_index),
        ]
        if count:  # without a GPU, fake_gpus's synchronize already refuses
            patches += [
                (torch.cuda, "synchronize", lambda device=None: gpus.sync(cpu.cuda_index(device, optional=True))),
                (torch.accelerator, "synchronize",
                 lambda device=None, /: gpus.sync(cpu.accelerator_index(device, optional=True))),
            ]
        for module, name, replacement in patches:
            stack.enter_context(mock.patch.object(module, name, replacement))
        yield gpus, cpu


_NO_GPU = N_("it called synchronize on a machine without a GPU: with devices=[cpu] there is nothing to wait for; "
           "synchronize only the CUDA devices in devices")
_SKIP_CPU = N_("torch.cuda.synchronize(d) accepts CUDA devices only: skip the CPU, whose work is finished when the "
             "call that issued it returns")


def _timed(answer, devices: list[torch.device], work: dict[int, float], first_call: float = 0.0,
           queued: tuple[int, float] | None = None) -> tuple[float, _Clock]:
    """The seconds ``answer`` returns for an fn that launches ``work`` on three fake GPUs (``queued``: work launched
    on a GPU before), after the properties every answer has; and the clock, which knows its fn and its GPUs."""
    with _machine(3) as (gpus, cpu):
        if queued:
            gpus.launch(*queued)
        step = _Step(gpus, work, first_call=first_call)
        clock = _Clock(gpus, step)
        try:
            result = answer(step, devices, clock)
        except Exception:
            with learner_code(_("calling time_on_devices(fn, {devices}, clock)").format(
                    devices=f"[{_names(devices)}]"), _(_SKIP_CPU) if cpu.asked else ""):
                raise
    expect(
        isinstance(result, int | float) and not isinstance(result, bool),
        (_("time_on_devices must return the seconds as a number, got {type} (a Timing: return its .median)")
         if type(result).__name__ == "Timing" else
         _("time_on_devices must return the seconds as a number, got {type}")).format(type=type(result).__name__))
    expect(math.isfinite(result),
           _("time_on_devices returned {result}: return a finite number of seconds").format(result=result))
    expect(step.calls >= 1, _("time_on_devices never called fn: call it, and time that call"))
    expect(
        gpus.synced != [],
        _("it never waits for a device, so the clock measured how fast Python launched the work, not the work "
          "itself. Synchronize every device in devices before reading the clock."))
    expect(
        len(clock.reads) >= 2,
        _("it does not read the time with clock(): use the clock the function is given (start = clock(), ..., "
          "clock() - start); the check runs it on simulated GPUs with a simulated clock."))
    expect(
        result < 300 * step.one_call,
        _("{result} for a call that takes {ms} ms: return seconds, not milliseconds").format(
            result=f"{result:g}", ms=f"{step.one_call * 1e3:.1f}"))
    return float(result), clock


def _too_short(clock: _Clock, slow: torch.device, result: float, devices: list[torch.device]) -> str:
    after = clock.synced_after_last_call()
    strays = [d for d in dict.fromkeys(after) if d not in devices]
    took = {"ms": f"{clock.step.one_call * 1e3:.1f}", "slow": slow, "got": f"{result * 1e3:.1f}"}
    if slow in after:
        return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: start the clock "
                 "before calling fn, and read it again after synchronizing.").format(**took)
    if slow in clock.gpus.synced[clock.window()[1][1]:]:
        return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: read the clock "
                 "after synchronizing, not before.").format(**took)
    if not after:
        return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: it does not wait "
                 "after fn, so the clock stopped when the work was launched. Synchronize every device after fn too, "
                 "then read the clock.").format(**took)
    if strays:
        return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: after fn it "
                 "waited for {strays}, which devices [{devices}] does not hold, and not for {slow}. Synchronize "
                 "each device d of devices itself, torch.cuda.synchronize(d): its place in the list "
                 "(enumerate(devices), range(len(devices))) is not its CUDA index, and a bare "
                 "torch.cuda.synchronize() waits for the current device (cuda:0) only.").format(
                     strays=_names(strays), devices=_names(devices), **took)
    if set(after) == {_cuda(0)}:
        return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: after fn it "
                 "waited for cuda:0 only. torch.cuda.synchronize() without an argument waits for the current "
                 "device (cuda:0) only: synchronize every device d in devices.").format(**took)
    return _("fn's slowest work takes {ms} ms (on {slow}), and the time returned is {got} ms: after fn it waited "
             "for {waited} but not for {slow}. Synchronize every device in devices, whatever their number and "
             "order.").format(waited=_names(dict.fromkeys(after)), **took)


def _too_long(clock: _Clock, devices: list[torch.device], result: float) -> str:
    took = {"ms": f"{clock.step.one_call * 1e3:.1f}", "got": f"{result * 1e3:.1f}"}
    before = clock.synced_before_start()
    if before is not None and not set(before) >= {d for d in devices if d.type != "cpu"}:
        return _("fn takes {ms} ms, and the time returned is {got} ms: the work of the call before (a warm-up) was "
                 "still queued when the clock started. Synchronize every device before starting the clock."
                 ).format(**took)
    if clock.timed_calls() > 1:
        return _("fn takes {ms} ms, and the time returned is {got} ms: return the time of one call (divide by the "
                 "number of calls you timed).").format(**took)
    return _("fn takes {ms} ms, and the time returned is {got} ms: time one call of fn, from a clock reading after "
             "synchronizing to one after synchronizing.").format(**took)


@exercise("Exercise 1 · Fix this timing code")
def check_fixed_timer(time_on_devices: Callable[..., float]) -> None:
    """``time_on_devices(fn, devices, clock)`` returns the seconds one steady-state call of ``fn`` takes."""
    _expect_waits_after_fn_for_every_device(time_on_devices)
    _expect_waits_before_the_clock_for_every_device(time_on_devices)
    _expect_warm_up_untimed(time_on_devices)
    _expect_devices_named_by_index(time_on_devices)
    _expect_no_cuda_call_without_a_gpu(time_on_devices)


def _expect_waits_after_fn_for_every_device(time_on_devices: Callable[..., float]) -> None:
    """Whichever device has fn's long work, it is waited for after fn, and one call is timed."""
    order = [_cuda(2), _cuda(0), _cuda(1)]
    for k in range(3):
        result, clock = _timed(time_on_devices, order, {i: 0.060 if i == k else 0.002 for i in range(3)})
        expect(result >= 0.9 * clock.step.one_call, _too_short(clock, _cuda(k), result, order))
        expect(result <= 1.1 * clock.step.one_call, _too_long(clock, order, result))


def _expect_waits_before_the_clock_for_every_device(time_on_devices: Callable[..., float]) -> None:
    """Whichever device has earlier work queued, it is waited for before the clock starts."""
    devices = [_cuda(0), _cuda(1), _cuda(2)]
    for k in range(3):
        result, clock = _timed(time_on_devices, devices, {(k + 1) % 3: 0.010}, queued=(k, 0.200))
        expect(result >= 0.9 * clock.step.one_call, _too_short(clock, _cuda((k + 1) % 3), result, devices))
        bare = k and set(clock.gpus.synced[:clock.window()[0][1]]) == {_cuda(0)}  # before the clock: cuda:0 alone
        expect(
            result <= 1.1 * clock.step.one_call,
            (_("fn takes {ms} ms, and the time returned is {got} ms: 200 ms of work queued on cuda:{k} before the "
               "call were billed to fn. Synchronize every device in devices before starting the clock (it waited "
               "for cuda:0 only, as a bare torch.cuda.synchronize() does).") if bare else
             _("fn takes {ms} ms, and the time returned is {got} ms: 200 ms of work queued on cuda:{k} before the "
               "call were billed to fn. Synchronize every device in devices before starting the clock.")
             ).format(ms=f"{clock.step.one_call * 1e3:.1f}", got=f"{result * 1e3:.1f}", k=k))


def _expect_warm_up_untimed(time_on_devices: Callable[..., float]) -> None:
    """The first call pays a one-time cost (think: CUDA context, cuBLAS handle) that is not fn's time."""
    result, clock = _timed(time_on_devices, [_cuda(0)], {0: 0.010}, first_call=0.5)
    timed_the_first_call = clock.window()[0][0] == 0  # the clock started before fn's first call
    expect(
        result <= 1.1 * clock.step.one_call,
        _("fn's first call pays a one-time cost of 500 ms, later calls take {ms} ms, and "
          "the time returned is {got} ms: it includes the warm-up. Call fn once before starting "
          "the clock, and do not time that call.").format(ms=f"{clock.step.one_call * 1e3:.1f}",
                                                           got=f"{result * 1e3:.1f}")
        if timed_the_first_call else _too_long(clock, [_cuda(0)], result))


def _expect_devices_named_by_index(time_on_devices: Callable[..., float]) -> None:
    """The CPU first or last among the devices (nothing to wait for, and CUDA is not asked to), and one GPU that is
    not cuda:0: a GPU is named by its index, not by its place in the list."""
    for devices in ([CPU, _cuda(1)], [_cuda(2), CPU], [_cuda(1)]):
        slow = next(d for d in devices if d.type == "cuda")
        result, clock = _timed(time_on_devices, devices, {slow.index: 0.020})
        expect(result >= 0.9 * clock.step.one_call, _too_short(clock, slow, result, devices))


def _expect_no_cuda_call_without_a_gpu(time_on_devices: Callable[..., float]) -> None:
    """On a machine without a GPU, with CPU work only, the time is fn's, and no CUDA call is made."""
    with _machine(0) as (gpus, _cpu):
        step = _Step(gpus, {}, host=0.003)  # CPU work only: done when fn returns
        clock = _Clock(gpus, step)
        with learner_code(_("calling time_on_devices(fn, [cpu], clock) on a machine without a GPU"),
                          causes={"synchronize called, but this (fake) machine has no": _(_NO_GPU)}):
            result = time_on_devices(step, [CPU], clock)
        expect(isinstance(result, int | float) and abs(result - 0.003) < 3e-4,
               _("fn spends 3 ms on the CPU, and with devices=[cpu] the time returned is {result}: read the clock "
                 "just before calling fn and again after it").format(result=repr(result)))


# --- Exercise 2 · which rows can you trust? --------------------------------------------------------

#: A benchmark report from a machine with two identical GPUs. One step is four equal chunks of matrix
#: products, 10 ms each on either GPU. Each row: how it was measured → milliseconds.
REPORT: dict[str, tuple[str, float]] = {
    "A": ("first call ever, 4 chunks on cuda:0, each device synchronized before and after", 412.0),
    "B": ("4 chunks on cuda:0, time.perf_counter() around the launches, no synchronization", 0.21),
    "C": ("4 chunks on cuda:0, each device synchronized before and after, median of 20 after warm-up", 40.3),
    "D": ("1 chunk on cuda:0 and 3 on cuda:1, torch.cuda.synchronize() before and after, median of 20 "
          "after warm-up", 10.2),
    "E": ("2 chunks on each GPU, each device synchronized before and after, median of 20 after warm-up", 20.4),
    "F": ("2 chunks on each GPU, one run right after a 50 ms copy to cuda:1 was queued, each device "
          "synchronized after but not before", 70.5),
}

#: What can be said of a row, by key.
REASONS: dict[str, str] = {
    "ok": "a steady-state time of one step: use it",
    "launch": "it never waits for the GPUs, so it measures the kernel launches, not the work",
    "current-device": "it waits for the current device only, so the other GPU's work is not counted",
    "warm-up": "it includes one-time start-up costs (CUDA context, cuBLAS handles, memory pool)",
    "earlier-work": "it starts the clock while earlier work is still queued, and bills that work to the step",
}

_EXPECTED = {"A": "warm-up", "B": "launch", "C": "ok", "D": "current-device", "E": "ok", "F": "earlier-work"}

_HINTS = {
    ("A", "ok"): N_("A is the first call ever: a steady-state step does not pay for creating the CUDA context and "
                    "cuBLAS handles again."),
    ("A", None): N_("A waited for both devices, and its label says what makes it slow: the first call ever."),
    ("B", "ok"): N_("B never synchronized: 0.21 ms is how long Python took to launch the work."),
    ("B", None): N_("B's label says no synchronization: what does a stopwatch around launches measure?"),
    ("C", None): N_("C follows every rule: 4 chunks of 10 ms on one GPU take 40 ms."),
    ("D", "ok"): N_("D reports 10 ms although cuda:1 had 3 chunks, 30 ms of work, and E with 2 + 2 chunks takes 20 ms. "
                    "Which device does torch.cuda.synchronize() without an argument wait for?"),
    ("D", "launch"): N_("D did wait for something: 10 ms is one chunk of work, fifty times the launches of B."),
    ("D", "warm-up"): N_("a one-time cost would make D larger, not smaller, and D was measured after warm-up."),
    ("D", "earlier-work"): N_("earlier work would make D larger, not smaller than what its GPUs had to do."),
    ("E", None): N_("E is consistent: two chunks on each GPU, both working at once, take 20 ms."),
    ("F", "ok"): N_("F took 70 ms for 20 ms of work per GPU: what was still queued on cuda:1 when the clock started?"),
    ("F", None): N_("F synchronized each device after the step, so nothing was missed at the end: the extra 50 ms "
                    "come from before it."),
}


@exercise("Exercise 2 · Which rows can you trust?")
def check_report(answer: Callable[[], tuple[dict[str, str], float]]) -> None:
    """``answer()`` returns ``(verdicts, should_be_ms)``: a key of ``REASONS`` for every row of ``REPORT``,
    and the milliseconds that D, the one row that synchronized yet reports less than its step takes, should
    show."""
    with learner_code(_("calling your answer()")):
        result = answer()
    expect(
        isinstance(result, tuple) and len(result) == 2,
        _("return a tuple (verdicts, should_be_ms), e.g. ({{'A': 'warm-up', 'B': ..., ...}}, 12.0)").format())
    verdicts, should_be = result
    expect(isinstance(verdicts, dict),
           _("verdicts must be a dict from row to reason, got {type}").format(type=type(verdicts).__name__))
    expect(set(verdicts) == set(REPORT),
           _("give a verdict for every row {rows}, got {given}").format(rows=sorted(REPORT),
                                                                       given=sorted(verdicts, key=repr)))
    for row in REPORT:
        reason = verdicts[row]
        expect(
            isinstance(reason, str),
            _("row {row}: give one key of REASONS, a string such as 'ok', not a {type} ({reason})").format(
                row=row, type=type(reason).__name__, reason=repr(reason)))
        expect(reason in REASONS, _("row {row}: {reason} is not one of the REASONS {reasons}").format(
            row=row, reason=repr(reason), reasons=sorted(REASONS)))
        if reason != _EXPECTED[row]:
            hint = _HINTS.get((row, reason), _HINTS.get((row, None)))
            expect(False, _("row {row}: {hint}").format(row=row, hint=_(hint) if hint else _("look again.")))
    expect(
        isinstance(should_be, int | float) and not isinstance(should_be, bool),
        _("should_be_ms must be a number of milliseconds, got {type}").format(type=type(should_be).__name__))
    expect(
        27.0 <= should_be <= 34.0,
        _("{ms} ms is not what D should show: both GPUs work at the same time, so the step ends when the "
          "busier one finishes. How long does cuda:1 need for its chunks?").format(ms=should_be))


# --- Exercise 3 · a masked mean without a hidden synchronization ------------------------------------

#: Two batches, so that an answer written for one shape (a literal 4 or 5, a squeeze that also drops a batch
#: of one) is caught: (4, 5) with rows of two, none, all and one True entries; (1, 3) with one row, whose
#: first True entry is 0 (a count of the nonzero values is not a count of the True entries).
_CASES = (
    (torch.tensor([[1.0, -2.0, 3.0, 0.5, 4.0],
                   [2.0, 2.0, -1.0, 5.0, 1.5],
                   [-3.0, 1.0, 1.0, 2.0, -0.5],
                   [0.25, 8.0, -4.0, 1.0, 2.0]]),
     torch.tensor([[True, False, True, False, False],    # two entries
                   [False, False, False, False, False],  # none: the mean is 0
                   [True, True, True, True, True],       # all
                   [False, True, False, False, False]])),  # one
    (torch.tensor([[0.0, -1.0, 4.5]]),
     torch.tensor([[True, False, True]])),
)


def _reference(x: torch.Tensor, mask: torch.Tensor) -> list[float]:
    rows = []
    for values, keep in zip(x.tolist(), mask.tolist(), strict=True):
        chosen = [v for v, k in zip(values, keep, strict=True) if k]
        rows.append(sum(chosen) / len(chosen) if chosen else 0.0)
    return rows


def _place(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A copy of ``tensor`` on ``device`` (the tests replace it to play the CUDA path on the CPU)."""
    return tensor.clone().to(device)


@contextlib.contextmanager
def _sync_errors(device: torch.device) -> Iterator[None]:
    """On a CUDA device: an operation that synchronizes with the host raises instead of waiting (for the
    operations that ``torch.cuda.set_sync_debug_mode`` covers, which are not all of them)."""
    if device.type != "cuda":
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


_NEEDS_HOST = N_(
    "needs the values on the host. On a GPU the host then waits for the device: a hidden synchronization. "
    "Keep every shape fixed and every value on the device: torch.where(mask, x, 0) or x * mask, then sums."
)


def _same(got: list[float], other: torch.Tensor) -> bool:
    return all(math.isclose(g, o, abs_tol=1e-5) for g, o in zip(got, other.tolist(), strict=True))


def _shape_cause(out: torch.Tensor, batch: int) -> str:
    if batch == 1 and out.shape == ():
        return _("the batch dim is gone: a batch of one row still needs a result of shape (1,)")
    if out.shape == ():
        return _("one number for the whole batch: reduce over the last dim only")
    return _("one mean per row, shape ({batch},)").format(batch=batch)


def _wrong_means(got: list[float], x_ref: torch.Tensor, mask_ref: torch.Tensor) -> str | None:
    """The hint for means ``got`` that are not the right ones, the likeliest cause first (None: they are right)."""
    shape, n = shape_of(x_ref), x_ref.shape[-1]
    want, kept = _reference(x_ref, mask_ref), torch.where(mask_ref, x_ref, 0.0)
    empty = next((row for row, keep in enumerate(mask_ref.tolist()) if not any(keep) and math.isnan(got[row])), None)
    if empty is not None:
        return _("row {row} of the {shape} batch has no True entry and its mean came out nan (0 / 0): divide "
                 "by the count clamped to at least 1, or use torch.where, so such a row gives 0").format(
                     row=empty, shape=shape)
    if _same(got, torch.tensor(want)):
        return None
    if _same(got, kept.sum(-1) / n):
        return _("in the {shape} batch it divides every row by its length ({n}): divide by the number of True "
                 "entries in the row instead").format(shape=shape, n=n)
    if _same(got, kept.sum(-1) / (kept != 0).sum(-1).clamp(min=1)):
        return _("in the {shape} batch it divides by the number of nonzero values, but a True entry may hold 0: "
                 "count the True entries of mask, mask.sum(-1)").format(shape=shape)
    row, g, w = next((row, g, w) for row, (g, w) in enumerate(zip(got, want, strict=True))
                     if not math.isclose(g, w, abs_tol=1e-5))
    return _("row {row} of the {shape} batch should have mean {expected}, got {got}").format(
        row=row, shape=shape, expected=f"{w:g}", got=f"{g:g}")


def _expect_no_sync_on_the_gpu(masked_mean: Callable, device: torch.device) -> None:
    """On a CUDA ``device``: the synchronizations ``HostReads`` does not list, under the sync debug mode."""
    for x_ref, mask_ref in _CASES:
        x, mask = _place(x_ref, device), _place(mask_ref, device)
        with learner_code(_("calling masked_mean(x, mask) on {device} under "
                            "torch.cuda.set_sync_debug_mode('error')").format(device=device.type)), \
                _sync_errors(device):
            try:
                masked_mean(x, mask)
            except RuntimeError as err:
                if "synchroniz" not in str(err):
                    raise
                expect(False, _("on the GPU, under torch.cuda.set_sync_debug_mode('error'), a call it makes "
                                "synchronized with the host. HostReads listed none of its calls, so which one "
                                "it was is unknown here; the error said: {error}. That call {cause}").format(
                                    error=err, cause=_(_NEEDS_HOST)))


@exercise("Exercise 3 · A masked mean without a hidden synchronization")
def check_masked_mean(masked_mean: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                      device: torch.device | str = CPU) -> None:
    """``masked_mean(x, mask)``: per row of ``x`` (batch, n), the mean of the entries where ``mask`` is True
    (0 for a row without any), on ``x``'s device, with no operation that needs the values on the host.

    The values are checked on ``device`` for two shapes. What the answer asks of the host is watched with
    ``HostReads`` on CPU copies, so that the hint is the same on every machine; on a CUDA ``device`` the
    answer then runs under ``torch.cuda.set_sync_debug_mode("error")`` too, which catches synchronizations
    that ``HostReads`` does not list (the cause is then unknown to the check)."""
    device = torch.device(device)
    for x_ref, mask_ref in _CASES:
        _expect_masked_means(masked_mean, x_ref, mask_ref, device)
    for x_ref, mask_ref in _CASES:
        _expect_nothing_asked_of_the_host(masked_mean, x_ref, mask_ref)
    if device.type == "cuda":
        _expect_no_sync_on_the_gpu(masked_mean, device)


def _expect_masked_means(masked_mean: Callable, x_ref: torch.Tensor, mask_ref: torch.Tensor,
                         device: torch.device) -> None:
    """On copies on ``device``: the inputs are left as they were, and the result is the floating point means of
    the rows, one per row, on x's device."""
    x, mask = _place(x_ref, device), _place(mask_ref, device)
    with learner_code(_("calling masked_mean(x, mask) on a {shape} batch").format(shape=shape_of(x_ref))):
        out = masked_mean(x, mask)
    expect(isinstance(out, torch.Tensor), _("return a tensor, got {type}").format(type=type(out).__name__))
    changed = [name for name, t, ref in (("x", x, x_ref), ("mask", mask, mask_ref)) if not torch.equal(t.cpu(), ref)]
    expect(not changed, (_("masked_mean changed x and mask in place: compute a new tensor and leave the inputs "
                           "as they were") if len(changed) == 2 else
                         _("masked_mean changed {name} in place: compute a new tensor and leave the inputs as "
                           "they were").format(name=changed[0] if changed else "")))
    expect(out.device == x.device,
           _("the result is on {device}, the input on {input}: keep it on x's device").format(
               device=out.device, input=x.device))
    expect(out.shape == (len(x_ref),), _("x has shape {shape} and the result {result}: {cause}").format(
        shape=shape_of(x_ref), result=shape_of(out), cause=_shape_cause(out, len(x_ref))))
    expect(out.is_floating_point(), _("the means must be floating point, got {dtype}").format(dtype=out.dtype))
    wrong = _wrong_means(out.detach().cpu().tolist(), x_ref, mask_ref)
    expect(not wrong, wrong or "-")


def _expect_nothing_asked_of_the_host(masked_mean: Callable, x_ref: torch.Tensor, mask_ref: torch.Tensor) -> None:
    """No call needs the values on the host (on a GPU each one waits for the device), and no tensor is made on the
    default device instead of x's (on a CPU-only machine both are the CPU; on a GPU they are not). Watched on CPU
    copies, so that the verdict and its words are the same on a CPU and on a GPU."""
    with learner_code(_("calling masked_mean(x, mask) again on a {shape} batch, watching what it asks "
                        "of the host").format(shape=shape_of(x_ref))), HostReads() as reads, TorchCalls() as seen:
        masked_mean(x_ref.clone(), mask_ref.clone())
    made = [f"torch.{name}" for name, kwargs, _args, t in seen.made if kwargs.get("device") is None and t.dim()]
    expect(not reads, _("it calls {calls}, which {cause}").format(calls=", ".join(dict.fromkeys(reads)),
                                                                  cause=_(_NEEDS_HOST)))
    expect(not made, _("it creates a tensor with {call} and no device=: that lands on the "
                       "default device (the CPU), not on x's device. Pass device=x.device, or build it from x "
                       "(torch.zeros_like, x.new_zeros)").format(call=made[0] if made else ""))
