"""Train a small regression model with DistributedDataParallel (chapter 10's training program).

The module is installed with the course's helpers, so it runs from any folder. Launch one process per
device with torchrun, whose ``-m`` runs a module as ``python -m`` does (``python -m torch.distributed.run``
is torchrun with the same interpreter)::

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m utils.ddp_train \\
        --epochs 3 --batch-size 8 --out result.json --checkpoint ckpt.pt

``--standalone`` starts a local rendezvous on a free port, so several runs on one machine never
collide. On several machines, run the same command on each with ``--nnodes=N --rdzv-backend=c10d
--rdzv-endpoint=HOST:PORT --rdzv-id=JOB`` instead (chapter 10, section 4). Without a launcher the
module runs as a single process (``python -m utils.ddp_train ...``). Nothing imports it for you:
``import utils`` leaves it alone until you ask for ``utils.ddp_train``.

* Backend: ``nccl`` when every process on this node has a CUDA GPU of its own (process ``LOCAL_RANK``
  uses ``cuda:LOCAL_RANK``), ``gloo`` on the CPU otherwise; ``--backend`` overrides the choice. With
  ``nccl`` each process makes its GPU the current device (``torch.cuda.set_device``) and binds its process
  group to it (``init_process_group(..., device_id=device)``): two different things, see
  :func:`init_distributed`.
* Data: a synthetic regression set made from ``--seed``, identical in every process;
  a ``DistributedSampler`` hands each process a disjoint shard and reshuffles every epoch (``set_epoch``).
  On a GPU the loader pins its batches, so that ``non_blocking`` copies really are asynchronous.
* Optimizer: SGD with momentum (``--lr``, ``--momentum``). ``--accumulate K`` sums the gradients of K
  micro-batches before each step; the first K-1 run under ``no_sync()``, so the gradients cross the
  network once per step, not K times. Each micro-batch's mean loss is weighted by its share of the
  step's samples (1/K when the micro-batches are equal), so that a short last micro-batch counts per sample.
* Only rank 0 logs, shows a progress bar (on a terminal, unless ``--no-progress``), writes the
  checkpoint and writes the JSON result; both files are written atomically (temporary file + rename).
* ``--resume`` continues from ``--checkpoint`` when that file exists: every rank loads it onto its own
  device (``map_location``), restores the model, the optimizer (momentum included) and the epoch, and
  waits at a barrier until all ranks have read it. At the end of a run every rank reloads the last
  checkpoint the same way and checks it against its own state.

Each process averages its loss over its own samples of the step and DDP averages the gradients over the
processes, so a run with P processes, ``--batch-size B`` and ``--accumulate K`` takes the same steps as one
process with batch P*B*K, up to floating-point rounding, when P divides the number of samples (otherwise
the sampler repeats a few samples to give every process as many).

``--demos`` adds, after training, chapter 10's demonstrations (:func:`demos`), in the same process group:
``train()`` of :mod:`utils.ddp_minimal` (the chapter's minimal script, which prints from rank 0 and writes
``model.pt``), what DDP synchronizes besides gradients (parameters when it wraps a model, buffers before
each forward), ``SyncBatchNorm`` on this backend, and a forward that leaves parameters out
(:class:`TwoHeads`), without and with ``find_unused_parameters=True``. Their findings go to the JSON result
under ``"demos"``.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import IO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, TensorDataset

from utils.checkpoint import atomic_write, load_checkpoint, save_checkpoint
from utils.i18n import _

N_FEATURES = 4
N_HIDDEN = 8
LOG = logging.getLogger("ddp_train")
#: The environment torchrun gives each process, as recorded in the result (``None`` when unset).
IDENTITY_VARS = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE",
                 "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(_("must be a positive integer, got {text}").format(text=text))
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(_("must be a positive number, got {text}").format(text=text))
    return value


def momentum_value(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(_("must be in [0, 1), got {text}").format(text=text))
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m utils.ddp_train", description=_("Train a small model with DistributedDataParallel.")
    )
    parser.add_argument("--epochs", type=positive_int, default=3, help=_("passes over the data (default 3)"))
    parser.add_argument("--batch-size", type=positive_int, default=8, help=_("batch size PER PROCESS (default 8)"))
    parser.add_argument("--accumulate", type=positive_int, default=1,
                        help=_("micro-batches per optimizer step (gradient accumulation, default 1)"))
    parser.add_argument("--lr", type=positive_float, default=0.1, help=_("SGD learning rate (default 0.1)"))
    parser.add_argument("--momentum", type=momentum_value, default=0.5, help=_("SGD momentum (default 0.5)"))
    parser.add_argument("--seed", type=int, default=0, help=_("seed for data, initial weights and shuffling"))
    parser.add_argument("--samples", type=positive_int, default=64, help=_("size of the synthetic data set"))
    parser.add_argument("--out", type=Path, required=True, help=_("JSON file for final parameters and metrics"))
    parser.add_argument("--checkpoint", type=Path, help=_("checkpoint file, written by rank 0 after each epoch"))
    parser.add_argument("--resume", action="store_true",
                        help=_("continue from --checkpoint if it exists (every rank loads it)"))
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help=_("process-group backend (default: nccl if each process has a GPU, else gloo)"))
    parser.add_argument("--no-progress", action="store_true", help=_("never show the progress bar"))
    parser.add_argument("--demos", action="store_true",
                        help=_("after training, run chapter 10's demonstrations and record what they find"))
    args = parser.parse_args(argv)
    if args.resume and args.checkpoint is None:
        parser.error(_("--resume needs --checkpoint"))
    return args


def choose_backend(requested: str, cuda_devices: int, local_world_size: int) -> str:
    """``nccl`` when each of the ``local_world_size`` processes on this node has its own CUDA GPU."""
    if requested not in ("auto", "gloo", "nccl"):
        raise ValueError(_("requested must be 'auto', 'gloo' or 'nccl', got {requested}").format(
            requested=repr(requested)))
    if cuda_devices < 0 or local_world_size < 1:
        raise ValueError(_("need cuda_devices >= 0 and local_world_size >= 1, got {cuda_devices}, "
                           "{local_world_size}").format(cuda_devices=cuda_devices, local_world_size=local_world_size))
    enough = cuda_devices >= local_world_size
    if requested == "nccl" and not enough:
        raise ValueError(_("nccl needs one CUDA GPU per process: {processes} processes, {gpus} GPUs").format(
            processes=local_world_size, gpus=cuda_devices))
    if requested == "auto":
        return "nccl" if enough else "gloo"
    return requested


def show_progress(rank: int, no_progress: bool, stream: IO[str]) -> bool:
    """The bar is drawn by rank 0 only, on a terminal only, and never with ``--no-progress``."""
    return rank == 0 and not no_progress and stream.isatty()


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy non-linear regression problem, drawn on the CPU from ``seed`` (the same in every process)."""

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, N_FEATURES, generator=gen)
    w = torch.randn(N_FEATURES, 1, generator=gen)
    y = torch.tanh(x @ w) + 0.1 * torch.randn(n, 1, generator=gen)
    return x, y


