"""Timing code that runs on one device or several, without fooling yourself. Used by chapter 09.

GPU work is asynchronous: a CUDA call queues a kernel and returns, so a clock read right after it
measures the *launch*. A correct measurement therefore

1. **synchronizes every device involved**, before starting the clock (so earlier work is not billed)
   and before stopping it (so all of this work is). ``torch.cuda.synchronize()`` without an argument
   waits for the *current* device only; :func:`synchronize` waits for each device you name, through
   ``torch.accelerator`` (CUDA, ROCm, XPU, MPS alike);
2. **warms up**: the first calls pay for one-time costs (CUDA context, cuBLAS handles, caches,
   memory allocation) that the steady state does not;
3. **repeats**, and reports the median with a measure of spread (the interquartile range, IQR).

:func:`measure` does all three and returns a :class:`Timing`::

    >>> t = measure(lambda: a @ b, devices=["cuda:0", "cuda:1"], warmup=2, repeats=7, label="a @ b")
    >>> print(t)
    a @ b: 1.21 ms per call (median of 7 × 2 calls, IQR 12.3 µs; 2 warm-up calls; synchronized cuda:0, cuda:1)

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
each, for the sequential-versus-parallel experiment on a machine without two GPUs. Time its runs with
:func:`compare`; what they show depends on the machine's cores and load, so a speed claim is asserted
on a virtual clock (``utils.fake_gpus``), never on these figures.

**Hidden synchronizations.** Inside ``with HostReads() as reads:`` every PyTorch call that needs tensor
*values* on the host (``.item()``, ``print``, ``if tensor:``, ``x[mask]``, ``nonzero`` ...) is listed in
``reads``: on a GPU, each of them makes the host wait for the device. It runs on the CPU, so a loop can
be checked for them on any machine. It knows the common cases, not every operator; on a GPU,
``torch.cuda.set_sync_debug_mode`` warns about (or raises on) the synchronizing calls it covers, which
are not all of them either (its docstring calls it experimental: ``torch.distributed`` and
``torch.sparse`` operations, for one, are not covered).

Importing this module is cheap: ``torch.utils.benchmark`` is imported on first use only, and nothing
here initializes CUDA until you time CUDA devices.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
import timeit
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from torch.overrides import TorchFunctionMode

from utils._validate import check_int, check_number, check_str
from utils.devices import GPU_TYPES
from utils.i18n import L_, _

if TYPE_CHECKING:
    from torch.utils.benchmark import Timer

__all__ = [
    "METHODS",
    "CPUWorkers",
    "HostReads",
    "Timing",
    "benchmark_timer",
    "compare",
    "format_seconds",
    "measure",
    "run_on_cpu_workers",
    "synchronize",
]

T = TypeVar("T")

#: Device types :func:`synchronize` accepts: the CPU (nothing to wait for) and the GPU types.
DEVICE_TYPES = ("cpu", *GPU_TYPES)
#: The ways :func:`measure` can time a callable.
METHODS = ("repeat", "autorange", "events")
#: With ``number=None``, calls per measurement are chosen so that one measurement lasts about this long.
TARGET_BLOCK_SECONDS = 2e-3
DeviceLike = torch.device | str
Clock = Callable[[], float]


# --- argument checks ------------------------------------------------------------------------------

def _as_devices(devices: DeviceLike | Iterable[DeviceLike], name: str = "devices") -> tuple[torch.device, ...]:
    """Normalize one device or an iterable of devices; duplicates removed, order kept."""
    items = [devices] if isinstance(devices, torch.device | str) else devices
    if not isinstance(items, Iterable):
        raise TypeError(_("{name} must be a torch.device, a str such as 'cuda:0', or an iterable of them; "
                          "got {type_name}").format(name=name, type_name=type(devices).__name__))
    out: list[torch.device] = []
    for item in items:
        if not isinstance(item, torch.device | str):
            raise TypeError(_("{name} must hold torch.device or str items, got {type_name} {item}").format(
                name=name, type_name=type(item).__name__, item=repr(item)))
        try:
            device = torch.device(item)
        except RuntimeError as err:
            raise ValueError(_("{name}: {item} is not a device ({error})").format(
                name=name, item=repr(item), error=err)) from None
        if device.type not in DEVICE_TYPES:
            raise ValueError(_("{name}: cannot synchronize a {device_type} device; known types: {known}").format(
                name=name, device_type=repr(device.type), known=DEVICE_TYPES))
        if device not in out:
            out.append(device)
    if not out:
        raise ValueError(_("{name} must name at least one device").format(name=name))
    return tuple(out)


def _check_callable(fn: object, name: str) -> None:
    if not callable(fn):
        raise TypeError(_("{name} must be callable, got {type_name}").format(name=name, type_name=type(fn).__name__))


def _check_optional_int(value: object, name: str, minimum: int) -> int | None:
    return None if value is None else check_int(value, name, minimum)


def _default_devices() -> tuple[torch.device, ...]:
    from utils.devices import try_all_gpus

    return tuple(try_all_gpus())


# --- synchronization ------------------------------------------------------------------------------

def synchronize(devices: DeviceLike | Iterable[DeviceLike]) -> None:
    """Wait until every device in ``devices`` has finished the work queued on it so far.

    ``devices`` is one device (``torch.device`` or a string such as ``"cuda:1"``) or an iterable of
    them. CPU work is already finished when the call that issued it returns, so ``"cpu"`` needs
    nothing. Every other device is synchronized on its own with ``torch.accelerator.synchronize(d)``
    (a bare ``torch.cuda.synchronize()`` waits for the *current* device only); ``"cuda"`` without an
    index means the current device. A device of a type this machine's accelerator is not raises a
    ``ValueError`` naming it, before anything is waited for.
    """
    devs = [d for d in _as_devices(devices) if d.type != "cpu"]
    if not devs:
        return
    accelerator = torch.accelerator.current_accelerator()
    for device in devs:
        if accelerator is None:
            raise ValueError(_("devices: cannot synchronize {device}: this machine has no accelerator").format(
                device=device))
        if device.type != accelerator.type:
            raise ValueError(_("devices: cannot synchronize {device}: this machine has a {kind} accelerator").format(
                device=device, kind=accelerator.type))
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
        raise ValueError(_("seconds must be finite, got {seconds}").format(seconds=seconds))
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
            raise ValueError(_("times must be a non-empty tuple of seconds per call"))
        if not all(isinstance(t, float) and math.isfinite(t) and t >= 0 for t in self.times):
            raise ValueError(_("times must hold finite, non-negative floats"))
        check_int(self.number, "number", 1)
        check_int(self.warmup, "warmup", 0)
        if not isinstance(self.devices, tuple) or not self.devices or not all(
            isinstance(d, str) and d for d in self.devices
        ):
            raise TypeError(_("devices must be a non-empty tuple of device names such as ('cuda:0',), "
                              "got {devices}").format(devices=repr(self.devices)))
        if self.method not in METHODS:
            raise ValueError(_("method must be one of {methods}, got {method}").format(
                methods=METHODS, method=repr(self.method)))
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
        q1, _q2, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q3 - q1

    @property
    def best(self) -> float:
        """The fastest measurement, seconds per call."""
        return min(self.times)

    def __str__(self) -> str:
        line = _TIMING_LINES[(bool(self.label), self.method, self.warmup == 1)]()
        return line.format(label=self.label, median=format_seconds(self.median), repeats=len(self.times),
                           number=self.number, iqr=format_seconds(self.iqr), warmup=self.warmup,
                           devices=", ".join(self.devices))


#: The line ``str(timing)`` prints, one whole-line message for each (labelled, method, one warm-up call): a
#: notebook prints it as it is.
_TIMING_LINES: dict[tuple[bool, str, bool], Callable[[], str]] = {
    (True, "repeat", False): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                        "IQR {iqr}; {warmup} warm-up calls; synchronized {devices})"),
    (True, "repeat", True): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                       "IQR {iqr}; {warmup} warm-up call; synchronized {devices})"),
    (True, "autorange", False): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                           "IQR {iqr}, blocked_autorange; {warmup} warm-up calls; "
                                           "synchronized {devices})"),
    (True, "autorange", True): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                          "IQR {iqr}, blocked_autorange; {warmup} warm-up call; "
                                          "synchronized {devices})"),
    (True, "events", False): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                        "IQR {iqr}, CUDA events; {warmup} warm-up calls; synchronized {devices})"),
    (True, "events", True): lambda: L_("{label}: {median} per call (median of {repeats} × {number} calls, "
                                       "IQR {iqr}, CUDA events; {warmup} warm-up call; synchronized {devices})"),
    (False, "repeat", False): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                         "IQR {iqr}; {warmup} warm-up calls; synchronized {devices})"),
    (False, "repeat", True): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                        "IQR {iqr}; {warmup} warm-up call; synchronized {devices})"),
    (False, "autorange", False): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                            "IQR {iqr}, blocked_autorange; {warmup} warm-up calls; "
                                            "synchronized {devices})"),
    (False, "autorange", True): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                           "IQR {iqr}, blocked_autorange; {warmup} warm-up call; "
                                           "synchronized {devices})"),
    (False, "events", False): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                         "IQR {iqr}, CUDA events; {warmup} warm-up calls; synchronized {devices})"),
    (False, "events", True): lambda: L_("{median} per call (median of {repeats} × {number} calls, "
                                        "IQR {iqr}, CUDA events; {warmup} warm-up call; synchronized {devices})"),
}


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
    (``None``: chosen per candidate so that one measurement lasts about 2 ms). The clock synchronizes
    every device in ``devices`` (``None``: every GPU this process can see, or the CPU without one; pass
    ``"cpu"`` for CPU-only code on a GPU machine), then reads ``timer``. Returns ``{name: Timing}`` in
    the order given.
    """
    if not isinstance(candidates, Mapping) or not candidates:
        raise TypeError(_("candidates must be a non-empty mapping of name -> callable"))
    for key, fn in candidates.items():
        if not isinstance(key, str):
            raise TypeError(_("candidates: names must be str, got {type_name}").format(type_name=type(key).__name__))
        _check_common(fn, warmup, repeats, number, num_threads, key, timer, name=f"candidates[{key!r}]")
    devs = _default_devices() if devices is None else _as_devices(devices)
    clock = _clock(devs, timer)
    timers = {key: timeit.Timer(stmt="fn()", timer=clock, globals={"fn": fn}) for key, fn in candidates.items()}
    raw: dict[str, list[float]] = {key: [] for key in candidates}
    with _intra_op_threads(num_threads):
        for fn in candidates.values():
            for _call in range(warmup):
                fn()
        numbers = {key: number or _calls_per_block(fn, clock) for key, fn in candidates.items()}
        for _round in range(repeats):
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
    """A ``torch.utils.benchmark.Timer`` running ``fn()`` with a clock that synchronizes ``devices``.

    The library's default clock synchronizes only the current accelerator; this one waits for every
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
    for _call in range(warmup):
        fn()
    if number is None:
        number = _calls_per_block(fn, _clock((device,), timer))
    synchronize(device)
    times = []
    for _round in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _call in range(number):
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
    """Time ``fn()``: synchronize ``devices``, warm up, repeat; return a :class:`Timing`.

    Args:
        fn: a callable without arguments (wrap arguments in a ``lambda`` or ``functools.partial``).
        devices: the devices ``fn`` uses, all of which are synchronized around every measurement.
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
        timer: the clock read after synchronizing (seconds); a simulated clock makes the whole
            measurement run on virtual time.
    """
    _check_common(fn, warmup, repeats, number, num_threads, label, timer)
    if method not in METHODS:
        raise ValueError(_("method must be one of {methods}, got {method}").format(methods=METHODS,
                                                                                    method=repr(method)))
    min_run_time = check_number(min_run_time, "min_run_time")
    if not min_run_time > 0:
        raise ValueError(_("min_run_time must be > 0, got {min_run_time}").format(min_run_time=min_run_time))
    devs = _default_devices() if devices is None else _as_devices(devices)
    names = tuple(str(d) for d in devs)

    if method == "repeat":
        return compare({label: fn}, devices=devs, warmup=warmup, repeats=repeats, number=number,
                       num_threads=num_threads, timer=timer)[label]

    if method == "events":
        if len(devs) != 1 or devs[0].type != "cuda":
            raise ValueError(_("devices must be exactly one CUDA device for method='events', got {names}").format(
                names=names))
        with _intra_op_threads(num_threads):
            times, number = _measure_events(fn, devs[0], warmup, repeats, number, timer)
        return Timing(tuple(times), number, warmup, names, "events", label)

    # autorange
    if number is not None:
        raise ValueError(_("number must be None for method='autorange': blocked_autorange chooses it"))
    bench = benchmark_timer(fn, devices=devs, num_threads=num_threads, label=label, timer=timer)
    with _intra_op_threads(num_threads):
        for _call in range(warmup):
            fn()
    result = bench.blocked_autorange(min_run_time=min_run_time)
    return Timing(tuple(float(t) for t in result.times), int(result.number_per_run), warmup, names,
                  "autorange", label)


# --- CPU workers as stand-in devices --------------------------------------------------------------

def _check_tasks(tasks: object) -> None:
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence) or not tasks:
        raise TypeError(_("tasks must be a non-empty sequence of callables"))
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
    Python overhead; on a busy or small machine it can be far from that.

    The threads start in the constructor, and each runs an initializer first:
    ``torch.set_num_threads(threads_per_worker)`` (the caller's own setting is untouched) and one small
    matrix product, because a thread's first PyTorch operation costs more than the next (as with a
    GPU's first calls). They live until :meth:`close` (or the end of a ``with`` block), so that timing
    ``pool.run`` (with :func:`measure` or :func:`compare`, ``devices="cpu"``) measures the work and the
    hand-off, not starting threads. ``native_ids`` holds each worker thread's id, in worker order. ::

        with CPUWorkers(1) as one, CPUWorkers(2) as two:
            one.run(tasks)   # sequential
            two.run(tasks)   # parallel
    """

    def __init__(self, workers: int, *, threads_per_worker: int = 1) -> None:
        self.workers = check_int(workers, "workers", 1)
        check_int(threads_per_worker, "threads_per_worker", 1)
        self._queues = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cpu-worker-{k}",
                               initializer=_start_worker, initargs=(threads_per_worker,))
            for k in range(self.workers)
        ]
        # Start every thread now (a pool starts its thread on the first submit) and learn its id.
        self.native_ids: tuple[int, ...] = tuple(q.submit(threading.get_native_id).result() for q in self._queues)
        self._closed = False

    def run(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``tasks`` on the workers (task ``i`` on worker ``i % workers``); return their results."""
        if self._closed:
            raise RuntimeError(_("these CPUWorkers are closed"))
        _check_tasks(tasks)
        futures = [self._queues[k].submit(lambda batch: [task() for task in batch], list(tasks[k::self.workers]))
                   for k in range(min(self.workers, len(tasks)))]
        outcomes = []
        for future in futures:  # wait for every worker, even after one has failed
            try:
                outcomes.append(future.result())
            except BaseException as err:  # handed to the caller below, in task order
                outcomes.append(err)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            raise errors[0]
        results: list[object] = [None] * len(tasks)
        for k, batch_results in enumerate(outcomes):
            results[k::self.workers] = batch_results
        return results  # type: ignore[return-value]

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
        raise ValueError(_("workers must be <= len(tasks) ({count}), got {workers}: a worker would idle").format(
            count=len(tasks), workers=workers))
    with CPUWorkers(workers) as pool:
        return pool.run(tasks)


# --- hidden synchronizations ----------------------------------------------------------------------

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
    """Note every PyTorch call that needs tensor values on the host; on a GPU each one is a synchronization.

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
    tensor but a synchronization from a GPU. A ``torch.device`` target is judged against the tensor's own
    device: ``mask.to(x.device)`` is not noted (a no-op, on any machine), nor is ``.to(torch.device("cpu"))``
    of a CPU tensor. The list is of the common cases, not every operator; on a GPU,
    ``torch.cuda.set_sync_debug_mode("warn")`` also warns about many synchronizing calls it does not list
    (not all: see the module docstring).
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
