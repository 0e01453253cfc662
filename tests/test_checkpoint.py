"""utils.checkpoint: atomic saves, clear errors for damaged files, clear reports of keys that do not fit."""

from __future__ import annotations

import copy
import os
import pickle
import stat
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from utils.checkpoint import CheckpointError, atomic_write, load_checkpoint, load_weights, save_checkpoint


def small_net(n_out: int = 2, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, n_out))


def leftovers(folder: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# --- round trip ------------------------------------------------------------------------------------

def test_round_trip_of_a_full_checkpoint(tmp_path):
    net = small_net()
    opt = torch.optim.Adam(net.parameters(), lr=0.1)
    net(torch.ones(5, 3)).sum().backward()
    opt.step()
    checkpoint = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": 3,
                  "rng": torch.get_rng_state(), "note": "after epoch 3"}
    returned = save_checkpoint(checkpoint, tmp_path / "ckpt.pt")
    assert returned == tmp_path / "ckpt.pt"
    back = load_checkpoint(str(tmp_path / "ckpt.pt"))
    assert back["epoch"] == 3 and back["note"] == "after epoch 3"
    assert torch.equal(back["rng"], checkpoint["rng"])
    for k, v in net.state_dict().items():
        assert torch.equal(back["model"][k], v)
    opt2 = torch.optim.Adam(small_net().parameters(), lr=0.1)
    opt2.load_state_dict(back["optimizer"])
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])
    assert leftovers(tmp_path, {"ckpt.pt"}) == []


def test_saving_again_replaces_and_keeps_permissions(tmp_path):
    target = tmp_path / "w.pt"
    save_checkpoint({"x": torch.zeros(2)}, target)
    os.chmod(target, 0o640)
    save_checkpoint({"x": torch.ones(2)}, target)
    assert torch.equal(load_checkpoint(target)["x"], torch.ones(2))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert leftovers(tmp_path, {"w.pt"}) == []


def test_map_location_reaches_torch_load(tmp_path):
    save_checkpoint({"w": torch.arange(6.0).reshape(2, 3)}, tmp_path / "w.pt")
    seen = []
    back = load_checkpoint(tmp_path / "w.pt", map_location=lambda storage, loc: seen.append(loc) or storage)
    assert seen == ["cpu"] and torch.equal(back["w"], torch.arange(6.0).reshape(2, 3))
    meta = load_checkpoint(tmp_path / "w.pt", map_location="meta")
    assert meta["w"].is_meta and meta["w"].shape == (2, 3)


@pytest.mark.parametrize("bad", [5, 1.5, [("cpu", "cpu")]])
def test_map_location_type_is_checked(tmp_path, bad):
    save_checkpoint(small_net().state_dict(), tmp_path / "w.pt")
    with pytest.raises(TypeError, match="map_location"):
        load_checkpoint(tmp_path / "w.pt", map_location=bad)
    with pytest.raises(TypeError, match="map_location"):
        load_weights(small_net(), tmp_path / "w.pt", map_location=bad)


# --- a crash in the middle of a save ----------------------------------------------------------------

def crash_part_way(obj, f, *args, **kwargs):
    """Stand-in for torch.save that dies after writing part of the file (a full disk, a kill)."""
    f.write(b"PK\x03\x04 half of a checkpoint")
    raise OSError(28, "No space left on device")


def test_crash_mid_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ckpt.pt"
    save_checkpoint({"epoch": 1, "w": torch.arange(4.0)}, target)
    before = target.read_bytes()
    monkeypatch.setattr(torch, "save", crash_part_way)
    with pytest.raises(OSError, match="No space left"):
        save_checkpoint({"epoch": 2, "w": torch.zeros(4)}, target)
    monkeypatch.undo()
    assert target.read_bytes() == before
    back = load_checkpoint(target)
    assert back["epoch"] == 1 and torch.equal(back["w"], torch.arange(4.0))
    assert leftovers(tmp_path, {"ckpt.pt"}) == [], "the temporary file must be removed"


def test_crash_on_first_save_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "save", crash_part_way)
    with pytest.raises(OSError):
        save_checkpoint({"w": torch.ones(1)}, tmp_path / "new.pt")
    assert list(tmp_path.iterdir()) == []


