"""Timing code that runs on one device or several, without fooling yourself. Used by chapter 08.

GPU work is asynchronous: a CUDA call queues a kernel and returns, so a clock read right after it
measures the *launch*. A correct measurement therefore

1. **synchronises every device involved**, before starting the clock (so earlier work is not billed)
   and before stopping it (so all of this work is). ``torch.cuda.synchronize()`` without an argument
   waits for the *current* device only; :func:`synchronize` waits for each device you name, through
   ``torch.accelerator`` (CUDA, ROCm, XPU, MPS alike);
2. **warms up**: the first calls pay for one-time costs (CUDA context, cuBLAS handles, caches,
   memory allocation) that the steady state does not;
3. **repeats**, and reports the median with a measure of spread (the interquartile range, IQR).

:func:`measure` does all three and returns a :class:`Timing`::

    >>> t = measure(lambda: a @ b, devices=["cuda:0", "cuda:1"], warmup=2, repeats=7, label="a @ b")
    >>> print(t)
    a @ b: 1.21 ms per call (median of 7 × 2 calls, IQR 12.3 µs; 2 warm-up calls; synchronised cuda:0, cuda:1)

Three methods, chosen with ``method=``: ``"repeat"`` (default: ``repeats`` measurements of ``number``
calls, with the ``timeit`` machinery that ``torch.utils.benchmark`` uses), ``"autorange"``
(``torch.utils.benchmark.Timer(...).blocked_autorange()`` with the same all-device clock;
:func:`benchmark_timer` gives you that ``Timer``) and ``"events"`` (CUDA events on one CUDA device).
:func:`compare` measures several callables *interleaved* (A, B, A, B, ...), so that a change in the
machine's load affects them alike.

Every function that reads a clock takes ``timer=`` (default ``time.perf_counter``): pass a simulated
clock, such as ``utils.fake_gpus.FakeGPUs.clock``, and the timing logic runs on virtual time, which
is how the tests check it without depending on the speed of the machine.

**CPU workers as stand-in devices.** :class:`CPUWorkers` runs tasks on N long-lived threads (one
``concurrent.futures.ThreadPoolExecutor`` each, like one queue per device) with one intra-op thread
each, for the sequential-versus-parallel experiment on a machine without two GPUs. Each run is
recorded as a :class:`WorkerRun`: wall time, CPU time per worker and, on Linux, how long our threads
waited for a core that another program held. A speed claim is then judged only on undisturbed runs:
:func:`until_quiet` measures in interleaved rounds until it has enough of them or its time is up, and
:func:`judge_speedup` says whether the claim holds, does not hold, or could not be checked (and why).

**Hidden synchronisations.** Inside ``with HostReads() as reads:`` every PyTorch call that needs tensor
*values* on the host (``.item()``, ``print``, ``if tensor:``, ``x[mask]``, ``nonzero`` ...) is listed in
``reads``: on a GPU, each of them makes the host wait for the device. It runs on the CPU, so a loop can
be checked for them on any machine; ``torch.cuda.set_sync_debug_mode`` is the authority on a GPU.

Importing this module is cheap: ``torch.utils.benchmark`` is imported on first use only, and nothing
here initialises CUDA until you time CUDA devices.
"""

from __future__ import annotations

import math
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from utils._validate import check_int, check_number, check_str
from utils.devices import GPU_TYPES

if TYPE_CHECKING:
    from torch.utils.benchmark import Timer

__all__ = [
    "METHODS",
    "CPUWorkers",
    "HostReads",
    "Timing",
    "SpeedupVerdict",
    "WorkerRun",
    "benchmark_timer",
    "compare",
    "core_wait",
    "format_seconds",
    "judge_speedup",
    "measure",
    "run_on_cpu_workers",
    "synchronize",
    "until_quiet",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

#: Device types :func:`synchronize` accepts: the CPU (nothing to wait for) and the GPU types.
DEVICE_TYPES = ("cpu", *GPU_TYPES)
#: The ways :func:`measure` can time a callable.
METHODS = ("repeat", "autorange", "events")
#: With ``number=None``, calls per measurement are chosen so that one measurement lasts about this long.
TARGET_BLOCK_SECONDS = 2e-3
#: A run counts as undisturbed when our threads waited for a core at most this share of its wall time ...
QUIET_SHARE = 0.05
#: ... plus this many seconds per thread: waking a sleeping thread counts as waiting, and takes some
#: microseconds even on an idle core (tens of them in a virtual machine).
QUIET_FLOOR = 25e-6
#: Below this share of a run spent computing, a worker that did not wait for a core was blocked (or had
#: its virtual CPU taken away), and the run cannot refute a speed claim.
MIN_SHARE = 0.9

DeviceLike = torch.device | str
Clock = Callable[[], float]


# --- argument checks ------------------------------------------------------------------------------

def _as_devices(devices: DeviceLike | Iterable[DeviceLike], name: str = "devices") -> tuple[torch.device, ...]:
    """Normalise one device or an iterable of devices; duplicates removed, order kept."""
    items = [devices] if isinstance(devices, torch.device | str) else devices
    if not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a torch.device, a str such as 'cuda:0', or an iterable of them; "
                        f"got {type(devices).__name__}")
    out: list[torch.device] = []
    for item in items:
        if not isinstance(item, torch.device | str):
            raise TypeError(f"{name} must hold torch.device or str items, got {type(item).__name__} {item!r}")
        try:
            device = torch.device(item)
        except RuntimeError as err:
            raise ValueError(f"{name}: {item!r} is not a device ({err})") from None
        if device.type not in DEVICE_TYPES:
            raise ValueError(f"{name}: cannot synchronise a {device.type!r} device; known types: {DEVICE_TYPES}")
        if device not in out:
            out.append(device)
    if not out:
        raise ValueError(f"{name} must name at least one device")
    return tuple(out)


