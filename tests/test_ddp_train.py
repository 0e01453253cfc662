"""utils.ddp_train: the pieces of chapter 09's DDP training program, and whole runs in this process.

The launched runs (2 processes x batch 8 and 1 process x batch 16 through ``torchrun``) are asserted
in notebooks/09_data_parallel_training.ipynb, sections 4-6, which runs in this test suite under strict
nbval: equal parameters and losses, rank-0-only logs and no progress bar when captured, identical
replicas, disjoint shards, one checkpoint written by rank 0 that a plain model loads, the ``module.``
prefix of the wrapper's keys. Launching them here as well would only repeat that work.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from utils import ddp_train

EPOCHS = 3


def params(result: dict) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(value) for name, value in result["params"].items()}


def without_a_launcher(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def epoch_order(samples: int, seed: int, epoch: int) -> list[int]:
    """The one-process order of an epoch: a permutation drawn from ``seed + epoch``."""
    return torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def plain_training(epochs: int, batch_size: int, lr: float = 0.1, seed: int = 0, samples: int = 64) -> nn.Module:
    """The same training without DDP, a sampler or a process group."""
    x, y = ddp_train.make_data(samples, seed)
    model = ddp_train.make_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for batch in torch.tensor(epoch_order(samples, seed, epoch)).split(batch_size):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
            optimizer.step()
    return model


def gloo_threads() -> list[str]:
    tasks = Path("/proc/self/task")
    return [name for t in tasks.iterdir() if "gloo" in (name := (t / "comm").read_text().strip())]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc")
def test_shutdown_stops_gloo_threads(tmp_path, monkeypatch):
    """Threads that outlive destroy_process_group() can abort the process when Python exits."""
    without_a_launcher(monkeypatch)
    before = gloo_threads()
    ddp_train.main(["--backend", "gloo", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "r.json")])
    assert gloo_threads() == before == []


def test_one_intra_op_thread_unless_omp_num_threads_says_otherwise(tmp_path, monkeypatch):
    without_a_launcher(monkeypatch)
    argv = ["--backend", "gloo", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "r.json")]
    threads = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS")
        torch.set_num_threads(2)
        ddp_train.main(argv)
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        torch.set_num_threads(2)
        ddp_train.main(argv)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_same_run_in_process_without_a_launcher_matches_plain_training_and_shows_the_bar(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    without_a_launcher(monkeypatch)
    argv = ["--backend", "gloo", "--epochs", str(EPOCHS), "--batch-size", "16",
            "--out", str(tmp_path / "r.json"), "--checkpoint", str(tmp_path / "c.pt")]
    assert ddp_train.main(argv) == 0
    assert not torch.distributed.is_initialized()  # the process group was torn down
    result = json.loads((tmp_path / "r.json").read_text())
    assert (result["world_size"], result["global_batch_size"], result["steps_per_epoch"]) == (1, 16, 4)
    assert result["in_sync"] is True and result["checkpoint_writers"] == [0]
    assert result["first_epoch_indices"] == [epoch_order(64, 0, 0)]
    # DDP with one process takes the steps of a plain loop over the same batches...
    reference = plain_training(EPOCHS, 16)
    got = params(result)
    for name, p in reference.named_parameters():
        assert torch.allclose(got[name], p.detach(), rtol=0, atol=1e-6), name
    # ...and that training did something: the parameters left the seeded start and the loss fell.
    assert not torch.allclose(got["0.weight"], ddp_train.make_model(0).state_dict()["0.weight"], atol=1e-3)
    assert result["losses"][-1] < result["losses"][0] / 2
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    assert (state["epoch"], state["world_size"]) == (EPOCHS, 1)
    assert all(torch.equal(state["model"][name], got[name]) for name in got)
    assert f"{EPOCHS * 4}/{EPOCHS * 4}" in terminal.getvalue()  # tqdm drew the bar to the end


@pytest.mark.parametrize(
    ("requested", "gpus", "procs", "want"),
    [("auto", 0, 2, "gloo"), ("auto", 1, 2, "gloo"), ("auto", 2, 2, "nccl"), ("auto", 8, 1, "nccl"),
     ("gloo", 4, 2, "gloo"), ("nccl", 2, 2, "nccl")],
)
def test_backend_is_nccl_only_when_every_process_has_a_gpu(requested, gpus, procs, want):
    assert ddp_train.choose_backend(requested, gpus, procs) == want


@pytest.mark.parametrize(
    ("args", "match"), [(("nccl", 1, 2), "one CUDA GPU per process"), (("mpi", 0, 1), "requested"),
                        (("auto", -1, 1), "cuda_devices"), (("auto", 0, 0), "local_world_size")],
)
def test_backend_rejects_impossible_requests(args, match):
    with pytest.raises(ValueError, match=match):
        ddp_train.choose_backend(*args)


@pytest.mark.parametrize(("rank", "no_progress", "tty", "want"),
                         [(0, False, True, True), (1, False, True, False), (0, True, True, False),
                          (0, False, False, False)])
def test_progress_bar_rank_zero_on_a_terminal_only(rank, no_progress, tty, want):
    stream = io.StringIO()
    stream.isatty = lambda: tty
    assert ddp_train.show_progress(rank, no_progress, stream) is want


@pytest.mark.parametrize("bad", [["--batch-size", "0"], ["--epochs", "-1"], ["--lr", "0"], []])
def test_arguments_are_validated(bad):
    with pytest.raises(SystemExit):
        ddp_train.parse_args([*bad, "--out", "r.json"] if bad else [])


def test_help_runs_as_a_module_from_any_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "utils.ddp_train", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m utils.ddp_train")
    assert "--batch-size" in done.stdout and "PER PROCESS" in done.stdout and "--checkpoint" in done.stdout
    # runpy warns when `import utils` has already imported the module it is asked to run.
    assert "found in sys.modules" not in done.stderr
