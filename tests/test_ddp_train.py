"""scripts/ddp_train.py: DDP with 2 processes takes the same steps as 1 process with the combined batch.

The launches go through ``python -m torch.distributed.run --standalone`` (same interpreter, a free port
for every run, so parallel test sessions never collide) with the gloo backend, which every machine has.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ddp_train.py"
EPOCHS = 3


def load_script():
    spec = importlib.util.spec_from_file_location("ddp_train", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ddp_train = load_script()


def torchrun(nproc: int, workdir: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           str(SCRIPT), "--backend", "gloo", "--epochs", str(EPOCHS), *args]
    return subprocess.Popen(cmd, cwd=workdir, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two independent launches, run side by side: 2 processes x batch 8 (with a checkpoint), and
    1 process x batch 16, through torchrun too."""
    work = {"two": tmp_path_factory.mktemp("two"), "one": tmp_path_factory.mktemp("one")}
    started = {
        "two": torchrun(2, work["two"], "--batch-size", "8", "--out", "result.json", "--checkpoint", "ckpt/last.pt"),
        "one": torchrun(1, work["one"], "--batch-size", "16", "--out", "result.json"),
    }
    done = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, out + err
        result = json.loads((work[name] / "result.json").read_text())
        done[name] = {"stdout": out, "stderr": err, "dir": work[name], "result": result}
    return done


@pytest.fixture(scope="module")
def two(runs):
    return runs["two"]


@pytest.fixture(scope="module")
def one(runs):
    return runs["one"]


def params(result: dict) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(value) for name, value in result["params"].items()}


def test_two_processes_match_one_process_with_the_combined_batch(two, one):
    a, b = two["result"], one["result"]
    assert (a["world_size"], a["global_batch_size"], a["steps_per_epoch"]) == (2, 16, 4)
    assert (b["world_size"], b["global_batch_size"], b["steps_per_epoch"]) == (1, 16, 4)
    pa, pb = params(a), params(b)
    assert pa.keys() == pb.keys() == {"0.weight", "0.bias", "2.weight", "2.bias"}
    for name in pa:
        assert torch.allclose(pa[name], pb[name], rtol=0, atol=1e-6), name
    assert a["losses"] == pytest.approx(b["losses"], abs=1e-6)
    # ...and the training did something: the parameters moved away from the seeded start.
    start = ddp_train.make_model(0).state_dict()
    assert not torch.allclose(pa["0.weight"], start["0.weight"], atol=1e-3)
    assert a["losses"][-1] < a["losses"][0] / 2


def test_each_rank_gets_every_other_index_of_the_one_process_order(two, one):
    shards = two["result"]["first_epoch_indices"]
    (order,) = one["result"]["first_epoch_indices"]
    assert sorted(order) == list(range(64))
    assert shards == [order[0::2], order[1::2]]  # so each step's two batches form the 1-process batch


def test_replicas_end_identical(two):
    assert two["result"]["in_sync"] is True


def test_only_rank_zero_writes_the_checkpoint(two):
    assert two["result"]["checkpoint_writers"] == [0]
    ckpt_dir = two["dir"] / "ckpt"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["last.pt"]  # no per-rank copies, no temp files
    state = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert (state["epoch"], state["world_size"]) == (EPOCHS, 2)
    assert not any(k.startswith("module.") for k in state["model"])
    model = ddp_train.make_model(1)
    model.load_state_dict(state["model"])  # a plain model loads it: no DDP wrapper needed
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), params(two["result"])[name]), name


def test_the_ddp_wrapper_itself_prefixes_its_keys(two):
    assert two["result"]["ddp_state_dict_keys"] == [f"module.{k}" for k in two["result"]["params"]]


def test_only_rank_zero_logs_and_no_bar_without_a_terminal(two):
    lines = two["stdout"].splitlines()
    assert len(lines) == 1 + EPOCHS + 1, lines
    assert all(line.startswith("[rank 0/2] ") for line in lines), lines
    assert "gloo on cpu: 2 process(es) x batch 8 = global batch 16, 4 steps per epoch" in lines[0]
    assert "[rank 1/2]" not in two["stdout"] + two["stderr"]
    assert "training" not in two["stderr"]  # stderr is a pipe here, not a terminal


def gloo_threads() -> list[str]:
    tasks = Path("/proc/self/task")
    return [name for t in tasks.iterdir() if "gloo" in (name := (t / "comm").read_text().strip())]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc")
def test_shutdown_stops_gloo_threads(tmp_path, monkeypatch):
    """Threads that outlive destroy_process_group() can abort the process when Python exits."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    before = gloo_threads()
    ddp_train.main(["--backend", "gloo", "--epochs", "1", "--no-progress", "--out", str(tmp_path / "r.json")])
    assert gloo_threads() == before == []


def test_same_run_in_process_without_a_launcher_shows_the_bar_on_a_terminal(one, tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    argv = ["--backend", "gloo", "--epochs", str(EPOCHS), "--batch-size", "16",
            "--out", str(tmp_path / "r.json"), "--checkpoint", str(tmp_path / "c.pt")]
    assert ddp_train.main(argv) == 0
    assert not torch.distributed.is_initialized()  # the process group was torn down
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["world_size"] == 1 and result["checkpoint_writers"] == [0]
    for name, p in params(result).items():
        assert torch.allclose(p, params(one["result"])[name], rtol=0, atol=1e-6), name
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


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "ckpt.pt"
    ddp_train.atomic_write(target, lambda f: f.write(b"old"))

    def crash(f):
        f.write(b"half of the new")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ddp_train.atomic_write(target, crash)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # the temporary file is gone


@pytest.mark.parametrize("bad", [["--batch-size", "0"], ["--epochs", "-1"], ["--lr", "0"], []])
def test_arguments_are_validated(bad):
    with pytest.raises(SystemExit):
        ddp_train.parse_args([*bad, "--out", "r.json"] if bad else [])


def test_help_does_not_import_torch():
    code = (f"import runpy, sys\nsys.argv = ['ddp_train.py', '--help']\n"
            f"try:\n    runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--batch-size" in done.stdout and "PER PROCESS" in done.stdout
