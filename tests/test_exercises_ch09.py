"""Chapter 09's checks: per exercise, a catalogue of plausible wrong answers with the hint each gets,
and right answers written differently from the notebook's reference (which nbval runs there).

Exercise 1's check runs on the shared fake GPUs and their virtual clock: nothing here sleeps or
depends on the speed of the machine.
"""

from __future__ import annotations

import contextlib
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode

from utils.checks import outcome, rejection
from utils.exercises import ch09
from utils.exercises.ch09 import REASONS, REPORT, check_fixed_timer, check_masked_mean, check_report
from utils.timing import measure, synchronize


def cuda_devices(devices):
    return [d for d in devices if d.type == "cuda"]


# --- Exercise 1 · Fix this timing code --------------------------------------------------------------
# Right answers, written differently from the reference (which warms up, then uses utils.timing.synchronize).

def right_cuda_loops(fn, devices, clock=time.perf_counter):
    fn()  # warm-up
    for d in cuda_devices(devices):
        torch.cuda.synchronize(d)
    start = clock()
    fn()
    for d in cuda_devices(devices):
        torch.cuda.synchronize(d)
    return clock() - start


def right_with_measure(fn, devices, clock=time.perf_counter):
    return measure(fn, devices=devices, warmup=1, repeats=3, number=1, timer=clock).median


def warm_then_time(fn, wait, clock):
    """The skeleton of the answers below, right and wrong, that differ only in how they wait for the GPUs: a
    warm-up call, wait, then one call timed between two waits."""
    fn()
    wait()
    start = clock()
    fn()
    wait()
    return clock() - start


def right_every_visible_gpu(fn, devices, clock=time.perf_counter):
    """Synchronizing every GPU the process sees is more than needed, but correct."""
    def wait_all():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)

    return warm_then_time(fn, wait_all, clock)


def right_accelerator_api_median(fn, devices, clock=time.perf_counter):
    """torch.accelerator, three timed calls, the median."""
    gpus = [d for d in devices if d.type != "cpu"]

    def wait():
        for d in gpus:
            torch.accelerator.synchronize(d)

    fn()
    times = []
    for _ in range(3):
        wait()
        start = clock()
        fn()
        wait()
        times.append(clock() - start)
    return sorted(times)[1]


def right_average_of_ten(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    start = clock()
    for _ in range(10):
        fn()
    synchronize(devices)
    return (clock() - start) / 10


def right_device_context(fn, devices, clock=time.perf_counter):
    """Make each GPU current, then a bare synchronize: how torch.cuda.synchronize(d) does it itself."""
    def wait():
        for d in devices:
            if d.type == "cuda":
                with torch.cuda.device(d):
                    torch.cuda.synchronize()

    return warm_then_time(fn, wait, clock)


def right_set_device(fn, devices, clock=time.perf_counter):
    def wait():
        for d in cuda_devices(devices):
            torch.cuda.set_device(d)
            torch.cuda.synchronize()

    return warm_then_time(fn, wait, clock)


def right_accelerator_device_index(fn, devices, clock=time.perf_counter):
    def wait():
        for d in devices:
            if d.type != "cpu":
                with torch.accelerator.device_index(d.index):
                    torch.accelerator.synchronize()

    return warm_then_time(fn, wait, clock)


def right_current_streams(fn, devices, clock=time.perf_counter):
    def wait():  # fn's work goes to each device's current stream
        for d in cuda_devices(devices):
            torch.cuda.current_stream(d).synchronize()

    return warm_then_time(fn, wait, clock)


def right_accelerator_streams(fn, devices, clock=time.perf_counter):
    def wait():
        for d in devices:
            if d.type != "cpu":
                torch.accelerator.current_stream(d).synchronize()

    return warm_then_time(fn, wait, clock)


def right_events_behind_the_work(fn, devices, clock=time.perf_counter):
    """An event recorded behind each GPU's work, then waited for: the host is there once every GPU has passed it."""
    def wait():
        for d in cuda_devices(devices):
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(d))
            done.synchronize()

    return warm_then_time(fn, wait, clock)


def right_cuda_indices(fn, devices, clock=time.perf_counter):
    indices = [d.index for d in devices if d.type == "cuda"]  # each GPU's own index, wherever it is listed

    def wait():
        for i in indices:
            torch.cuda.synchronize(i)

    return warm_then_time(fn, wait, clock)


