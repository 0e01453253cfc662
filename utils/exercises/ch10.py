"""Checks for chapter 10 · Data-parallel training with torchrun.

Exercises 1 and 2 compare a learner's answer with what PyTorch itself does: a ``DistributedSampler``
built for each rank (no process group is needed for that: ``num_replicas`` and ``rank`` are passed
explicitly) and the ``DataLoader`` over it, on sizes that divide evenly and sizes that do not.
Exercise 3 hands the learner's step a stand-in for ``DistributedDataParallel`` (:class:`RecordingDDP`)
that records, as DDP decides it (from ``no_sync()`` or DDP's own ``require_backward_grad_sync`` flag), which
forward passes set up an all-reduce, and an optimizer
(:class:`RecordingSGD`) that records its calls and the gradients it steps with.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
from collections.abc import Callable

import torch
from torch import nn

from utils._validate import check_int
from utils.checks import exercise, expect, learner_code
from utils.i18n import _

__all__ = [
    "RecordingDDP",
    "RecordingSGD",
    "check_accumulate_step",
    "check_ddp_numbers",
    "check_epoch_shards",
    "true_ddp_numbers",
    "true_epoch_shards",
]


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


def _is_int(value: object) -> bool:
    """A whole number of Python's or NumPy's kind (np.int64 from np.ceil(...).astype(int) counts), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# Sizes where the plausible shortcuts give a wrong number: uneven shards, a last partial batch, one process,
# more processes than samples, and an odd whole number of steps (round(x + 0.5) rounds 3.5 to 4: to even).
_NUMBER_CASES = [(10_000, 4, 32), (64, 2, 8), (64, 1, 16), (48, 2, 8), (100, 4, 8), (10, 4, 2), (7, 2, 4),
                 (5, 8, 1)]


@exercise("Exercise 1 · The numbers of a DDP run")
def check_ddp_numbers(ddp_numbers: Callable[[int, int, int], tuple[int, int]]) -> None:
    """``ddp_numbers(n_samples, world_size, batch_size)`` returns ``(global_batch, steps_per_epoch)``."""
    for n, world, batch in _NUMBER_CASES:
        with learner_code(_("calling ddp_numbers({n}, {world}, {batch})").format(n=n, world=world, batch=batch),
                          _("compute both numbers from the three ints (math.ceil for rounding up)")):
            got = ddp_numbers(n, world, batch)
        expect(
            isinstance(got, tuple) and len(got) == 2 and all(_is_int(v) for v in got),
            _("return a tuple of two ints (global_batch, steps_per_epoch); ddp_numbers({n}, {world}, {batch}) "
              "returned {got}").format(n=n, world=world, batch=batch, got=repr(got)),
        )
        want_batch, want_steps = true_ddp_numbers(n, world, batch)
        expect(
            got[0] == want_batch,
            _("{world} processes with --batch-size {batch}: one optimizer step averages the gradients of "
              "{want} samples, not {got}. --batch-size is per process.").format(
                  world=world, batch=batch, want=want_batch, got=got[0]),
        )
        expect(
            got[1] <= want_steps or n % want_batch,
            _("{n} samples make exactly {steps} global batches of {batch}: nothing is left over, so there "
              "is no extra step ({steps} steps per epoch, not {got}). Round up with math.ceil: int(x) + 1 "
              "adds a step when x is whole, and so does round(x + 0.5) for odd x (Python rounds halves to even)"
              ).format(n=n, steps=want_steps, batch=want_batch, got=got[1]),
        )
        expect(
            got[1] == want_steps,
            _("{n} samples, {world} processes, batch {batch}: each process gets ceil({n}/{world}) samples "
              "(the sampler pads the shards to equal length by repeating samples) and a last partial batch "
              "still counts as a step, so {steps} steps per epoch, not {got}").format(
                  n=n, world=world, batch=batch, steps=want_steps, got=got[1]),
        )


def _nesting(value: object) -> str:
    """``list of list of Tensor``: the type of ``value`` and of its first element, all the way down."""
    names = [type(value).__name__]
    while isinstance(value, list | tuple) and value:
        value = value[0]
        names.append(type(value).__name__)
    return " of ".join(names)


def _shards_of(answer: Callable[..., list[list[int]]], n: int, world: int, epochs: int, seed: int):
    shards = []
    for rank in range(world):
        with learner_code(
            _("calling epoch_shards({n}, {world}, {rank}, {epochs}, {seed})").format(
                n=n, world=world, rank=rank, epochs=epochs, seed=seed),
            _("no process group exists here: give DistributedSampler num_replicas=world_size and rank=rank"),
        ):
            per_epoch = answer(n, world, rank, epochs, seed)
        if isinstance(per_epoch, list):  # a tuple of ints is as good as a list
            per_epoch = [list(e) if isinstance(e, tuple) else e for e in per_epoch]
        expect(
            isinstance(per_epoch, list)
            and len(per_epoch) == epochs
            and all(isinstance(e, list) and all(_is_int(i) for i in e) for e in per_epoch),
            (_("rank {rank}: return a list with one list of int indices per epoch ({epochs} epochs), such as "
               "list(sampler) or tensor.tolist(); got {nesting} ({count} of them)")
             if isinstance(per_epoch, list) and len(per_epoch) != epochs else
             _("rank {rank}: return a list with one list of int indices per epoch ({epochs} epochs), such as "
               "list(sampler) or tensor.tolist(); got {nesting}")).format(
                 rank=rank, epochs=epochs, nesting=_nesting(per_epoch),
                 count=len(per_epoch) if isinstance(per_epoch, list) else 0),
        )
        shards.append(per_epoch)
    return shards


