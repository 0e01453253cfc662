"""utils.ddp_train, utils.ddp_minimal and utils.launch: chapter 10's DDP training program, its minimal script
and the helper that launches them; their pieces, and whole runs in this process.

The launched run (a two-node torchrun job on this machine, one process per node, batch 4 with 2
micro-batches per step, ``--demos``) is asserted in notebooks/10_data_parallel_training.ipynb,
sections 4-8, which runs in this test suite under strict nbval: world size, ranks and node ranks,
equal parameters and losses against a plain loop, rank-0-only logs and no progress bar when captured,
identical replicas, disjoint shards, one checkpoint written by rank 0 that every rank reloads, the
``module.`` prefix of the wrapper's keys, gradients that differ across ranks inside ``no_sync()``,
buffers broadcast from rank 0, SyncBatchNorm refused on the CPU, the error of a forward that leaves
parameters out and its fix, and the minimal script's training on both ranks. Launching it here as well would
only repeat that work; these tests run the program in this process (a one-process group) and test its parts,
and run it and the minimal script once in a fresh interpreter, as ``python -m`` and ``python`` do, to see
that they stop gloo before they exit. The launcher is tested with a stand-in for torchrun.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import inspect
import io
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from utils import ddp_train, launch

MINIMAL = Path(importlib.util.find_spec("utils.ddp_minimal").origin)

EPOCHS = 3


def params(result: dict) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(value) for name, value in result["params"].items()}


def without_a_launcher(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


def epoch_order(samples: int, seed: int, epoch: int) -> list[int]:
    """The one-process order of an epoch: a permutation drawn from ``seed + epoch``."""
    return torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def plain_training(epochs: int, batch_size: int, lr: float = 0.1, momentum: float = 0.5, seed: int = 0,
                   samples: int = 64) -> nn.Module:
    """The same training without DDP, a sampler or a process group."""
    x, y = ddp_train.make_data(samples, seed)
    model = ddp_train.make_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for epoch in range(epochs):
        for batch in torch.tensor(epoch_order(samples, seed, epoch)).split(batch_size):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
            optimizer.step()
    return model


def minimal_plain_training() -> nn.Module:
    """utils/ddp_minimal.py's training in one process, without DDP, a sampler or a process group: its data and
    initial weights from seed 0, then 3 epochs of batches of 8 in the one-process sampler's order, SGD at 0.2."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        x = torch.randn(64, 4)
        y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
        model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    for epoch in range(3):
        for batch in torch.tensor(epoch_order(64, 0, epoch)).split(8):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def run(tmp_path: Path, *extra: str, name: str = "r.json") -> dict:
    argv = ["--backend", "gloo", "--no-progress", "--out", str(tmp_path / name), *extra]
    assert ddp_train.main(argv) == 0
    assert not torch.distributed.is_initialized()  # the process group was torn down
    return json.loads((tmp_path / name).read_text())


def assert_same_params(got: dict[str, torch.Tensor], model: nn.Module, atol: float = 1e-6) -> None:
    for name, p in model.named_parameters():
        assert torch.allclose(got[name], p.detach(), rtol=0, atol=atol), name


def gloo_threads() -> list[str]:
    names = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ends while it is listed
            names.append((task / "comm").read_text().strip())
    return [name for name in names if "gloo" in name]


def gloo_threads_left(patience: float = 10.0) -> list[str]:
    """gloo's threads once any that are ending have gone. A thread that gloo has joined can stay listed
    in /proc for a moment after the join (longer on a loaded machine), so wait for the list to empty; one
    that still runs, because something keeps its process group alive, stays and is returned."""
    deadline = time.monotonic() + patience
    enabled = gc.isenabled()
    gc.disable()  # no collection may free, while we wait, a group that only a collection would free
    try:
        while (left := gloo_threads()) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if enabled:
            gc.enable()
    return left