@pytest.mark.parametrize("answer", [right_cuda_loops, right_with_measure, right_every_visible_gpu,
                                    right_accelerator_api_median, right_average_of_ten, right_device_context,
                                    right_set_device, right_accelerator_device_index, right_current_streams,
                                    right_accelerator_streams, right_cuda_indices, right_events_behind_the_work])
def test_fixed_timer_accepts(answer):
    assert outcome(check_fixed_timer, answer) == ("passed", "")


# Wrong answers, the mistakes that published notes and first attempts make.

def naive(fn, devices, clock=time.perf_counter):  # the code the exercise asks to fix
    start = clock()
    fn()
    torch.cuda.synchronize()
    return clock() - start


def time_time_no_sync(fn, devices, clock=time.perf_counter):
    start = time.time()
    fn()
    return time.time() - start


def never_synchronises(fn, devices, clock=time.perf_counter):
    fn()
    start = clock()
    fn()
    return clock() - start


def sync_before_only(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    start = clock()
    fn()
    return clock() - start


def sync_after_only(fn, devices, clock=time.perf_counter):
    start = clock()
    fn()
    synchronize(devices)
    return clock() - start


def warm_up_without_sync_before(fn, devices, clock=time.perf_counter):
    fn()
    start = clock()
    fn()
    synchronize(devices)
    return clock() - start


def bare_sync_both_sides(fn, devices, clock=time.perf_counter):
    return warm_then_time(fn, torch.cuda.synchronize, clock)


def first_device_only(fn, devices, clock=time.perf_counter):
    return warm_then_time(fn, lambda: torch.cuda.synchronize(devices[0]), clock)


def two_hardcoded_gpus(fn, devices, clock=time.perf_counter):
    return warm_then_time(fn, lambda: synchronize(["cuda:0", "cuda:1"]), clock)


def bare_before_no_warm_up(fn, devices, clock=time.perf_counter):
    torch.cuda.synchronize()  # the current device, cuda:0, only
    start = clock()
    fn()
    synchronize(devices)
    return clock() - start


def bare_before_every_device_after(fn, devices, clock=time.perf_counter):
    fn()
    torch.cuda.synchronize()
    start = clock()
    fn()
    synchronize(devices)
    return clock() - start


def stops_the_clock_before_waiting(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    start = clock()
    fn()
    end = clock()
    synchronize(devices)
    return end - start


def starts_the_clock_after_fn(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    fn()
    start = clock()
    synchronize(devices)
    return clock() - start


def includes_the_warm_up(fn, devices, clock=time.perf_counter):
    synchronize(devices)
    start = clock()
    fn()
    synchronize(devices)
    return clock() - start


def crashes_on_the_cpu(fn, devices, clock=time.perf_counter):
    def wait():
        for d in devices:
            torch.cuda.synchronize(d)

    return warm_then_time(fn, wait, clock)


def device_context_with_the_cpu(fn, devices, clock=time.perf_counter):
    def wait():
        for d in devices:
            with torch.cuda.device(d):
                torch.cuda.synchronize()

    return warm_then_time(fn, wait, clock)


def selects_the_last_device_only(fn, devices, clock=time.perf_counter):
    """A bare synchronize waits for the current device, which is now the last one of devices."""
    torch.cuda.set_device(devices[-1])
    return bare_sync_both_sides(fn, devices, clock)


def ignores_the_clock(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    start = time.perf_counter()
    fn()
    synchronize(devices)
    return time.perf_counter() - start


def returns_milliseconds(fn, devices, clock=time.perf_counter):
    return right_cuda_loops(fn, devices, clock) * 1000


def returns_the_timing(fn, devices, clock=time.perf_counter):
    return measure(fn, devices=devices, warmup=1, repeats=3, number=1, timer=clock)


def sums_three_calls(fn, devices, clock=time.perf_counter):
    fn()
    synchronize(devices)
    start = clock()
    for _ in range(3):
        fn()
    synchronize(devices)
    return clock() - start


def bare_sync_always(fn, devices, clock=time.perf_counter):
    """Right on a GPU machine, but calls CUDA on a machine without one."""
    fn()
    torch.cuda.synchronize()
    for d in cuda_devices(devices):
        torch.cuda.synchronize(d)
    start = clock()
    fn()
    for d in cuda_devices(devices):
        torch.cuda.synchronize(d)
    return clock() - start


def current_stream_only(fn, devices, clock=time.perf_counter):
    return warm_then_time(fn, lambda: torch.cuda.current_stream().synchronize(), clock)


def streams_of_every_device(fn, devices, clock=time.perf_counter):  # the CPU has no CUDA stream
    def wait():
        for d in devices:
            torch.cuda.current_stream(d).synchronize()

    return warm_then_time(fn, wait, clock)


def positions_for_indices(fn, devices, clock=time.perf_counter):
    """enumerate gives each device's place in the list, not its CUDA index."""
    def wait():
        for i, d in enumerate(devices):
            if d.type == "cuda":
                torch.cuda.synchronize(i)

    return warm_then_time(fn, wait, clock)


def range_of_the_length(fn, devices, clock=time.perf_counter):
    def wait():
        if torch.cuda.is_available():
            for i in range(len(devices)):
                torch.cuda.synchronize(i)

    return warm_then_time(fn, wait, clock)


def skips_the_cpu_only_when_first(fn, devices, clock=time.perf_counter):
    gpus = devices[1:] if devices[0].type == "cpu" else devices

    def wait():
        for d in gpus:
            torch.cuda.synchronize(d)

    return warm_then_time(fn, wait, clock)


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (naive, "after fn it waited for cuda:0 only. torch.cuda.synchronize() without an argument"),
        (time_time_no_sync, "it never waits for a device, so the clock measured how fast Python launched"),
        (never_synchronises, "it never waits for a device"),
        (sync_before_only, "it does not wait after fn, so the clock stopped when the work was launched"),
        (sync_after_only, "200 ms of work queued on cuda:0 before the call were billed to fn"),
        (warm_up_without_sync_before, "the work of the call before (a warm-up) was still queued"),
        (bare_sync_both_sides, "after fn it waited for cuda:0 only"),
        (first_device_only, "after fn it waited for cuda:2 but not for cuda:0"),
        (two_hardcoded_gpus, "after fn it waited for cuda:0, cuda:1 but not for cuda:2"),
        (bare_before_every_device_after, "the work of the call before (a warm-up) was still queued"),
        (bare_before_no_warm_up, "200 ms of work queued on cuda:1 before the call were billed to fn. Synchronize every "
                                 "device in devices before starting the clock (it waited for cuda:0 only, as a bare "
                                 "torch.cuda.synchronize() does)."),
        (stops_the_clock_before_waiting, "read the clock after synchronizing, not before"),
        (starts_the_clock_after_fn, "fn spends 3 ms on the CPU, and with devices=[cpu] the time returned is 0.0"),
        (includes_the_warm_up, "it includes the warm-up. Call fn once before starting the clock"),
        (crashes_on_the_cpu, "skip the CPU"),
        (device_context_with_the_cpu, "skip the CPU"),
        (selects_the_last_device_only, "after fn it waited for cuda:1 but not for cuda:0"),
        (ignores_the_clock, "it does not read the time with clock()"),
        (returns_milliseconds, "return seconds, not milliseconds"),
        (returns_the_timing, "a Timing: return its .median"),
        (sums_three_calls, "return the time of one call (divide by the number of calls you timed)"),
        (bare_sync_always, "on a machine without a GPU"),
        (current_stream_only, "after fn it waited for cuda:0 only"),
        (streams_of_every_device, "skip the CPU"),
        (positions_for_indices, "waited for cuda:0, which devices [cuda:2, cpu] does not hold, and not for cuda:2"),
        (range_of_the_length, "its place in the list (enumerate(devices), range(len(devices))) is not its CUDA index"),
        (skips_the_cpu_only_when_first, "skip the CPU"),
    ],
)
def test_fixed_timer_rejects(wrong, hint):
    verdict, message = outcome(check_fixed_timer, wrong)
    assert verdict == "failed" and hint in message, message


def test_every_device_is_tried_in_every_role():
    """An answer that forgets one particular device, before or after fn, is caught whichever it is."""
    for k in range(3):
        def forgets_one(fn, devices, clock=time.perf_counter, skip=f"cuda:{k}"):
            fn()
            synchronize([d for d in devices if str(d) != skip])
            start = clock()
            fn()
            synchronize([d for d in devices if str(d) != skip])
            return clock() - start

        verdict, message = outcome(check_fixed_timer, forgets_one)
        assert verdict == "failed" and f"but not for cuda:{k}" in message, message

        def forgets_one_before(fn, devices, clock=time.perf_counter, skip=f"cuda:{k}"):
            fn()
            synchronize([d for d in devices if str(d) != skip])
            start = clock()
            fn()
            synchronize(devices)
            return clock() - start

        verdict, message = outcome(check_fixed_timer, forgets_one_before)
        assert verdict == "failed", message
        assert f"queued on cuda:{k} before the call" in message or "(a warm-up) was still queued" in message


def asks_for_the_current_device(fn, devices, clock=time.perf_counter):
    torch.cuda.current_device()  # a CUDA call, but not a synchronize: the check does not guess a cause
    return right_cuda_loops(fn, devices, clock)


EX1 = "Exercise 1 · Fix this timing code: not yet. "
NO_GPU = "calling time_on_devices(fn, [cpu], clock) on a machine without a GPU raised RuntimeError: "


def test_fixed_timer_on_a_machine_without_a_gpu_names_the_cause_it_saw():
    assert outcome(check_fixed_timer, bare_sync_always) == ("failed", EX1 + NO_GPU + (
        "synchronize called, but this (fake) machine has no cuda device. Likely cause: it called synchronize on a "
        "machine without a GPU: with devices=[cpu] there is nothing to wait for; synchronize only the CUDA devices "
        "in devices."))
    assert outcome(check_fixed_timer, asks_for_the_current_device) == ("failed", EX1 + NO_GPU + (
        "current device asked for, but this (fake) machine has no cuda device."))


def test_fixed_timer_stub_and_crash():
    def stub(fn, devices, clock=time.perf_counter):
        raise NotImplementedError("your code here")

    assert outcome(check_fixed_timer, stub) == ("not attempted", "")

    def typo(fn, devices, clock=time.perf_counter):
        return clock() - strat  # noqa: F821

    verdict, message = outcome(check_fixed_timer, typo)
    assert verdict == "failed" and "raised NameError" in message
    assert "skip the CPU" not in message  # that hint only where a CUDA call was handed the CPU


def test_the_fake_gpus_leave_torch_as_they_were():
    def patched():
        return (torch.cuda.synchronize, torch.accelerator.synchronize, torch.cuda.is_available,
                torch.cuda.device_count, torch.cuda.set_device, torch.cuda.current_device, torch.cuda._exchange_device,
                torch.cuda._maybe_exchange_device, torch.cuda._get_device_index, torch.accelerator._get_device_index,
                torch._C._accelerator_exchangeDevice, torch._C._accelerator_getDeviceIndex)

    before = patched()
    assert outcome(check_fixed_timer, naive)[0] == "failed"
    assert outcome(check_fixed_timer, right_cuda_loops)[0] == "passed"
    assert outcome(check_fixed_timer, right_set_device)[0] == "passed"
    assert outcome(check_fixed_timer, device_context_with_the_cpu)[0] == "failed"
    assert patched() == before


# --- Exercise 2 · Which rows can you trust? ---------------------------------------------------------

TRUTH = {"A": "warm-up", "B": "launch", "C": "ok", "D": "current-device", "E": "ok", "F": "earlier-work"}


def with_changes(should_be=30.0, **changes):
    return lambda: ({**TRUTH, **changes}, should_be)


@pytest.mark.parametrize(
    "answer",
    [
        lambda: (dict(reversed(list(TRUTH.items()))), 30),  # another order, an int
        lambda: ({row: TRUTH[row] for row in "FEDCBA"}, 31.5),
        lambda: (dict(TRUTH), REPORT["C"][1] * 3 / 4),  # three chunks of the one-GPU step
    ],
)
def test_report_accepts(answer):
    assert outcome(check_report, answer) == ("passed", "")


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (with_changes(D="ok"), "Which device does torch.cuda.synchronize() without an argument wait for?"),
        (with_changes(D="launch"), "D did wait for something"),
        (with_changes(D="warm-up"), "a one-time cost would make D larger"),
        (with_changes(D="earlier-work"), "earlier work would make D larger"),
        (with_changes(A="ok"), "A is the first call ever"),
        (with_changes(A="current-device"), "what makes it slow: the first call ever"),
        (with_changes(B="ok"), "B never synchronized"),
        (with_changes(C="warm-up"), "C follows every rule"),
        (with_changes(E="current-device"), "E is consistent"),
        (with_changes(F="ok"), "what was still queued on cuda:1 when the clock started?"),
        (with_changes(F="current-device"), "the extra 50 ms come from before it"),
        (with_changes(D="impossible-speed-up"), "is not one of the REASONS"),
        (with_changes(A=["warm-up"]), "row A: give one key of REASONS, a string such as 'ok', not a list"),
        (with_changes(should_be=40.3), "the step ends when the busier one finishes"),
        (with_changes(should_be=20.4), "the step ends when the busier one finishes"),
        (with_changes(should_be=10.2), "the step ends when the busier one finishes"),
        (with_changes(should_be="30"), "should_be_ms must be a number"),
        (lambda: ({"D": "current-device"}, 30.0), "give a verdict for every row"),
        (lambda: ("D", "current-device", 30.0), "return a tuple (verdicts, should_be_ms)"),
        (lambda: ([("D", "current-device")], 30.0), "verdicts must be a dict"),
    ],
)
def test_report_rejects(answer, hint):
    verdict, message = outcome(check_report, answer)
    assert verdict == "failed" and hint in message, message