def _check_callable(fn: object, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be callable, got {type(fn).__name__}")


def _check_optional_int(value: object, name: str, minimum: int) -> int | None:
    return None if value is None else check_int(value, name, minimum)


def _default_devices() -> tuple[torch.device, ...]:
    from utils.devices import try_all_gpus

    return tuple(try_all_gpus())


# --- synchronisation ------------------------------------------------------------------------------

def synchronize(devices: DeviceLike | Iterable[DeviceLike]) -> None:
    """Wait until every device in ``devices`` has finished the work queued on it so far.

    ``devices`` is one device (``torch.device`` or a string such as ``"cuda:1"``) or an iterable of
    them. CPU work is already finished when the call that issued it returns, so ``"cpu"`` needs
    nothing. Every other device is synchronised on its own with ``torch.accelerator.synchronize(d)``
    (a bare ``torch.cuda.synchronize()`` waits for the *current* device only); ``"cuda"`` without an
    index means the current device. A device of a type this machine's accelerator is not raises a
    ``ValueError`` naming it, before anything is waited for.
    """
    devs = [d for d in _as_devices(devices) if d.type != "cpu"]
    if not devs:
        return
    accelerator = torch.accelerator.current_accelerator()
    for device in devs:
        if accelerator is None or device.type != accelerator.type:
            have = "no accelerator" if accelerator is None else f"a {accelerator.type} accelerator"
            raise ValueError(f"devices: cannot synchronise {device}: this machine has {have}")
    for device in devs:
        torch.accelerator.synchronize(device)


def _clock(devices: tuple[torch.device, ...], timer: Clock = time.perf_counter) -> Clock:
    """A clock that first waits for every device (``timer`` itself for CPU-only work)."""
    if all(d.type == "cpu" for d in devices):
        return timer

    def synchronised_clock() -> float:
        synchronize(devices)
        return timer()

    return synchronised_clock


@contextmanager
def _intra_op_threads(num_threads: int | None) -> Iterator[None]:
    if num_threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# --- the result -----------------------------------------------------------------------------------

def format_seconds(seconds: float) -> str:
    """``0.00123`` → ``'1.23 ms'``: three significant digits in s, ms, µs or ns; whole seconds from 1000 s."""
    seconds = check_number(seconds, "seconds")
    if not math.isfinite(seconds):
        raise ValueError(f"seconds must be finite, got {seconds}")
    rounded = float(f"{seconds:.3g}")  # the unit is chosen after rounding: 999.6 µs is '1 ms', not '1e+03 µs'
    for unit, scale in (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0)):
        text = f"{rounded / scale:.3g}"
        if float(text) < 1000:
            return f"{text} {unit}"
    return f"{seconds:.0f} s"


