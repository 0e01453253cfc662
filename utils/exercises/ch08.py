"""Checks for chapter 08 · Timing on several devices.

Exercise 1 runs your timing function against two *simulated* GPUs, so it works on any machine: while
the check runs, ``torch.cuda.synchronize`` (and ``torch.accelerator.synchronize``) wait for a fake
device's queue, and the "kernels" are sleeps on a background thread per device, finishing after the
launching call has returned, exactly as real GPU work does.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from utils.checks import exercise, expect

__all__ = ["REASONS", "REPORT", "check_fixed_timer", "check_which_number"]


# --- Exercise 1 · fix this timing code ------------------------------------------------------------

class _SimulatedGPUs:
    """Two fake CUDA devices: one FIFO queue of work each, like the default stream of a real GPU."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.queues = [ThreadPoolExecutor(max_workers=1) for _ in range(count)]
        self.pending: list[list[Future]] = [[] for _ in range(count)]
        self.synced: list[int] = []

    def launch(self, index: int, seconds: float) -> None:
        """Queue ``seconds`` of work on device ``index`` and return at once."""
        self.pending[index].append(self.queues[index].submit(time.sleep, seconds))

    def _index(self, device: object) -> int:
        if device is None:
            return 0  # the current device
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            dev = torch.device(device)  # type: ignore[arg-type]
            if dev.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {dev}")
            index = 0 if dev.index is None else dev.index
        if not 0 <= index < self.count:
            raise RuntimeError(f"invalid device ordinal {index}")
        return index

    def synchronize(self, device: object = None) -> None:
        index = self._index(device)
        self.synced.append(index)
        for job in self.pending[index]:
            job.result()
        self.pending[index] = []

    def drain(self) -> None:
        for index in range(self.count):
            for job in self.pending[index]:
                job.result()
            self.pending[index] = []

    def close(self) -> None:
        self.drain()
        for queue in self.queues:
            queue.shutdown(wait=True)


@contextlib.contextmanager
def _simulated_gpus() -> Iterator[_SimulatedGPUs]:
    gpus = _SimulatedGPUs()
    patches = {
        (torch.cuda, "synchronize"): gpus.synchronize,
        (torch.accelerator, "synchronize"): gpus.synchronize,
        (torch.cuda, "current_device"): lambda: 0,
        (torch.cuda, "device_count"): lambda: gpus.count,
        (torch.cuda, "is_available"): lambda: True,
    }
    saved = {key: getattr(*key) for key in patches}
    try:
        for (module, name), fake in patches.items():
            setattr(module, name, fake)
        yield gpus
    finally:
        for (module, name), original in saved.items():
            setattr(module, name, original)
        gpus.close()


CUDA0, CUDA1, CPU = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")


def _seconds(result: object) -> float:
    expect(
        isinstance(result, int | float) and not isinstance(result, bool) and math.isfinite(result),
        f"time_on_devices must return the elapsed seconds as a float, got {type(result).__name__}",
    )
    return float(result)  # type: ignore[arg-type]


@exercise("Exercise 1 · Fix this timing code")
def check_fixed_timer(time_on_devices: Callable[[Callable[[], object], list[torch.device]], float]) -> None:
    """``time_on_devices(fn, devices)`` returns the seconds one call of ``fn`` takes on ``devices``."""
    with _simulated_gpus() as gpus:
        # 1. Uneven work: 2 ms on cuda:0, 60 ms on cuda:1; the call itself returns at once.
        def step() -> None:
            gpus.launch(0, 0.002)
            gpus.launch(1, 0.060)

        took = _seconds(time_on_devices(step, [CUDA0, CUDA1]))
        waited_for = set(gpus.synced)
        gpus.drain()
        expect(
            waited_for != set(),
            "it never synchronised, so the clock measured the launch, not the work. Synchronise before "
            "reading the clock.",
        )
        expect(
            took >= 0.055,
            "cuda:1 had 60 ms of work, and the time returned is shorter. torch.cuda.synchronize() without an "
            "argument waits for the current device (cuda:0) only: call torch.cuda.synchronize(d) for every "
            "CUDA device d in devices.",
        )
        expect(took < 0.5, "far too long for 60 ms of work: return seconds, not milliseconds")

        # 2. Work queued *before* the measurement must not be billed to fn.
        gpus.synced.clear()
        gpus.launch(1, 0.100)
        took = _seconds(time_on_devices(lambda: gpus.launch(1, 0.010), [CUDA0, CUDA1]))
        gpus.drain()
        expect(
            took < 0.080,
            "fn queues 10 ms of work, but the time returned is far longer: 100 ms of earlier work was still "
            "queued on cuda:1 and got billed to fn. Synchronise every device before starting the clock too.",
        )
        expect(took >= 0.009, "the time returned is shorter than the 10 ms of work fn queued: wait for it to finish")

        # 3. The CPU is among the devices: there is nothing to wait for, and CUDA cannot be asked to.
        try:
            took = _seconds(time_on_devices(lambda: gpus.launch(1, 0.020), [CPU, CUDA1]))
        except (ValueError, RuntimeError, AssertionError) as err:
            expect(False, f"with devices=[cpu, cuda:1] it raised {type(err).__name__}: {err}. CPU work is finished "
                          "when the call returns: skip devices whose type is not 'cuda'.")
        gpus.drain()
        expect(took >= 0.018, "with devices=[cpu, cuda:1] the time returned is shorter than the 20 ms of work "
                              "fn queued on cuda:1")