def test_one_intra_op_thread_unless_omp_num_threads_says_otherwise(tmp_path, monkeypatch):
    without_a_launcher(monkeypatch)
    threads = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS")
        torch.set_num_threads(2)
        run(tmp_path, "--epochs", "1")
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        torch.set_num_threads(2)
        run(tmp_path, "--epochs", "1")
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
    result = json.loads((tmp_path / "r.json").read_text())
    assert (result["world_size"], result["nodes"]) == (1, 1)
    assert (result["global_batch_size"], result["steps_per_epoch"]) == (16, 4)
    assert result["in_sync"] is True and result["checkpoint_writers"] == [0]
    assert result["first_epoch_indices"] == [epoch_order(64, 0, 0)]
    assert result["no_sync_audit"] is None and result["pinned_batches"] is False
    # DDP with one process takes the steps of a plain loop over the same batches...
    got = params(result)
    assert_same_params(got, plain_training(EPOCHS, 16))
    # ...and that training did something: the parameters left the seeded start and the loss fell.
    assert not torch.allclose(got["0.weight"], ddp_train.make_model(0).state_dict()["0.weight"], atol=1e-3)
    assert result["losses"][-1] < result["losses"][0] / 2
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    assert (state["epoch"], state["world_size"]) == (EPOCHS, 1)
    assert all(torch.equal(state["model"][name], got[name]) for name in got)
    assert set(state["optimizer"]["state"]) == {0, 1, 2, 3}  # momentum buffers are saved
    assert result["checkpoint_checks"] == [{"matches": True, "devices": ["cpu"]}]
    assert f"{EPOCHS * 4}/{EPOCHS * 4}" in terminal.getvalue()  # tqdm drew the bar to the end


def test_resume_continues_exactly_where_the_checkpoint_left_off(tmp_path, monkeypatch):
    without_a_launcher(monkeypatch)
    ckpt = str(tmp_path / "c.pt")
    assert run(tmp_path, "--epochs", "2", "--batch-size", "16", "--checkpoint", ckpt, "--resume",
               name="first.json")["start_epoch"] == 0  # no checkpoint yet: a fresh start
    resumed = run(tmp_path, "--epochs", str(EPOCHS), "--batch-size", "16", "--checkpoint", ckpt, "--resume",
                  name="resumed.json")
    assert resumed["start_epoch"] == 2 and len(resumed["losses"]) == 1
    assert resumed["first_epoch_indices"] == [epoch_order(64, 0, 2)]  # the sampler continues at epoch 2
    assert_same_params(params(resumed), plain_training(EPOCHS, 16))
    # Without the optimizer's momentum the resumed run would take other steps:
    x, y = ddp_train.make_data(64, 0)
    no_momentum = plain_training(2, 16)
    optimizer = torch.optim.SGD(no_momentum.parameters(), lr=0.1, momentum=0.5)  # fresh: no buffers
    for batch in torch.tensor(epoch_order(64, 0, 2)).split(16):
        optimizer.zero_grad()
        nn.functional.mse_loss(no_momentum(x[batch]), y[batch]).backward()
        optimizer.step()
    assert not torch.allclose(params(resumed)["0.weight"], no_momentum[0].weight.detach(), atol=1e-4)


def test_gradient_accumulation_matches_the_combined_batch(tmp_path, monkeypatch):
    """16 micro-batches of 4 in windows of 3: five steps on 12 samples and a last one on 4, as plain batches."""
    without_a_launcher(monkeypatch)
    result = run(tmp_path, "--epochs", str(EPOCHS), "--batch-size", "4", "--accumulate", "3")
    assert (result["global_batch_size"], result["micro_batches_per_epoch"], result["steps_per_epoch"]) == (12, 16, 6)
    assert_same_params(params(result), plain_training(EPOCHS, 12))


