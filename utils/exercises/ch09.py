"""Checks for chapter 09 · Data-parallel training with torchrun.

Both checks compare a learner's answer with what PyTorch itself does: a ``DistributedSampler`` built for
each rank (no process group is needed for that: ``num_replicas`` and ``rank`` are passed explicitly) and
the ``DataLoader`` over it.
"""

from __future__ import annotations

from collections.abc import Callable

from utils._validate import check_int
from utils.checks import exercise, expect

__all__ = ["check_ddp_numbers", "check_epoch_shards", "true_ddp_numbers", "true_epoch_shards"]


def true_ddp_numbers(n_samples: int, world_size: int, batch_size: int) -> tuple[int, int]:
    """``(global_batch, steps_per_epoch)`` of a run, measured on a real sampler and loader.

    Every process uses ``DistributedSampler(..., drop_last=False)`` and
    ``DataLoader(batch_size=batch_size, drop_last=False)``; one step is one batch in every process.
    """
    from torch.utils.data import DataLoader, DistributedSampler

    n_samples = check_int(n_samples, "n_samples", 1)
    world_size = check_int(world_size, "world_size", 1)
    batch_size = check_int(batch_size, "batch_size", 1)
    data = range(n_samples)
    steps = {
        len(DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data, world_size, rank)))
        for rank in range(world_size)
    }
    if len(steps) != 1:  # the sampler pads, so every rank takes the same number of steps
        raise AssertionError(f"ranks disagree on the number of steps: {steps}")
    return world_size * batch_size, steps.pop()


def true_epoch_shards(n_samples: int, world_size: int, rank: int, epochs: int, seed: int) -> list[list[int]]:
    """The indices ``rank`` sees in epochs ``0 .. epochs-1`` of a correctly written training loop."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    shards = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


# Sizes where the plausible shortcuts give a wrong number: uneven shards, a last partial batch, one process.
_NUMBER_CASES = [(10_000, 4, 32), (64, 2, 8), (64, 1, 16), (100, 4, 8), (10, 4, 2), (7, 2, 4), (5, 8, 1)]


@exercise("Exercise 1 · The numbers of a DDP run")
def check_ddp_numbers(ddp_numbers: Callable[[int, int, int], tuple[int, int]]) -> None:
    """``ddp_numbers(n_samples, world_size, batch_size)`` returns ``(global_batch, steps_per_epoch)``."""
    for n, world, batch in _NUMBER_CASES:
        got = ddp_numbers(n, world, batch)
        expect(
            isinstance(got, tuple) and len(got) == 2 and all(isinstance(v, int) for v in got),
            f"return a tuple of two ints (global_batch, steps_per_epoch); got {got!r}",
        )
        want_batch, want_steps = true_ddp_numbers(n, world, batch)
        expect(
            got[0] == want_batch,
            f"{world} processes with --batch-size {batch}: one optimizer step averages the gradients of "
            f"{want_batch} samples, not {got[0]}. --batch-size is per process.",
        )
        expect(
            got[1] == want_steps,
            f"{n} samples, {world} processes, batch {batch}: each process gets ceil({n}/{world}) samples "
            f"(the sampler pads the last shard) and a last partial batch still counts as a step, so "
            f"{want_steps} steps per epoch, not {got[1]}",
        )


def _shards_of(answer: Callable[..., list[list[int]]], n: int, world: int, epochs: int, seed: int):
    shards = [answer(n, world, rank, epochs, seed) for rank in range(world)]
    for rank, per_epoch in enumerate(shards):
        expect(
            isinstance(per_epoch, list)
            and len(per_epoch) == epochs
            and all(isinstance(e, list) and all(isinstance(i, int) for i in e) for e in per_epoch),
            f"rank {rank}: return a list with one list of int indices per epoch ({epochs} epochs)",
        )
    return shards


@exercise("Exercise 2 · Fix the sampler setup")
def check_epoch_shards(epoch_shards: Callable[[int, int, int, int, int], list[list[int]]]) -> None:
    """``epoch_shards(n_samples, world_size, rank, epochs, seed)``: the indices ``rank`` sees per epoch."""
    for n, world, epochs, seed in [(12, 2, 3, 5), (12, 3, 2, 0)]:
        shards = _shards_of(epoch_shards, n, world, epochs, seed)
        for epoch in range(epochs):
            seen = [i for rank in range(world) for i in shards[rank][epoch]]
            expect(
                sorted(seen) == list(range(n)),
                f"epoch {epoch}: the {world} ranks together must see every one of the {n} samples exactly "
                "once. Overlapping shards mean the ranks shuffled differently: every rank must build its "
                "sampler with the same seed (only rank differs).",
            )
        expect(
            shards[0][0] != shards[0][1],
            "every epoch repeats the first epoch's order: call sampler.set_epoch(epoch) at the start of "
            "each epoch, so that the shuffle changes (and stays the same on every rank)",
        )
        for rank in range(world):
            expect(
                shards[rank] == true_epoch_shards(n, world, rank, epochs, seed),
                f"rank {rank} does not see what DistributedSampler(dataset, num_replicas, rank, shuffle=True, "
                "seed=seed) gives with set_epoch(0), set_epoch(1), ...: use the sampler and its epoch numbers "
                "as they are, so that a resumed run can reproduce them",
            )