def test_unpicklable_object_keeps_the_previous_checkpoint(tmp_path):
    """A real torch.save that fails half-way (a lambda cannot be pickled) behaves the same."""
    target = tmp_path / "ckpt.pt"
    save_checkpoint({"w": torch.ones(3)}, target)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        save_checkpoint({"w": torch.zeros(3), "hook": lambda x: x}, target)
    assert torch.equal(load_checkpoint(target)["w"], torch.ones(3))
    assert leftovers(tmp_path, {"ckpt.pt"}) == []


def test_plain_torch_save_loses_the_previous_checkpoint(tmp_path):
    """Why the helper exists: torch.save straight onto the file destroys it when it fails."""
    target = tmp_path / "ckpt.pt"
    torch.save({"w": torch.ones(3)}, target)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        torch.save({"w": torch.zeros(3), "hook": lambda x: x}, target)
    with pytest.raises(CheckpointError, match="no data.pkl") as info:
        load_checkpoint(target)
    assert str(target) in str(info.value)


# --- damaged files --------------------------------------------------------------------------------

@pytest.mark.parametrize("keep", [0.1, 0.5, 0.95])
def test_truncated_file_names_the_path(tmp_path, keep):
    target = tmp_path / "truncated.pt"
    save_checkpoint({"w": torch.arange(1000.0)}, target)
    data = target.read_bytes()
    target.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="not a complete checkpoint") as info:
        load_checkpoint(target)
    assert str(target) in str(info.value)


def test_empty_file_names_the_path(tmp_path):
    target = tmp_path / "empty.pt"
    target.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty") as info:
        load_checkpoint(target)
    assert str(target) in str(info.value)


def test_not_a_checkpoint(tmp_path):
    target = tmp_path / "notes.pt"
    target.write_text("these are notes, not weights\n" * 20)
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(target)


def test_flipped_bit_in_a_tensor_is_caught(tmp_path):
    target = tmp_path / "bitrot.pt"
    save_checkpoint({"w": torch.arange(1000.0)}, target)
    with zipfile.ZipFile(target) as archive:
        record = next(i for i in archive.infolist() if i.filename.endswith("data/0"))
    data = bytearray(target.read_bytes())
    data[record.header_offset + 200] ^= 0xFF          # inside the tensor's bytes
    target.write_bytes(bytes(data))
    # torch.load alone returns wrong numbers without complaint:
    assert not torch.equal(torch.load(target)["w"], torch.arange(1000.0))
    with pytest.raises(CheckpointError, match="checksum") as info:
        load_checkpoint(target)
    assert str(target) in str(info.value)
    assert not torch.equal(load_checkpoint(target, verify=False)["w"], torch.arange(1000.0))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.pt"):
        load_checkpoint(tmp_path / "nothing.pt")


def test_code_in_a_pickle_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this must not run",))

    target = tmp_path / "payload.pt"
    torch.save({"w": torch.ones(1), "p": Payload()}, target)
    with pytest.raises(pickle.UnpicklingError, match="builtins.print|GLOBAL print"):
        load_checkpoint(target)


# --- arguments --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 3, b"ckpt.pt", True])
def test_path_type_is_checked(bad):
    with pytest.raises(TypeError, match="path"):
        save_checkpoint({}, bad)
    with pytest.raises(TypeError, match="path"):
        load_checkpoint(bad)


def test_path_values_are_checked(tmp_path):
    with pytest.raises(ValueError, match="path"):
        save_checkpoint({}, "")
    with pytest.raises(ValueError, match="path.*does not exist"):
        save_checkpoint({}, tmp_path / "no_such_folder" / "w.pt")
    with pytest.raises(ValueError, match="path.*folder"):
        save_checkpoint({}, tmp_path)
    with pytest.raises(TypeError, match="verify"):
        load_checkpoint(tmp_path / "w.pt", verify="yes")


def test_load_weights_arguments(tmp_path):
    save_checkpoint(small_net().state_dict(), tmp_path / "w.pt")
    with pytest.raises(TypeError, match="module"):
        load_weights({"not": "a module"}, tmp_path / "w.pt")
    with pytest.raises(TypeError, match="key"):
        load_weights(small_net(), tmp_path / "w.pt", key=0)
    with pytest.raises(TypeError, match="strict"):
        load_weights(small_net(), tmp_path / "w.pt", strict=None)
    with pytest.raises(ValueError, match="strip_prefix"):
        load_weights(small_net(), tmp_path / "w.pt", strip_prefix="")


# --- keys that do not fit ---------------------------------------------------------------------------

