"""The device helpers' contract on 0, 1 and 4 simulated GPUs, other accelerators, and bad input."""

from __future__ import annotations

import re

import pytest
import torch

import utils
from utils import devices
from utils.fake_gpus import fake_gpus

CPU = torch.device("cpu")


def test_no_gpu():
    with fake_gpus(0):
        assert utils.num_gpus() == 0
        assert utils.gpu_type() is None
        assert utils.try_gpu() == CPU
        assert utils.try_gpu(3) == CPU
        assert utils.try_all_gpus() == [CPU]


def test_one_gpu():
    with fake_gpus(1, "cuda"):
        assert utils.num_gpus() == 1
        assert utils.try_gpu() == torch.device("cuda", 0)
        assert utils.try_gpu(1) == CPU
        assert utils.try_all_gpus() == [torch.device("cuda", 0)]


def test_four_gpus():
    with fake_gpus(4, "cuda"):
        assert utils.num_gpus() == 4
        assert utils.try_gpu(3) == torch.device("cuda", 3)
        assert utils.try_gpu(4) == CPU
        assert utils.try_all_gpus() == [torch.device("cuda", i) for i in range(4)]


@pytest.mark.parametrize("kind", ["mps", "xpu"])
def test_other_gpus_count(kind):
    with fake_gpus(1, kind):
        assert utils.gpu_type() == kind
        assert utils.try_gpu() == torch.device(kind, 0)
        assert utils.try_all_gpus() == [torch.device(kind, 0)]


def test_accelerator_that_is_not_a_gpu_is_ignored():
    with fake_gpus(2, "mtia"):
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


def test_requires(capsys):
    with fake_gpus(1, "cuda"):
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


def contract_table() -> list[list[str]]:
    """The rows of the table in ``utils.devices``'s docstring, one cell per column, without the header."""
    lines = devices.__doc__.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=")]
    assert len(rules) == 3, "a simple reST table: a rule, the header, a rule, the rows, a rule"
    starts = [m.start() for m in re.finditer(r"=+", lines[rules[0]])]
    ends = [*starts[1:], None]
    return [[line[a:b].strip() for a, b in zip(starts, ends, strict=True)] for line in lines[rules[1] + 1 : rules[2]]]


def shown(value: object) -> str:
    """A result as the table writes it: ``cpu``, ``[cuda:0]``, ``[cuda:0, ..., cuda:3]``."""
    if isinstance(value, list):
        names = [str(v) for v in value]
        return "[" + ", ".join(names if len(names) <= 2 else [names[0], "...", names[-1]]) + "]"
    return str(value)


def test_contract_table_in_docstring_is_what_the_functions_return():
    rows = contract_table()
    assert [row[0] for row in rows] == ["``num_gpus()``", "``try_gpu()``", "``try_gpu(3)``", "``try_all_gpus()``"]
    for column, count in enumerate((0, 1, 4), start=1):
        with fake_gpus(count):
            for row in rows:
                call = row[0].strip("`")
                assert row[column] == f"``{shown(eval(call, vars(utils)))}``", (call, count)
    with fake_gpus(4):
        assert len(utils.try_all_gpus()) == 4  # what "..." stands for


@pytest.mark.parametrize("version, ok", [("2.13.0+cpu", True), ("2.11.0+cu130", True), ("3.0.0", True),
                                         ("2.10.1", False), ("1.13.1", False)])
def test_check_torch_version(capsys, version, ok):
    assert utils.check_torch_version(version) is ok
    said = capsys.readouterr().out
    assert (said == "") == ok
    if not ok:
        assert f"this is PyTorch {version}; the course needs 2.11 or newer" in said


def test_check_torch_version_arguments():
    assert utils.check_torch_version() is True  # the pinned torch of this environment
    with pytest.raises(TypeError, match="version"):
        utils.check_torch_version(2.13)
    with pytest.raises(ValueError, match="version"):
        utils.check_torch_version("latest")
    for bad in ("2.11", (2,), (2, 11, 0), (2, True), (2, -1), [2, 11]):
        with pytest.raises(TypeError, match="minimum"):
            utils.check_torch_version("2.13.0", minimum=bad)
    assert utils.check_torch_version("2.13.0", minimum=(2, 13)) is True


# --- the shared fake --------------------------------------------------------------------------------

#: Everything ``fake_gpus`` patches (those on ``torch._C`` may not exist outside the block).
PATCHED = [
    (torch.accelerator, ("is_available", "current_accelerator", "device_count", "synchronize", "current_stream")),
    (torch.cuda, ("is_available", "device_count", "synchronize", "_exchange_device", "_maybe_exchange_device",
                  "set_device", "current_device", "current_stream", "default_stream", "Event")),
    (torch._C, ("_accelerator_exchangeDevice", "_accelerator_maybeExchangeDevice", "_accelerator_setDeviceIndex",
                "_accelerator_getDeviceIndex")),
]
ABSENT = object()


def originals() -> dict[str, object]:
    return {f"{owner.__name__}.{name}": getattr(owner, name, ABSENT) for owner, names in PATCHED for name in names}