def test_report_is_consistent_with_its_story():
    chunk_ms = REPORT["C"][1] / 4
    assert REPORT["E"][1] == pytest.approx(2 * chunk_ms, rel=0.05)
    assert REPORT["D"][1] == pytest.approx(chunk_ms, rel=0.05)  # what cuda:0 alone needs
    assert REPORT["F"][1] == pytest.approx(50 + 2 * chunk_ms, rel=0.05)  # the earlier copy, then the step
    assert REPORT["B"][1] < REPORT["D"][1] / 10
    assert set(TRUTH.values()) <= set(REASONS) and set(TRUTH) == set(REPORT)


def test_report_has_one_synchronised_row_below_its_step():
    """The task asks about the one row that synchronized yet reports less than its step takes: D, not B."""
    busiest_gpu_chunks = {"A": 4, "B": 4, "C": 4, "D": 3, "E": 2, "F": 2}  # the step's time, in 10 ms chunks
    below = [row for row, (how, ms) in REPORT.items() if ms < 10 * busiest_gpu_chunks[row]]
    assert below == ["B", "D"] and "no synchronization" in REPORT["B"][0]
    assert "synchronize() before and after" in REPORT["D"][0]


# --- Exercise 3 · A masked mean without a hidden synchronization --------------------------------------

