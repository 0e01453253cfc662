"""The timing helpers: every device synchronised, warm-up excluded, agreement with torch.utils.benchmark.

CUDA is simulated: ``torch.cuda.synchronize`` is replaced by a fake that records which device it waited
for, and "GPU work" is a sleep running on a background thread per device, so a clock that forgets to
wait for a device measures too little, exactly as on real hardware.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
import torch

from utils import timing
from utils.timing import CPUWorkers, Timing, compare, format_seconds, measure, run_on_cpu_workers, synchronize

CPU = torch.device("cpu")


class FakeGPUs:
    """Per-device queues of work that finish later; ``sync`` stands in for ``torch.cuda.synchronize``."""

    def __init__(self) -> None:
        self.queues: dict[int, ThreadPoolExecutor] = {}
        self.pending: dict[int, list[Future]] = {}
        self.synced: list[torch.device] = []

    def launch(self, index: int, seconds: float) -> None:
        queue = self.queues.setdefault(index, ThreadPoolExecutor(max_workers=1))
        self.pending.setdefault(index, []).append(queue.submit(time.sleep, seconds))

    def sync(self, device=None) -> None:
        device = torch.device("cuda", 0) if device is None else torch.device(device)
        assert device.type == "cuda", f"synchronize called with {device}"
        self.synced.append(device)
        for job in self.pending.pop(device.index or 0, []):
            job.result()

    def close(self) -> None:
        for queue in self.queues.values():
            queue.shutdown(wait=True)


@pytest.fixture
def gpus(monkeypatch):
    fake = FakeGPUs()
    monkeypatch.setattr(torch.cuda, "synchronize", fake.sync)
    yield fake
    fake.close()


# --- synchronisation ------------------------------------------------------------------------------

def test_synchronize_waits_for_every_cuda_device_and_skips_the_cpu(gpus):
    synchronize(["cuda:0", torch.device("cuda", 1), "cpu", "cuda:1"])
    assert gpus.synced == [torch.device("cuda", 0), torch.device("cuda", 1)]


def test_synchronize_accepts_a_single_device(gpus):
    synchronize("cuda:3")
    synchronize(CPU)
    assert gpus.synced == [torch.device("cuda", 3)]


def test_measure_synchronises_each_device_around_every_measurement(gpus):
    measure(lambda: None, devices=["cuda:0", "cuda:1", "cpu"], warmup=0, repeats=4, number=3)
    counts = {d: gpus.synced.count(d) for d in set(gpus.synced)}
    assert set(counts) == {torch.device("cuda", 0), torch.device("cuda", 1)}
    assert counts[torch.device("cuda", 0)] == counts[torch.device("cuda", 1)] >= 2 * 4


def test_measure_includes_the_slowest_device(gpus):
    def step():  # returns at once, like a CUDA launch; the work finishes later
        gpus.launch(0, 0.002)
        gpus.launch(1, 0.030)

    both = measure(step, devices=["cuda:0", "cuda:1"], warmup=1, repeats=3, number=1)
    current_only = measure(step, devices=["cuda:0"], warmup=1, repeats=3, number=1)
    gpus.sync("cuda:1")
    assert both.median >= 0.029, both
    assert current_only.median < 0.020, "the fake must show the bug that synchronising one device causes"


def test_earlier_work_is_not_billed(gpus):
    gpus.launch(1, 0.080)  # queued before the measurement starts
    t = measure(lambda: gpus.launch(1, 0.010), devices=["cuda:0", "cuda:1"], warmup=0, repeats=1, number=1)
    assert 0.009 <= t.median < 0.060, t


def test_cpu_only_work_never_touches_cuda(gpus):
    measure(lambda: None, devices="cpu", warmup=1, repeats=2, number=5)
    assert gpus.synced == []


def test_default_devices_are_every_gpu_or_the_cpu(monkeypatch, gpus):
    monkeypatch.setattr(timing, "_default_devices", lambda: (torch.device("cuda", 0), torch.device("cuda", 1)))
    t = measure(lambda: None, warmup=0, repeats=1, number=1)
    assert t.devices == ("cuda:0", "cuda:1")
    assert {torch.device("cuda", 0), torch.device("cuda", 1)} == set(gpus.synced)


def test_default_devices_on_this_machine():
    t = measure(lambda: None, warmup=0, repeats=1, number=1)
    if not torch.cuda.is_available():
        assert t.devices == ("cpu",)


# --- warm-up and repetition -----------------------------------------------------------------------

class SlowStart:
    """The first ``slow`` calls take 40 ms (think: CUDA context, cuBLAS handle), later ones ~0."""

    def __init__(self, slow: int = 3) -> None:
        self.calls = 0
        self.slow = slow

    def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.slow:
            time.sleep(0.040)


def test_warm_up_calls_are_excluded():
    fn = SlowStart(slow=3)
    t = measure(fn, devices="cpu", warmup=3, repeats=5, number=2)
    assert fn.calls == 3 + 5 * 2
    assert max(t.times) < 0.010, t.times
    assert t.warmup == 3 and t.number == 2 and len(t.times) == 5


def test_without_warm_up_the_slow_calls_pollute_the_first_measurement():
    fn = SlowStart(slow=1)
    t = measure(fn, devices="cpu", warmup=0, repeats=5, number=1)
    assert t.times[0] >= 0.035 and max(t.times[1:]) < 0.010, t.times


def test_warm_up_is_excluded_with_automatic_block_size():
    fn = SlowStart(slow=2)
    t = measure(fn, devices="cpu", warmup=2, repeats=5)
    assert max(t.times) < 0.010, t.times
    assert t.number > 1  # a ~0 s call is repeated to fill a block of about 2 ms


def test_warm_up_is_excluded_with_autorange():
    fn = SlowStart(slow=2)
    t = measure(fn, devices="cpu", warmup=2, method="autorange", min_run_time=0.02)
    assert t.method == "autorange" and max(t.times) < 0.010, t.times


def test_compare_interleaves_and_warms_each_candidate():
    order: list[str] = []
    a, b = SlowStart(slow=1), SlowStart(slow=1)

    def run_a():
        order.append("a")
        a()

    def run_b():
        order.append("b")
        b()

    result = compare({"a": run_a, "b": run_b}, devices="cpu", warmup=1, repeats=3, number=1)
    assert list(result) == ["a", "b"] and result["a"].label == "a"
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert max(result["a"].times + result["b"].times) < 0.010


def test_num_threads_is_applied_and_restored():
    before = torch.get_num_threads()
    seen: list[int] = []
    measure(lambda: seen.append(torch.get_num_threads()), devices="cpu", warmup=1, repeats=2, number=1,
            num_threads=1)
    assert set(seen) == {1}
    assert torch.get_num_threads() == before


# --- agreement with torch.utils.benchmark ---------------------------------------------------------

def test_agrees_with_torch_utils_benchmark_on_a_cpu_matmul():
    from torch.utils.benchmark import Timer

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 256, generator=gen)
    ours, theirs = [], []
    reference = Timer("a @ a", globals={"a": a}, num_threads=1)
    # Interleaved rounds, so a change in the machine's load hits both sides alike. Our measurements
    # make as many calls as the library's blocks (equally long, so equally exposed to other programs).
    # Other programs only ever add time, so each side is summarised by its fastest measurement over
    # all rounds (the "best of" that timeit recommends on a shared machine).
    for _ in range(7):
        library = reference.blocked_autorange(min_run_time=0.02)
        theirs.append(min(library.times))
        mine = measure(lambda: a @ a, devices="cpu", num_threads=1, number=library.number_per_run,
                       repeats=len(library.times))
        ours.append(mine.best)
    ratio = min(ours) / min(theirs)
    assert abs(ratio - 1) < 0.05, f"ours/benchmark = {ratio:.3f} ({ours} vs {theirs})"


def test_autorange_method_is_blocked_autorange_with_our_clock(monkeypatch):
    from torch.utils.benchmark import Timer

    calls = []
    original = Timer.blocked_autorange

    def spy(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Timer, "blocked_autorange", spy)
    t = measure(lambda: None, devices="cpu", method="autorange", min_run_time=0.01, warmup=0)
    assert calls == [{"min_run_time": 0.01}]
    assert t.number >= 1 and len(t.times) >= 1


def test_benchmark_timer_uses_a_clock_that_synchronises_every_device(gpus):
    timer = timing.benchmark_timer(lambda: None, devices=["cuda:0", "cuda:1"])
    timer.timeit(number=3)
    assert {torch.device("cuda", 0), torch.device("cuda", 1)} <= set(gpus.synced)
    assert timer._task_spec.num_threads == torch.get_num_threads()


# --- CUDA events (simulated) ----------------------------------------------------------------------

class FakeEvent:
    clock = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.at: float | None = None
        self.stream = None

    def record(self, stream=None) -> None:
        self.stream = stream
        self.at = FakeEvent.clock

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1000.0  # milliseconds, as CUDA reports


def test_events_method_reports_device_time(monkeypatch, gpus):
    streams = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: streams.append(device) or "stream-1")

    def kernel():  # each call advances the fake device clock by 3 ms
        FakeEvent.clock += 0.003

    t = measure(kernel, devices="cuda:1", method="events", warmup=2, repeats=4, number=5)
    assert t.method == "events" and t.times == pytest.approx((0.003,) * 4)
    assert streams == [torch.device("cuda", 1)]
    assert torch.device("cuda", 1) in gpus.synced


def test_events_need_exactly_one_cuda_device():
    with pytest.raises(ValueError, match="devices"):
        measure(lambda: None, devices=["cuda:0", "cuda:1"], method="events")
    with pytest.raises(ValueError, match="devices"):
        measure(lambda: None, devices="cpu", method="events")


# --- the result -----------------------------------------------------------------------------------

def test_timing_statistics_and_str():
    t = Timing((0.001, 0.002, 0.003, 0.004, 0.010), number=10, warmup=2, devices=("cuda:0", "cuda:1"),
               method="repeat", label="matmul")
    assert t.median == 0.003
    assert t.iqr == pytest.approx(0.004 - 0.002)
    assert t.best == 0.001
    assert str(t) == (
        "matmul: 3 ms per call (median of 5 × 10 calls, IQR 2 ms; 2 warm-up calls; synchronised cuda:0, cuda:1)"
    )
    with pytest.raises(AttributeError):
        t.number = 3  # frozen


def test_iqr_matches_torch_utils_benchmark():
    from torch.utils.benchmark import Measurement

    times = [0.0031, 0.0010, 0.0025, 0.0042, 0.0018, 0.0020]
    ours = Timing(tuple(times), 1, 0, ("cpu",), "repeat")
    theirs = Measurement(number_per_run=1, raw_times=times, task_spec=_task_spec())
    assert ours.median == pytest.approx(theirs.median)
    assert ours.iqr == pytest.approx(theirs.iqr)


def _task_spec():
    from torch.utils.benchmark.utils.common import TaskSpec

    return TaskSpec(stmt="pass", setup="pass")


def test_single_measurement_has_zero_spread():
    assert Timing((0.5,), 1, 0, ("cpu",), "repeat").iqr == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.5 s"), (0.00123, "1.23 ms"), (4.56e-5, "45.6 µs"), (7e-9, "7 ns"), (0.0, "0 ns")],
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"times": ()}, ValueError, "times"),
        ({"times": [0.1]}, ValueError, "times"),
        ({"times": (-1.0,)}, ValueError, "times"),
        ({"number": 0}, ValueError, "number"),
        ({"warmup": 1.5}, TypeError, "warmup"),
        ({"method": "stopwatch"}, ValueError, "method"),
    ],
)
def test_timing_rejects_bad_fields(kwargs, error, name):
    fields = {"times": (0.1,), "number": 1, "warmup": 0, "devices": ("cpu",), "method": "repeat"} | kwargs
    with pytest.raises(error, match=name):
        Timing(**fields)


# --- CPU workers as stand-in devices --------------------------------------------------------------

def test_workers_run_tasks_in_parallel_with_one_thread_each():
    before = torch.get_num_threads()

    def task():
        time.sleep(0.05)  # sleeping, like PyTorch kernels, releases the GIL
        return threading.get_ident(), torch.get_num_threads()

    with CPUWorkers(1) as one, CPUWorkers(2) as two:
        t0 = time.perf_counter()
        seq = one.run([task, task])
        t1 = time.perf_counter()
        par = two.run([task, task])
        t2 = time.perf_counter()
    assert len({ident for ident, _ in seq}) == 1 and len({ident for ident, _ in par}) == 2
    assert {n for _, n in seq + par} == {1}
    assert torch.get_num_threads() == before
    assert t1 - t0 >= 0.1 and t2 - t1 < 0.09, (t1 - t0, t2 - t1)


def test_workers_are_long_lived_threads():
    with CPUWorkers(2) as pool:
        first = pool.run([threading.get_ident, threading.get_ident])
        second = pool.run([threading.get_ident, threading.get_ident])
    assert first == second and len(set(first)) == 2 and threading.get_ident() not in first


def test_workers_return_results_in_task_order():
    tasks = [lambda i=i: i * i for i in range(7)]
    assert run_on_cpu_workers(tasks, workers=3) == [i * i for i in range(7)]
    with CPUWorkers(4) as pool:
        assert pool.run(tasks) == [i * i for i in range(7)]
        assert pool.run(tasks[:2]) == [0, 1]  # more workers than tasks: the others idle


def test_workers_compute_the_same_matmul():
    gen = torch.Generator().manual_seed(0)
    mats = [torch.randn(64, 64, generator=gen) for _ in range(4)]
    out = run_on_cpu_workers([lambda m=m: m @ m for m in mats], workers=2)
    assert all(torch.equal(o, m @ m) for o, m in zip(out, mats, strict=True))


def test_a_failing_task_raises_in_the_caller_and_the_pool_survives():
    def boom():
        raise RuntimeError("task failed")

    with pytest.raises(RuntimeError, match="task failed"):
        run_on_cpu_workers([lambda: 1, boom], workers=2)
    with CPUWorkers(2) as pool:
        with pytest.raises(RuntimeError, match="task failed"):
            pool.run([lambda: 1, boom])
        assert pool.run([lambda: 1, lambda: 2]) == [1, 2]


def test_closed_workers_refuse_work_and_stop_their_threads():
    pool = CPUWorkers(2)
    threads = list(pool._threads)
    pool.close()
    pool.close()  # idempotent
    assert not any(t.is_alive() for t in threads)
    assert repr(pool) == "CPUWorkers(2, closed)"
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([noop])


# --- bad input ------------------------------------------------------------------------------------

def noop():
    return None


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: measure(42), TypeError, "fn"),
        (lambda: measure(noop, devices=0), TypeError, "devices"),
        (lambda: measure(noop, devices=[0]), TypeError, "devices"),
        (lambda: measure(noop, devices=[]), ValueError, "devices"),
        (lambda: measure(noop, devices="gpu7"), ValueError, "devices"),
        (lambda: measure(noop, devices="meta"), ValueError, "devices"),
        (lambda: measure(noop, devices="cpu", warmup=-1), ValueError, "warmup"),
        (lambda: measure(noop, devices="cpu", warmup=True), TypeError, "warmup"),
        (lambda: measure(noop, devices="cpu", repeats=0), ValueError, "repeats"),
        (lambda: measure(noop, devices="cpu", repeats=2.0), TypeError, "repeats"),
        (lambda: measure(noop, devices="cpu", number=0), ValueError, "number"),
        (lambda: measure(noop, devices="cpu", num_threads=0), ValueError, "num_threads"),
        (lambda: measure(noop, devices="cpu", method="wallclock"), ValueError, "method"),
        (lambda: measure(noop, devices="cpu", method="autorange", number=3), ValueError, "number"),
        (lambda: measure(noop, devices="cpu", min_run_time=0), ValueError, "min_run_time"),
        (lambda: measure(noop, devices="cpu", min_run_time="1"), TypeError, "min_run_time"),
        (lambda: measure(noop, devices="cpu", label=3), TypeError, "label"),
        (lambda: synchronize(None), TypeError, "devices"),
        (lambda: synchronize("cuda:x"), ValueError, "devices"),
        (lambda: compare({}), TypeError, "candidates"),
        (lambda: compare([noop]), TypeError, "candidates"),
        (lambda: compare({1: noop}), TypeError, "candidates"),
        (lambda: compare({"a": 5}, devices="cpu"), TypeError, "candidates"),
        (lambda: timing.benchmark_timer(noop, devices="cpu", num_threads=-1), ValueError, "num_threads"),
        (lambda: run_on_cpu_workers([], 1), TypeError, "tasks"),
        (lambda: run_on_cpu_workers(noop, 1), TypeError, "tasks"),
        (lambda: run_on_cpu_workers([noop, 3], 1), TypeError, r"tasks\[1\]"),
        (lambda: run_on_cpu_workers([noop], 0), ValueError, "workers"),
        (lambda: run_on_cpu_workers([noop], 1.0), TypeError, "workers"),
        (lambda: run_on_cpu_workers([noop], 2), ValueError, "workers"),
        (lambda: CPUWorkers(0), ValueError, "workers"),
        (lambda: CPUWorkers("2"), TypeError, "workers"),
        (lambda: CPUWorkers(1).run([]), TypeError, "tasks"),
        (lambda: CPUWorkers(1).run([noop, None]), TypeError, r"tasks\[1\]"),
        (lambda: format_seconds(-1.0), ValueError, "seconds"),
        (lambda: format_seconds("1"), TypeError, "seconds"),
    ],
)
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()