def test_a_short_last_micro_batch_counts_per_sample(tmp_path, monkeypatch):
    """64 samples in micro-batches of 6 (the last of 4), windows of 4: steps on 24, 24 and 16 samples, as plain
    batches of 24. Dividing each micro-batch's mean loss by 3 in the last window would weigh the 4 samples
    of the short one as much as 6: the losses are weighted by their share of the window's samples."""
    without_a_launcher(monkeypatch)
    result = run(tmp_path, "--epochs", str(EPOCHS), "--batch-size", "6", "--accumulate", "4")
    assert (result["global_batch_size"], result["micro_batches_per_epoch"], result["steps_per_epoch"]) == (24, 11, 3)
    assert_same_params(params(result), plain_training(EPOCHS, 24))


@pytest.mark.parametrize(("micro", "k", "batch", "samples", "want"),
                         [(11, 4, 6, 64, [24] * 8 + [16] * 3), (8, 2, 4, 32, [8] * 8), (3, 5, 4, 10, [10] * 3),
                          (4, 1, 3, 10, [3, 3, 3, 1])])
def test_window_samples(micro, k, batch, samples, want):
    assert [ddp_train.window_samples(i, micro, k, batch, samples) for i in range(micro)] == want


@pytest.mark.parametrize(("micro", "k", "sizes", "steps"),
                         [(8, 1, [1] * 8, 8), (8, 2, [2] * 8, 4), (8, 3, [3] * 6 + [2] * 2, 3), (2, 4, [2, 2], 1)])
def test_accumulation_windows(micro, k, sizes, steps):
    assert [ddp_train.window_size(i, micro, k) for i in range(micro)] == sizes
    assert ddp_train.steps_per_epoch(micro, k) == steps


def test_batches_are_pinned_only_for_a_cuda_device():
    data = TensorDataset(torch.zeros(4, 1))
    sampler = torch.utils.data.DistributedSampler(data, num_replicas=1, rank=0)
    assert ddp_train.make_loader(data, sampler, 2, torch.device("cuda", 1)).pin_memory is True  # not iterated
    assert ddp_train.make_loader(data, sampler, 2, torch.device("cpu")).pin_memory is False


def test_each_rank_loads_onto_its_own_device(tmp_path):
    model = ddp_train.make_model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    model(torch.ones(2, ddp_train.N_FEATURES)).sum().backward()
    optimizer.step()
    path = tmp_path / "c.pt"
    torch.save(ddp_train.training_state(model, optimizer, 5, 2), path)
    on_meta = ddp_train.load_for_rank(path, torch.device("meta"))  # map_location: shapes, no data
    assert {t.device.type for t in on_meta["model"].values()} == {"meta"}
    assert on_meta["optimizer"]["state"][0]["momentum_buffer"].device.type == "meta"
    fresh = ddp_train.make_model(1)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.5)
    assert not ddp_train.same_state(ddp_train.load_for_rank(path, torch.device("cpu")), fresh, fresh_optimizer)
    assert ddp_train.resume(path, fresh, fresh_optimizer, torch.device("cpu")) == 5
    assert ddp_train.same_state(ddp_train.load_for_rank(path, torch.device("cpu")), fresh, fresh_optimizer)
    fresh_optimizer.param_groups[0]["lr"] = 0.2  # settings count too
    assert not ddp_train.same_state(ddp_train.load_for_rank(path, torch.device("cpu")), fresh, fresh_optimizer)
    assert ddp_train.resume(tmp_path / "missing.pt", fresh, fresh_optimizer, torch.device("cpu")) == 0


def test_ranks_must_resume_from_the_same_epoch():
    assert ddp_train.common_start([3, 3, 3]) == 3
    with pytest.raises(RuntimeError, match="file system they share"):
        ddp_train.common_start([3, 0])  # rank 1 found no checkpoint: it would start over


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


@pytest.mark.parametrize("bad", [["--batch-size", "0"], ["--epochs", "-1"], ["--lr", "0"], ["--momentum", "1"],
                                 ["--accumulate", "0"], ["--resume"], []])
def test_arguments_are_validated(bad):
    with pytest.raises(SystemExit):
        ddp_train.parse_args([*bad, "--out", "r.json"] if bad else [])