# (n_samples, world_size, epochs, seed): one size that divides evenly, two that do not (padding).
_SHARD_CASES = [(12, 3, 2, 0), (10, 4, 3, 5), (7, 2, 2, 1)]


@exercise("Exercise 2 · Fix the sampler setup")
def check_epoch_shards(epoch_shards: Callable[[int, int, int, int, int], list[list[int]]]) -> None:
    """``epoch_shards(n_samples, world_size, rank, epochs, seed)``: the indices ``rank`` sees per epoch."""
    for n, world, epochs, seed in _SHARD_CASES:
        shards = _shards_of(epoch_shards, n, world, epochs, seed)
        want = [true_epoch_shards(n, world, rank, epochs, seed) for rank in range(world)]
        per_rank = math.ceil(n / world)
        for epoch in range(epochs):
            sizes = [len(shards[rank][epoch]) for rank in range(world)]
            expect(
                sizes == [per_rank] * world,
                _("{n} samples on {world} ranks, epoch {epoch}: every rank must get ceil({n}/{world}) = "
                  "{per_rank} indices (got {sizes}). The sampler pads uneven data by repeating the first "
                  "indices of the shuffled list, so that every rank takes the same number of steps; keep "
                  "drop_last=False as the task's training loop does").format(
                      n=n, world=world, epoch=epoch, per_rank=per_rank, sizes=sizes),
            )
            expect(
                world == 1 or any(shards[rank][epoch] != shards[0][epoch] for rank in range(1, world)),
                _("{n} samples on {world} ranks, epoch {epoch}: every rank got the same indices, "
                  "{indices}, so the ranks all train on one shard. The rank was not used: pass "
                  "rank=rank to DistributedSampler, next to num_replicas=world_size").format(
                      n=n, world=world, epoch=epoch, indices=shards[0][epoch]),
            )
            seen = {i for rank in range(world) for i in shards[rank][epoch]}
            expect(
                seen == set(range(n)),
                _("epoch {epoch}: the {world} ranks together must see every one of the {n} samples. Overlapping "
                  "shards mean the ranks shuffled differently: every rank must use the same seed and the same "
                  "epoch number (only rank differs).").format(epoch=epoch, world=world, n=n),
            )
        expect(
            all(shards[rank][0] != shards[rank][1] for rank in range(world)),
            _("every epoch repeats the first epoch's order: shuffle (shuffle=True) and call "
              "sampler.set_epoch(epoch) at the start of each epoch, so that the order changes every epoch "
              "(and stays the same on every rank)"),
        )
        for rank in range(world):
            expect(
                shards[rank] == want[rank],
                _("{n} samples, {world} ranks: rank {rank} does not see what DistributedSampler(dataset, "
                  "num_replicas, rank, shuffle=True, seed=seed) gives with set_epoch(0), set_epoch(1), ...: "
                  "use the sampler, its seed and its epoch numbers as they are, so that a resumed run can "
                  "reproduce them").format(n=n, world=world, rank=rank),
            )


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
    ``via_wrapper`` holds, per logged forward, whether it went through the wrapper.
    """

    def __init__(self, module: nn.Module, log: list) -> None:
        super().__init__()
        self.module = module
        self.log = log
        self.require_backward_grad_sync = True
        self.via_wrapper: list[bool] = []
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
            out.register_hook(lambda grad: self.log.append(("backward", synced)))


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


def _window(k: int, seed: int, device: torch.device) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    """A small model and k micro-batches of 2 samples, drawn on the CPU from ``seed`` and moved to ``device``."""
    gen = torch.Generator().manual_seed(seed)
    model = nn.Linear(3, 1)
    with torch.no_grad():  # seeded without touching the global generator
        model.weight.copy_(torch.randn(1, 3, generator=gen))
        model.bias.copy_(torch.randn(1, generator=gen))
    batches = [(torch.randn(2, 3, generator=gen).to(device), torch.randn(2, 1, generator=gen).to(device))
               for _ in range(k)]
    return model.to(device), batches


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: nn.Module) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def _same(a: list, b: list) -> bool:
    return all(u is not None and torch.allclose(u, v, atol=1e-6) for u, v in zip(a, b, strict=True))


@exercise("Exercise 3 · Accumulate without an all-reduce per micro-batch")
def check_accumulate_step(accumulate_step: Callable[..., object], device: torch.device | str = "cpu") -> None:
    """``accumulate_step(ddp, optimizer, loss_fn, micro_batches)``: one step, one all-reduce.

    The model and the micro-batches live on ``device`` (the notebook passes its own); ``loss_fn`` is a mean
    squared error in two windows and a mean absolute error in the third.
    """
    device = torch.device(device)
    # Two loss functions: the step must use the one it is given.
    for k, seed, loss_fn in [(3, 0, nn.MSELoss()), (1, 1, nn.MSELoss()), (2, 2, nn.L1Loss())]:
        model, batches = _window(k, seed, device)
        reference = copy.deepcopy(model)
        everything = (torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]))
        want = _grads(reference, *everything, loss_fn)  # the mean loss over all samples of the window
        last_only = [g / k for g in _grads(reference, *batches[-1], loss_fn)]
        mse = _grads(reference, *everything, nn.MSELoss())  # what a hard-coded mean squared error gives
        for p in model.parameters():  # leftovers from an earlier pass, which the step must not use
            p.grad = torch.full_like(p, 100.0)
        log: list = []
        ddp, optimizer = RecordingDDP(model, log), RecordingSGD(model.parameters(), 0.1, log)
        with learner_code(
            _("calling accumulate_step(ddp, optimizer, loss_fn, micro_batches) with {k} micro-batch(es)").format(k=k),
            _("call ddp(x) for the forward, loss_fn(output, y) for the loss, and ddp.no_sync() as a context "
              "manager (`with ddp.no_sync(): ...`)"),
        ):
            accumulate_step(ddp, optimizer, loss_fn, [(x.clone(), y.clone()) for x, y in batches])
        forwards = [synced for what, synced in log if what == "forward"]
        backwards = [synced for what, synced in log if what == "backward"]
        steps = [i for i, (what, _) in enumerate(log) if what == "step"]
        expect(
            any(ddp.via_wrapper),
            _("the model was never called through the DDP wrapper: call ddp(x), not ddp.module(x) (the module "
              "alone never all-reduces)"),
        )
        expect(
            len(forwards) == k and len(backwards) == k,
            _("{k} micro-batch(es) need {k} forward and {k} backward passes, one each; got {forwards} "
              "forward(s) and {backwards} backward(s)").format(k=k, forwards=len(forwards), backwards=len(backwards)),
        )
        kinds = [what for what, _ in log if what in ("forward", "backward")]
        expect(
            kinds == ["forward", "backward"] * k,
            _("run each micro-batch's backward right after its forward: keeping every micro-batch's graph until "
              "one backward at the end costs the memory that accumulation is meant to save"),
        )
        expect(
            len(steps) == 1 and steps[0] > max(i for i, (what, _) in enumerate(log) if what == "backward"),
            _("call optimizer.step() exactly once, after the last micro-batch's backward (it was called "
              "{count} time(s))").format(count=len(steps)),
        )
        expect(
            forwards[-1] or ddp.via_wrapper[-1],
            _("the last micro-batch's forward bypassed the wrapper (ddp.module(x)): its backward does not "
              "all-reduce, so every rank steps with its own gradients. Call ddp(x) for the last micro-batch, "
              "outside no_sync()"),
        )
        expect(
            forwards[-1] or not any(forwards),
            _("a micro-batch before the last set up the all-reduce, and the last ran inside no_sync() (or with "
              "require_backward_grad_sync False): the gradients accumulated after the all-reduce stay on their "
              "rank. Run the first K-1 micro-batches inside no_sync() and the last one outside"),
        )
        expect(
            forwards[-1],
            _("the last micro-batch ran inside no_sync() (or with require_backward_grad_sync False): then no "
              "backward all-reduces and every rank steps with its own gradients. Run the last micro-batch outside "
              "no_sync()"),
        )
        expect(
            not any(forwards[:-1]),
            _("a micro-batch before the last set up an all-reduce. DDP decides in forward whether the backward "
              "all-reduces: run the forward of each of the first K-1 micro-batches inside `with ddp.no_sync():` "
              "(entering no_sync() only around the backward is too late)"),
        )
        got = optimizer.stepped_with[0]
        expect(
            isinstance(loss_fn, nn.MSELoss) or not _same(got, mse),
            _("loss_fn was {loss_fn}, and the step used the gradient of a mean squared error instead: compute "
              "each micro-batch's loss with loss_fn(ddp(x), y), the loss function you are given").format(
                  loss_fn=loss_fn),
        )
        expect(
            not _same(got, [w * k for w in want]) or k == 1,
            _("the step used {k} times the mean gradient: divide each micro-batch's loss by the number of "
              "micro-batches ({k}) before backward, so that the accumulated sum is the mean over all samples"
              ).format(k=k),
        )
        expect(
            not _same(got, last_only) or k == 1,
            _("only the last micro-batch's gradient reached the step: zero the gradients once, before the first "
              "micro-batch, not inside the loop"),
        )
        expect(
            _same(got, want),
            _("the gradient the step used is not the mean gradient over all the window's samples. Start with "
              "optimizer.zero_grad() (the gradients may hold leftovers from an earlier pass) and divide each "
              "micro-batch's mean loss by the number of micro-batches"),
        )
