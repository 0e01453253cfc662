"""Chapter 08's checks accept the reference answers and reject the plausible wrong ones."""

import time

import pytest
import torch

from utils import ExerciseFailed
from utils.exercises.ch08 import REASONS, REPORT, check_fixed_timer, check_which_number
from utils.timing import synchronize

# --- Exercise 1 -----------------------------------------------------------------------------------


def time_on_devices(fn, devices):
    """The reference: wait for every device before starting and before stopping the clock."""
    cuda = [d for d in devices if d.type == "cuda"]
    for d in cuda:
        torch.cuda.synchronize(d)
    start = time.perf_counter()
    fn()
    for d in cuda:
        torch.cuda.synchronize(d)
    return time.perf_counter() - start


def with_the_helper(fn, devices):
    synchronize(devices)
    start = time.perf_counter()
    fn()
    synchronize(devices)
    return time.perf_counter() - start


def with_measure(fn, devices):
    from utils.timing import measure

    return measure(fn, devices=devices, warmup=1, repeats=3, number=1).median


def every_visible_gpu(fn, devices):
    """Synchronising every visible GPU is slower than needed, but correct."""
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)
    start = time.perf_counter()
    fn()
    for i in range(torch.cuda.device_count()):
        torch.cuda.synchronize(i)
    return time.perf_counter() - start


def naive(fn, devices):  # the code the exercise asks to fix
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def never_synchronises(fn, devices):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def only_after(fn, devices):
    start = time.perf_counter()
    fn()
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)
    return time.perf_counter() - start


def first_device_only(fn, devices):
    torch.cuda.synchronize(devices[0])
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize(devices[0])
    return time.perf_counter() - start


def crashes_on_the_cpu(fn, devices):
    for d in devices:
        torch.cuda.synchronize(d)
    start = time.perf_counter()
    fn()
    for d in devices:
        torch.cuda.synchronize(d)
    return time.perf_counter() - start


def returns_milliseconds(fn, devices):
    return time_on_devices(fn, devices) * 1000


def returns_a_string(fn, devices):
    return f"{time_on_devices(fn, devices):.3f} s"


@pytest.mark.parametrize("answer", [time_on_devices, with_the_helper, with_measure, every_visible_gpu])
def test_fixed_timer_accepts(answer, capsys):
    check_fixed_timer(answer)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (naive, "current device"),
        (never_synchronises, "launch"),
        (only_after, "before starting the clock"),
        (first_device_only, "current device"),
        (crashes_on_the_cpu, "skip devices"),
        (returns_milliseconds, "not milliseconds"),
        (returns_a_string, "float"),
    ],
)
def test_fixed_timer_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_fixed_timer(wrong)


def test_the_simulation_leaves_torch_as_it_was():
    before = (torch.cuda.synchronize, torch.accelerator.synchronize, torch.cuda.is_available, torch.cuda.device_count)
    with pytest.raises(ExerciseFailed):
        check_fixed_timer(naive)
    check_fixed_timer(time_on_devices)
    after = (torch.cuda.synchronize, torch.accelerator.synchronize, torch.cuda.is_available, torch.cuda.device_count)
    assert before == after


def test_not_attempted(capsys):
    def stub(fn, devices):
        raise NotImplementedError

    check_fixed_timer(stub)
    assert "not attempted" in capsys.readouterr().out


# --- Exercise 2 -----------------------------------------------------------------------------------


def test_which_number_accepts_the_reference(capsys):
    check_which_number(lambda: ("D", "current-device", 30.0))
    check_which_number(lambda: ("D", "current-device", 31))
    assert capsys.readouterr().out.count("passed") == 2


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        (("A", "warm-up", 40.3), "first call"),
        (("B", "launch", 40.3), "no synchronisation"),
        (("C", "warm-up", 40.0), "consistent"),
        (("E", "impossible-speed-up", 40.0), "consistent"),
        (("D", "launch", 30.0), "did wait"),
        (("D", "impossible-speed-up", 30.0), "symptom"),
        (("D", "warm-up", 30.0), "larger"),
        (("D", "current-device", 20.4), "busier"),
        (("D", "current-device", 40.3), "busier"),
        (("D", "current-device", 10.2), "busier"),
        (("D", "current-device", "30"), "number"),
        (("F", "launch", 1.0), "row"),
        (("D", "slow", 30.0), "reason"),
        (["D", "current-device", 30.0], "tuple"),
    ],
)
def test_which_number_rejects(answer, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_which_number(lambda: answer)


def test_report_is_consistent_with_the_story():
    chunk_ms = REPORT["C"][1] / 4
    assert REPORT["E"][1] == pytest.approx(2 * chunk_ms, rel=0.05)
    assert REPORT["D"][1] == pytest.approx(chunk_ms, rel=0.05)  # what cuda:0 alone needs
    assert REPORT["B"][1] < REPORT["D"][1] / 10
    assert set(REASONS) == {"launch", "current-device", "warm-up", "impossible-speed-up"}