@dataclass(frozen=True)
class Timing:
    """The result of :func:`measure`: seconds per call, one value per measurement.

    ``times[i]`` is the duration of measurement ``i`` divided by ``number`` (the calls it made).
    :attr:`median` is the headline, :attr:`iqr` the spread (75th minus 25th percentile, linear
    interpolation as in ``torch.utils.benchmark``), :attr:`best` the fastest measurement (the least
    disturbed by other programs on a shared machine).
    """

    times: tuple[float, ...]
    number: int
    warmup: int
    devices: tuple[str, ...]
    method: str
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.times, tuple) or not self.times:
            raise ValueError("times must be a non-empty tuple of seconds per call")
        if not all(isinstance(t, float) and math.isfinite(t) and t >= 0 for t in self.times):
            raise ValueError("times must hold finite, non-negative floats")
        check_int(self.number, "number", 1)
        check_int(self.warmup, "warmup", 0)
        if not isinstance(self.devices, tuple) or not self.devices or not all(
            isinstance(d, str) and d for d in self.devices
        ):
            raise TypeError(f"devices must be a non-empty tuple of device names such as ('cuda:0',), "
                            f"got {self.devices!r}")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        check_str(self.label, "label", empty=True)

    @property
    def median(self) -> float:
        """Median seconds per call."""
        return statistics.median(self.times)

    @property
    def iqr(self) -> float:
        """Interquartile range of the seconds per call (0 with a single measurement)."""
        if len(self.times) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q3 - q1

    @property
    def best(self) -> float:
        """The fastest measurement, seconds per call."""
        return min(self.times)

    def __str__(self) -> str:
        name = f"{self.label}: " if self.label else ""
        how = {"repeat": "", "autorange": ", blocked_autorange", "events": ", CUDA events"}[self.method]
        warm = f"{self.warmup} warm-up call{'' if self.warmup == 1 else 's'}"
        return (
            f"{name}{format_seconds(self.median)} per call "
            f"(median of {len(self.times)} × {self.number} calls, IQR {format_seconds(self.iqr)}{how}; "
            f"{warm}; synchronised {', '.join(self.devices)})"
        )


# --- measuring ------------------------------------------------------------------------------------

def _calls_per_block(fn: Callable[[], object], clock: Clock) -> int:
    start = clock()
    fn()
    once = max(clock() - start, 1e-9)
    return max(1, min(1_000_000, math.ceil(TARGET_BLOCK_SECONDS / once)))


def _check_common(fn: object, warmup: object, repeats: object, number: object, num_threads: object,
                  label: object, timer: object, name: str = "fn") -> None:
    _check_callable(fn, name)
    check_int(warmup, "warmup", 0)
    check_int(repeats, "repeats", 1)
    _check_optional_int(number, "number", 1)
    _check_optional_int(num_threads, "num_threads", 1)
    check_str(label, "label", empty=True)
    _check_callable(timer, "timer")


def compare(
    candidates: Mapping[str, Callable[[], object]],
    *,
    devices: DeviceLike | Iterable[DeviceLike] | None = None,
    warmup: int = 2,
    repeats: int = 7,
    number: int | None = None,
    num_threads: int | None = None,
    timer: Clock = time.perf_counter,
) -> dict[str, Timing]:
    """Measure several callables *interleaved*: one measurement of each in turn, ``repeats`` rounds.

    Interleaving makes slow drifts of the machine (another program starting, the CPU clocking down)
    hit every candidate alike, so their ratio is more trustworthy than two back-to-back runs. Each
    candidate is warmed up ``warmup`` times first (not measured); ``number`` calls per measurement
    (``None``: chosen per candidate so that one measurement lasts about 2 ms). The clock synchronises
    every device in ``devices`` (``None``: every GPU this process can see, or the CPU without one; pass
    ``"cpu"`` for CPU-only code on a GPU machine), then reads ``timer``. Returns ``{name: Timing}`` in
    the order given.
    """
    if not isinstance(candidates, Mapping) or not candidates:
        raise TypeError("candidates must be a non-empty mapping of name -> callable")
    for key, fn in candidates.items():
        if not isinstance(key, str):
            raise TypeError(f"candidates: names must be str, got {type(key).__name__}")
        _check_common(fn, warmup, repeats, number, num_threads, key, timer, name=f"candidates[{key!r}]")
    devs = _default_devices() if devices is None else _as_devices(devices)
    clock = _clock(devs, timer)
    timers = {key: timeit.Timer(stmt="fn()", timer=clock, globals={"fn": fn}) for key, fn in candidates.items()}
    raw: dict[str, list[float]] = {key: [] for key in candidates}
    with _intra_op_threads(num_threads):
        for fn in candidates.values():
            for _ in range(warmup):
                fn()
        numbers = {key: number or _calls_per_block(fn, clock) for key, fn in candidates.items()}
        for _ in range(repeats):
            for key, t in timers.items():
                raw[key].append(t.timeit(numbers[key]) / numbers[key])
    names = tuple(str(d) for d in devs)
    return {
        key: Timing(tuple(raw[key]), numbers[key], warmup, names, "repeat", key) for key in candidates
    }


def benchmark_timer(
    fn: Callable[[], object],
    *,
    devices: DeviceLike | Iterable[DeviceLike] | None = None,
    num_threads: int | None = None,
    label: str = "",
    timer: Clock = time.perf_counter,
) -> Timer:
    """A ``torch.utils.benchmark.Timer`` running ``fn()`` with a clock that synchronises ``devices``.

    The library's default clock synchronises only the current accelerator; this one waits for every
    device you name, then reads ``timer``. ``num_threads`` defaults to the current
    ``torch.get_num_threads()`` (the library's own default is 1). Use the library's methods on it::

        benchmark_timer(step, devices=["cuda:0", "cuda:1"]).blocked_autorange(min_run_time=1.0)
    """
    _check_callable(fn, "fn")
    _check_optional_int(num_threads, "num_threads", 1)
    check_str(label, "label", empty=True)
    _check_callable(timer, "timer")
    devs = _default_devices() if devices is None else _as_devices(devices)
    from torch.utils.benchmark import Timer

    return Timer(
        stmt="fn()",
        globals={"fn": fn},
        timer=_clock(devs, timer),
        num_threads=num_threads or torch.get_num_threads(),
        label=label or None,
    )