# --- Exercise 2 · which number is wrong, and why ---------------------------------------------------

#: A benchmark report from a machine with two GPUs. One "step" is four equal chunks of matrix products,
#: 10 ms each on one of these GPUs. Each row: what was measured → milliseconds.
REPORT: dict[str, tuple[str, float]] = {
    "A": ("first call ever, all 4 chunks on cuda:0, synchronised", 412.0),
    "B": ("all 4 chunks on cuda:0, time.perf_counter() around the launches, no synchronisation", 0.21),
    "C": ("all 4 chunks on cuda:0, median of 20 synchronised runs after warm-up", 40.3),
    "D": ("1 chunk on cuda:0 and 3 chunks on cuda:1, one torch.cuda.synchronize() at the end", 10.2),
    "E": ("2 chunks on cuda:0 and 2 on cuda:1, each device synchronised, median after warm-up", 20.4),
}

#: The possible explanations, by key.
REASONS: dict[str, str] = {
    "launch": "it never waits for the GPU, so it measures the kernel launches, not the work",
    "current-device": "it waits for the current device only, so the other GPU's work is not counted",
    "warm-up": "it includes one-time start-up costs (CUDA context, cuBLAS handles, memory pool)",
    "impossible-speed-up": "two GPUs cannot be more than twice as fast as one",
}


@exercise("Exercise 2 · Which number is wrong, and why")
def check_which_number(answer: Callable[[], tuple[str, str, float]]) -> None:
    """``answer()`` returns ``(row, reason, should_be_ms)``: the row whose number does not measure what
    its label says, the key in ``REASONS`` that explains it, and the milliseconds it should show."""
    result = answer()
    expect(
        isinstance(result, tuple) and len(result) == 3,
        "return a tuple (row, reason, should_be_ms), e.g. ('B', 'launch', 12.0)",
    )
    row, reason, should_be = result
    expect(row in REPORT, f"row must be one of {sorted(REPORT)}, got {row!r}")
    expect(reason in REASONS, f"reason must be one of {sorted(REASONS)}, got {reason!r}")
    expect(
        row != "A",
        "A is large, but its label says *first call ever*: start-up costs are exactly what it measures. "
        "Look for a number smaller than what its label promises.",
    )
    expect(row != "B", "B's label says *no synchronisation*: 0.2 ms of launches is what it claims to measure.")
    expect(
        row not in ("C", "E"),
        f"{row} is consistent: 4 chunks of 10 ms take 40 ms on one GPU, and 2 + 2 chunks on two GPUs 20 ms.",
    )
    expect(
        reason != "launch",
        "D is 50 times the launch time of row B, so it did wait for something. For what, and for what not?",
    )
    expect(
        reason != "impossible-speed-up",
        "that is how you can tell D is wrong (C / D is about 4 from two GPUs), but it is the symptom, not the "
        "cause: which devices does a bare torch.cuda.synchronize() wait for?",
    )
    expect(
        reason == "current-device",
        f"{REASONS[reason]!r} does not explain D: a one-time cost would make it larger, not smaller.",
    )
    expect(
        isinstance(should_be, int | float) and not isinstance(should_be, bool),
        f"should_be_ms must be a number of milliseconds, got {type(should_be).__name__}",
    )
    expect(
        27.0 <= should_be <= 34.0,
        f"{should_be} ms is not what D should show: both GPUs work at the same time, so the step ends when "
        "the busier one finishes. How long does cuda:1 need for its chunks?",
    )