def make_model(seed: int) -> nn.Module:

    torch.manual_seed(seed)  # same initial weights everywhere (DDP would broadcast rank 0's anyway)
    return nn.Sequential(nn.Linear(N_FEATURES, N_HIDDEN), nn.Tanh(), nn.Linear(N_HIDDEN, 1))


def make_loader(dataset: Dataset, sampler: Sampler, batch_size: int, device: torch.device) -> DataLoader:
    """Batches of ``batch_size`` in the sampler's order; pinned (page-locked) when they go to a CUDA GPU.

    ``tensor.to("cuda", non_blocking=True)`` returns before the copy ends only from pinned memory; from
    ordinary memory it waits for the copy like a plain ``.to()``. Pinning on a CPU run would only cost.
    """
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, pin_memory=device.type == "cuda")


def steps_per_epoch(micro_batches: int, accumulate: int) -> int:
    """Optimizer steps in an epoch of ``micro_batches`` batches: a last, shorter window still steps."""
    return math.ceil(micro_batches / accumulate)


def window_size(index: int, micro_batches: int, accumulate: int) -> int:
    """How many micro-batches share the optimizer step that micro-batch ``index`` belongs to."""
    start = index // accumulate * accumulate
    return min(start + accumulate, micro_batches) - start


def window_samples(index: int, micro_batches: int, accumulate: int, batch_size: int, samples: int) -> int:
    """How many samples the step of micro-batch ``index`` reads, when ``samples`` come in batches of
    ``batch_size`` (the last one shorter if they do not divide evenly)."""
    start = index // accumulate * accumulate
    stop = min(start + accumulate, micro_batches)
    return min(stop * batch_size, samples) - start * batch_size