def test_fake_gpus_run_launched_work_later_on_a_virtual_clock():
    before = originals()
    with fake_gpus(2) as gpus:
        assert all(originals()[name] is not before[name] for name in before), "every one is patched"
        gpus.launch(0, 0.002)
        gpus.launch(1, 0.030)
        gpus.host(0.001)
        assert gpus.clock() == 0.001 and not gpus.idle(0) and not gpus.idle(1)
        torch.cuda.synchronize(0)
        assert gpus.clock() == pytest.approx(0.002) and gpus.idle(0) and not gpus.idle(1)
        torch.accelerator.synchronize("cuda:1")
        assert gpus.clock() == pytest.approx(0.030)
        assert gpus.synced == [torch.device("cuda", 0), torch.device("cuda", 1)]
        torch.cuda.synchronize()  # no argument: the current device, 0
        assert gpus.synced[-1] == torch.device("cuda", 0)
        with pytest.raises(RuntimeError, match="invalid device ordinal 2"):
            torch.cuda.synchronize(2)
    after = originals()
    assert all(after[name] is before[name] for name in before), "the patches are gone"


def test_fake_gpus_have_a_current_device_that_a_bare_synchronize_waits_for():
    with fake_gpus(3) as gpus:
        assert torch.cuda.current_device() == 0 and torch.accelerator.current_device_index() == 0
        torch.cuda.set_device("cuda:2")
        assert torch.cuda.current_device() == 2
        torch.cuda.synchronize()
        assert gpus.synced[-1] == torch.device("cuda", 2)
        with torch.cuda.device(1):  # selects cuda:1 for the block, then puts cuda:2 back
            assert torch.cuda.current_device() == 1
            torch.accelerator.synchronize()
        assert gpus.synced[-1] == torch.device("cuda", 1) and torch.cuda.current_device() == 2
        torch.accelerator.set_device_index(0)
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1
        assert torch.cuda.current_device() == 0
        with pytest.raises(RuntimeError, match="invalid device ordinal 3"):
            torch.cuda.set_device(3)
        with pytest.raises(ValueError):
            torch.cuda.set_device("cpu")  # torch's own parsing refuses the CPU
    with fake_gpus(0):
        with pytest.raises(RuntimeError, match="no cuda device"):
            torch.cuda.current_device()
        for synchronize in (torch.cuda.synchronize, torch.accelerator.synchronize):
            with pytest.raises(RuntimeError, match=r"synchronize called, but this \(fake\) machine has no cuda device"):
                synchronize()


def test_fake_gpus_streams_wait_for_their_device():
    with fake_gpus(2) as gpus:
        gpus.launch(0, 0.010)
        gpus.launch(1, 0.030)
        stream = torch.cuda.current_stream(1)
        assert stream.device == torch.device("cuda", 1) and not stream.query()
        stream.synchronize()
        assert gpus.clock() == pytest.approx(0.030) and stream.query()
        torch.cuda.default_stream().synchronize()  # no argument: the current device, 0
        torch.accelerator.current_stream("cuda:1").synchronize()
        assert gpus.synced == [torch.device("cuda", 1), torch.device("cuda", 0), torch.device("cuda", 1)]
        with pytest.raises(ValueError):
            torch.cuda.current_stream("cpu")  # torch's own parsing refuses the CPU
        with pytest.raises(RuntimeError, match="invalid device ordinal 2"):
            torch.cuda.current_stream(2)


def test_fake_gpus_events_mark_a_point_in_a_devices_queue():
    with fake_gpus(2) as gpus:
        gpus.launch(0, 0.200)                        # earlier work: not between the marks
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()                               # the current device's queue, cuda:0
        gpus.host(0.001)
        gpus.launch(0, 0.030)
        end.record(torch.cuda.current_stream(0))
        assert not end.query() and torch.cuda.Event().query()  # an event never recorded counts as passed
        with pytest.raises(RuntimeError, match="must be completed"):
            start.elapsed_time(end)
        end.synchronize()
        assert gpus.clock() == pytest.approx(0.230) and end.query() and gpus.synced == [torch.device("cuda", 0)]
        assert start.elapsed_time(end) == pytest.approx(30.0)  # milliseconds, the GPU's view
        with pytest.raises(ValueError, match="enable_timing"):
            torch.cuda.Event().elapsed_time(end)
        with pytest.raises(ValueError, match="recorded"):
            start.elapsed_time(torch.cuda.Event(enable_timing=True))
        gpus.launch(0, 0.050)
        ready = torch.cuda.Event()
        ready.record()
        ready.wait(torch.cuda.current_stream(1))    # later work on cuda:1 waits for cuda:0's mark
        gpus.launch(1, 0.010)
        torch.cuda.synchronize(1)
        assert gpus.clock() == pytest.approx(0.290)


def test_fake_gpus_arguments():
    with pytest.raises(TypeError, match="count"):
        with fake_gpus(1.5):
            pass
    with pytest.raises(ValueError, match="kind"):
        with fake_gpus(1, "cpu"):
            pass
    with fake_gpus(1) as gpus:
        with pytest.raises(ValueError, match="seconds"):
            gpus.launch(0, -1)
        with pytest.raises(ValueError, match="index"):
            gpus.launch(1, 0.1)