def _measure_events(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int,
                    number: int | None, timer: Clock) -> tuple[list[float], int]:
    """GPU-side seconds per call between two CUDA events on ``device``'s current stream."""
    synchronize(device)  # a device this machine lacks: a ValueError naming it, before torch.cuda is asked
    stream = torch.cuda.current_stream(device)
    for _ in range(warmup):
        fn()
    if number is None:
        number = _calls_per_block(fn, _clock((device,), timer))
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(number):
            fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0 / number)  # elapsed_time is in milliseconds
    return times, number


def measure(
    fn: Callable[[], object],
    *,
    devices: DeviceLike | Iterable[DeviceLike] | None = None,
    warmup: int = 2,
    repeats: int = 7,
    number: int | None = None,
    num_threads: int | None = None,
    method: str = "repeat",
    min_run_time: float = 0.2,
    label: str = "",
    timer: Clock = time.perf_counter,
) -> Timing:
    """Time ``fn()``: synchronise ``devices``, warm up, repeat; return a :class:`Timing`.

    Args:
        fn: a callable without arguments (wrap arguments in a ``lambda`` or ``functools.partial``).
        devices: the devices ``fn`` uses, all of which are synchronised around every measurement.
            ``None``: every GPU this process can see, or the CPU without one. Pass ``"cpu"`` to time
            CPU-only code on a GPU machine without touching the GPUs.
        warmup: calls made before measuring, excluded from the result.
        repeats: measurements taken (method ``"repeat"`` or ``"events"``).
        number: calls per measurement; ``None`` chooses it so that one measurement lasts about 2 ms.
        num_threads: intra-op threads while measuring (restored afterwards); ``None`` keeps the current
            setting. ``torch.utils.benchmark.Timer`` defaults to 1 thread: pass ``1`` to compare with it.
        method: ``"repeat"``, ``"autorange"`` (``blocked_autorange`` decides how often to call ``fn``:
            ``repeats`` is unused and ``number`` must be ``None``) or ``"events"`` (CUDA events;
            ``devices`` must be exactly one CUDA device).
        min_run_time: seconds of measurement for ``"autorange"``.
        label: a name shown by ``str(timing)``.
        timer: the clock read after synchronising (seconds); a simulated clock makes the whole
            measurement run on virtual time.
    """
    _check_common(fn, warmup, repeats, number, num_threads, label, timer)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    min_run_time = check_number(min_run_time, "min_run_time")
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be > 0, got {min_run_time}")
    devs = _default_devices() if devices is None else _as_devices(devices)
    names = tuple(str(d) for d in devs)

    if method == "repeat":
        return compare({label: fn}, devices=devs, warmup=warmup, repeats=repeats, number=number,
                       num_threads=num_threads, timer=timer)[label]

    if method == "events":
        if len(devs) != 1 or devs[0].type != "cuda":
            raise ValueError(f"devices must be exactly one CUDA device for method='events', got {names}")
        with _intra_op_threads(num_threads):
            times, number = _measure_events(fn, devs[0], warmup, repeats, number, timer)
        return Timing(tuple(times), number, warmup, names, "events", label)

    # autorange
    if number is not None:
        raise ValueError("number must be None for method='autorange': blocked_autorange chooses it")
    bench = benchmark_timer(fn, devices=devs, num_threads=num_threads, label=label, timer=timer)
    with _intra_op_threads(num_threads):
        for _ in range(warmup):
            fn()
    result = bench.blocked_autorange(min_run_time=min_run_time)
    return Timing(tuple(float(t) for t in result.times), int(result.number_per_run), warmup, names,
                  "autorange", label)


# --- runs that another program may have disturbed -------------------------------------------------

def core_wait(native_ids: Iterable[int]) -> float | None:
    """Seconds the threads ``native_ids`` of this process have spent *waiting for a core*, in total.

    That is the time a thread was ready to run while every core was busy with something else: on a
    quiet machine it stays near zero, on a shared one it grows. Linux reports it per thread (second
    field of ``/proc/self/task/<id>/schedstat``); elsewhere, or for a thread that has ended, the
    answer is ``None`` (unknown). A thread blocked on a lock (Python's GIL, a queue) is not waiting
    for a core and adds nothing. Compare two readings to see what a run suffered.
    """
    if isinstance(native_ids, str | bytes) or not isinstance(native_ids, Iterable):
        raise TypeError(f"native_ids must be an iterable of thread ids, got {type(native_ids).__name__}")
    ids = list(native_ids)
    for tid in ids:
        check_int(tid, "native_ids", 1)
    if not sys.platform.startswith("linux"):
        return None
    total = 0
    for tid in ids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            return None
    return total / 1e9