def rank_identity(device: torch.device) -> dict:
    """What torchrun told this process about itself, and the device it uses: its type, the device its process
    group is bound to (``None`` unless ``init_process_group`` got a ``device_id``) and, on a GPU, the current
    CUDA device's index (``None`` on the CPU)."""
    bound = getattr(dist.group.WORLD, "bound_device_id", None) if dist.is_initialized() else None
    return {
        **{name.lower(): os.environ.get(name) for name in IDENTITY_VARS},
        "device_type": device.type,
        "bound_device": None if bound is None else str(bound),
        "current_cuda_device": torch.cuda.current_device() if device.type == "cuda" else None,
    }


def init_distributed(requested: str) -> tuple[int, int, torch.device, str]:
    """Join the process group torchrun describes (or a one-process group); return rank, size, device, backend.

    On the ``nccl`` path, two calls tie the process to ``cuda:LOCAL_RANK`` (torch 2.13):

    * ``torch.cuda.set_device(device)`` makes it the *current* device, which whatever names only ``"cuda"``
      uses: ``torch.device("cuda")``, ``.cuda()``, and the object collectives (``all_gather_object``,
      which this program calls) that put their buffers on the current device.
    * ``init_process_group(backend, device_id=device)`` *binds* the process group to it (the group's
      ``bound_device_id``): NCCL creates its communicator at once, so a broken setup fails here rather
      than at the first collective; ``barrier()`` runs on that device; later sub-groups are split from
      its communicator where NCCL can. It does not call ``set_device``, so it does not replace the first call.

    The ``gloo`` path on the CPU passes no ``device_id``: ``init_process_group`` refuses one that is not
    an accelerator with an index (``ValueError``).
    """

    launched = "RANK" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = choose_backend(requested, cuda_devices, local_world_size)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # the current device, for everything that says just "cuda"
        bind = {"device_id": device}  # the process group's device: NCCL connects now, barrier() uses it
    else:
        device = torch.device("cpu")
        bind = {}  # device_id must be an accelerator: a CPU group takes none
    if launched:  # torchrun set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
        dist.init_process_group(backend, **bind)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **bind)
    return dist.get_rank(), dist.get_world_size(), device, backend


def wrap(model: nn.Module, device: torch.device, **options) -> DDP:
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **options)


def equal_on_all_ranks(tensor: torch.Tensor) -> bool:
    """True when every rank holds exactly this tensor (a collective: every rank must call it)."""
    everyone = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, tensor.contiguous())
    return all(torch.equal(other, everyone[0]) for other in everyone)


def flat_grads(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.detach().reshape(-1) for p in model.parameters()])


def training_state(model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int, world_size: int) -> dict:
    return {
        "model": model.state_dict(),  # the unwrapped module: no "module." prefix in the keys
        "optimizer": optimizer.state_dict(),  # momentum buffers: a resumed run needs them too
        "epoch": epoch,
        "world_size": world_size,
    }


def load_for_rank(path: Path, device: torch.device) -> dict:
    """Read a checkpoint onto this rank's device.

    Rank 0 wrote it from its own device (``cuda:0`` on a GPU machine); without ``map_location`` every
    rank would put its copy on that one GPU.
    """
    return load_checkpoint(path, map_location=device)


