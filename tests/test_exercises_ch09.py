"""Chapter 09's checks accept the reference answers and reject the plausible wrong ones."""

import math

import pytest
from torch.utils.data import DistributedSampler

from utils import ExerciseFailed
from utils.exercises.ch09 import check_ddp_numbers, check_epoch_shards, true_ddp_numbers, true_epoch_shards

# --- Exercise 1 ------------------------------------------------------------------------------------


def ddp_numbers(n_samples, world_size, batch_size):
    per_process = math.ceil(n_samples / world_size)
    return world_size * batch_size, math.ceil(per_process / batch_size)


def forgot_the_processes(n_samples, world_size, batch_size):
    return batch_size, math.ceil(n_samples / batch_size)


def steps_ignore_sharding(n_samples, world_size, batch_size):
    return world_size * batch_size, math.ceil(n_samples / batch_size)


def floor_drops_the_partial_batch(n_samples, world_size, batch_size):
    return world_size * batch_size, n_samples // (world_size * batch_size)


def returns_floats(n_samples, world_size, batch_size):
    return float(world_size * batch_size), n_samples / (world_size * batch_size)


def test_true_numbers_match_hand_computation():
    assert true_ddp_numbers(64, 2, 8) == (16, 4)
    assert true_ddp_numbers(100, 4, 8) == (32, 4)  # 25 samples per process: 3 full batches and 1 partial
    assert true_ddp_numbers(5, 8, 1) == (8, 1)  # more processes than samples: the sampler repeats some


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4"])
def test_true_numbers_reject_bad_arguments(bad):
    with pytest.raises((TypeError, ValueError), match="world_size"):
        true_ddp_numbers(10, bad, 2)


def test_ddp_numbers_accepts_reference(capsys):
    check_ddp_numbers(ddp_numbers)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong", [forgot_the_processes, steps_ignore_sharding, floor_drops_the_partial_batch, returns_floats]
)
def test_ddp_numbers_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_ddp_numbers(wrong)


def test_ddp_numbers_hint_names_the_per_process_batch():
    with pytest.raises(ExerciseFailed, match="per process"):
        check_ddp_numbers(forgot_the_processes)


# --- Exercise 2 ------------------------------------------------------------------------------------


def epoch_shards(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def no_set_epoch(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return [list(sampler) for _ in range(epochs)]


def seed_per_rank(n_samples, world_size, rank, epochs, seed):
    return epoch_shards(n_samples, world_size, rank, epochs, seed + rank)


def no_shuffle(n_samples, world_size, rank, epochs, seed):
    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=False)
    return [list(sampler) for _ in range(epochs)]


def ignores_the_seed(n_samples, world_size, rank, epochs, seed):
    return epoch_shards(n_samples, world_size, rank, epochs, 1234)


def both_bugs(n_samples, world_size, rank, epochs, seed):
    return no_set_epoch(n_samples, world_size, rank, epochs, seed + rank)


def test_true_shards_are_disjoint_and_change_every_epoch():
    shards = [true_epoch_shards(10, 2, rank, 2, 0) for rank in range(2)]
    for epoch in range(2):
        assert sorted(shards[0][epoch] + shards[1][epoch]) == list(range(10))
    assert shards[0][0] != shards[0][1]


def test_epoch_shards_accepts_reference(capsys):
    check_epoch_shards(epoch_shards)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (no_set_epoch, "set_epoch"),
        (seed_per_rank, "same seed"),
        (no_shuffle, "set_epoch"),
        (ignores_the_seed, "seed=seed"),
        (both_bugs, "same seed"),
    ],
)
def test_epoch_shards_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_epoch_shards(wrong)


def test_not_attempted_is_reported(capsys):
    def stub(*args):
        raise NotImplementedError

    check_epoch_shards(stub)
    check_ddp_numbers(stub)
    assert capsys.readouterr().out.count("not attempted yet") == 2
