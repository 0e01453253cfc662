"""The timing helpers' logic, on virtual time: which devices are synchronized, that warm-up calls are
excluded, that candidates are interleaved, and how CPU workers hand out tasks.

Nothing here depends on the speed of the machine. GPUs are the shared double ``utils.fake_gpus``
(work launched on a fake device finishes later on a virtual clock, and ``torch.accelerator`` /
``torch.cuda.synchronize`` wait for it); every clock the helpers read is passed in as ``timer=``, so
"this call took 30 ms" is exact, not a sleep.
"""

from __future__ import annotations

import threading
from unittest import mock

import pytest
import torch

from utils import timing
from utils.fake_gpus import FakeGPUs, fake_gpus
from utils.timing import (
    CPUWorkers,
    HostReads,
    Timing,
    compare,
    format_seconds,
    measure,
    run_on_cpu_workers,
    synchronize,
)

CPU = torch.device("cpu")
CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


@pytest.fixture
def two_threads():
    """Two intra-op threads for the test: conftest sets one, and a check for 1 must be able to fail."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


# --- synchronization ------------------------------------------------------------------------------

def test_synchronize_waits_for_every_device_and_skips_the_cpu():
    with fake_gpus(2) as gpus:
        synchronize(["cuda:0", CUDA1, "cpu", "cuda:1"])
        assert gpus.synced == [CUDA0, CUDA1]


def test_synchronize_accepts_a_single_device_and_the_current_one():
    with fake_gpus(4) as gpus:
        synchronize("cuda:3")
        synchronize(CPU)
        synchronize("cuda")  # no index: the current device
        assert gpus.synced == [torch.device("cuda", 3), CUDA0]


def test_synchronize_goes_through_torch_accelerator():
    # On a machine whose accelerator is an XPU, torch.cuda.synchronize would raise; the helper still works.
    with fake_gpus(2, "xpu") as gpus:
        synchronize(["xpu:1", "cpu"])
        assert gpus.synced == [torch.device("xpu", 1)]


def test_synchronize_refuses_a_device_this_machine_lacks_before_waiting():
    with fake_gpus(2) as gpus:
        with pytest.raises(ValueError, match="devices: cannot synchronize xpu:0"):
            synchronize(["cuda:1", "xpu:0"])
        assert gpus.synced == []
    with fake_gpus(0):
        with pytest.raises(ValueError, match="no accelerator"):
            synchronize("cuda:0")
        synchronize("cpu")  # nothing to wait for


def test_measure_synchronises_each_device_around_every_measurement():
    with fake_gpus(2) as gpus:
        measure(lambda: None, devices=["cuda:0", "cuda:1", "cpu"], warmup=0, repeats=4, number=3, timer=gpus.clock)
        counts = {d: gpus.synced.count(d) for d in set(gpus.synced)}
        assert counts == {CUDA0: 2 * 4, CUDA1: 2 * 4}  # before and after each of the 4 measurements


def test_measure_includes_the_slowest_device():
    with fake_gpus(2) as gpus:
        def step():  # returns at once, like CUDA launches; the work finishes later
            gpus.launch(0, 0.002)
            gpus.launch(1, 0.030)

        both = measure(step, devices=["cuda:0", "cuda:1"], warmup=1, repeats=3, number=1, timer=gpus.clock)
        assert both.times == pytest.approx((0.030,) * 3)
        gpus.sync(1)
        current_only = measure(step, devices=["cuda:0"], warmup=1, repeats=3, number=1, timer=gpus.clock)
        assert max(current_only.times) < 0.030, "the fake must show the bug that synchronizing one device causes"


def test_earlier_work_is_not_billed():
    with fake_gpus(2) as gpus:
        gpus.launch(1, 0.080)  # queued before the measurement starts
        t = measure(lambda: gpus.launch(1, 0.010), devices=["cuda:0", "cuda:1"], warmup=0, repeats=2, number=1,
                    timer=gpus.clock)
        assert t.times == pytest.approx((0.010, 0.010))


def test_host_time_is_counted_too():
    with fake_gpus(1) as gpus:
        def step():
            gpus.host(0.001)  # Python and the launch itself
            gpus.launch(0, 0.004)

        t = measure(step, devices="cuda:0", warmup=0, repeats=1, number=5, timer=gpus.clock)
        # The host queues ahead while the device works: after the first launch, the device is the bottleneck.
        assert t.times == pytest.approx(((0.001 + 5 * 0.004) / 5,))


def test_cpu_only_work_never_touches_the_accelerator():
    with fake_gpus(2) as gpus:
        measure(lambda: gpus.host(0.001), devices="cpu", warmup=1, repeats=2, number=5, timer=gpus.clock)
        assert gpus.synced == []


def test_default_devices_are_every_gpu_or_the_cpu():
    with fake_gpus(2) as gpus:
        t = measure(lambda: None, warmup=0, repeats=1, number=1, timer=gpus.clock)
        assert t.devices == ("cuda:0", "cuda:1") and set(gpus.synced) == {CUDA0, CUDA1}
    with fake_gpus(0) as gpus:
        assert measure(lambda: None, warmup=0, repeats=1, number=1, timer=gpus.clock).devices == ("cpu",)


# --- warm-up and repetition -----------------------------------------------------------------------

class SlowStart:
    """The first ``slow`` calls spend 40 ms on the host (think: CUDA context, cuBLAS handle), later ones 1 ms."""

    def __init__(self, clock: FakeGPUs, slow: int = 3) -> None:
        self.clock, self.slow, self.calls = clock, slow, 0

    def __call__(self) -> None:
        self.calls += 1
        self.clock.host(0.040 if self.calls <= self.slow else 0.001)


def test_warm_up_calls_are_excluded():
    clock = FakeGPUs(0)
    fn = SlowStart(clock, slow=3)
    t = measure(fn, devices="cpu", warmup=3, repeats=5, number=2, timer=clock.clock)
    assert fn.calls == 3 + 5 * 2
    assert t.times == pytest.approx((0.001,) * 5)
    assert t.warmup == 3 and t.number == 2


def test_without_warm_up_the_slow_calls_pollute_the_first_measurement():
    clock = FakeGPUs(0)
    t = measure(SlowStart(clock, slow=1), devices="cpu", warmup=0, repeats=5, number=1, timer=clock.clock)
    assert t.times == pytest.approx((0.040, 0.001, 0.001, 0.001, 0.001))
    assert t.median == pytest.approx(0.001) and t.best == pytest.approx(0.001)


def test_warm_up_is_excluded_with_automatic_block_size():
    clock = FakeGPUs(0)
    fn = SlowStart(clock, slow=2)
    t = measure(fn, devices="cpu", warmup=2, repeats=5, timer=clock.clock)
    assert t.number == 2  # 1 ms per call: 2 calls fill a block of about 2 ms
    assert t.times == pytest.approx((0.001,) * 5)
    assert fn.calls == 2 + 1 + 5 * 2  # warm-up, one call to size the block, the measurements


def test_warm_up_is_excluded_with_autorange():
    clock = FakeGPUs(0)
    t = measure(SlowStart(clock, slow=2), devices="cpu", warmup=2, method="autorange", min_run_time=0.02,
                timer=clock.clock)
    assert t.method == "autorange" and t.times == pytest.approx((0.001,) * len(t.times))


def test_compare_interleaves_and_warms_each_candidate():
    clock = FakeGPUs(0)
    order: list[str] = []

    def candidate(name, seconds):
        def run():
            order.append(name)
            clock.host(seconds)
        return run

    result = compare({"a": candidate("a", 0.002), "b": candidate("b", 0.005)}, devices="cpu", warmup=1,
                     repeats=3, number=1, timer=clock.clock)
    assert list(result) == ["a", "b"] and result["a"].label == "a"
    assert order == ["a", "b"] + ["a", "b"] * 3
    assert result["a"].times == pytest.approx((0.002,) * 3) and result["b"].times == pytest.approx((0.005,) * 3)


def test_num_threads_is_applied_and_restored(two_threads):
    seen: list[int] = []
    measure(lambda: seen.append(torch.get_num_threads()), devices="cpu", warmup=1, repeats=2, number=1,
            num_threads=1)
    assert set(seen) == {1}
    assert torch.get_num_threads() == 2


# --- agreement with torch.utils.benchmark ---------------------------------------------------------

def test_same_clock_same_answer_as_torch_utils_benchmark():
    from torch.utils.benchmark import Timer

    clock = FakeGPUs(0)

    def fn():
        clock.host(0.003)

    theirs = Timer("fn()", globals={"fn": fn}, timer=clock.clock).timeit(number=5)
    ours = measure(fn, devices="cpu", warmup=0, repeats=1, number=5, timer=clock.clock)
    assert theirs.mean == pytest.approx(0.003) and ours.median == pytest.approx(theirs.mean)


def test_iqr_matches_torch_utils_benchmark():
    from torch.utils.benchmark import Measurement
    from torch.utils.benchmark.utils.common import TaskSpec

    times = [0.0031, 0.0010, 0.0025, 0.0042, 0.0018, 0.0020]
    ours = Timing(tuple(times), 1, 0, ("cpu",), "repeat")
    theirs = Measurement(number_per_run=1, raw_times=times, task_spec=TaskSpec(stmt="pass", setup="pass"))
    assert ours.median == pytest.approx(theirs.median)
    assert ours.iqr == pytest.approx(theirs.iqr)


def test_autorange_method_is_blocked_autorange_with_our_clock():
    from torch.utils.benchmark import Timer

    clock = FakeGPUs(0)
    with mock.patch.object(Timer, "blocked_autorange", autospec=True, side_effect=Timer.blocked_autorange) as spy:
        t = measure(lambda: clock.host(0.001), devices="cpu", method="autorange", min_run_time=0.01, warmup=0,
                    timer=clock.clock)
    assert spy.call_args.kwargs == {"min_run_time": 0.01}
    assert t.number >= 1 and t.times == pytest.approx((0.001,) * len(t.times))


def test_benchmark_timer_uses_a_clock_that_synchronises_every_device(two_threads):
    with fake_gpus(2) as gpus:
        def step():
            gpus.launch(0, 0.002)
            gpus.launch(1, 0.030)

        bench = timing.benchmark_timer(step, devices=["cuda:0", "cuda:1"], timer=gpus.clock)
        assert bench.timeit(number=3).mean == pytest.approx(0.030)
        assert {CUDA0, CUDA1} <= set(gpus.synced)
        assert bench._task_spec.num_threads == 2  # the current setting, not the library's default of 1


# --- CUDA events (simulated) ----------------------------------------------------------------------

def test_events_method_reports_device_time():
    with fake_gpus(2) as gpus:  # the shared fake's torch.cuda.Event and current_stream
        gpus.launch(1, 0.500)     # earlier work: events are not billed for it
        t = measure(lambda: gpus.launch(1, 0.003), devices="cuda:1", method="events", warmup=2, repeats=4,
                    number=5, timer=gpus.clock)
    assert t.method == "events" and t.times == pytest.approx((0.003,) * 4)
    assert CUDA1 in gpus.synced and CUDA0 not in gpus.synced


def test_events_need_exactly_one_cuda_device():
    with pytest.raises(ValueError, match="devices"):
        measure(lambda: None, devices=["cuda:0", "cuda:1"], method="events")
    with pytest.raises(ValueError, match="devices"):
        measure(lambda: None, devices="cpu", method="events")
    with fake_gpus(0), pytest.raises(ValueError, match="devices: cannot synchronize cuda:0: this machine has no"):
        measure(lambda: None, devices="cuda:0", method="events")


# --- the result -----------------------------------------------------------------------------------

def test_timing_statistics_and_str():
    t = Timing((0.001, 0.002, 0.003, 0.004, 0.010), number=10, warmup=2, devices=("cuda:0", "cuda:1"),
               method="repeat", label="matmul")
    assert t.median == 0.003
    assert t.iqr == pytest.approx(0.004 - 0.002)
    assert t.best == 0.001
    assert str(t) == (
        "matmul: 3 ms per call (median of 5 × 10 calls, IQR 2 ms; 2 warm-up calls; synchronized cuda:0, cuda:1)"
    )
    with pytest.raises(AttributeError):
        t.number = 3  # frozen


def test_single_measurement_has_zero_spread():
    assert Timing((0.5,), 1, 0, ("cpu",), "repeat").iqr == 0.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2.5 s"), (0.00123, "1.23 ms"), (4.56e-5, "45.6 µs"), (7e-9, "7 ns"), (0.0, "0 ns"),
     # at a unit's edge the rounded value picks the unit; 1000 s and more are whole seconds
     (9.9996e-7, "1 µs"), (0.0009996, "1 ms"), (0.0009994, "999 µs"), (0.9996, "1 s"), (999.4, "999 s"),
     (999.6, "1000 s"), (1234.4, "1234 s")],
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
        ({"devices": "cpu"}, TypeError, "devices"),
        ({"devices": None}, TypeError, "devices"),
        ({"devices": ()}, TypeError, "devices"),
        ({"label": None}, TypeError, "label"),
    ],
)
def test_timing_rejects_bad_fields(kwargs, error, name):
    fields = {"times": (0.1,), "number": 1, "warmup": 0, "devices": ("cpu",), "method": "repeat"} | kwargs
    with pytest.raises(error, match=name):
        Timing(**fields)


# --- CPU workers as stand-in devices --------------------------------------------------------------

def test_workers_start_warmed_up_threads_with_one_intra_op_thread_each(two_threads):
    with mock.patch.object(timing, "_start_worker", wraps=timing._start_worker) as initializer:
        with CPUWorkers(2) as pool:
            assert initializer.call_count == 2  # one per thread, before any run
            assert len(set(pool.native_ids)) == 2 and threading.get_native_id() not in pool.native_ids
            seen = pool.run([torch.get_num_threads, torch.get_num_threads, threading.get_native_id])
    assert seen[:2] == [1, 1] and seen[2] == pool.native_ids[0]
    assert torch.get_num_threads() == 2


def test_task_i_goes_to_worker_i_mod_workers_in_order():
    order: list[tuple[int, int]] = []
    lock = threading.Lock()

    def task(i):
        def run():
            with lock:
                order.append((threading.get_native_id(), i))
            return threading.get_native_id()
        return run

    with CPUWorkers(2) as pool:
        owners = pool.run([task(i) for i in range(5)])
        a, b = pool.native_ids
    assert owners == [a, b, a, b, a]
    assert [i for owner, i in order if owner == a] == [0, 2, 4]  # each worker in order, like a device queue
    assert [i for owner, i in order if owner == b] == [1, 3]


def test_workers_are_long_lived_and_run_at_the_same_time():
    both_started = threading.Barrier(2, timeout=10)  # passes only if the two tasks run at once

    def meet():
        both_started.wait()
        return threading.get_native_id()

    with CPUWorkers(2) as pool:
        first = pool.run([meet, meet])
        second = pool.run([meet, meet])
    assert first == second == list(pool.native_ids)


def test_one_worker_runs_tasks_one_after_the_other():
    running = []

    def task():
        running.append(threading.get_native_id())
        assert len(running) == 1  # nobody else is running now
        running.pop()
        return True

    with CPUWorkers(1) as pool:
        assert pool.run([task] * 4) == [True] * 4


def test_workers_return_results_in_task_order():
    tasks = [lambda i=i: i * i for i in range(7)]
    assert run_on_cpu_workers(tasks, workers=3) == [i * i for i in range(7)]
    with CPUWorkers(4) as pool:
        assert pool.run(tasks) == [i * i for i in range(7)]
        assert pool.run(tasks[:2]) == [0, 1]  # more workers than tasks: the others idle


def test_workers_compute_the_same_matmul():
    gen = torch.Generator().manual_seed(0)
    mats = [torch.randn(16, 16, generator=gen) for _ in range(4)]
    out = run_on_cpu_workers([lambda m=m: m @ m for m in mats], workers=2)
    assert all(torch.equal(o, m @ m) for o, m in zip(out, mats, strict=True))


def test_a_failing_task_raises_after_every_worker_is_done_and_the_pool_survives():
    failed, release, other_finished = threading.Event(), threading.Event(), threading.Event()

    def boom():
        failed.set()
        raise RuntimeError("task failed")

    def slow_but_fine():
        assert failed.wait(timeout=30)  # still running when the other task fails ...
        release.wait(timeout=0.2)       # ... and for a while after: set only once the error has arrived
        other_finished.set()
        return 1

    with CPUWorkers(2) as pool:  # (leaving the block would wait for the workers anyway)
        try:
            with pytest.raises(RuntimeError, match="task failed"):
                pool.run([boom, slow_but_fine])
            assert other_finished.is_set(), "the error reached the caller while a worker was still running"
        finally:
            release.set()
        with pytest.raises(RuntimeError, match="task failed"):
            pool.run([lambda: 1, boom])
        assert pool.run([lambda: 1, lambda: 2]) == [1, 2]
    with pytest.raises(RuntimeError, match="task failed"):
        run_on_cpu_workers([boom, lambda: 1], workers=2)


def test_closed_workers_refuse_work_and_stop_their_threads():
    pool = CPUWorkers(2)
    ids = set(pool.native_ids)
    pool.close()
    pool.close()  # idempotent
    assert not any(t.native_id in ids for t in threading.enumerate())
    assert repr(pool) == "CPUWorkers(2, closed)"
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([noop])


# --- hidden synchronizations ----------------------------------------------------------------------

def test_host_reads_notes_copies_to_the_host_but_not_moves_to_the_tensors_own_device():
    x, mask = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with HostReads() as reads:
        mask.to(x.device), mask.to(device=x.device, dtype=x.dtype), mask.to(x), mask.to(torch.float64)
    assert reads == []  # each returns mask (or a cast) on x's device, whatever that device is
    with HostReads() as reads:
        x.cpu(), x.to("cpu"), x.to(device="cpu:0"), x.to("cpu", torch.float64)
    assert reads == [".cpu() / .to('cpu')"] * 4  # "cpu" names the host: from a GPU, a copy that waits
    on_gpu = mock.Mock(spec=torch.Tensor, device=CUDA0)  # only its device is read: no GPU needed
    assert timing._to_host((on_gpu, CPU), {}) and timing._to_host((on_gpu,), {"device": CPU})
    assert timing._to_host((on_gpu, x), {}) and not timing._to_host((on_gpu, CUDA0), {})


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
        (lambda: measure(noop, devices="cpu", timer=0.5), TypeError, "timer"),
        (lambda: synchronize(None), TypeError, "devices"),
        (lambda: synchronize("cuda:x"), ValueError, "devices"),
        (lambda: compare({}), TypeError, "candidates"),
        (lambda: compare([noop]), TypeError, "candidates"),
        (lambda: compare({1: noop}), TypeError, "candidates"),
        (lambda: compare({"a": 5}, devices="cpu"), TypeError, "candidates"),
        (lambda: compare({"a": noop}, devices="cpu", timer="clock"), TypeError, "timer"),
        (lambda: timing.benchmark_timer(noop, devices="cpu", num_threads=-1), ValueError, "num_threads"),
        (lambda: timing.benchmark_timer(noop, devices="cpu", timer=None), TypeError, "timer"),
        (lambda: run_on_cpu_workers([], 1), TypeError, "tasks"),
        (lambda: run_on_cpu_workers(noop, 1), TypeError, "tasks"),
        (lambda: run_on_cpu_workers([noop, 3], 1), TypeError, r"tasks\[1\]"),
        (lambda: run_on_cpu_workers([noop], 0), ValueError, "workers"),
        (lambda: run_on_cpu_workers([noop], 1.0), TypeError, "workers"),
        (lambda: run_on_cpu_workers([noop], 2), ValueError, "workers"),
        (lambda: CPUWorkers(0), ValueError, "workers"),
        (lambda: CPUWorkers("2"), TypeError, "workers"),
        (lambda: CPUWorkers(1, threads_per_worker=0), ValueError, "threads_per_worker"),
        (lambda: format_seconds(-1.0), ValueError, "seconds"),
        (lambda: format_seconds("1"), TypeError, "seconds"),
        (lambda: format_seconds(float("inf")), ValueError, "seconds"),
    ],
)
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()