def test_load_weights_round_trip_and_key(tmp_path):
    src, dst = small_net(), nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    save_checkpoint({"model": src.state_dict(), "epoch": 4}, tmp_path / "ckpt.pt")
    result = load_weights(dst, tmp_path / "ckpt.pt", key="model")
    assert result.missing_keys == [] and result.unexpected_keys == []
    x = torch.randn(5, 3)
    assert torch.equal(dst(x), src(x))
    with pytest.raises(ValueError, match="'weights'.*'epoch', 'model'"):
        load_weights(dst, tmp_path / "ckpt.pt", key="weights")
    with pytest.raises(CheckpointError, match="key='model'"):
        load_weights(dst, tmp_path / "ckpt.pt")


def test_wrong_keys_are_named_and_nothing_is_copied(tmp_path):
    class Renamed(nn.Module):
        def __init__(self):
            super().__init__()
            self.add_module("0", nn.Linear(3, 4))  # matches the checkpoint's first layer
            self.head = nn.Linear(4, 2)

    src = small_net()
    save_checkpoint(src.state_dict(), tmp_path / "w.pt")
    torch.manual_seed(1)
    model = Renamed()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert not torch.equal(before["0.weight"], src[0].weight), "a copy must be visible"
    with pytest.raises(CheckpointError) as info:
        load_weights(model, tmp_path / "w.pt")
    message = str(info.value)
    assert "missing from the checkpoint: 'head.weight', 'head.bias'" in message
    assert "not in the model: '2.weight', '2.bias'" in message
    assert "strict=False" in message and "Renamed" in message
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items()), "nothing is copied"


def test_partial_load_with_strict_false(tmp_path):
    """Reuse the first layer in a model with an extra head: the match loads, the rest is reported."""
    src = small_net()
    save_checkpoint({"model": src.state_dict()}, tmp_path / "ckpt.pt")
    bigger = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 7))
    fresh_tail = bigger[4].weight.clone()
    with pytest.raises(CheckpointError, match="missing from the checkpoint: '4.weight', '4.bias'"):
        load_weights(bigger, tmp_path / "ckpt.pt", key="model")
    result = load_weights(bigger, tmp_path / "ckpt.pt", key="model", strict=False)
    assert result.missing_keys == ["4.weight", "4.bias"] and result.unexpected_keys == []
    assert torch.equal(bigger[0].weight, src[0].weight) and torch.equal(bigger[2].bias, src[2].bias)
    assert torch.equal(bigger[4].weight, fresh_tail)


def test_shape_mismatch_fails_even_with_strict_false(tmp_path):
    src = small_net(n_out=2)
    save_checkpoint(src.state_dict(), tmp_path / "w.pt")
    other = small_net(n_out=5, seed=1)
    before = other[0].weight.clone()
    assert not torch.equal(before, src[0].weight), "a copy of the matching layer must be visible"
    with pytest.raises(CheckpointError, match=r"2\.weight: checkpoint \(2, 4\), model \(5, 4\)"):
        load_weights(other, tmp_path / "w.pt", strict=False)
    assert torch.equal(other[0].weight, before), "nothing is copied when a load fails"


def test_data_parallel_prefix_is_stripped(tmp_path):
    src = small_net()
    save_checkpoint(nn.DataParallel(copy.deepcopy(src)).state_dict(), tmp_path / "dp.pt")  # with a GPU it moves there
    plain = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    load_weights(plain, tmp_path / "dp.pt")
    assert torch.equal(plain[2].weight, src[2].weight)
    with pytest.raises(CheckpointError, match="not in the model: 'module.0.weight'"):
        load_weights(plain, tmp_path / "dp.pt", strip_prefix=None)


def test_prefix_is_kept_when_the_model_has_it_too(tmp_path):
    """A wrapped model's own keys start with "module." (DataParallel, an EMA wrapper): nothing to strip."""
    src = small_net()
    save_checkpoint(nn.DataParallel(copy.deepcopy(src)).state_dict(), tmp_path / "dp.pt")
    wrapped = nn.DataParallel(small_net(seed=1))
    result = load_weights(wrapped, tmp_path / "dp.pt")
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(wrapped.module[2].weight, src[2].weight)


def test_lazy_module_is_filled(tmp_path):
    src = nn.Linear(3, 2)
    save_checkpoint(src.state_dict(), tmp_path / "w.pt")
    lazy = nn.LazyLinear(2)
    load_weights(lazy, tmp_path / "w.pt")
    assert torch.equal(lazy.weight, src.weight) and torch.equal(lazy.bias, src.bias)


