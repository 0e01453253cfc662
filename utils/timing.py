"""Timing code that runs on one device or several, without fooling yourself.

GPU work is asynchronous: a CUDA call queues a kernel and returns, so a clock read right after it
measures the *launch*. A correct measurement therefore

1. **synchronises every device involved**, before starting the clock (so earlier work is not billed)
   and before stopping it (so all of this work is). ``torch.cuda.synchronize()`` without an argument
   waits for the *current* device only; :func:`synchronize` waits for each device you name;
2. **warms up**: the first calls pay for one-time costs (CUDA context, cuBLAS handles, caches,
   memory allocation) that the steady state does not;
3. **repeats**, and reports the median with a measure of spread (the interquartile range, IQR).

:func:`measure` does all three and returns a :class:`Timing`::

    >>> t = measure(lambda: a @ b, devices=["cuda:0", "cuda:1"], warmup=2, repeats=7, label="a @ b")
    >>> print(t)
    a @ b: 1.21 ms per call (median of 7 × 2 calls, IQR 12.3 µs; 2 warm-up calls; synchronised cuda:0, cuda:1)

Three methods, chosen with ``method=``:

``"repeat"`` (default)
    ``repeats`` measurements of ``number`` calls each, with a host clock that synchronises every
    device in ``devices``; the same ``timeit`` machinery that ``torch.utils.benchmark`` uses for Python
    statements (garbage collection paused while timing).
``"autorange"``
    ``torch.utils.benchmark.Timer(...).blocked_autorange()``, the library's own block sizing, with the
    same all-device clock (:func:`benchmark_timer` gives you that ``Timer`` itself). Best for
    microsecond-scale operations; ``repeats`` and ``number`` are then chosen by the library.
``"events"``
    CUDA events recorded on the current stream of one CUDA device: GPU-side time, no host clock. Fits
    when ``fn`` runs on exactly one CUDA device and you want the device's view.

:func:`compare` measures several callables *interleaved* (A, B, A, B, ...), so that a change in the
machine's load affects them alike. :class:`CPUWorkers` (and the one-off :func:`run_on_cpu_workers`)
runs tasks on N CPU threads with one intra-op thread each: *stand-in devices* for the
sequential-versus-parallel experiment on a machine without two GPUs.

Importing this module is cheap: ``torch.utils.benchmark`` is imported on first use only, and nothing
here initialises CUDA until you time CUDA devices.
"""

from __future__ import annotations

import contextlib
import math
import queue
import statistics
import threading
import time
import timeit
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch

from utils._validate import check_int

if TYPE_CHECKING:
    from torch.utils.benchmark import Timer

__all__ = [
    "METHODS",
    "CPUWorkers",
    "Timing",
    "benchmark_timer",
    "compare",
    "format_seconds",
    "measure",
    "run_on_cpu_workers",
    "synchronize",
]

T = TypeVar("T")

#: Device types :func:`synchronize` knows how to wait for.
DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps")
#: The ways :func:`measure` can time a callable.
METHODS = ("repeat", "autorange", "events")
#: With ``number=None``, calls per measurement are chosen so that one measurement lasts about this long.
TARGET_BLOCK_SECONDS = 2e-3

DeviceLike = torch.device | str


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
    nothing. CUDA devices are synchronised one by one with ``torch.cuda.synchronize(d)``: a bare
    ``torch.cuda.synchronize()`` waits for the *current* device only. ``"cuda"`` without an index
    means the current device. XPU and MPS are handled alike (MPS has a single device).
    """
    for device in _as_devices(devices):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elif device.type == "xpu":
            torch.xpu.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()


def _clock(devices: tuple[torch.device, ...]) -> Callable[[], float]:
    """A clock that first waits for every device (a plain ``perf_counter`` for CPU-only work)."""
    if all(d.type == "cpu" for d in devices):
        return time.perf_counter

    def synchronised_clock() -> float:
        synchronize(devices)
        return time.perf_counter()

    return synchronised_clock


@contextlib.contextmanager
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
    """``0.00123`` → ``'1.23 ms'``: three significant digits in s, ms, µs or ns."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be finite and >= 0, got {seconds}")
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


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
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")

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

