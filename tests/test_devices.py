"""The device helpers' contract on 0, 1 and 4 simulated GPUs, other accelerators, and bad input."""

from __future__ import annotations

import pytest
import torch

import utils
from utils import devices


def simulate(monkeypatch, kind: str | None, count: int) -> None:
    """Make torch.accelerator report ``count`` devices of ``kind`` (None: no accelerator)."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: kind is not None and count > 0)
    monkeypatch.setattr(
        torch.accelerator,
        "current_accelerator",
        lambda check_available=False: torch.device(kind) if kind is not None else None,
    )
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: count if kind is not None else 0)


CPU = torch.device("cpu")


def test_no_gpu(monkeypatch):
    simulate(monkeypatch, None, 0)
    assert utils.num_gpus() == 0
    assert utils.gpu_type() is None
    assert utils.try_gpu() == CPU
    assert utils.try_gpu(3) == CPU
    assert utils.try_all_gpus() == [CPU]


def test_one_gpu(monkeypatch):
    simulate(monkeypatch, "cuda", 1)
    assert utils.num_gpus() == 1
    assert utils.try_gpu() == torch.device("cuda", 0)
    assert utils.try_gpu(1) == CPU
    assert utils.try_all_gpus() == [torch.device("cuda", 0)]


def test_four_gpus(monkeypatch):
    simulate(monkeypatch, "cuda", 4)
    assert utils.num_gpus() == 4
    assert utils.try_gpu(3) == torch.device("cuda", 3)
    assert utils.try_gpu(4) == CPU
    assert utils.try_all_gpus() == [torch.device("cuda", i) for i in range(4)]


@pytest.mark.parametrize("kind", ["mps", "xpu"])
def test_other_gpus_count(monkeypatch, kind):
    simulate(monkeypatch, kind, 1)
    assert utils.gpu_type() == kind
    assert utils.try_gpu() == torch.device(kind, 0)
    assert utils.try_all_gpus() == [torch.device(kind, 0)]


def test_accelerator_that_is_not_a_gpu_is_ignored(monkeypatch):
    simulate(monkeypatch, "mtia", 2)
    assert utils.gpu_type() is None
    assert utils.num_gpus() == 0
    assert utils.try_all_gpus() == [CPU]


def test_real_machine_is_consistent():
    # Whatever this machine has, the three functions agree with each other and with torch.
    n = utils.num_gpus()
    assert len(utils.try_all_gpus()) == max(n, 1)
    assert (utils.try_gpu().type == "cpu") == (n == 0)
    if torch.cuda.is_available():
        assert n == torch.cuda.device_count()


@pytest.mark.parametrize(
    ("bad", "error"),
    [(-1, ValueError), (1.0, TypeError), (True, TypeError), ("0", TypeError), (None, TypeError)],
)
def test_try_gpu_rejects_bad_index(bad, error):
    with pytest.raises(error, match=r"\bi\b"):
        utils.try_gpu(bad)


def test_requires(monkeypatch, capsys):
    simulate(monkeypatch, "cuda", 1)
    assert utils.requires("cuda") is True
    assert capsys.readouterr().out == ""
    assert utils.requires("cuda", 2) is False
    assert "needs 2 CUDA devices; this machine has 1" in capsys.readouterr().out
    assert utils.requires("mps") is False
    assert "this machine has 0" in capsys.readouterr().out
    with pytest.raises(ValueError, match="kind"):
        utils.requires("tpu")
    with pytest.raises(TypeError, match="count"):
        utils.requires("cuda", 1.5)
    with pytest.raises(ValueError, match="count"):
        utils.requires("cuda", -2)


def test_contract_table_in_docstring_matches_names():
    for name in ("num_gpus", "try_gpu", "try_all_gpus"):
        assert name in devices.__doc__
