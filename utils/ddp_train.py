"""Train a small regression model with DistributedDataParallel (chapter 09's training program).

The module is installed with the course's helpers, so it runs from any folder. Launch one process per
device with torchrun, whose ``-m`` runs a module as ``python -m`` does (``python -m torch.distributed.run``
is torchrun with the same interpreter)::

    python -m torch.distributed.run --standalone --nproc_per_node=2 -m utils.ddp_train \\
        --epochs 3 --batch-size 8 --out result.json --checkpoint ckpt.pt

``--standalone`` starts a local rendezvous on a free port, so several runs on one machine never
collide. Without a launcher the module runs as a single process (``python -m utils.ddp_train ...``).
Nothing imports it for you: ``import utils`` leaves it alone until you ask for ``utils.ddp_train``.

* Backend: ``nccl`` when every process on this node has a CUDA GPU of its own (process ``LOCAL_RANK``
  uses ``cuda:LOCAL_RANK``), ``gloo`` on the CPU otherwise; ``--backend`` overrides the choice.
* Data: a synthetic regression set made from ``--seed``, identical in every process;
  a ``DistributedSampler`` hands each process a disjoint shard and reshuffles every epoch (``set_epoch``).
* Only rank 0 logs, shows a progress bar (on a terminal, unless ``--no-progress``), writes the
  checkpoint and writes the JSON result; both files are written atomically (temporary file + rename).

Each process averages its loss over its own batch and DDP averages the gradients over the processes,
so a run with P processes and ``--batch-size B`` takes the same steps as one process with batch P*B,
up to floating-point rounding.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
from pathlib import Path
from typing import IO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from utils.checkpoint import atomic_write, save_checkpoint

N_FEATURES = 4
N_HIDDEN = 8
LOG = logging.getLogger("ddp_train")


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m utils.ddp_train", description="Train a small model with DistributedDataParallel."
    )
    parser.add_argument("--epochs", type=positive_int, default=3, help="passes over the data (default 3)")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="batch size PER PROCESS (default 8)")
    parser.add_argument("--lr", type=positive_float, default=0.1, help="SGD learning rate (default 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seed for data, initial weights and shuffling")
    parser.add_argument("--samples", type=positive_int, default=64, help="size of the synthetic data set")
    parser.add_argument("--out", type=Path, required=True, help="JSON file for final parameters and metrics")
    parser.add_argument("--checkpoint", type=Path, help="checkpoint file, written by rank 0 after each epoch")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="process-group backend (default: nccl if each process has a GPU, else gloo)")
    parser.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    return parser.parse_args(argv)


def choose_backend(requested: str, cuda_devices: int, local_world_size: int) -> str:
    """``nccl`` when each of the ``local_world_size`` processes on this node has its own CUDA GPU."""
    if requested not in ("auto", "gloo", "nccl"):
        raise ValueError(f"requested must be 'auto', 'gloo' or 'nccl', got {requested!r}")
    if cuda_devices < 0 or local_world_size < 1:
        raise ValueError(f"need cuda_devices >= 0 and local_world_size >= 1, got {cuda_devices}, {local_world_size}")
    enough = cuda_devices >= local_world_size
    if requested == "nccl" and not enough:
        raise ValueError(f"nccl needs one CUDA GPU per process: {local_world_size} processes, {cuda_devices} GPUs")
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


def init_distributed(requested: str) -> tuple[int, int, torch.device, str]:
    """Join the process group torchrun describes (or a one-process group); return rank, size, device, backend."""

    launched = "RANK" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend = choose_backend(requested, cuda_devices, local_world_size)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before any collective: NCCL uses the current device
    else:
        device = torch.device("cpu")
    if launched:  # torchrun set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size(), device, backend


def train(args: argparse.Namespace, rank: int, world_size: int, device: torch.device, backend: str) -> dict | None:
    """Train in an initialised process group; rank 0 returns the result it wrote to ``args.out``, others None."""

    logging.basicConfig(stream=sys.stdout, format=f"[rank {rank}/{world_size}] %(message)s")
    LOG.setLevel(logging.INFO if rank == 0 else logging.WARNING)  # the other ranks only report problems
    dataset = TensorDataset(*make_data(args.samples, args.seed))
    # Every process shuffles with the same seed, then takes every world_size-th index from its rank on.
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = make_model(args.seed).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()  # reduction="mean": per-process mean, then DDP averages over processes

    LOG.info(
        "%s on %s: %d process(es) x batch %d = global batch %d, %d steps per epoch",
        backend, device.type, world_size, args.batch_size, world_size * args.batch_size, len(loader),
    )
    bar = None
    if show_progress(rank, args.no_progress, sys.stderr):
        from tqdm import tqdm

        bar = tqdm(total=args.epochs * len(loader), desc="training", unit="step")

    losses, first_epoch, wrote_checkpoint = [], [], False
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # without it every epoch repeats epoch 0's order
        if epoch == 0:
            first_epoch = list(sampler)
        totals = torch.zeros(2, dtype=torch.float64, device=device)  # sum of losses, number of samples
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()  # DDP all-reduces (averages) the gradients during backward
            optimizer.step()
            totals[0] += loss.detach() * len(x)
            totals[1] += len(x)
            if bar is not None:
                bar.update()
        dist.all_reduce(totals)  # every process's share -> the epoch's mean loss over all samples
        losses.append((totals[0] / totals[1]).item())
        if bar is not None:
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
        LOG.info("epoch %d/%d  loss %.4f", epoch + 1, args.epochs, losses[-1])
        if args.checkpoint is not None and rank == 0:
            state = {
                "model": model.state_dict(),  # the unwrapped module: no "module." prefix in the keys
                "optimizer": optimizer.state_dict(),
                "epoch": epoch + 1,
                "world_size": world_size,
            }
            args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            save_checkpoint(state, args.checkpoint)
            wrote_checkpoint = True
    if bar is not None:
        bar.close()
    if args.checkpoint is not None:
        LOG.info("checkpoint saved by rank 0 after epoch %d", args.epochs)

    # Every replica must hold the same parameters: compare them all with rank 0's.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(everyone, flat)
    in_sync = all(torch.equal(other, everyone[0]) for other in everyone)
    gathered: list[object] = [None] * world_size
    dist.all_gather_object(gathered, {"wrote_checkpoint": wrote_checkpoint, "first_epoch": first_epoch})

    if rank != 0:
        return None
    result = {
        "world_size": world_size,
        "backend": backend,
        "device_type": device.type,
        "batch_size_per_process": args.batch_size,
        "global_batch_size": world_size * args.batch_size,
        "steps_per_epoch": len(loader),
        "epochs": args.epochs,
        "lr": args.lr,
        "seed": args.seed,
        "samples": args.samples,
        "losses": losses,
        "in_sync": in_sync,
        "checkpoint_writers": [r for r, g in enumerate(gathered) if g["wrote_checkpoint"]],
        "first_epoch_indices": [g["first_epoch"] for g in gathered],
        "params": {name: p.detach().cpu().tolist() for name, p in model.named_parameters()},
        "ddp_state_dict_keys": list(ddp.state_dict()),  # the wrapper's keys, for comparison
    }
    text = json.dumps(result, indent=1).encode()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, lambda f: f.write(text))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A clean shutdown needs destroy_process_group() to really free the group, so that gloo's threads stop
    # while Python is still running (otherwise a process can abort at exit). Two things keep it alive:
    # torch._dynamo, which DDP imports on first use, holds on to groups that exist when it is imported,
    # so it is imported first; and the DDP wrapper holds the group in reference cycles, so those are
    # collected before the group is destroyed.
    import torch._dynamo  # noqa: F401

    if "OMP_NUM_THREADS" not in os.environ:  # one intra-op thread per process, unless the user chose otherwise
        torch.set_num_threads(1)  # torch is imported already: too late for the variable to count

    rank, world_size, device, backend = init_distributed(args.backend)
    try:
        train(args, rank, world_size, device, backend)
        dist.barrier()  # no rank leaves while another one still needs it
    finally:
        gc.collect()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