def resume(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device) -> int:
    """Restore model and optimizer from ``path`` if it exists; return the epoch to continue with (0 if not)."""
    if not path.exists():
        return 0
    state = load_for_rank(path, device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


def common_start(starts: list[int]) -> int:
    """The epoch every rank resumes from; an error if the ranks read different checkpoints (or none)."""
    if len(set(starts)) != 1:
        raise RuntimeError(_(
            "the ranks would resume from different epochs {starts}: every rank must read the same checkpoint "
            "(on several machines, put it on a file system they share, or copy it to each)"
        ).format(starts=starts))
    return starts[0]


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    return a == b


def same_state(state: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Does a loaded checkpoint hold exactly this model's and optimizer's state (tensors and settings)?"""
    return _same(state["model"], model.state_dict()) and _same(state["optimizer"], optimizer.state_dict())


class TwoHeads(nn.Module):
    """A body and two heads; each forward uses one head, so the other one's parameters get no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head_a, self.head_b = nn.Linear(1, 3), nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, task: str = "a") -> torch.Tensor:
        h = self.body(x).relu()
        return self.head_a(h) if task == "a" else self.head_b(h)


#: What chapter 10 teaches of the error DDP raises when a forward left parameters out (torch 2.13): the start
#: of its message, and the option it names. The rest of the message changes between releases.
UNUSED_ERROR_START = "Expected to have finished reduction in the prior iteration"
UNUSED_ERROR_FIX = "find_unused_parameters=True"


def unused_parameters_demo(device: torch.device, x: torch.Tensor, find_unused: bool) -> dict:
    """Two training steps of :class:`TwoHeads` on task "a" (``head_b`` left out), wrapped in DDP with
    ``find_unused_parameters=find_unused``: the step whose forward raised (``None`` if none did), the exception's
    type and which taught parts its message holds; with none raised, the parameters without a gradient and
    whether the others' gradients are equal on every rank (a collective: every rank must call it)."""
    torch.manual_seed(0)
    heads = wrap(TwoHeads().to(device), device, find_unused_parameters=find_unused)
    for step in range(2):
        try:
            out = heads(x)  # task "a": head_b is not used
        except RuntimeError as err:  # raised by the forward of the step after the one that left head_b out
            return {"failed_step": step, "error": type(err).__name__,
                    "says": [part for part in (UNUSED_ERROR_START, UNUSED_ERROR_FIX) if part in str(err)]}
        out.sum().backward()
    used = [p for p in heads.module.parameters() if p.grad is not None]
    return {"failed_step": None,
            "no_grad": [name for name, p in heads.module.named_parameters() if p.grad is None],
            "grads_equal": equal_on_all_ranks(torch.cat([p.grad.reshape(-1) for p in used]))}


def demos(rank: int, device: torch.device) -> dict:
    """Chapter 10's demonstrations, run on every rank of the process group.

    * The minimal script's ``train(device)`` (:mod:`utils.ddp_minimal`): it prints from rank 0 and writes
      ``model.pt`` in the working folder.

    And what DDP synchronizes besides gradients, seen on every rank:

    * Parameters and buffers when it wraps a model: every rank starts from its own, then compares.
    * Buffers before each forward: a BatchNorm's running mean after two ordinary training steps, with
      the buffer sync on and off. Rank r's inputs have mean r + 1, so each rank's own statistics differ.
    * ``no_sync()`` entered after the forward: does the backward still all-reduce?
    * SyncBatchNorm on this backend: one training forward and one in eval mode.
    * A forward that leaves parameters out, without and with ``find_unused_parameters=True``
      (:func:`unused_parameters_demo`, on inputs that differ between the ranks).
    """
    from utils import ddp_minimal

    ddp_minimal.train(device)  # the minimal script, in this group: its main() would make and end one
    found: dict = {}
    torch.manual_seed(1000 + rank)  # deliberately different weights on every rank...
    net = nn.Sequential(nn.BatchNorm1d(1, momentum=0.5), nn.Linear(1, 1)).to(device)
    net[0].running_mean.fill_(10.0 * rank)  # ...and different buffers

    def state() -> torch.Tensor:
        return torch.cat([t.detach().reshape(-1) for t in (*net.parameters(), net[0].running_mean)])

    found["state_equal_before_wrap"] = equal_on_all_ranks(state())
    wrap(net, device)  # wrapping copies rank 0's parameters and buffers to every rank
    found["state_equal_after_wrap"] = equal_on_all_ranks(state())

    # torch 2.13 deprecates broadcast_buffers (it warns) for forward_sync_buffers. Not a mere rename:
    # broadcast_buffers=False also skips the copy of the buffers at wrap time, forward_sync_buffers=False
    # only the broadcast before each forward. These buffers start equal on every rank: both show the same.
    renamed = "forward_sync_buffers" in inspect.signature(DDP).parameters
    switch = "forward_sync_buffers" if renamed else "broadcast_buffers"
    x = (rank + 1.0 + torch.tensor([[-1.0], [1.0], [-1.0], [1.0]])).to(device)  # mean rank + 1
    for sync in (True, False):
        bn = nn.BatchNorm1d(1, momentum=0.5)
        model = wrap(nn.Sequential(bn, nn.Linear(1, 1)).to(device), device, **{switch: sync})
        means = []
        for _step in range(2):
            model(x).sum().backward()  # ordinary training: a forward, then a backward
            everyone = [torch.empty_like(bn.running_mean) for _ in range(dist.get_world_size())]
            dist.all_gather(everyone, bn.running_mean)
            means.append([t.item() for t in everyone])
        found[f"running_means_sync_{str(sync).lower()}"] = means  # [after step][rank]

    # no_sync() around the backward alone: the forward, outside it, already set up the all-reduce.
    torch.manual_seed(0)
    late = wrap(nn.Linear(1, 1).to(device), device)
    out = late(x)
    with late.no_sync():
        out.sum().backward()
    found["grads_equal_no_sync_around_backward_only"] = equal_on_all_ranks(flat_grads(late))

    sync_bn = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.BatchNorm1d(1))).to(device)
    found["sync_bn_type"] = type(sync_bn[0]).__name__
    for mode in ("train", "eval"):
        sync_bn.train(mode == "train")
        try:
            sync_bn(x)
            found[f"sync_bn_{mode}_forward"] = "ok"
        except Exception as err:  # noqa: BLE001 - the demo records what this backend refuses
            found[f"sync_bn_{mode}_forward"] = type(err).__name__

    for find_unused in (False, True):
        found[f"unused_find_{str(find_unused).lower()}"] = unused_parameters_demo(device, x, find_unused)
    return found