def test_identity_comes_from_the_launcher(monkeypatch):
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found = ddp_train.rank_identity(torch.device("cpu"))
    assert (found["group_rank"], found["cuda_visible_devices"], found["device_type"]) == ("1", None, "cpu")


def test_identity_records_the_nccl_error_handling_mode(monkeypatch):
    """torchrun sets TORCH_NCCL_ASYNC_ERROR_HANDLING in its workers; chapter 10 reads it from the result."""
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    assert ddp_train.rank_identity(torch.device("cpu"))["torch_nccl_async_error_handling"] is None
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    assert ddp_train.rank_identity(torch.device("cpu"))["torch_nccl_async_error_handling"] == "3"


def test_the_cuda_path_sets_the_current_device_and_binds_the_group_to_it(monkeypatch):
    """No GPU needed: the CUDA calls are recorded, not made."""
    calls = []
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(ddp_train.dist, "init_process_group",
                        lambda *args, **kwargs: calls.append(("init_process_group", args, kwargs)))
    monkeypatch.setattr(ddp_train.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(ddp_train.dist, "get_world_size", lambda: 4)
    assert ddp_train.init_distributed("auto") == (3, 4, torch.device("cuda", 1), "nccl")
    assert calls == [("set_device", torch.device("cuda", 1)),
                     ("init_process_group", ("nccl",), {"device_id": torch.device("cuda", 1)})]


def test_the_cpu_path_binds_no_device(monkeypatch):
    without_a_launcher(monkeypatch)
    rank, world_size, device, backend = ddp_train.init_distributed("gloo")
    try:
        assert (rank, world_size, device, backend) == (0, 1, torch.device("cpu"), "gloo")
        found = ddp_train.rank_identity(device)
        assert (found["bound_device"], found["current_cuda_device"]) == (None, None)
    finally:
        torch.distributed.destroy_process_group()
    # Why: init_process_group refuses a device_id that is not an accelerator with an index.
    with pytest.raises(ValueError, match="device_id"):
        torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0, world_size=1,
                                             device_id=torch.device("cpu"))
    assert not torch.distributed.is_initialized()