def right_clamped(x, mask):
    return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1)


def right_nan_to_num(x, mask):
    return torch.nan_to_num((x * mask).sum(-1) / mask.sum(-1))


def right_masked_fill(x, mask):
    return x.masked_fill(~mask, 0).sum(-1).div(mask.sum(-1).clamp(min=1))


def right_row_loop_without_indexing(x, mask):
    return torch.stack([torch.where(m, r, 0.0).sum() / m.sum().clamp(min=1) for r, m in zip(x, mask, strict=True)])


@pytest.mark.parametrize("answer", [right_clamped, right_nan_to_num, right_masked_fill,
                                    right_row_loop_without_indexing])
def test_masked_mean_accepts(answer):
    assert outcome(check_masked_mean, answer) == ("passed", "")
    assert outcome(check_masked_mean, answer, torch.device("cpu")) == ("passed", "")


def boolean_index_mean(x, mask):
    return x[mask].mean()


def row_loop_with_indexing(x, mask):
    return torch.stack([r[m].mean() for r, m in zip(x, mask, strict=True)])


def row_loop_with_indexing_nan_fixed(x, mask):
    return torch.stack([r[m].mean() for r, m in zip(x, mask, strict=True)]).nan_to_num()


def divides_by_zero(x, mask):
    return (x * mask).sum(-1) / mask.sum(-1)