@dataclass(frozen=True)
class WorkerRun:
    """One timed :meth:`CPUWorkers.timed_run`: how long it took, and whether anything disturbed it.

    ``wall``: seconds, from handing out the tasks to having every result (hand-off included).
    ``cpu``: CPU seconds each worker that had tasks spent running them (its thread's CPU clock).
    ``tasks``: how many tasks the run had. ``waited``: seconds our threads (the caller's and the
    workers') spent waiting for a core during the run, or ``None`` where the OS does not say.
    """

    wall: float
    cpu: tuple[float, ...]
    tasks: int
    waited: float | None

    def __post_init__(self) -> None:
        check_number(self.wall, "wall")
        if not isinstance(self.cpu, tuple) or not self.cpu:
            raise ValueError("cpu must be a non-empty tuple of seconds, one per busy worker")
        for seconds in self.cpu:
            check_number(seconds, "cpu")
        check_int(self.tasks, "tasks", 1)
        if self.waited is not None:
            check_number(self.waited, "waited")

    @property
    def cpu_per_task(self) -> float:
        """CPU seconds per task, summed over the workers (grows when the tasks slow each other down)."""
        return sum(self.cpu) / self.tasks

    @property
    def share(self) -> float:
        """The smallest share of the wall time that a busy worker spent computing (0 to about 1)."""
        return min(self.cpu) / self.wall if self.wall > 0 else 1.0

    def quiet(self) -> bool:
        """Whether the run was undisturbed by other programs.

        Where the OS reports waiting (Linux): our threads (the caller and each busy worker) waited for a
        core at most ``QUIET_SHARE`` of the wall time plus ``QUIET_FLOOR`` per thread. Elsewhere: every
        busy worker computed at least ``1 - QUIET_SHARE`` of the wall time, which only runs much longer
        than the hand-off can show.
        """
        if self.waited is not None:
            return self.waited <= QUIET_SHARE * self.wall + QUIET_FLOOR * (1 + len(self.cpu))
        return self.share >= 1 - QUIET_SHARE


# --- CPU workers as stand-in devices --------------------------------------------------------------

def _check_tasks(tasks: object) -> None:
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence) or not tasks:
        raise TypeError("tasks must be a non-empty sequence of callables")
    for i, task in enumerate(tasks):
        _check_callable(task, f"tasks[{i}]")


def _start_worker(num_threads: int) -> None:
    """Each worker thread's initializer: its intra-op threads, and its one-time costs paid now."""
    torch.set_num_threads(num_threads)
    torch.ones(8, 8) @ torch.ones(8, 8)  # a thread's first PyTorch operation is slower than the next


