"""Chapter 10's checks: per exercise, a catalogue of plausible wrong answers with the hint each gets,
and right answers written differently from the notebook's reference (which nbval runs there).

Exercise 3's check drives the answer with a stand-in for DDP that records which passes would
all-reduce (``RecordingDDP``): no process group, no optimizer import, a few tiny tensors.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from utils.checks import outcome, rejection
from utils.exercises.ch10 import (
    RecordingDDP,
    RecordingSGD,
    check_accumulate_step,
    check_ddp_numbers,
    check_epoch_shards,
    true_ddp_numbers,
    true_epoch_shards,
)


def stub(*args):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("check", [check_ddp_numbers, check_epoch_shards, check_accumulate_step])
def test_only_the_stub_is_not_attempted(check):
    assert outcome(check, stub) == ("not attempted", "")

    def torch_own_not_implemented(*args):
        raise NotImplementedError  # not the stub's message: an attempted answer that fails

    verdict, hint = outcome(check, torch_own_not_implemented)
    assert verdict == "failed" and "raised NotImplementedError" in hint


# --- Exercise 1 · The numbers of a DDP run ----------------------------------------------------------

def right_one_ceiling(n_samples, world_size, batch_size):
    """ceil(ceil(n/P)/B) == ceil(n/(P*B)) for positive ints."""
    return world_size * batch_size, math.ceil(n_samples / (world_size * batch_size))


def right_integer_ceiling(n_samples, world_size, batch_size):
    per_rank = -(-n_samples // world_size)
    return batch_size * world_size, (per_rank + batch_size - 1) // batch_size


def right_measured(n_samples, world_size, batch_size):
    data = range(n_samples)
    loader = DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data, world_size, 0))
    return world_size * batch_size, len(loader)


def right_with_numpy(n_samples, world_size, batch_size):
    """NumPy integers are whole numbers too."""
    per_rank = np.ceil(np.int64(n_samples) / world_size).astype(np.int64)
    return np.int64(world_size * batch_size), np.ceil(per_rank / batch_size).astype(np.int64)


@pytest.mark.parametrize("right", [right_one_ceiling, right_integer_ceiling, right_measured, right_with_numpy])
def test_ddp_numbers_accepts(right):
    assert outcome(check_ddp_numbers, right) == ("passed", "")


def forgot_the_processes(n_samples, world_size, batch_size):
    return batch_size, math.ceil(n_samples / batch_size)


def steps_ignore_sharding(n_samples, world_size, batch_size):
    return world_size * batch_size, math.ceil(n_samples / batch_size)


def floor_drops_the_partial_batch(n_samples, world_size, batch_size):
    return world_size * batch_size, n_samples // (world_size * batch_size)


def floor_per_process(n_samples, world_size, batch_size):
    """Rounds the shard down: forgets that the sampler pads it."""
    return world_size * batch_size, math.ceil((n_samples // world_size) / batch_size)


def returns_floats(n_samples, world_size, batch_size):
    return float(world_size * batch_size), n_samples / (world_size * batch_size)


def returns_a_list(n_samples, world_size, batch_size):
    return [world_size * batch_size, math.ceil(n_samples / (world_size * batch_size))]


def round_half_up(n_samples, world_size, batch_size):
    """round(x + 0.5) as "round up": Python rounds halves to even, so 3.5 becomes 4 (but 4.5 also 4)."""
    return world_size * batch_size, round(n_samples / (world_size * batch_size) + 0.5)


def floor_plus_one(n_samples, world_size, batch_size):
    return world_size * batch_size, n_samples // (world_size * batch_size) + 1


def measured_without_a_process_group(n_samples, world_size, batch_size):
    loader = DataLoader(range(n_samples), batch_size=batch_size, sampler=DistributedSampler(range(n_samples)))
    return world_size * batch_size, len(loader)


def hard_coded(n_samples, world_size, batch_size):
    """The colleague's case worked out by hand, for every input: the processes are not what is missing."""
    return 128, 79