def train(args: argparse.Namespace, rank: int, world_size: int, device: torch.device, backend: str) -> dict | None:
    """Train in an initialized process group; rank 0 returns the result it wrote to ``args.out``, others None."""

    logging.basicConfig(stream=sys.stdout, format=f"[rank {rank}/{world_size}] %(message)s")
    LOG.setLevel(logging.INFO if rank == 0 else logging.WARNING)  # the other ranks only report problems
    dataset = TensorDataset(*make_data(args.samples, args.seed))
    # Every process shuffles with the same seed, then takes every world_size-th index from its rank on.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = make_loader(dataset, sampler, args.batch_size, device)
    pinned = loader.pin_memory
    model = make_model(args.seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    start_epoch = 0
    if args.resume:
        start_epoch = resume(args.checkpoint, model, optimizer, device)  # on every rank, onto its own device
        dist.barrier()  # all ranks have read the file before rank 0 may replace it
        starts: list[object] = [None] * world_size
        dist.all_gather_object(starts, start_epoch)
        start_epoch = common_start(starts)  # type: ignore[arg-type]
    ddp = wrap(model, device)
    loss_fn = nn.MSELoss()  # reduction="mean": per-process mean, then DDP averages over processes
    micro_batches, k = len(loader), args.accumulate
    steps = steps_per_epoch(micro_batches, k)

    nodes = int(os.environ.get("GROUP_WORLD_SIZE", 1))
    LOG.info(_(
        "{backend} on {device}: {processes} process(es) on {nodes} node(s) x batch {batch} x {k} micro-batch(es) "
        "= global batch {global_batch}, {steps} steps per epoch"
    ).format(backend=backend, device=device.type, processes=world_size, nodes=nodes, batch=args.batch_size, k=k,
             global_batch=world_size * args.batch_size * k, steps=steps))
    if start_epoch:
        LOG.info(_("resumed from the checkpoint of epoch {epoch}").format(epoch=start_epoch))
    bar = None
    if show_progress(rank, args.no_progress, sys.stderr):
        from tqdm import tqdm

        bar = tqdm(total=(args.epochs - start_epoch) * micro_batches, desc=_("training"), unit="batch")

    losses, first_epoch, wrote_checkpoint, audit = [], [], False, None
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # without it every epoch repeats epoch 0's order
        if epoch == start_epoch:
            first_epoch = list(sampler)
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # sum of losses, number of samples
        for i, (x, y) in enumerate(loader):
            x, y = x.to(device, non_blocking=pinned), y.to(device, non_blocking=pinned)
            last = i % k == window_size(i, micro_batches, k) - 1  # the window's last micro-batch all-reduces
            window = window_samples(i, micro_batches, k, args.batch_size, len(sampler))
            # DDP decides in forward whether the backward all-reduces: the forward goes inside no_sync() too.
            with contextlib.nullcontext() if last else ddp.no_sync():
                loss = loss_fn(ddp(x), y)
                (loss * len(x) / window).backward()  # this micro-batch's share of the window's mean loss
            if audit is None and k > 1 and world_size > 1 and epoch == start_epoch:
                # The program checks its first step once: gradients differ between ranks until the
                # all-reduce of the window's last backward, and agree after it.
                audit = {"equal_inside_no_sync": equal_on_all_ranks(flat_grads(model))}
            elif audit is not None and "equal_after_sync" not in audit and last:
                audit["equal_after_sync"] = equal_on_all_ranks(flat_grads(model))
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            totals[0] += loss.detach() * len(x)
            totals[1] += len(x)
            if bar is not None:
                bar.update()
        dist.all_reduce(totals)  # every process's share -> the epoch's mean loss over all samples
        losses.append((totals[0] / totals[1]).item())
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        LOG.info(_("epoch {epoch}/{epochs}  loss {loss}").format(epoch=epoch + 1, epochs=args.epochs,
                                                                  loss=f"{losses[-1]:.4f}"))
        if args.checkpoint is not None and rank == 0:
            args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            save_checkpoint(training_state(model, optimizer, epoch + 1, world_size), args.checkpoint)
            wrote_checkpoint = True
    if bar is not None:
        bar.close()
    checked = None
    if args.checkpoint is not None:
        LOG.info(_("checkpoint saved by rank 0 after epoch {epoch}").format(epoch=args.epochs))
        dist.barrier()  # rank 0 has finished writing before anyone reads
        if args.checkpoint.exists():  # on several machines: only where the file system is shared
            state = load_for_rank(args.checkpoint, device)  # what a resumed run starts from, on every rank
            checked = {"matches": same_state(state, model, optimizer),
                       "devices": sorted({str(t.device) for t in state["model"].values()})}
    demo = demos(rank, device) if args.demos else None

    # Every replica must hold the same parameters: compare them all with rank 0's.
    in_sync = equal_on_all_ranks(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    gathered: list[object] = [None] * world_size
    mine = {"wrote_checkpoint": wrote_checkpoint, "first_epoch": first_epoch, "identity": rank_identity(device),
            "checkpoint_check": checked}
    dist.all_gather_object(gathered, mine)

    if rank != 0:
        return None
    result = {
        "world_size": world_size,
        "nodes": nodes,
        "backend": backend,
        "device_type": device.type,
        "pinned_batches": pinned,
        "batch_size_per_process": args.batch_size,
        "accumulate": k,
        "global_batch_size": world_size * args.batch_size * k,
        "micro_batches_per_epoch": micro_batches,
        "steps_per_epoch": steps,
        "epochs": args.epochs,
        "start_epoch": start_epoch,
        "lr": args.lr,
        "momentum": args.momentum,
        "seed": args.seed,
        "samples": args.samples,
        "losses": losses,
        "in_sync": in_sync,
        "no_sync_audit": audit,
        "ranks": [g["identity"] for g in gathered],
        "checkpoint_writers": [r for r, g in enumerate(gathered) if g["wrote_checkpoint"]],
        "checkpoint_checks": [g["checkpoint_check"] for g in gathered],
        "first_epoch_indices": [g["first_epoch"] for g in gathered],
        "params": {name: p.detach().cpu().tolist() for name, p in model.named_parameters()},
        "ddp_state_dict_keys": list(ddp.state_dict()),  # the wrapper's keys, for comparison
        "demos": demo,
    }
    text = json.dumps(result, indent=1).encode()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, lambda f: f.write(text))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A clean shutdown needs destroy_process_group() to really free the group, so that gloo's threads stop
    # while Python is still running (otherwise a process can abort at exit). torch._dynamo, which DDP
    # imports on first use, holds on to the groups that exist when it is imported: import it first.
    import torch._dynamo  # noqa: F401

    if "OMP_NUM_THREADS" not in os.environ:  # one intra-op thread per process, unless the user chose otherwise
        torch.set_num_threads(1)  # torch is imported already: too late for the variable to count

    rank, world_size, device, backend = init_distributed(args.backend)
    try:
        train(args, rank, world_size, device, backend)
        dist.barrier()  # no rank leaves while another one still needs it
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