#: In a fresh interpreter (torch._dynamo not imported yet, as in a launched worker), runs the module as
#: ``python -m`` does (runpy, as ``__main__``): ``--help``, then a one-epoch run with the demos, with
#: the garbage collector off so that only the program's own shutdown can stop gloo's threads; then the
#: minimal script as ``python ddp_minimal.py`` runs it, as torchrun's only worker (its environment set
#: here). Prints what gloo_threads_left() finds after each (the helpers above, copied into the script from
#: their source).
AS_MAIN = "\n".join([
    "import contextlib, gc, json, os, runpy, sys, time",
    "from pathlib import Path",
    inspect.getsource(gloo_threads),
    inspect.getsource(gloo_threads_left),
    """
MINIMAL, PORT = sys.argv[1:3]  # before as_main() replaces sys.argv


def as_main(*argv):
    sys.argv = ["ddp_train", *argv]
    try:
        runpy.run_module("utils.ddp_train", run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        return exit.code

gc.disable()
assert as_main("--help") == 0
code = as_main("--backend", "gloo", "--no-progress", "--epochs", "1", "--demos", "--out", "r.json")
after_program = gloo_threads_left()
os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=PORT)
Path("r.json").rename("program.json")
Path("model.pt").rename("demos_model.pt")  # the demos ran the minimal script's train() too
print("--- the minimal script")
runpy.run_path(MINIMAL, run_name="__main__")
print(json.dumps({"exit": code, "gloo_threads_left": after_program, "after_minimal": gloo_threads_left()}))
"""])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc")
def test_runs_as_a_module_from_any_folder_and_stops_gloo_before_exit(tmp_path, monkeypatch):
    """gloo threads that outlive destroy_process_group() can abort the process when Python exits."""
    without_a_launcher(monkeypatch)
    done = subprocess.run([sys.executable, "-c", AS_MAIN, str(MINIMAL), str(launch.free_port())], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("usage: python -m utils.ddp_train")
    for flag in ("PER PROCESS", "--checkpoint", "--resume", "--accumulate", "--demos"):
        assert flag in done.stdout, flag
    # runpy warns when `import utils` has already imported the module it is asked to run.
    assert "found in sys.modules" not in done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"exit": 0, "gloo_threads_left": [], "after_minimal": []}
    # The minimal script, run as a script by torchrun's only worker: rank 0 prints three epochs and saves the
    # model it trained, which is what a plain loop over the sampler's batches of 8 gives.
    printed = done.stdout.split("--- the minimal script\n")[1].splitlines()[:-1]
    assert [line.split(":")[0] for line in printed] == ["epoch 0", "epoch 1", "epoch 2"], printed
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert list(saved) == ["weight", "bias"]  # the module inside DDP: no "module." prefix
    expected = minimal_plain_training()
    assert all(torch.allclose(saved[name], p.detach(), rtol=0, atol=1e-6) for name, p in expected.named_parameters())
    # The demos ran the same train() in the program's group (one process there too): the same model.
    assert all(torch.equal(t, saved[name]) for name, t in torch.load(tmp_path / "demos_model.pt").items())
    demo = json.loads((tmp_path / "program.json").read_text())["demos"]
    # One rank: every comparison across ranks is trivially equal; BatchNorm sees only its own batches.
    assert demo["state_equal_before_wrap"] and demo["state_equal_after_wrap"]
    assert demo["running_means_sync_true"] == demo["running_means_sync_false"] == [[0.5], [0.75]]
    assert demo["grads_equal_no_sync_around_backward_only"] is True
    # On the CPU, SyncBatchNorm refuses to train inside a process group (even a one-process one).
    assert (demo["sync_bn_type"], demo["sync_bn_train_forward"], demo["sync_bn_eval_forward"]) == (
        "SyncBatchNorm", "ValueError", "ok")
    # A forward that leaves head_b out: the next step's forward raises, even with one rank; the option fixes it.
    assert demo["unused_find_false"] == {"failed_step": 1, "error": "RuntimeError",
                                         "says": [ddp_train.UNUSED_ERROR_START, ddp_train.UNUSED_ERROR_FIX]}
    assert demo["unused_find_true"] == {"failed_step": None, "no_grad": ["head_b.weight", "head_b.bias"],
                                        "grads_equal": True}


# --- the minimal script ------------------------------------------------------------------------------