def steps_of_all_processes_together(n_samples, world_size, batch_size):
    return world_size * batch_size, world_size * math.ceil(n_samples / (world_size * batch_size))


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (forgot_the_processes, "averages the gradients of 128 samples, not 32. --batch-size is per process."),
        (hard_coded, "2 processes with --batch-size 8: the global batch is world_size × batch_size = 16, not 128"),
        (steps_ignore_sharding, "313 steps is what one process reading all 10000 samples takes. Each process reads "
                                "only its shard, ceil(10000/4) = 2500 samples, so an epoch has 79 steps"),
        (floor_drops_the_partial_batch, "2500 samples per process in batches of 32: 78 steps leaves out the last, "
                                        "partial batch"),
        (floor_per_process, "10 samples on 4 processes: 1 steps is what a shard of 10//4 = 2 samples takes, but the "
                            "sampler pads the shards"),
        (round_half_up, "24 samples per process make exactly 3 batches of 8: nothing is left over"),
        (floor_plus_one, "32 samples per process make exactly 4 batches of 8: nothing is left over"),
        (steps_of_all_processes_together, "10000 samples, 4 processes, batch 32: 79 steps per epoch, not 316."),
        (returns_floats, "return a tuple of two ints"),
        (returns_a_list, "return a tuple of two ints"),
        (measured_without_a_process_group, "calling ddp_numbers(10000, 4, 32) raised ValueError: Default process "
                                           "group has not been initialized"),
        (measured_without_a_process_group, "no process group exists here: pass num_replicas=world_size and rank"),
    ],
)
def test_ddp_numbers_rejects(wrong, hint):
    verdict, message = outcome(check_ddp_numbers, wrong)
    assert verdict == "failed" and hint in message, message


def test_true_numbers_match_hand_computation():
    assert true_ddp_numbers(64, 2, 8) == (16, 4)
    assert true_ddp_numbers(100, 4, 8) == (32, 4)  # 25 samples per process: 3 full batches and 1 partial
    assert true_ddp_numbers(5, 8, 1) == (8, 1)  # more processes than samples: the sampler repeats some
    assert true_ddp_numbers(48, 2, 8) == (16, 3)  # divides evenly: no extra step


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_true_numbers_reject_bad_arguments(bad):
    with pytest.raises((TypeError, ValueError), match="world_size"):
        true_ddp_numbers(10, bad, 2)


# --- Exercise 2 · Fix the sampler setup -------------------------------------------------------------

def right_new_sampler_each_epoch(n_samples, world_size, rank, epochs, seed):
    """The sampler shuffles with seed + epoch: a new sampler seeded seed + e is the same order."""
    return [list(DistributedSampler(range(n_samples), world_size, rank, shuffle=True, seed=seed + e))
            for e in range(epochs)]


def right_by_hand(n_samples, world_size, rank, epochs, seed):
    per_rank = math.ceil(n_samples / world_size)
    out = []
    for e in range(epochs):
        order = torch.randperm(n_samples, generator=torch.Generator().manual_seed(seed + e)).tolist()
        order += order[: per_rank * world_size - n_samples]  # pad with the start of the shuffled list
        out.append(order[rank::world_size])
    return out


def right_tuples_and_keywords(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(dataset=list(range(n_samples)), num_replicas=world_size, rank=rank, seed=seed)
    shards = []
    for e in range(epochs):
        sampler.set_epoch(e)
        shards.append(tuple(iter(sampler)))
    return shards


@pytest.mark.parametrize("right", [right_new_sampler_each_epoch, right_by_hand, right_tuples_and_keywords])
def test_epoch_shards_accepts(right):
    assert outcome(check_epoch_shards, right) == ("passed", "")


def sampler_for(n_samples, world_size, rank, seed, **kwargs):
    return DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, **kwargs)


def no_set_epoch(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed)
    return [list(sampler) for _ in range(epochs)]


def seed_per_rank(n_samples, world_size, rank, epochs, seed):
    return right_new_sampler_each_epoch(n_samples, world_size, rank, epochs, seed + 100 * rank)


def epoch_per_rank(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed)
    out = []
    for e in range(epochs):
        sampler.set_epoch(e + rank)
        out.append(list(sampler))
    return out


def no_shuffle(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=False)
    out = []
    for e in range(epochs):
        sampler.set_epoch(e)
        out.append(list(sampler))
    return out


def drop_last(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed, drop_last=True)
    out = []
    for e in range(epochs):
        sampler.set_epoch(e)
        out.append(list(sampler))
    return out


def by_hand_without_padding(n_samples, world_size, rank, epochs, seed):
    return [torch.randperm(n_samples, generator=torch.Generator().manual_seed(seed + e)).tolist()[rank::world_size]
            for e in range(epochs)]


def ignores_the_seed(n_samples, world_size, rank, epochs, seed):
    return right_new_sampler_each_epoch(n_samples, world_size, rank, epochs, 1234)