def test_atomic_write_keeps_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "result.json"
    assert atomic_write(target, lambda f: f.write(b"old")) == target

    def crash(f):
        f.write(b"half of the new")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, crash)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temporary file left
    with pytest.raises(TypeError, match="write"):
        atomic_write(target, b"not callable")


# --- what a killed save leaves behind ---------------------------------------------------------------

KILLED_SAVE = """
import os, signal, sys
from utils.checkpoint import atomic_write

def write(file):
    file.write(b"half a checkpoint" * 1000)
    file.flush()
    print(os.getpid(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # killed here, half-way through the save

atomic_write(sys.argv[1], write)
"""


def killed_save(path: Path) -> int:
    """Start a save to ``path`` in another process that is SIGKILLed half-way through; return its process id.

    Once ``subprocess.run`` returns, the killed process is gone."""
    import signal
    import subprocess
    import sys

    command = [sys.executable, "-c", KILLED_SAVE, str(path)]
    child = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    return int(child.stdout)


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL and process ids as used here are POSIX")
def test_next_save_removes_what_a_killed_save_left_and_only_that(tmp_path):
    target = tmp_path / "ckpt.pt"
    save_checkpoint({"epoch": 1}, target)
    dead = killed_save(target)
    (tmp_path / f".other.pt.{dead}-89abcdef.tmp").write_bytes(b"left by the same kind of kill")
    orphans = leftovers(tmp_path, {"ckpt.pt"})
    assert len(orphans) == 2 and all(name.endswith(".tmp") for name in orphans), orphans
    assert load_checkpoint(target) == {"epoch": 1}, "the kill must not touch the previous checkpoint"

    save_checkpoint({"epoch": 2}, target)
    assert load_checkpoint(target) == {"epoch": 2}
    assert leftovers(tmp_path, {"ckpt.pt"}) == [n for n in orphans if n.startswith(".other.pt.")], (
        "the orphan of ckpt.pt is gone; the one of other.pt stays until other.pt is saved again"
    )


@pytest.mark.skipif(os.name != "posix", reason="process ids as used here are POSIX")
def test_a_save_in_progress_elsewhere_keeps_its_temporary(tmp_path):
    import subprocess
    import sys

    target = tmp_path / "ckpt.pt"
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        in_progress = tmp_path / f".ckpt.pt.{alive.pid}-0123abcd.tmp"
        in_progress.write_bytes(b"being written")
        lookalike = tmp_path / ".ckpt.pt.backup.tmp"  # not a name this module writes
        lookalike.write_bytes(b"someone else's")
        impossible = tmp_path / ".ckpt.pt.99999999999-0123abcd.tmp"  # no process has this id: not ours
        impossible.write_bytes(b"someone else's")
        save_checkpoint({"epoch": 3}, target)
        assert in_progress.exists() and lookalike.exists() and impossible.exists()
        assert load_checkpoint(target) == {"epoch": 3}
    finally:
        alive.kill()
        alive.wait(timeout=30)


# --- files that are not torch.save zip archives get an accurate message ----------------------------

def test_legacy_format_is_named_as_such(tmp_path):
    target = tmp_path / "old.pt"
    torch.save({"w": torch.ones(2)}, target, _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="legacy torch.save format"):
        load_checkpoint(target)


@pytest.mark.parametrize("name", ["weights.safetensors", "renamed.pt"])
def test_safetensors_file_is_named_as_such(tmp_path, name):
    from safetensors.torch import save_file

    target = tmp_path / name
    save_file({"w": torch.ones(2)}, str(target))
    with pytest.raises(CheckpointError, match=r"is a safetensors file.*safetensors\.torch\.load_file"):
        load_checkpoint(target)


def test_damaged_pickle_with_valid_checksums_is_named_as_damaged(tmp_path):
    good, bad = tmp_path / "good.pt", tmp_path / "bad.pt"
    save_checkpoint({"w": torch.arange(3.0)}, good)
    with zipfile.ZipFile(good) as source, zipfile.ZipFile(bad, "w") as damaged:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename.endswith("data.pkl"):
                data = data[:5] + b"\x01" + data[6:]  # a byte no pickle opcode uses, with a matching CRC
            damaged.writestr(info, data)
    with pytest.raises(CheckpointError, match=r"bad\.pt is damaged: its pickle \(data\.pkl\) could not be read"):
        load_checkpoint(bad)