def test_the_minimal_script_stays_minimal_and_imports_dynamo_before_it_makes_the_group():
    """Chapter 10 prints it whole for learners to copy: short, only torch, and the gloo-safe order (see
    CONTRIBUTING: torch._dynamo imported before init_process_group; the DDP model gone before the group)."""
    source = MINIMAL.read_text()
    code = [line for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert len(source.splitlines()) <= 60
    assert all(line.startswith(("import torch", "from torch", "import os")) for line in code
               if line.startswith(("import ", "from ")))
    assert source.index("import torch._dynamo") < source.index("init_process_group(")
    assert source.index("train(device)  #") < source.index("destroy_process_group()")
    for part in ("DistributedSampler(", "sampler.set_epoch(epoch)", "DDP(", "model.module.state_dict()",
                 'os.environ["LOCAL_RANK"]', "torch.cuda.set_device(device)", 'init_process_group("nccl", device_id'):
        assert part in source, part


def test_two_heads_leave_the_other_head_without_a_gradient():
    heads = ddp_train.TwoHeads()
    heads(torch.ones(2, 1)).sum().backward()
    assert [name for name, p in heads.named_parameters() if p.grad is None] == ["head_b.weight", "head_b.bias"]
    heads.zero_grad(set_to_none=True)
    heads(torch.ones(2, 1), task="b").sum().backward()
    assert [name for name, p in heads.named_parameters() if p.grad is None] == ["head_a.weight", "head_a.bias"]


# --- the launcher, with a stand-in for torchrun ---------------------------------------------------------

#: Prints what it was given and where, as JSON, and fails when its arguments say --fail.
FAKE_TORCHRUN = """
import json, os, sys
names = ("OMP_NUM_THREADS", "TMPDIR", "GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES")
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {n: os.environ.get(n) for n in names}}))
sys.exit(1 if "--fail" in sys.argv else 0)
"""


def test_the_launcher_prints_the_command_and_runs_every_agent_in_the_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launch, "LAUNCHER", ["-c", FAKE_TORCHRUN])
    outputs = launch.torchrun("--nproc-per-node=1", "-m", "utils.ddp_train", "--out", "a b.json", machines=2,
                              cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    printed = capsys.readouterr().out
    assert printed == (
        "Each of the 2 machines runs (here: 2 torchrun agents on this computer, $PORT a free port):\n"
        "CUDA_VISIBLE_DEVICES= torchrun --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$PORT \\\n"
        "    --rdzv-id=ch10 --rdzv-conf=join_timeout=120 --local-addr=127.0.0.1 --nproc-per-node=1 -m \\\n"
        "    utils.ddp_train --out 'a b.json'\n")
    seen = [json.loads(out) for out, _err in outputs]
    assert len(seen) == 2 and seen[0]["argv"] == seen[1]["argv"]  # the same command on every machine
    endpoint = next(arg for arg in seen[0]["argv"] if arg.startswith("--rdzv-endpoint="))
    assert endpoint.startswith("--rdzv-endpoint=127.0.0.1:") and endpoint.split(":")[-1].isdigit()  # a real port
    assert seen[0]["argv"][-5:] == ["--nproc-per-node=1", "-m", "utils.ddp_train", "--out", "a b.json"]
    assert Path(seen[0]["cwd"]).resolve() == tmp_path.resolve()
    env = seen[0]["env"]
    assert (env["OMP_NUM_THREADS"], env["CUDA_VISIBLE_DEVICES"]) == ("1", "")
    assert Path(env["TMPDIR"]).resolve() == tmp_path.resolve()  # torchrun's default log folders stay in cwd
    loopback = [name for _index, name in socket.if_nameindex() if name in ("lo", "lo0")]
    assert env["GLOO_SOCKET_IFNAME"] == (loopback[0] if loopback else None)


def test_one_machine_needs_no_rendezvous_and_a_failure_raises_with_what_the_agents_printed(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.setattr(launch, "LAUNCHER", ["-c", FAKE_TORCHRUN])
    launch.torchrun("--standalone", "--nproc-per-node=2", "ddp_minimal.py", cwd=tmp_path)
    assert capsys.readouterr().out == "torchrun --standalone --nproc-per-node=2 ddp_minimal.py\n"
    with pytest.raises(RuntimeError, match=r"(?s)the torchrun job failed:.*--fail"):
        launch.torchrun("--standalone", "--fail", cwd=tmp_path)


def test_a_job_that_runs_too_long_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "LAUNCHER", ["-c", "import time; print('started', flush=True); time.sleep(60)"])
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="(?s)still running after 1.5 s; it was stopped:.*started"):
        launch.torchrun("--standalone", cwd=tmp_path, timeout=1.5)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("bad", [0, -1, 1.0, True, "2"])
def test_the_number_of_machines_is_checked(bad):
    with pytest.raises(ValueError, match="machines"):
        launch.rendezvous_flags(bad, 29400)


def test_a_command_line_is_cut_into_lines_that_continue():
    words = [f"--flag-number-{k}" for k in range(12)]
    text = launch.command_line(words, width=40)
    assert all(len(line) <= 40 for line in text.splitlines())
    assert text.replace(" \\\n    ", " ") == "torchrun " + " ".join(words)