def no_process_group(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(range(n_samples), shuffle=True, seed=seed)  # needs an initialized group
    return [list(sampler) for _ in range(epochs)]


def returns_the_sampler(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed)
    out = []
    for e in range(epochs):
        sampler.set_epoch(e)
        out.append(sampler)
    return out


def batches_of_tensors(n_samples, world_size, rank, epochs, seed):  # a DataLoader's batches hold tensors
    sampler = sampler_for(n_samples, world_size, rank, seed)
    loader = DataLoader(range(n_samples), batch_size=2, sampler=sampler)
    out = []
    for e in range(epochs):
        sampler.set_epoch(e)
        out.append([i for batch in loader for i in batch])
    return out


def ignores_the_rank(n_samples, world_size, rank, epochs, seed):  # every rank builds rank 0's sampler
    return right_tuples_and_keywords(n_samples, world_size, 0, epochs, seed)


def both_bugs(n_samples, world_size, rank, epochs, seed):
    return no_set_epoch(n_samples, world_size, rank, epochs, seed + rank)


def one_based_epochs(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed)
    out = []
    for epoch in range(1, epochs + 1):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def seed_zero(n_samples, world_size, rank, epochs, seed):
    return right_new_sampler_each_epoch(n_samples, world_size, rank, epochs, 0)


def set_epoch_after_the_epoch(n_samples, world_size, rank, epochs, seed):
    sampler = sampler_for(n_samples, world_size, rank, seed)
    out = []
    for epoch in range(epochs):
        out.append(list(sampler))
        sampler.set_epoch(epoch)  # too late: the next epoch reads the order this one already had
    return out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (no_set_epoch, "12 samples on 3 ranks: epochs 0 and 1 have the same order. The sampler shuffles with seed + "
                       "epoch, and its epoch stays 0 until set_epoch changes it: call sampler.set_epoch(epoch)"),
        (set_epoch_after_the_epoch, "epochs 0 and 1 have the same order"),
        (one_based_epochs, "12 samples, 3 ranks: epoch 0 got the order of the sampler's epoch 1"),
        (seed_zero, "10 samples, 4 ranks, seed 5: every rank sees what seed 0 gives. Pass the seed argument"),
        (seed_per_rank, "the same seed and the same epoch number"),
        (epoch_per_rank, "the same seed and the same epoch number"),
        (no_shuffle, "rank 0 sees [0, 3, 6, 9] in epoch 0, the data in their order: they are not shuffled. Keep "
                     "shuffle=True"),
        (drop_last, "10 samples on 4 ranks, epoch 0: every rank got 2 indices, so the last 2 samples were dropped "
                    "(drop_last=True). Keep drop_last=False"),
        (by_hand_without_padding, "(got [3, 3, 2, 2]). The sampler pads uneven data by repeating the first indices"),
        (ignores_the_seed, "use the sampler, its seed and its epoch numbers"),
        (no_process_group, "asked the process group for them, and no process group exists here: pass "
                           "num_replicas=world_size and rank=rank"),
        (returns_the_sampler, "got list of DistributedSampler"),
        (batches_of_tensors, "got list of list of Tensor"),
        (both_bugs, "the same seed"),
        (ignores_the_rank, "12 samples on 3 ranks, epoch 0: every rank got the same indices, [8, 9, 2, 1], so the "
                           "ranks all train on one shard. The rank was not used: pass rank=rank"),
    ],
)
def test_epoch_shards_rejects(wrong, hint):
    verdict, message = outcome(check_epoch_shards, wrong)
    assert verdict == "failed" and hint in message, message


def test_true_shards_are_padded_on_the_last_ranks_and_change_every_epoch():
    shards = [true_epoch_shards(10, 4, rank, 2, 0) for rank in range(4)]
    order = torch.randperm(10, generator=torch.Generator().manual_seed(0)).tolist()
    assert [s[0] for s in shards] == [(order + order[:2])[r::4] for r in range(4)]
    assert shards[0][0] != shards[0][1]


# --- Exercise 3 · Accumulate without an all-reduce per micro-batch --------------------------------