class CPUWorkers:
    """``workers`` long-lived CPU threads with one intra-op thread each: stand-ins for devices.

    Each worker is a ``concurrent.futures.ThreadPoolExecutor`` with one thread, so it runs what it is
    given in order, like a device's queue. ``pool.run(tasks)`` hands task ``i`` to worker
    ``i % workers`` and returns the results in the order of ``tasks`` once every worker is done (an
    exception a task raised is re-raised there: the first worker's, if several failed). With one
    worker every task runs after the other (the sequential baseline); with two, two threads compute
    at the same time. PyTorch releases Python's GIL inside its operations, so on two free cores that
    takes about half as long, once the tasks are large enough to dwarf the hand-off and the per-call
    Python overhead.

    The threads start in the constructor, and each runs an initializer first:
    ``torch.set_num_threads(threads_per_worker)`` (the caller's own setting is untouched) and one small
    matrix product, because a thread's first PyTorch operation costs more than the next (as with a
    GPU's first calls). They live until :meth:`close` (or the end of a ``with`` block). ::

        with CPUWorkers(1) as one, CPUWorkers(2) as two:
            one.run(tasks)   # sequential
            two.run(tasks)   # parallel

    :meth:`timed_run` runs the tasks and returns a :class:`WorkerRun` instead of the results.
    ``clock``, ``cpu_clock`` (read inside each worker) and ``waiting`` (:func:`core_wait`) can be
    replaced by simulated ones in tests.
    """

    def __init__(
        self,
        workers: int,
        *,
        threads_per_worker: int = 1,
        clock: Clock = time.perf_counter,
        cpu_clock: Clock = time.thread_time,
        waiting: Callable[[Iterable[int]], float | None] = core_wait,
    ) -> None:
        self.workers = check_int(workers, "workers", 1)
        check_int(threads_per_worker, "threads_per_worker", 1)
        _check_callable(clock, "clock")
        _check_callable(cpu_clock, "cpu_clock")
        _check_callable(waiting, "waiting")
        self._clock, self._cpu_clock, self._waiting = clock, cpu_clock, waiting
        self._queues = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cpu-worker-{k}",
                               initializer=_start_worker, initargs=(threads_per_worker,))
            for k in range(self.workers)
        ]
        # Start every thread now (a pool starts its thread on the first submit) and learn its id.
        self.native_ids: tuple[int, ...] = tuple(q.submit(threading.get_native_id).result() for q in self._queues)
        self._closed = False

    def _batch(self, batch: list[Callable[[], T]]) -> tuple[list[T], float]:
        start = self._cpu_clock()
        results = [task() for task in batch]
        return results, self._cpu_clock() - start

    def _run(self, tasks: Sequence[Callable[[], T]]) -> tuple[list[T], WorkerRun]:
        if self._closed:
            raise RuntimeError("these CPUWorkers are closed")
        _check_tasks(tasks)
        busy = range(min(self.workers, len(tasks)))
        threads = [threading.get_native_id(), *(self.native_ids[k] for k in busy)]
        waited_before = self._waiting(threads)
        start = self._clock()
        futures = [self._queues[k].submit(self._batch, list(tasks[k::self.workers])) for k in busy]
        outcomes = []
        for future in futures:  # wait for every worker, even after one has failed
            try:
                outcomes.append(future.result())
            except BaseException as err:  # handed to the caller below, in task order
                outcomes.append(err)
        wall = self._clock() - start
        waited_after = self._waiting(threads)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            raise errors[0]
        results: list[object] = [None] * len(tasks)
        for k, (batch_results, _) in zip(busy, outcomes, strict=True):
            results[k::self.workers] = batch_results
        waited = None if waited_before is None or waited_after is None else max(waited_after - waited_before, 0.0)
        run = WorkerRun(max(wall, 0.0), tuple(max(cpu, 0.0) for _, cpu in outcomes), len(tasks), waited)
        return results, run  # type: ignore[return-value]

    def run(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``tasks`` on the workers (task ``i`` on worker ``i % workers``); return their results."""
        return self._run(tasks)[0]

    def timed_run(self, tasks: Sequence[Callable[[], object]]) -> WorkerRun:
        """Run ``tasks`` like :meth:`run`; return how long that took and whether it was disturbed."""
        return self._run(tasks)[1]

    def close(self) -> None:
        """Stop the worker threads (idempotent)."""
        if not self._closed:
            self._closed = True
            for queue in self._queues:
                queue.shutdown(wait=True)

    def __enter__(self) -> CPUWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CPUWorkers({self.workers}{', closed' if self._closed else ''})"


def run_on_cpu_workers(tasks: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Run ``tasks`` once on ``workers`` fresh :class:`CPUWorkers` threads; return results in order.

    A one-off convenience: the threads are started for this call and stopped after it. To time
    sequential against parallel work, keep a :class:`CPUWorkers` pool alive and time its runs.
    """
    _check_tasks(tasks)
    check_int(workers, "workers", 1)
    if workers > len(tasks):
        raise ValueError(f"workers must be <= len(tasks) ({len(tasks)}), got {workers}: a worker would idle")
    with CPUWorkers(workers) as pool:
        return pool.run(tasks)


# --- hidden synchronisations ----------------------------------------------------------------------

#: Tensor methods whose result is a Python value computed from the tensor's data.
_VALUE_READS = {
    "item": ".item()", "tolist": ".tolist()", "numpy": ".numpy()", "__bool__": "bool(tensor) / if tensor",
    "__float__": "float(tensor)", "__int__": "int(tensor)", "__index__": "tensor as an index",
    "__complex__": "complex(tensor)", "__format__": "format(tensor) / f-string", "__repr__": "print / repr",
    "__str__": "print / str", "__contains__": "value in tensor", "__array__": "numpy.asarray(tensor)",
    "equal": "torch.equal", "allclose": "torch.allclose", "is_nonzero": ".is_nonzero()",
}
#: Operations whose output *shape* depends on the data: the host must learn it before it can go on.
_SHAPE_READS = {
    "nonzero": "torch.nonzero", "argwhere": "torch.argwhere", "masked_select": "torch.masked_select",
    "unique": "torch.unique", "unique_consecutive": "torch.unique_consecutive", "bincount": "torch.bincount",
}


def _holds_bool_tensor(index: object) -> bool:
    items = index if isinstance(index, tuple | list) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items) or (
        isinstance(index, list) and any(isinstance(i, bool) for i in index))


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether ``tensor.to(...)`` copies to the host on a GPU: a target spelt ``"cpu"`` names the host
    whatever device the code runs on; a ``torch.device`` (or a tensor's) is the CPU only for data that
    is elsewhere: ``mask.to(x.device)`` returns ``mask`` itself when both are on the same device."""
    own = args[0].device if args and isinstance(args[0], torch.Tensor) else None
    for target in (*args[1:], kwargs.get("device")):
        if isinstance(target, torch.Tensor):
            target = target.device
        if isinstance(target, str) and target.split(":")[0] == "cpu":
            return True
        if isinstance(target, torch.device) and target.type == "cpu" and own is not None and own.type != "cpu":
            return True
    return False


class HostReads(TorchFunctionMode):
    """Note every PyTorch call that needs tensor values on the host; on a GPU each one is a synchronisation.

    ::

        with HostReads() as reads:
            total += loss.item()        # noted: '.item()'
            hard = x[x > 0.5]           # noted: 'x[mask] (boolean mask)'
        reads                           # ['.item()', 'x[mask] (boolean mask)']

    Three kinds are noted: a Python value read from a tensor (``.item()``, ``float()``, ``bool()`` and
    so ``if tensor:``, printing, ``.tolist()``, ``torch.equal``); an output whose shape depends on the
    values (boolean-mask indexing, ``nonzero``, ``torch.where(condition)``, ``masked_select``,
    ``unique``, ``bincount``, ``repeat_interleave`` with tensor repeats, ``one_hot`` without
    ``num_classes``); and a copy to the host (``.cpu()``, ``.to("cpu")``, ``.numpy()``), free for a CPU
    tensor but a synchronisation from a GPU. A ``torch.device`` target is judged against the tensor's own
    device: ``mask.to(x.device)`` is not noted (a no-op, on any machine), nor is ``.to(torch.device("cpu"))``
    of a CPU tensor. The list is of the common cases, not every operator; on a GPU,
    ``torch.cuda.set_sync_debug_mode("warn")`` reports every synchronisation the device makes.
    Nothing is changed: every call runs as usual.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __enter__(self) -> list[str]:  # type: ignore[override]
        super().__enter__()
        return self.reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _VALUE_READS:
            self.reads.append(_VALUE_READS[name])
        elif name in _SHAPE_READS:
            self.reads.append(_SHAPE_READS[name])
        elif name == "__getitem__" and len(args) > 1 and _holds_bool_tensor(args[1]):
            self.reads.append("x[mask] (boolean mask)")
        elif name == "where" and len(args) + len(kwargs) == 1:
            self.reads.append("torch.where(condition)")
        elif name == "repeat_interleave" and len(args) > 1 and isinstance(args[1], torch.Tensor) \
                and kwargs.get("output_size") is None:
            self.reads.append("torch.repeat_interleave (tensor repeats)")
        elif name == "one_hot" and (args[1] if len(args) > 1 else kwargs.get("num_classes", -1)) == -1:
            self.reads.append("F.one_hot without num_classes")
        elif name == "cpu" or (name == "to" and _to_host(args, kwargs)):
            self.reads.append(".cpu() / .to('cpu')")
        return func(*args, **kwargs)


# --- speed claims on a shared machine -------------------------------------------------------------

def until_quiet(
    setups: Mapping[K, Callable[[], WorkerRun]],
    *,
    want: int = 3,
    budget: float = 3.0,
    warmup: int = 1,
    max_rounds: int = 1000,
    clock: Clock = time.perf_counter,
) -> dict[K, list[WorkerRun]]:
    """Run every setup once per round, interleaved, until each has ``want`` undisturbed runs.

    A setup is a callable returning a :class:`WorkerRun` (``lambda: pool.timed_run(tasks)``). The
    first ``warmup`` rounds are not kept. Measuring stops after the first round in which every setup
    has ``want`` quiet runs (:meth:`WorkerRun.quiet`), or once ``budget`` seconds of ``clock`` have
    passed since the start, or after ``max_rounds`` rounds, whichever comes first; at least one round
    is always kept. Returns every kept run per setup, quiet or not, in the order measured, so that
    :func:`judge_speedup` can say how busy the machine was.
    """
    if not isinstance(setups, Mapping) or not setups:
        raise TypeError("setups must be a non-empty mapping of key -> callable returning a WorkerRun")
    for key, setup in setups.items():
        _check_callable(setup, f"setups[{key!r}]")
    check_int(want, "want", 1)
    budget = check_number(budget, "budget")
    check_int(warmup, "warmup", 0)
    check_int(max_rounds, "max_rounds", 1)
    _check_callable(clock, "clock")
    deadline = clock() + budget
    for _ in range(warmup):
        for setup in setups.values():
            setup()
    runs: dict[K, list[WorkerRun]] = {key: [] for key in setups}
    for _ in range(max_rounds):
        for key, setup in setups.items():
            run = setup()
            if not isinstance(run, WorkerRun):
                raise TypeError(f"setups[{key!r}] must return a WorkerRun, got {type(run).__name__}")
            runs[key].append(run)
        if all(sum(r.quiet() for r in kept) >= want for kept in runs.values()) or clock() >= deadline:
            break
    return runs


@dataclass(frozen=True)
class SpeedupVerdict:
    """What :func:`judge_speedup` concluded about a claim on the speed-up of two workers over one.

    ``holds``: ``True`` (shown on undisturbed runs), ``False`` (undisturbed runs contradict it) or
    ``None`` (it could not be checked here; :attr:`reason` says why). ``speedup``: best undisturbed
    one-worker wall time over best undisturbed two-worker wall time (``None`` without both).
    """

    claim: str
    holds: bool | None
    speedup: float | None
    reason: str

    def __str__(self) -> str:
        mark = {True: "✓ shown", False: "✗ NOT TRUE here", None: "? not checked"}[self.holds]
        return f"{mark}: {self.claim}. {self.reason}"


def judge_speedup(
    one: Sequence[WorkerRun],
    two: Sequence[WorkerRun],
    *,
    claim: str,
    at_least: float | None = None,
    at_most: float | None = None,
    contention: float = 1.1,
) -> SpeedupVerdict:
    """Judge ``claim`` about ``one``-worker runs against ``two``-worker runs of the same tasks.

    Only undisturbed runs count, and of those the fastest of each side (other programs only ever add
    time). The claim is that the speed-up is ``>= at_least`` and/or ``<= at_most``. It cannot be checked
    (``holds=None``) when either side has no undisturbed run: the machine was too busy. A speed-up
    below ``at_least`` is not held against the claim either when a worker of the fastest two-worker run
    computed less than 90 % of it (blocked, or its virtual machine's CPU taken away: steal time, which
    the OS does not count as waiting), or when the tasks needed ``contention`` times more CPU time per
    task side by side than alone: then the two cores share hardware (two hyperthreads of one core, or
    memory bandwidth) and are not two independent devices.
    """
    check_str(claim, "claim")
    for name, runs in (("one", one), ("two", two)):
        if isinstance(runs, str | bytes) or not isinstance(runs, Sequence) or not runs:
            raise TypeError(f"{name} must be a non-empty sequence of WorkerRun")
        if not all(isinstance(r, WorkerRun) for r in runs):
            raise TypeError(f"{name} must hold WorkerRun items")
    if at_least is None and at_most is None:
        raise ValueError("at_least or at_most must be given: the claim needs a bound")
    low = None if at_least is None else check_number(at_least, "at_least")
    high = None if at_most is None else check_number(at_most, "at_most")
    contention = check_number(contention, "contention")
    quiet_one, quiet_two = [r for r in one if r.quiet()], [r for r in two if r.quiet()]
    if not quiet_one or not quiet_two:
        return SpeedupVerdict(
            claim, None, None,
            f"The machine was too busy to check it: {len(quiet_one)} of {len(one)} runs with one worker and "
            f"{len(quiet_two)} of {len(two)} with two were undisturbed (our threads kept waiting for a core "
            "that another program held). Run it again when the machine is idle.",
        )
    best_one, best_two = min(quiet_one, key=lambda r: r.wall), min(quiet_two, key=lambda r: r.wall)
    speedup = best_one.wall / best_two.wall if best_two.wall > 0 else math.inf
    measured = f"{speedup:.2f}× (fastest of {len(quiet_one)} and {len(quiet_two)} undisturbed runs)"
    if high is not None and speedup > high:
        return SpeedupVerdict(claim, False, speedup, f"Measured {measured}, more than {high:g}×.")
    if low is not None and speedup < low:
        extra = best_two.cpu_per_task / best_one.cpu_per_task if best_one.cpu_per_task > 0 else 1.0
        if best_two.share < MIN_SHARE:
            return SpeedupVerdict(
                claim, None, speedup,
                f"Measured {measured}, but a worker computed only {best_two.share:.0%} of the run without waiting "
                "for a core either: it was blocked (Python's GIL, a lock) or the virtual machine's host took the "
                "CPU away (steal time), so the run says nothing about the devices.",
            )
        if extra >= contention:
            return SpeedupVerdict(
                claim, None, speedup,
                f"Measured {measured}, but side by side each task needed {extra:.2f}× the CPU time it needs "
                "alone: these two cores share hardware (two hyperthreads of one core, or memory bandwidth), "
                "so they are not two independent devices.",
            )
        return SpeedupVerdict(claim, False, speedup, f"Measured {measured}, less than {low:g}×.")
    bounds = ([] if low is None else [f"at least {low:g}×"]) + ([] if high is None else [f"at most {high:g}×"])
    return SpeedupVerdict(claim, True, speedup, f"Measured {measured}: {' and '.join(bounds)}.")