def divides_by_the_length(x, mask):
    return (x * mask).mean(-1)


def checks_for_empty_rows_with_if(x, mask):
    counts = mask.sum(-1)
    if (counts == 0).any():  # bool() of a tensor: the host needs the value
        counts = counts.clamp(min=1)
    return (x * mask).sum(-1) / counts


def with_item(x, mask):
    return torch.stack([(r * m).sum() / max(m.sum().item(), 1) for r, m in zip(x, mask, strict=True)])


def with_masked_select(x, mask):
    return torch.stack([torch.masked_select(r, m).sum() / m.sum().clamp(min=1) for r, m in zip(x, mask, strict=True)])


def with_nonzero(x, mask):
    out = []
    for r, m in zip(x, mask, strict=True):
        idx = torch.nonzero(m).flatten()
        out.append(r[idx].sum() / m.sum().clamp(min=1))
    return torch.stack(out)


def output_on_the_default_device(x, mask):
    out = torch.zeros(x.shape[0])
    out += (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return out


def moves_to_the_cpu(x, mask):
    return ((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).cpu()


def one_mean_for_all(x, mask):
    return torch.where(mask, x, 0).sum() / mask.sum().clamp(min=1)


def in_place(x, mask):
    return x.masked_fill_(~mask, 0).sum(-1) / mask.sum(-1).clamp(min=1)


def integer_division(x, mask):
    return (x * mask).sum(-1) // mask.sum(-1).clamp(min=1)


def returns_a_list(x, mask):
    return ((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).tolist()


def keepdim_then_squeeze(x, mask):
    """Right for a batch of several rows; squeeze() also drops the batch dim of a batch of one."""
    return (torch.where(mask, x, 0).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)).squeeze()


def four_rows_written_in(x, mask):
    """The example's batch size as a literal."""
    out = x.new_zeros(4)
    return out + torch.where(mask, x, 0).sum(-1) / mask.sum(-1).clamp(min=1)


def five_columns_written_in(x, mask):
    """Counts the True entries as 5 minus the False ones: the example's row length as a literal."""
    return torch.where(mask, x, 0).sum(-1) / (5 - (~mask).sum(-1)).clamp(min=1)


def counts_nonzero_values(x, mask):
    kept = torch.where(mask, x, 0)
    return kept.sum(-1) / (kept != 0).sum(-1).clamp(min=1)


def inverts_the_mask_in_place(x, mask):
    counts = mask.sum(-1).clamp(min=1)
    return x.masked_fill(mask.logical_not_(), 0).sum(-1) / counts


HOST = "which needs the values on the host. On a GPU the host then waits for the device: a hidden synchronization. " \
       "Keep every shape fixed and every value on the device: torch.where(mask, x, 0) or x * mask, then sums."
EX3 = "Exercise 3 · A masked mean without a hidden synchronization: not yet. "
@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (boolean_index_mean, "x has shape (4, 5) and the result (): one number for the whole batch: reduce over "
                             "the last dim only"),
        (row_loop_with_indexing, "row 1 of the (4, 5) batch has no True entry and its mean came out nan (0 / 0): "
                                 "divide by the count clamped to at least 1, or use torch.where, so such a row "
                                 "gives 0"),
        (row_loop_with_indexing_nan_fixed, f"it calls x[mask] (boolean mask), {HOST}"),
        (divides_by_zero, "row 1 of the (4, 5) batch has no True entry and its mean came out nan (0 / 0): divide "
                          "by the count clamped to at least 1, or use torch.where, so such a row gives 0"),
        (divides_by_the_length, "in the (4, 5) batch it divides every row by its length (5): divide by the number "
                                "of True entries in the row instead"),
        (checks_for_empty_rows_with_if, f"it calls bool(tensor) / if tensor, {HOST}"),
        (with_item, f"it calls .item(), {HOST}"),
        (with_masked_select, f"it calls torch.masked_select, {HOST}"),
        (with_nonzero, f"it calls torch.nonzero, {HOST}"),
        (output_on_the_default_device, "it creates a tensor with torch.zeros and no device=: that lands on the "
                                       "default device (the CPU), not on x's device. Pass device=x.device, or build "
                                       "it from x (torch.zeros_like, x.new_zeros)"),
        (moves_to_the_cpu, f"it calls .cpu() / .to('cpu'), {HOST}"),
        (one_mean_for_all, "x has shape (4, 5) and the result (): one number for the whole batch: reduce over the "
                           "last dim only"),
        (in_place, "masked_mean changed x in place: compute a new tensor and leave the inputs as they were"),
        (inverts_the_mask_in_place, "masked_mean changed mask in place: compute a new tensor and leave the inputs "
                                    "as they were"),
        (integer_division, "row 2 of the (4, 5) batch should have mean 0.1, got 0"),
        (returns_a_list, "return a tensor, got list"),
        (keepdim_then_squeeze, "x has shape (1, 3) and the result (): the batch dim is gone: a batch of one row "
                               "still needs a result of shape (1,)"),
        (four_rows_written_in, "x has shape (1, 3) and the result (4,): one mean per row, shape (1,)"),
        (five_columns_written_in, "row 0 of the (1, 3) batch should have mean 2.25, got 1.125"),
        (counts_nonzero_values, "in the (1, 3) batch it divides by the number of nonzero values, but a True entry "
                                "may hold 0: count the True entries of mask, mask.sum(-1)"),
    ],
)
def test_masked_mean_rejects(wrong, hint):
    assert outcome(check_masked_mean, wrong) == ("failed", EX3 + hint)