def right_split_loop(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    *early, last = micro_batches
    with ddp.no_sync():
        for x, y in early:
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    x, y = last
    (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    optimizer.step()


def right_forward_inside_backward_outside(ddp, optimizer, loss_fn, micro_batches):
    """DDP only looks at the forward: a backward outside no_sync() of a forward inside it stays local."""
    optimizer.zero_grad(set_to_none=False)
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            loss = loss_fn(ddp(x), y) * (1 / k)
        loss.backward()
    optimizer.step()


def right_scale_the_gradients(ddp, optimizer, loss_fn, micro_batches):
    """Dividing the accumulated gradients by K before the step is the same as dividing each loss."""
    optimizer.zero_grad()
    with contextlib.ExitStack() as stack:
        stack.enter_context(ddp.no_sync())
        for x, y in micro_batches[:-1]:
            loss_fn(ddp(x), y).backward()
    loss_fn(ddp(micro_batches[-1][0]), micro_batches[-1][1]).backward()
    for p in ddp.parameters():
        p.grad /= len(micro_batches)
    optimizer.step()


def right_nanogpt_flag(ddp, optimizer, loss_fn, micro_batches):
    """nanoGPT's loop: set the flag that no_sync() toggles, so that only the last forward syncs."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        ddp.require_backward_grad_sync = i == k - 1
        (loss_fn(ddp(x), y) / k).backward()
    optimizer.step()


def right_module_forward_for_early(ddp, optimizer, loss_fn, micro_batches):
    """Bypassing the wrapper for the first K-1 forwards also accumulates locally under real DDP (2 gloo ranks:
    one all-reduce, the exact mean gradient)."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        net = ddp if i == k - 1 else ddp.module
        (loss_fn(net(x), y) / k).backward()
    optimizer.step()


@pytest.mark.parametrize("right", [right_split_loop, right_forward_inside_backward_outside, right_scale_the_gradients,
                                   right_nanogpt_flag, right_module_forward_for_early])
def test_accumulate_step_accepts(right):
    assert outcome(check_accumulate_step, right) == ("passed", "")


def no_sync_around_the_backward_only(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(ddp(x), y) / k
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            loss.backward()
    optimizer.step()


def everything_in_no_sync(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    with ddp.no_sync():
        for x, y in micro_batches:
            (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    optimizer.step()


def no_no_sync(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    optimizer.step()


def sync_first(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i > 0 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
    optimizer.step()


def loss_not_divided(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            loss_fn(ddp(x), y).backward()
    optimizer.step()


def step_every_micro_batch(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
        optimizer.step()


def zero_grad_in_the_loop(ddp, optimizer, loss_fn, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        optimizer.zero_grad()
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
    optimizer.step()


def never_zeroes(ddp, optimizer, loss_fn, micro_batches):
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
    optimizer.step()
    optimizer.zero_grad()  # afterwards: too late for the leftovers this step started with


def bypasses_ddp(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(ddp.module(x), y) / len(micro_batches)).backward()
    optimizer.step()


def module_for_the_last(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            net = ddp.module if i == k - 1 else ddp
            (loss_fn(net(x), y) / k).backward()
    optimizer.step()


def flag_set_after_the_forward(ddp, optimizer, loss_fn, micro_batches):
    """nanoGPT's flag, but set between forward and backward: DDP has already read it."""
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        loss = loss_fn(ddp(x), y) / k
        ddp.require_backward_grad_sync = i == k - 1
        loss.backward()
    optimizer.step()


def one_backward_at_the_end(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    total = 0
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            total = total + loss_fn(ddp(x), y) / k
    total.backward()
    optimizer.step()


def no_sync_called_not_entered(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    for x, y in micro_batches[:-1]:
        ddp.no_sync()  # creates the context manager and drops it
        (loss_fn(ddp(x), y) / len(micro_batches)).backward()
    (loss_fn(ddp(micro_batches[-1][0]), micro_batches[-1][1]) / len(micro_batches)).backward()
    optimizer.step()


def loss_on_a_tuple(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    with ddp.no_sync():
        for batch in micro_batches[:-1]:
            loss_fn(ddp(batch), batch).backward()
    optimizer.step()


def divides_by_the_micro_batch_size(ddp, optimizer, loss_fn, micro_batches):  # right when K equals their size
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / len(x)).backward()
    optimizer.step()


def no_grad_instead_of_no_sync(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with torch.no_grad() if i < k - 1 else contextlib.nullcontext():
            loss = loss_fn(ddp(x), y) / k
        loss.backward()
    optimizer.step()


def no_sync_without_parentheses(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
    optimizer.step()


def clears_after_the_last_backward(ddp, optimizer, loss_fn, micro_batches):
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (loss_fn(ddp(x), y) / k).backward()
    optimizer.zero_grad()  # meant for the next step, but it runs before this one
    optimizer.step()


def hard_coded_mse(ddp, optimizer, loss_fn, micro_batches):  # right for nn.MSELoss() only
    optimizer.zero_grad()
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        with ddp.no_sync() if i < k - 1 else contextlib.nullcontext():
            (nn.functional.mse_loss(ddp(x), y) / k).backward()
    optimizer.step()


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (hard_coded_mse, "loss_fn was L1Loss(), and the step used the gradient of a mean squared error instead"),
        (no_sync_around_the_backward_only, "micro-batch 1's forward ran outside no_sync() and its backward inside it "
                                           "(or with require_backward_grad_sync False): too late"),
        (everything_in_no_sync, "the last micro-batch ran inside no_sync()"),
        (no_no_sync, "micro-batch 1 of 3 ran outside no_sync(), so its backward all-reduced too"),
        (sync_first, "a micro-batch before the last set up the all-reduce, and the last ran inside"),
        (loss_not_divided, "the step used 3 times the mean gradient"),
        (step_every_micro_batch, "call optimizer.step() exactly once"),
        (zero_grad_in_the_loop, "only the last micro-batch's gradient reached the step"),
        (never_zeroes, "the gradients the step used still held the leftovers the check put in .grad (100.0 in every "
                       "element): start with optimizer.zero_grad()"),
        (clears_after_the_last_backward, "the step found no gradient (None or zeros)"),
        (divides_by_the_micro_batch_size, "the step used 1.5 times the mean gradient over the window's 3 micro-batches "
                                          "of 2 samples: weigh each micro-batch's mean loss by 1/3"),
        (no_grad_instead_of_no_sync, "Likely cause: the loss had no autograd graph"),
        (no_sync_without_parentheses, "Likely cause: ddp.no_sync is a method: enter what it returns"),
        (bypasses_ddp, "call ddp(x), not ddp.module(x)"),
        (module_for_the_last, "the last micro-batch's forward bypassed the wrapper"),
        (flag_set_after_the_forward, "micro-batch 1's forward ran outside no_sync() and its backward inside it (or "
                                     "with require_backward_grad_sync False): too late"),
        (one_backward_at_the_end, "run each micro-batch's backward right after its forward"),
        (no_sync_called_not_entered, "micro-batch 1 of 3 ran outside no_sync(), so its backward all-reduced too"),
        (loss_on_a_tuple, "Likely cause: a micro-batch (x, y) was passed to the model whole: unpack it"),
    ],
)
def test_accumulate_step_rejects(wrong, hint):
    verdict, message = outcome(check_accumulate_step, wrong)
    assert verdict == "failed" and hint in message, message


def test_the_stand_in_records_what_ddp_decides_in_forward():
    log: list = []
    ddp = RecordingDDP(nn.Linear(2, 1), log)
    with ddp.no_sync():
        inside = ddp(torch.ones(1, 2))
    outside = ddp(torch.ones(1, 2))
    with torch.no_grad():
        ddp(torch.ones(1, 2))
    (inside.sum() + outside.sum()).backward()
    assert log[:3] == [("forward", False), ("forward", True), ("forward", False)]
    assert sorted(log[3:]) == [("backward", False), ("backward", True)]
    # Like DDP's no_sync(), it toggles the public flag that forward reads, and restores it.
    assert ddp.require_backward_grad_sync is True
    ddp.require_backward_grad_sync = False
    with ddp.no_sync():
        pass
    assert ddp.require_backward_grad_sync is False
    ddp(torch.ones(1, 2))
    ddp.require_backward_grad_sync = True
    ddp.module(torch.ones(1, 2))  # bypasses the wrapper: never synced
    assert log[5:] == [("forward", False), ("forward", False)]
    assert ddp.via_wrapper == [True, True, True, True, False]
    del log[5:]
    optimizer = RecordingSGD(ddp.parameters(), 0.5, log)
    before = ddp.module.bias.detach().clone()
    optimizer.step()
    assert torch.allclose(ddp.module.bias, before - 0.5 * optimizer.stepped_with[0][1])


def test_rejection_shows_the_hint():
    assert "too late" in rejection(check_accumulate_step, no_sync_around_the_backward_only)


def test_the_stand_in_records_the_flag_each_backward_ran_with():
    log: list = []
    ddp = RecordingDDP(nn.Linear(2, 1), log)
    early, late = ddp(torch.ones(1, 2)), ddp(torch.ones(1, 2))
    with ddp.no_sync():
        early.sum().backward()  # a forward outside, its backward inside: the all-reduce was set up already
    late.sum().backward()
    assert log == [("forward", True), ("forward", True), ("backward", True), ("backward", True)]
    assert ddp.sync_at_backward == [False, True]


def test_each_exercise_heading_is_its_checks_title():
    """The notebook's `### Exercise N · ...` heading and what its check prints say the same (and so translate the
    same); chapter 10 builds on chapter 08's gradient accumulation (section 7), which its prerequisites say."""
    import nbformat

    from tools import course

    chapter = course.BY_NUMBER["10"]
    headings = [c.source.splitlines()[0].removeprefix("### ") for c in nbformat.read(chapter.path, as_version=4).cells
                if c.cell_type == "markdown" and c.source.startswith("### Exercise")]
    assert headings == [check.title for check in (check_ddp_numbers, check_epoch_shards, check_accumulate_step)]
    assert "08" in chapter.prerequisites
