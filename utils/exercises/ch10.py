"""Checks for chapter 10 · Data-parallel training with torchrun.

Exercises 1 and 2 compare a learner's answer with what PyTorch itself does: a ``DistributedSampler``
built for each rank (no process group is needed for that: ``num_replicas`` and ``rank`` are passed
explicitly) and the ``DataLoader`` over it, on sizes that divide evenly and sizes that do not.
Exercise 3 hands the learner's step a stand-in for ``DistributedDataParallel`` (:class:`RecordingDDP`)
that records, as DDP decides it (from ``no_sync()`` or DDP's own ``require_backward_grad_sync`` flag), which
forward passes set up an all-reduce, and an optimizer (:class:`RecordingSGD`) that records its calls and the
gradients it steps with.

Each check tries several configurations, chosen so that a near miss (a shard rounded down, a fixed seed,
1-based epochs, a loss divided by the micro-batch's size rather than by their number) gives a wrong answer
in at least one of them; a hint names a mistake only where the check saw its result.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable

import torch
from torch import nn

from utils._validate import check_int
from utils.checks import exercise, expect, learner_code
from utils.exercises.common import is_whole_number, translated
from utils.i18n import N_, _

__all__ = [
    "RecordingDDP",
    "RecordingSGD",
    "check_accumulate_step",
    "check_ddp_numbers",
    "check_epoch_shards",
    "true_ddp_numbers",
    "true_epoch_shards",
]



#: Without num_replicas and rank, DistributedSampler asks the process group for them, and there is none here.
_NO_GROUP = {"Default process group has not been initialized": N_(
    "DistributedSampler was made without num_replicas and rank, so it asked the process group for them, and "
    "no process group exists here: pass num_replicas=world_size and rank=rank")}


# --- Exercise 1 · The numbers of a DDP run -----------------------------------------------------------

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


# Sizes where the plausible shortcuts give a wrong number: uneven shards, a last partial batch, one process,
# more processes than samples, and whole numbers of steps, even (64, 2, 8) before odd (48, 2, 8).
_NUMBER_CASES = [(10_000, 4, 32), (64, 2, 8), (64, 1, 16), (48, 2, 8), (100, 4, 8), (10, 4, 2), (7, 2, 4),
                 (5, 8, 1)]


def _steps_hint(n: int, world: int, batch: int, steps: int) -> str | None:
    """What a wrong number of steps per epoch shows, when it is the result of a known mistake; None if not."""
    want = true_ddp_numbers(n, world, batch)[1]
    per_rank = math.ceil(n / world)  # the sampler pads the shards to this length
    mistakes = [  # (steps per epoch that a mistake computes, what the check then saw), in this order
        (math.ceil(n / batch), _(
            "{n} samples, {world} processes, batch {batch}: {got} steps is what one process reading all "
            "{n} samples takes. Each process reads only its shard, ceil({n}/{world}) = {per_rank} samples, "
            "so an epoch has {steps} steps")),
        (math.ceil(n // world / batch), _(
            "{n} samples on {world} processes: {got} steps is what a shard of {n}//{world} = {floor} samples "
            "takes, but the sampler pads the shards to equal length by repeating samples: each process reads "
            "ceil({n}/{world}) = {per_rank}, so an epoch has {steps} steps")),
        (per_rank // batch, _(
            "{per_rank} samples per process in batches of {batch}: {got} steps leaves out the last, partial "
            "batch, which still counts as a step ({steps} steps per epoch). Round up with math.ceil")),
        (want + 1 if per_rank % batch == 0 else None, _(
            "{per_rank} samples per process make exactly {steps} batches of {batch}: nothing is left over, so "
            "there is no extra step ({steps} steps per epoch, not {got}). Round up with math.ceil, which adds "
            "a step only for a partial batch")),
    ]
    hint = next((hint for value, hint in mistakes if steps == value != want), None)
    return hint and hint.format(n=n, world=world, batch=batch, got=steps, steps=want, per_rank=per_rank,
                                floor=n // world)


@exercise("Exercise 1 · The numbers of a DDP run")
def check_ddp_numbers(ddp_numbers: Callable[[int, int, int], tuple[int, int]]) -> None:
    """``ddp_numbers(n_samples, world_size, batch_size)`` returns ``(global_batch, steps_per_epoch)``."""
    for n, world, batch in _NUMBER_CASES:
        with learner_code(_("calling ddp_numbers({n}, {world}, {batch})").format(n=n, world=world, batch=batch),
                          _("not known from here: the error is in your ddp_numbers"), causes=translated(_NO_GROUP)):
            got = ddp_numbers(n, world, batch)
        expect(
            isinstance(got, tuple) and len(got) == 2 and all(is_whole_number(v) for v in got),
            _("return a tuple of two ints (global_batch, steps_per_epoch); ddp_numbers({n}, {world}, {batch}) "
              "returned {got}").format(n=n, world=world, batch=batch, got=repr(got)))
        _expect_global_batch(got[0], world, batch)
        _expect_steps_per_epoch(got[1], n, world, batch)


def _expect_global_batch(global_batch: int, world: int, batch: int) -> None:
    """The global batch is every process's --batch-size together."""
    want = world * batch
    expect(
        global_batch == want or global_batch != batch,
        _("{world} processes with --batch-size {batch}: one optimizer step averages the gradients of "
          "{want} samples, not {got}. --batch-size is per process.").format(
              world=world, batch=batch, want=want, got=global_batch))
    expect(
        global_batch == want,
        _("{world} processes with --batch-size {batch}: the global batch is world_size × batch_size = {want}, "
          "not {got}").format(world=world, batch=batch, want=want, got=global_batch))


