"""A minimal, complete DDP training script (chapter 10, section 4): copy it and launch one process per device.

    torchrun --standalone --nproc-per-node=2 ddp_minimal.py

On several machines, run the same command on each with ``--nnodes=N --rdzv-backend=c10d
--rdzv-endpoint=HOST:PORT --rdzv-id=JOB`` instead of ``--standalone``. It trains on the GPUs (``nccl``)
when every process of the machine has one, on the CPU (``gloo``) otherwise.
"""

import os

import torch
import torch._dynamo  # noqa: F401  (gloo: import it before init_process_group, or its threads outlive the group)
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(device: torch.device) -> None:
    torch.manual_seed(0)  # the same data and the same initial weights in every process
    x = torch.randn(64, 4)
    data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
    sampler = DistributedSampler(data, shuffle=True, seed=0)  # this process's shard (rank and size: the group's)
    loader = DataLoader(data, batch_size=8, sampler=sampler)  # 8 samples per process and step
    model = DDP(nn.Linear(4, 1).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for epoch in range(3):
        sampler.set_epoch(epoch)  # a new order every epoch, the same on every rank
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of all the processes here
            optimizer.step()
        if dist.get_rank() == 0:  # one process prints and saves
            print(f"epoch {epoch}: loss {loss.item():.4f} (rank 0's last batch)")
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "model.pt")  # the model inside the wrapper: no "module." keys


def main() -> None:
    local_rank = int(os.environ["LOCAL_RANK"])  # torchrun's: this process's number on this machine
    if torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"]):  # a GPU for every process here
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        train(device)  # its DDP model is gone when it returns, before the group is
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