def _calls_per_block(fn: Callable[[], object], clock: Callable[[], float]) -> int:
    start = clock()
    fn()
    once = max(clock() - start, 1e-9)
    return max(1, min(1_000_000, math.ceil(TARGET_BLOCK_SECONDS / once)))


def _check_common(fn: object, warmup: object, repeats: object, number: object, num_threads: object,
                  label: object, name: str = "fn") -> None:
    _check_callable(fn, name)
    check_int(warmup, "warmup", 0)
    check_int(repeats, "repeats", 1)
    _check_optional_int(number, "number", 1)
    _check_optional_int(num_threads, "num_threads", 1)
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")


def compare(
    candidates: Mapping[str, Callable[[], object]],
    *,
    devices: DeviceLike | Iterable[DeviceLike] | None = None,
    warmup: int = 2,
    repeats: int = 7,
    number: int | None = None,
    num_threads: int | None = None,
) -> dict[str, Timing]:
    """Measure several callables *interleaved*: one measurement of each in turn, ``repeats`` rounds.

    Interleaving makes slow drifts of the machine (another program starting, the CPU clocking down)
    hit every candidate alike, so their ratio is more trustworthy than two back-to-back runs. Each
    candidate is warmed up ``warmup`` times first; ``number`` calls per measurement (``None``: chosen
    per candidate so that one measurement lasts about 2 ms). The clock synchronises every device in
    ``devices`` (``None``: every GPU this process can see, or the CPU without one; pass ``"cpu"`` for
    CPU-only code on a GPU machine). Returns ``{name: Timing}`` in the order given.
    """
    if not isinstance(candidates, Mapping) or not candidates:
        raise TypeError("candidates must be a non-empty mapping of name -> callable")
    for key, fn in candidates.items():
        if not isinstance(key, str):
            raise TypeError(f"candidates: names must be str, got {type(key).__name__}")
        _check_common(fn, warmup, repeats, number, num_threads, key, name=f"candidates[{key!r}]")
    devs = _default_devices() if devices is None else _as_devices(devices)
    clock = _clock(devs)
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
) -> Timer:
    """A ``torch.utils.benchmark.Timer`` running ``fn()`` with a clock that synchronises ``devices``.

    The library's default clock synchronises only the current accelerator; this one waits for every
    device you name. ``num_threads`` defaults to the current ``torch.get_num_threads()`` (the library's
    own default is 1). Use the library's methods on it::

        benchmark_timer(step, devices=["cuda:0", "cuda:1"]).blocked_autorange(min_run_time=1.0)
    """
    _check_callable(fn, "fn")
    _check_optional_int(num_threads, "num_threads", 1)
    if not isinstance(label, str):
        raise TypeError(f"label must be a str, got {type(label).__name__}")
    devs = _default_devices() if devices is None else _as_devices(devices)
    from torch.utils.benchmark import Timer

    return Timer(
        stmt="fn()",
        globals={"fn": fn},
        timer=_clock(devs),
        num_threads=num_threads or torch.get_num_threads(),
        label=label or None,
    )