def _expect_steps_per_epoch(steps: int, n: int, world: int, batch: int) -> None:
    """An epoch has as many steps as batches in each process's padded shard, the last one partial."""
    hint = _steps_hint(n, world, batch, steps)
    expect(hint is None, hint or "-")
    want = true_ddp_numbers(n, world, batch)[1]
    expect(
        steps == want,
        _("{n} samples, {world} processes, batch {batch}: {steps} steps per epoch, not {got}. Each process "
          "reads ceil({n}/{world}) samples (the sampler pads the shards to equal length), in batches of "
          "{batch}, the last one partial").format(n=n, world=world, batch=batch, steps=want, got=steps))


# --- Exercise 2 · Fix the sampler setup -------------------------------------------------------------

def true_epoch_shards(n_samples: int, world_size: int, rank: int, epochs: int, seed: int) -> list[list[int]]:
    """The indices ``rank`` sees in epochs ``0 .. epochs-1`` of a correctly written training loop."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n_samples), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    shards = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


def _nesting(value: object) -> str:
    """``list of list of Tensor``: the type of ``value`` and of its first element, all the way down."""
    names = [type(value).__name__]
    while isinstance(value, list | tuple) and value:
        value = value[0]
        names.append(type(value).__name__)
    return " of ".join(names)


def _shards_of(answer: Callable[..., list[list[int]]], n: int, world: int, epochs: int, seed: int):
    """The answer's indices, ``[rank][epoch]``, after checking that each rank's are a list of int lists."""
    shards = []
    for rank in range(world):
        with learner_code(
            _("calling epoch_shards({n}, {world}, {rank}, {epochs}, {seed})").format(
                n=n, world=world, rank=rank, epochs=epochs, seed=seed),
            _("not known from here: the error is in your epoch_shards"), causes=translated(_NO_GROUP),
        ):
            per_epoch = answer(n, world, rank, epochs, seed)
        if isinstance(per_epoch, list):  # a tuple of ints is as good as a list
            per_epoch = [list(e) if isinstance(e, tuple) else e for e in per_epoch]
        expect(
            isinstance(per_epoch, list)
            and len(per_epoch) == epochs
            and all(isinstance(e, list) and all(is_whole_number(i) for i in e) for e in per_epoch),
            (_("rank {rank}: return a list with one list of int indices per epoch ({epochs} epochs), such as "
               "list(sampler) or tensor.tolist(); got {nesting} ({count} of them)")
             if isinstance(per_epoch, list) and len(per_epoch) != epochs else
             _("rank {rank}: return a list with one list of int indices per epoch ({epochs} epochs), such as "
               "list(sampler) or tensor.tolist(); got {nesting}")).format(
                 rank=rank, epochs=epochs, nesting=_nesting(per_epoch),
                 count=len(per_epoch) if isinstance(per_epoch, list) else 0))
        shards.append(per_epoch)
    return shards


def _expect_one_epoch_sharded(shards: list[list[list[int]]], n: int, world: int, epoch: int) -> None:
    """In ``epoch``, every rank has ceil(n / world) indices, and together they cover the data (rank r: [r][epoch])."""
    per_rank = math.ceil(n / world)
    sizes = [len(shards[rank][epoch]) for rank in range(world)]
    expect(
        sizes != [n // world] * world or n % world == 0,
        _("{n} samples on {world} ranks, epoch {epoch}: every rank got {floor} indices, so the last "
          "{left} samples were dropped (drop_last=True). Keep drop_last=False, as the task's training loop "
          "does: the sampler then pads the shards to ceil({n}/{world}) = {per_rank} by repeating samples"
          ).format(n=n, world=world, epoch=epoch, floor=n // world, left=n % world, per_rank=per_rank))
    expect(
        sizes == [per_rank] * world,
        _("{n} samples on {world} ranks, epoch {epoch}: every rank must get ceil({n}/{world}) = "
          "{per_rank} indices (got {sizes}). The sampler pads uneven data by repeating the first "
          "indices of the shuffled list, so that every rank takes the same number of steps; keep "
          "drop_last=False as the task's training loop does").format(
              n=n, world=world, epoch=epoch, per_rank=per_rank, sizes=sizes))
    expect(
        world == 1 or any(shards[rank][epoch] != shards[0][epoch] for rank in range(1, world)),
        _("{n} samples on {world} ranks, epoch {epoch}: every rank got the same indices, "
          "{indices}, so the ranks all train on one shard. The rank was not used: pass "
          "rank=rank to DistributedSampler, next to num_replicas=world_size").format(
              n=n, world=world, epoch=epoch, indices=shards[0][epoch]))
    expect(
        {i for rank in range(world) for i in shards[rank][epoch]} == set(range(n)),
        _("epoch {epoch}: the {world} ranks together must see every one of the {n} samples. Overlapping "
          "shards mean the ranks shuffled differently: every rank must use the same seed and the same "
          "epoch number (only rank differs).").format(epoch=epoch, world=world, n=n))


# (n_samples, world_size, epochs, seed): one size that divides evenly, two that do not (padding); three seeds.
_SHARD_CASES = [(12, 3, 2, 0), (10, 4, 3, 5), (7, 2, 2, 1)]


@exercise("Exercise 2 · Fix the sampler setup")
def check_epoch_shards(epoch_shards: Callable[[int, int, int, int, int], list[list[int]]]) -> None:
    """``epoch_shards(n_samples, world_size, rank, epochs, seed)``: the indices ``rank`` sees per epoch."""
    for n, world, epochs, seed in _SHARD_CASES:
        shards = _shards_of(epoch_shards, n, world, epochs, seed)  # [rank][epoch]
        # Each epoch: equal shards that together cover the data.
        for epoch in range(epochs):
            _expect_one_epoch_sharded(shards, n, world, epoch)
        _expect_shuffled_as_the_sampler(shards, n, world, epochs, seed)


def _expect_shuffled_as_the_sampler(shards: list[list[list[int]]], n: int, world: int, epochs: int,
                                    seed: int) -> None:
    """The order is shuffled, anew every epoch (epochs numbered from 0), from the seed given, as the sampler does."""
    in_order = (list(range(n)) * 2)[:math.ceil(n / world) * world]  # what shuffle=False gives, padded
    expect(
        any(shards[rank][0] != in_order[rank::world] for rank in range(world)),
        _("{n} samples on {world} ranks: rank 0 sees {indices} in epoch 0, the data in their order: "
          "they are not shuffled. Keep shuffle=True (DistributedSampler's default)").format(
              n=n, world=world, indices=shards[0][0]))
    expect(
        all(shards[rank][0] != shards[rank][1] for rank in range(world)),
        _("{n} samples on {world} ranks: epochs 0 and 1 have the same order. The sampler shuffles with "
          "seed + epoch, and its epoch stays 0 until set_epoch changes it: call sampler.set_epoch(epoch) at "
          "the start of each epoch").format(n=n, world=world))
    want = [true_epoch_shards(n, world, rank, epochs + 1, seed) for rank in range(world)]  # one epoch more
    expect(
        any(shards[rank] != want[rank][1:] for rank in range(world)),
        _("{n} samples, {world} ranks: epoch 0 got the order of the sampler's epoch 1, epoch 1 that of "
          "epoch 2, and so on. Number the epochs from 0: sampler.set_epoch(epoch) for epoch in "
          "range(epochs)").format(n=n, world=world))
    expect(
        seed == 0 or any(shards[rank] != true_epoch_shards(n, world, rank, epochs, 0) for rank in range(world)),
        _("{n} samples, {world} ranks, seed {seed}: every rank sees what seed 0 gives. Pass the seed argument "
          "to DistributedSampler (seed=seed)").format(n=n, world=world, seed=seed))
    for rank in range(world):
        expect(
            shards[rank] == want[rank][:-1],
            _("{n} samples, {world} ranks: rank {rank} does not see what DistributedSampler(dataset, "
              "num_replicas, rank, shuffle=True, seed=seed) gives with set_epoch(0), set_epoch(1), ...: "
              "use the sampler, its seed and its epoch numbers as they are, so that a resumed run can "
              "reproduce them").format(n=n, world=world, rank=rank))


# --- Exercise 3 · Gradient accumulation with no_sync() ----------------------------------------------

class RecordingDDP(nn.Module):
    """A one-process stand-in for ``DistributedDataParallel`` that records what DDP would all-reduce.

    DDP decides during ``forward`` whether the backward of that output will all-reduce the gradients:
    yes when its public attribute ``require_backward_grad_sync`` is true and gradients are enabled.
    ``no_sync()`` only clears that attribute for the duration of the block and restores it afterwards,
    so setting it by hand (as nanoGPT's training loop does) works the same; this stand-in keeps the same
    attribute. Every forward of the wrapped module is logged as ``("forward", synced)`` and the backward
    through its output as ``("backward", synced)``, including a forward that bypasses the wrapper
    (``ddp.module(x)``): never synced, as under DDP, whose reducer then accumulates locally.
    ``via_wrapper`` holds, per logged forward, whether it went through the wrapper, and ``sync_at_backward``,
    per logged backward, the flag's value when it ran (off for a backward inside ``no_sync()``).
    """

    def __init__(self, module: nn.Module, log: list) -> None:
        super().__init__()
        self.module = module
        self.log = log
        self.require_backward_grad_sync = True
        self.via_wrapper: list[bool] = []
        self.sync_at_backward: list[bool] = []
        self._inside = False
        module.register_forward_hook(self._record)

    @contextlib.contextmanager
    def no_sync(self):
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    def forward(self, *args, **kwargs):
        self._inside = True
        try:
            return self.module(*args, **kwargs)
        finally:
            self._inside = False

    def _record(self, module: nn.Module, args: tuple, out: object) -> None:
        synced = self._inside and bool(self.require_backward_grad_sync) and torch.is_grad_enabled()
        self.log.append(("forward", synced))
        self.via_wrapper.append(self._inside)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda grad: self._record_backward(synced))

    def _record_backward(self, synced: bool) -> None:
        self.log.append(("backward", synced))
        self.sync_at_backward.append(bool(self.require_backward_grad_sync))


class RecordingSGD:
    """Plain SGD that logs ``zero_grad`` and ``step`` calls and keeps the gradients of each step."""

    def __init__(self, params, lr: float, log: list) -> None:
        self.params = list(params)
        self.lr = lr
        self.log = log
        self.stepped_with: list[list[torch.Tensor | None]] = []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.log.append(("zero_grad", None))
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        self.log.append(("step", None))
        self.stepped_with.append([None if p.grad is None else p.grad.clone() for p in self.params])
        for p in self.params:
            if p.grad is not None:
                p -= self.lr * p.grad


def _window(k: int, rows: int, seed: int, device: torch.device):
    """A small model and k micro-batches of ``rows`` samples, drawn on the CPU from ``seed``, moved to ``device``."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Linear(3, 1)
    with torch.no_grad():  # seeded without touching the global generator
        model.weight.copy_(torch.randn(1, 3, generator=gen))
        model.bias.copy_(torch.randn(1, generator=gen))
    batches = [(torch.randn(rows, 3, generator=gen).to(device), torch.randn(rows, 1, generator=gen).to(device))
               for _ in range(k)]
    return model.to(device), batches


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def _same(a: list, b: list) -> bool:
    return all(u is not None and torch.allclose(u, v, atol=1e-6) for u, v in zip(a, b, strict=True))


def _rounded(t: torch.Tensor | None) -> object:
    return None if t is None else [round(v, 4) for v in t.flatten().tolist()]


def _scale(got: list, want: list) -> float | None:
    """``c`` when every gradient the step used is ``c`` times the wanted one, else None."""
    if any(g is None for g in got):
        return None
    g, w = torch.cat([t.reshape(-1) for t in got]), torch.cat([t.reshape(-1) for t in want])
    c = (g @ w / (w @ w)).item()
    return c if torch.allclose(g, c * w, atol=1e-6) else None


#: Errors of an answer's step and what they show.
_STEP_CAUSES = {
    "does not require grad": N_(
        "the loss had no autograd graph, so backward had nothing to go through: a forward ran under "
        "torch.no_grad() or its output was detached. no_sync() is what keeps a backward local; it still records "
        "the graph"),
    "context manager protocol": N_(
        "ddp.no_sync is a method: enter what it returns, `with ddp.no_sync():`, parentheses included"),
    "must be Tensor, not tuple": N_(
        "a micro-batch (x, y) was passed to the model whole: unpack it, `for x, y in micro_batches:`, and call "
        "ddp(x)"),
}
_LEFTOVER = 100.0  # what .grad holds when the answer's step starts


def _expect_passes_and_one_step(log: list, ddp: RecordingDDP, k: int) -> None:
    """Through the wrapper, one forward and right after it one backward per micro-batch, then one step."""
    expect(
        any(ddp.via_wrapper),
        _("the model was never called through the DDP wrapper: call ddp(x), not ddp.module(x) (the module "
          "alone never all-reduces)"))
    passes = [what for what, _synced in log if what in ("forward", "backward")]
    expect(
        passes.count("forward") == k and passes.count("backward") == k,
        _("{k} micro-batch(es) need {k} forward and {k} backward passes, one each; got {forwards} "
          "forward(s) and {backwards} backward(s)").format(
              k=k, forwards=passes.count("forward"), backwards=passes.count("backward")))
    expect(
        passes == ["forward", "backward"] * k,
        _("run each micro-batch's backward right after its forward: keeping every micro-batch's graph until "
          "one backward at the end costs the memory that accumulation is meant to save"))
    steps = [i for i, (what, _synced) in enumerate(log) if what == "step"]
    expect(len(steps) == 1, _("call optimizer.step() exactly once (it was called {count} time(s))").format(
        count=len(steps)))
    expect(
        steps[0] > max(i for i, (what, _synced) in enumerate(log) if what == "backward"),
        _("optimizer.step() ran before the last micro-batch's backward: call it after the loop"))


def _expect_one_all_reduce(log: list, ddp: RecordingDDP, k: int) -> None:
    """The last micro-batch's forward sets up the all-reduce, through the wrapper; no forward before it does."""
    forwards = [synced for what, synced in log if what == "forward"]
    expect(
        forwards[-1] or ddp.via_wrapper[-1],
        _("the last micro-batch's forward bypassed the wrapper (ddp.module(x)): its backward does not "
          "all-reduce, so every rank steps with its own gradients. Call ddp(x) for the last micro-batch, "
          "outside no_sync()"))
    too_late = [i + 1 for i in range(k - 1) if forwards[i] and not ddp.sync_at_backward[i]]
    expect(
        not too_late,
        _("micro-batch {i}'s forward ran outside no_sync() and its backward inside it (or with "
          "require_backward_grad_sync False): too late, since DDP decides in forward whether the backward "
          "all-reduces. Run the forward of each of the first K-1 micro-batches inside `with ddp.no_sync():` too"
          ).format(i=too_late[0] if too_late else 0))
    expect(
        forwards[-1] or not any(forwards),
        _("a micro-batch before the last set up the all-reduce, and the last ran inside no_sync() (or with "
          "require_backward_grad_sync False): the gradients accumulated after the all-reduce stay on their "
          "rank. Run the first K-1 micro-batches inside no_sync() and the last one outside"))
    expect(
        forwards[-1],
        _("the last micro-batch ran inside no_sync() (or with require_backward_grad_sync False): then no "
          "backward all-reduces and every rank steps with its own gradients. Run the last micro-batch outside "
          "no_sync()"))
    expect(
        not any(forwards[:-1]),
        _("micro-batch {i} of {k} ran outside no_sync(), so its backward all-reduced too: run the forward and "
          "backward of each of the first K-1 micro-batches inside `with ddp.no_sync():`").format(
              i=forwards.index(True) + 1, k=k))


def _expect_mean_gradient(got: list, reference: nn.Module, batches: list, loss_fn: nn.Module) -> None:
    """The step used the gradient of ``loss_fn``'s mean over all the window's samples (``reference``: the model
    before the step)."""
    k, rows = len(batches), len(batches[0][0])
    everything = (torch.cat([x for x, _y in batches]), torch.cat([y for _x, y in batches]))
    want = _grads(reference, *everything, loss_fn)
    expect(
        any(g is not None and g.abs().max() > 0 for g in got),
        _("the step found no gradient (None or zeros): the gradients were cleared after the last backward. "
          "Clear them once, with optimizer.zero_grad() before the first micro-batch"))
    expect(
        not all(g is not None and (g > _LEFTOVER / 2).all() for g in got),
        _("the gradients the step used still held the leftovers the check put in .grad ({leftover} in every "
          "element): start with optimizer.zero_grad(), before the first micro-batch").format(leftover=_LEFTOVER))
    expect(
        isinstance(loss_fn, nn.MSELoss) or not _same(got, _grads(reference, *everything, nn.MSELoss())),
        _("loss_fn was {loss_fn}, and the step used the gradient of a mean squared error instead: compute "
          "each micro-batch's loss with loss_fn(ddp(x), y), the loss function you are given").format(loss_fn=loss_fn))
    expect(
        k == 1 or not _same(got, [g / k for g in _grads(reference, *batches[-1], loss_fn)]),
        _("only the last micro-batch's gradient reached the step: zero the gradients once, before the first "
          "micro-batch, not inside the loop"))
    scale = _scale(got, want)
    expect(
        scale is None or abs(scale - k) > 1e-4 or k == 1,
        _("the step used {k} times the mean gradient: divide each micro-batch's loss by the number of "
          "micro-batches ({k}) before backward, so that the accumulated sum is the mean over all samples").format(k=k))
    expect(
        scale is None or abs(scale - 1) < 1e-4,
        _("the step used {scale} times the mean gradient over the window's {k} micro-batches of {rows} "
          "samples: weigh each micro-batch's mean loss by 1/{k}, one over the number of micro-batches, so that "
          "the accumulated sum is the mean over all samples").format(scale=f"{scale or 0:.3g}", k=k, rows=rows))
    for (name, _param), g, w in zip(reference.named_parameters(), got, want, strict=True):
        expect(
            g is not None and torch.allclose(g, w, atol=1e-6),
            _("the gradient of {name} that the step used, {got}, is not the mean gradient over all the "
              "window's samples, {want}").format(name=name, got=_rounded(g), want=_rounded(w)))


# (K micro-batches, samples in each, seed, loss): K and the micro-batch's size differ in the windows of K > 1.
_WINDOWS = [(3, 2, 0, nn.MSELoss()), (1, 2, 1, nn.MSELoss()), (2, 3, 2, nn.L1Loss())]


@exercise("Exercise 3 · Accumulate without an all-reduce per micro-batch")
def check_accumulate_step(accumulate_step: Callable[..., object], device: torch.device | str = "cpu") -> None:
    """``accumulate_step(ddp, optimizer, loss_fn, micro_batches)``: one step, one all-reduce.

    The model and the micro-batches live on ``device`` (the notebook passes its own); the windows differ in
    their number of micro-batches, their size and their loss (the step must use the loss it is given).
    """
    for k, rows, seed, loss_fn in _WINDOWS:
        model, batches = _window(k, rows, seed, torch.device(device))
        reference = copy.deepcopy(model)
        for p in model.parameters():  # leftovers from an earlier pass, which the step must not use
            p.grad = torch.full_like(p, _LEFTOVER)
        log: list = []
        ddp, optimizer = RecordingDDP(model, log), RecordingSGD(model.parameters(), 0.1, log)
        with learner_code(
            _("calling accumulate_step(ddp, optimizer, loss_fn, micro_batches) with {k} micro-batch(es)").format(k=k),
            _("not known from here: the error is in your accumulate_step"), causes=translated(_STEP_CAUSES),
        ):
            accumulate_step(ddp, optimizer, loss_fn, [(x.clone(), y.clone()) for x, y in batches])
        _expect_passes_and_one_step(log, ddp, k)
        _expect_one_all_reduce(log, ddp, k)
        _expect_mean_gradient(optimizer.stepped_with[0], reference, batches, loss_fn)