def test_masked_mean_hints_quote_no_torch_message():
    """The hints a notebook prints name the exception type, not torch's wording (it changes between releases)."""
    for wrong in (row_loop_with_indexing_nan_fixed, with_item, with_nonzero):
        message = rejection(check_masked_mean, wrong)
        assert "Error" not in message, message


def test_masked_mean_stub():
    def stub(x, mask):
        raise NotImplementedError("your code here")

    assert outcome(check_masked_mean, stub) == ("not attempted", "")


# On a CUDA device the check also runs the answer under torch.cuda.set_sync_debug_mode("error"). Played here on the
# CPU: the inputs stay on the CPU, and a stand-in for the debug mode raises as torch does on the calls it covers.

class FakeSyncErrors(TorchFunctionMode):
    """Raises torch's sync-debug error on calls that synchronize on a GPU; `cumsum` stands for one that HostReads
    does not list (the check cannot know every operator)."""

    SYNCS = frozenset({"item", "nonzero", "__bool__", "masked_select", "cumsum"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        bool_index = name == "__getitem__" and isinstance(args[1], torch.Tensor) and args[1].dtype == torch.bool
        if name in self.SYNCS or bool_index:
            raise RuntimeError("called a synchronizing CUDA operation")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def fake_cuda_check(monkeypatch):
    @contextlib.contextmanager
    def sync_errors(device):
        assert device.type == "cuda"
        with FakeSyncErrors():
            yield

    monkeypatch.setattr(ch09, "_place", lambda tensor, device: tensor.clone())
    monkeypatch.setattr(ch09, "_sync_errors", sync_errors)


def counts_with_cumsum(x, mask):
    return torch.where(mask, x, 0).sum(-1) / mask.long().cumsum(-1)[..., -1].clamp(min=1)


WRONG_MASKED_MEANS = [boolean_index_mean, row_loop_with_indexing, row_loop_with_indexing_nan_fixed, divides_by_zero,
                      divides_by_the_length, checks_for_empty_rows_with_if, with_item, with_masked_select, with_nonzero,
                      output_on_the_default_device, moves_to_the_cpu, one_mean_for_all, in_place,
                      inverts_the_mask_in_place, integer_division, returns_a_list, keepdim_then_squeeze,
                      four_rows_written_in, five_columns_written_in, counts_nonzero_values]


def test_masked_mean_verdicts_and_hints_are_the_same_on_cpu_and_cuda(fake_cuda_check):
    """The notebook prints the hint for the row loop with boolean indexing in a compared cell: a CUDA runner must
    print the same words as the CPU that recorded it."""
    on_cpu = [outcome(check_masked_mean, wrong, torch.device("cpu")) for wrong in WRONG_MASKED_MEANS]
    on_cuda = [outcome(check_masked_mean, wrong, torch.device("cuda")) for wrong in WRONG_MASKED_MEANS]
    assert on_cpu == on_cuda and all(verdict == "failed" for verdict, _ in on_cuda)
    assert outcome(check_masked_mean, row_loop_with_indexing_nan_fixed, "cuda") == (
        "failed", EX3 + f"it calls x[mask] (boolean mask), {HOST}")
    for right in (right_clamped, right_nan_to_num, right_masked_fill, right_row_loop_without_indexing):
        assert outcome(check_masked_mean, right, "cuda") == ("passed", "")


def test_masked_mean_on_cuda_names_a_synchronization_that_host_reads_does_not_list(fake_cuda_check):
    assert outcome(check_masked_mean, counts_with_cumsum, "cpu") == ("passed", "")  # nothing to see on a CPU
    assert outcome(check_masked_mean, counts_with_cumsum, "cuda") == ("failed", EX3 + (
        "on the GPU, under torch.cuda.set_sync_debug_mode('error'), a call it makes synchronized with the host. "
        "HostReads listed none of its calls, so which one it was is unknown here; the error said: called a "
        f"synchronizing CUDA operation. That call {HOST.removeprefix('which ')}"))