def _measure_events(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int,
                    number: int | None) -> tuple[list[float], int]:
    """GPU-side seconds per call between two CUDA events on ``device``'s current stream."""
    stream = torch.cuda.current_stream(device)
    for _ in range(warmup):
        fn()
    if number is None:
        number = _calls_per_block(fn, _clock((device,)))
    torch.cuda.synchronize(device)
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
    """
    _check_common(fn, warmup, repeats, number, num_threads, label)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(min_run_time, bool) or not isinstance(min_run_time, int | float):
        raise TypeError(f"min_run_time must be a number of seconds, got {type(min_run_time).__name__}")
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be > 0, got {min_run_time}")
    devs = _default_devices() if devices is None else _as_devices(devices)
    names = tuple(str(d) for d in devs)

    if method == "repeat":
        timing = compare({label: fn}, devices=devs, warmup=warmup, repeats=repeats, number=number,
                         num_threads=num_threads)[label]
        return timing

    if method == "events":
        if len(devs) != 1 or devs[0].type != "cuda":
            raise ValueError(f"devices must be exactly one CUDA device for method='events', got {names}")
        with _intra_op_threads(num_threads):
            times, number = _measure_events(fn, devs[0], warmup, repeats, number)
        return Timing(tuple(times), number, warmup, names, "events", label)

    # autorange
    if number is not None:
        raise ValueError("number must be None for method='autorange': blocked_autorange chooses it")
    timer = benchmark_timer(fn, devices=devs, num_threads=num_threads, label=label)
    with _intra_op_threads(num_threads):
        for _ in range(warmup):
            fn()
    result = timer.blocked_autorange(min_run_time=float(min_run_time))
    return Timing(tuple(float(t) for t in result.times), int(result.number_per_run), warmup, names,
                  "autorange", label)


# --- CPU workers as stand-in devices --------------------------------------------------------------

def _check_tasks(tasks: object) -> None:
    if isinstance(tasks, str | bytes) or not isinstance(tasks, Sequence) or not tasks:
        raise TypeError("tasks must be a non-empty sequence of callables")
    for i, task in enumerate(tasks):
        _check_callable(task, f"tasks[{i}]")


class CPUWorkers:
    """``workers`` long-lived CPU threads with one intra-op thread each: stand-ins for devices.

    ``pool.run(tasks)`` hands task ``i`` to worker ``i % workers``; each worker runs its tasks in order,
    like a device's queue, and ``run`` returns the results in the order of ``tasks`` once every worker
    is done (the first exception a task raised is re-raised there). With one worker, every task runs
    after the other (the sequential baseline); with two, two threads compute at the same time. PyTorch
    operations release Python's GIL, so on a machine with two free cores that takes about half as long.

    Each worker calls ``torch.set_num_threads(1)`` once, so that it uses one core, as one device
    would; the caller's own setting is untouched. The threads live until :meth:`close` (or the end of
    a ``with`` block): a thread's first PyTorch operations pay one-time set-up costs, which a timing
    should not include, exactly as with a GPU's first calls. ::

        with CPUWorkers(1) as one, CPUWorkers(2) as two:
            one.run(tasks)   # sequential
            two.run(tasks)   # parallel
    """

    def __init__(self, workers: int) -> None:
        self.workers = check_int(workers, "workers", 1)
        self._inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(workers)]
        self._threads = [
            threading.Thread(target=self._serve, args=(inbox,), name=f"cpu-worker-{k}", daemon=True)
            for k, inbox in enumerate(self._inboxes)
        ]
        self._closed = False
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _serve(inbox: queue.SimpleQueue) -> None:
        torch.set_num_threads(1)
        while (job := inbox.get()) is not None:
            batch, results, errors, done = job
            try:
                for i, task in batch:
                    results[i] = task()
            except BaseException as err:  # handed to the caller of run()
                errors.append(err)
            finally:
                done.release()

    def run(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        """Run ``tasks`` on the workers (task ``i`` on worker ``i % workers``); return their results."""
        if self._closed:
            raise RuntimeError("these CPUWorkers are closed")
        _check_tasks(tasks)
        results: list[object] = [None] * len(tasks)
        errors: list[BaseException] = []
        done = threading.Semaphore(0)
        for k, inbox in enumerate(self._inboxes):
            inbox.put(([(i, tasks[i]) for i in range(k, len(tasks), self.workers)], results, errors, done))
        for _ in self._inboxes:
            done.acquire()
        if errors:
            raise errors[0]
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker threads (idempotent)."""
        if not self._closed:
            self._closed = True
            for inbox in self._inboxes:
                inbox.put(None)
            for thread in self._threads:
                thread.join()

    def __enter__(self) -> CPUWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CPUWorkers({self.workers}{', closed' if self._closed else ''})"


def run_on_cpu_workers(tasks: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Run ``tasks`` once on ``workers`` fresh :class:`CPUWorkers` threads; return results in order.

    A one-off convenience: the threads are started for this call and stopped after it, so a timing of
    this function includes their start-up. To time sequential against parallel work, keep a
    :class:`CPUWorkers` pool alive and time ``pool.run(tasks)``.
    """
    _check_tasks(tasks)
    check_int(workers, "workers", 1)
    if workers > len(tasks):
        raise ValueError(f"workers must be <= len(tasks) ({len(tasks)}), got {workers}: a worker would idle")
    with CPUWorkers(workers) as pool:
        return pool.run(tasks)
