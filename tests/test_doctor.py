"""``python -m utils.doctor`` on simulated machines, on this machine, and as a real command.

Machines with GPUs are simulated with the one shared double, :func:`utils.fake_gpus.fake_gpus`; other
patches go through ``unittest.mock.patch``, which undoes them even when a test fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from utils import devices, doctor
from utils.doctor import Accelerator, Facts, advice, gather, render
from utils.fake_gpus import fake_gpus

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30

LAPTOP = Facts(python="3.11.9", platform="Linux x86_64", torch="2.13.0+cpu", build="CPU")
H100 = Accelerator("cuda", 0, "NVIDIA H100 80GB HBM3", 80 * GiB)
ONE_GPU = Facts(
    python="3.11.9",
    platform="Linux x86_64",
    torch="2.13.0+cu126",
    build="CUDA",
    cuda="12.6",
    cudnn=91002,
    accelerators=(H100,),
    nvidia_evidence=("nvidia-smi found", "/proc/driver/nvidia exists"),
)


def test_no_gpu():
    tips = advice(LAPTOP)
    assert len(tips) == 1 and tips[0].startswith("No GPU found")
    report = render(LAPTOP)
    assert "2.13.0+cpu" in report and "CPU only" in report
    assert "none visible" in report and "course device         cpu" in report
    assert "CUDA_VISIBLE_DEVICES  not set" in report
    assert LAPTOP.device == "cpu" and LAPTOP.gpus == ()


def test_one_gpu():
    tips = advice(ONE_GPU)
    assert len(tips) == 1 and tips[0].startswith("Ready: 1 GPU visible")
    report = render(ONE_GPU)
    assert "cuda:0  NVIDIA H100 80GB HBM3, 80.0 GiB" in report
    assert "build                 CUDA 12.6" in report
    assert "cuDNN                 9.10.2 (91002)" in report
    assert ONE_GPU.device == "cuda:0"


def test_several_gpus_listed_one_per_line():
    facts = replace(ONE_GPU, accelerators=(H100, replace(H100, index=1)))
    report = render(facts)
    assert report.count("NVIDIA H100") == 2 and "cuda:1  NVIDIA H100" in report
    assert advice(facts)[0].startswith("Ready: 2 GPUs visible")


def test_cpu_only_build_on_a_machine_with_an_nvidia_gpu():
    facts = replace(LAPTOP, nvidia_evidence=("nvidia-smi found", "/proc/driver/nvidia exists"))
    tips = advice(facts)
    assert len(tips) == 1
    tip = tips[0]
    assert "An NVIDIA GPU is present (nvidia-smi found / /proc/driver/nvidia exists)" in tip
    # A CPU-only build knows no CUDA version (torch.version.cuda is None): no guessed wheel index, but
    # PyTorch's install selector.
    assert "CPU-only build: reinstall" in tip and "https://pytorch.org/get-started/locally/" in tip
    assert "--index-url" not in tip and "cu126" not in tip
    assert "No GPU found" not in " ".join(tips)
    assert "NVIDIA driver         nvidia-smi found / /proc/driver/nvidia exists" in render(facts)


@pytest.mark.parametrize(("cuda", "index"), [("13.0", "cu130"), ("12.6", "cu126"), ("12.8.1", "cu128")])
def test_reinstall_command_follows_the_cuda_version(cuda, index):
    facts = replace(LAPTOP, cuda=cuda, nvidia_evidence=("nvidia-smi found",))
    tip = advice(facts)[0]
    assert f"`pip install --force-reinstall torch==2.13.0 --index-url https://download.pytorch.org/whl/{index}`" in tip
    assert "get-started" not in tip


@pytest.mark.parametrize("cuda", [None, "", "thirteen"])
def test_reinstall_without_a_known_cuda_version_points_to_the_selector(cuda):
    tip = advice(replace(LAPTOP, cuda=cuda, nvidia_evidence=("nvidia-smi found",)))[0]
    assert "install selector (https://pytorch.org/get-started/locally/)" in tip and "--index-url" not in tip


def test_cpu_only_build_on_a_machine_with_an_amd_gpu():
    tip = advice(replace(LAPTOP, amd_evidence=("/dev/kfd exists",)))[0]
    assert "AMD GPU driver is present (/dev/kfd exists)" in tip and "whl/rocm" in tip


def test_hidden_devices():
    facts = replace(ONE_GPU, accelerators=(), cuda_visible_devices="")
    tips = advice(facts)
    assert tips[0].startswith("CUDA_VISIBLE_DEVICES is set to '' so no GPU is visible")
    assert not any("driver" in t for t in tips), "hiding the GPUs is the explanation, not the driver"
    report = render(facts)
    assert "CUDA_VISIBLE_DEVICES  ''" in report and "none visible" in report
    # The same variable on a CPU-only laptop: still said, and the laptop advice still given.
    laptop = advice(replace(LAPTOP, cuda_visible_devices=""))
    assert laptop[0].startswith("CUDA_VISIBLE_DEVICES is set to ''") and laptop[1].startswith("No GPU found")


def test_visible_devices_naming_a_missing_gpu():
    tips = advice(replace(ONE_GPU, accelerators=(), cuda_visible_devices="3"))
    assert tips[0].startswith("CUDA_VISIBLE_DEVICES is set to '3' and no GPU is visible")


def test_visible_devices_selecting_gpus():
    tips = advice(replace(ONE_GPU, cuda_visible_devices="2"))
    assert "renumbered from 0" in tips[0] and tips[1].startswith("Ready: 1 GPU")


def test_gpu_build_but_driver_too_old():
    facts = replace(ONE_GPU, accelerators=(), warnings=("CUDA initialization: The NVIDIA driver is too old",))
    tips = advice(facts)
    assert len(tips) == 1 and "driver older than that toolkit needs" in tips[0]
    report = render(facts)
    assert "Warnings from torch\n- CUDA initialization: The NVIDIA driver is too old" in report


def test_the_driver_tool_matches_the_build():
    """A ROCm machine is told about rocm-smi, a CUDA machine about nvidia-smi; the warnings sit above the advice."""
    rocm = replace(ONE_GPU, torch="2.13.0+rocm6.4", build="ROCm", cuda=None, hip="6.4", cudnn=None,
                   accelerators=(), nvidia_evidence=(), amd_evidence=("/dev/kfd exists",), warnings=("w",))
    for facts in (rocm, replace(rocm, cuda_visible_devices="3")):
        tip = advice(facts)[0]
        assert "rocm-smi" in tip and "nvidia" not in tip
    cuda = replace(ONE_GPU, accelerators=(), warnings=("w",))
    assert "`nvidia-smi` shows" in advice(cuda)[0]
    assert "`nvidia-smi -L` lists" in advice(replace(cuda, cuda_visible_devices="3"))[0]
    report = render(cuda)
    assert "listed above" in advice(cuda)[0] and report.index("Warnings from torch") < report.index("Advice")
    assert "warnings" not in advice(replace(cuda, warnings=()))[0]  # none to point to


def test_advice_is_never_empty():
    xpu = Facts(python="3.11.9", platform="Linux x86_64", torch="2.13.0+xpu", build="XPU")
    assert "Intel GPUs (XPU) but sees none" in advice(xpu)[0]
    assert advice(replace(xpu, accelerators=(Accelerator("xpu", 0, "Intel Arc"),)))[0].startswith("Ready")
    odd = replace(LAPTOP, mps_built=True)  # an MPS build off macOS: no case matches, the fallback speaks
    assert advice(odd) == ["Nothing to fix found: `try_gpu()` returns cpu."]
    for build in doctor.BUILDS:
        for accelerators in ((), (H100,), (Accelerator("xpu", 0, "x"),), (Accelerator("mtia", 0, "x"),)):
            for cvd in (None, "", "0"):
                for mps_built in (False, True):
                    facts = replace(LAPTOP, build=build, accelerators=accelerators, cuda_visible_devices=cvd,
                                    mps_built=mps_built)
                    assert advice(facts), facts


def test_gpu_build_on_a_machine_without_gpu():
    tips = advice(replace(ONE_GPU, accelerators=(), nvidia_evidence=()))
    assert len(tips) == 1 and "no GPU driver was found" in tips[0] and "whl/cpu" in tips[0]


def test_missing_cudnn():
    tips = advice(replace(ONE_GPU, cudnn=None))
    assert any(t.startswith("cuDNN is not available") for t in tips)
    assert "cuDNN                 not available" in render(replace(ONE_GPU, cudnn=None))


def test_cudnn_8_version_format():
    assert "8.9.2 (8902)" in render(replace(ONE_GPU, cudnn=8902))


def test_apple_gpu():
    mac = replace(LAPTOP, platform="Darwin arm64", torch="2.13.0", mps_built=True, mps_available=True,
                  accelerators=(Accelerator("mps", 0, "Apple GPU (MPS)", None),))
    assert mac.device == "mps:0"
    assert advice(mac)[0].startswith("Apple GPU ready")
    intel_mac = replace(mac, platform="Darwin x86_64", mps_available=False, accelerators=())
    assert "macOS 12.3" in advice(intel_mac)[0]


def test_report_is_ascii_with_one_line_per_tip():
    facts = replace(LAPTOP, nvidia_evidence=("nvidia-smi found",), warnings=("caf\u00e9 " * 40,))
    report = render(facts)
    report.encode("ascii")  # a Windows console with a legacy code page can print it
    lines = report.splitlines()
    assert "- " + "caf? " * 40 in lines                              # a warning, whole, on one line
    assert lines[lines.index("Advice") + 1:] == ["- " + tip for tip in advice(facts)]


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="build"):
        Facts(python="3", platform="x", torch="2", build="TPU")
    with pytest.raises(TypeError, match="accelerators"):
        Facts(python="3", platform="x", torch="2", build="CPU", accelerators=[H100])
    with pytest.raises(TypeError, match="cuda_visible_devices"):
        Facts(python="3", platform="x", torch="2", build="CPU", cuda_visible_devices=0)
    with pytest.raises(TypeError, match="torch"):
        Facts(python="3", platform="x", torch=(2, 13), build="CPU")
    with pytest.raises(TypeError, match="cudnn"):
        replace(ONE_GPU, cudnn="91002")
    with pytest.raises(ValueError, match="cudnn"):
        replace(ONE_GPU, cudnn=-1)
    with pytest.raises(TypeError, match="mps_available"):
        replace(LAPTOP, mps_available="yes")
    with pytest.raises(TypeError, match="nvidia_evidence"):
        replace(LAPTOP, nvidia_evidence=("nvidia-smi found", 1))
    with pytest.raises(ValueError, match="index"):
        Accelerator("cuda", -1, "x")
    with pytest.raises(TypeError, match="index"):
        Accelerator("cuda", True, "x")  # a bool is not an index
    with pytest.raises(TypeError, match="kind"):
        Accelerator("", 0, "x")
    with pytest.raises(ValueError, match="total_memory"):
        Accelerator("cuda", 0, "x", -1)
    with pytest.raises(TypeError, match="facts"):
        render({"build": "CPU"})
    with pytest.raises(TypeError, match="facts"):
        advice(None)
    with pytest.raises(TypeError, match="environ"):
        gather(environ=[("CUDA_VISIBLE_DEVICES", "")])
    with pytest.raises(TypeError, match="which"):
        gather(which="nvidia-smi")
    with pytest.raises(TypeError, match="exists"):
        gather(exists=None)
    with pytest.raises(TypeError, match="argv"):
        doctor.main("--help")


def test_main_prints_the_report(capsys):
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PyTorch doctor\n") and f"torch                 {torch.__version__}" in out


def test_the_list_of_gpu_kinds_is_shared_with_utils_devices():
    assert not hasattr(doctor, "GPU_KINDS") and doctor.GPU_TYPES is devices.GPU_TYPES
    for kind in devices.GPU_TYPES:
        facts = replace(LAPTOP, accelerators=(Accelerator(kind, 0, "a GPU"),))
        assert facts.device == f"{kind}:0" and len(facts.gpus) == 1
    other = replace(LAPTOP, accelerators=(Accelerator("mtia", 0, "not a GPU"),))
    assert other.device == "cpu" and other.gpus == ()


def _properties(index):
    return SimpleNamespace(name=f"Fake GPU {index}", total_memory=(index + 1) * GiB)


@pytest.mark.parametrize(("count", "kind"), [(0, "cuda"), (1, "cuda"), (3, "cuda"), (2, "xpu"), (1, "mps")])
def test_gather_agrees_with_utils_devices_on_simulated_machines(count, kind):
    with fake_gpus(count, kind), mock.patch.object(getattr(torch, kind), "get_device_properties", _properties,
                                                   create=True), \
            mock.patch.object(torch.mps, "recommended_max_memory", lambda: 16 * GiB):
        facts = gather(environ={})
        assert facts.device == str(devices.try_gpu())
        assert len(facts.gpus) == devices.num_gpus() == count
        assert [a.kind for a in facts.gpus] == [kind] * count
    if kind == "cuda" and count:
        assert [a.name for a in facts.gpus] == [f"Fake GPU {i}" for i in range(count)]
        assert facts.gpus[-1].total_memory == count * GiB
        assert f"cuda:{count - 1}  Fake GPU {count - 1}, {count}.0 GiB" in render(facts)
    if kind == "mps":
        assert facts.gpus[0].name == "Apple GPU (MPS)" and facts.gpus[0].total_memory == 16 * GiB
    assert not any("failed" in w for w in facts.warnings)


def test_an_apple_gpu_whose_memory_cannot_be_read_is_still_named():
    def broken():
        raise RuntimeError("no MPS here")

    with fake_gpus(1, "mps"), mock.patch.object(torch.mps, "recommended_max_memory", broken):
        facts = gather(environ={})
    assert facts.gpus == (Accelerator("mps", 0, "Apple GPU (MPS)", None),) and facts.device == "mps:0"


def test_a_device_whose_name_cannot_be_read_is_listed_with_a_warning():
    def broken(index):
        raise RuntimeError(f"no properties for device {index}")

    with fake_gpus(2, "cuda"), mock.patch.object(torch.cuda, "get_device_properties", broken):
        facts = gather(environ={})
    assert [str(a) for a in facts.gpus] == ["cuda:0  name unavailable", "cuda:1  name unavailable"]
    assert "reading the name of cuda:1 failed: RuntimeError: no properties for device 1" in facts.warnings
    assert facts.device == "cuda:0"


def test_an_accelerator_that_is_not_a_gpu_is_listed_but_not_used():
    mtia = torch.device("mtia")
    with fake_gpus(0), mock.patch.object(torch.accelerator, "is_available", lambda: True), \
            mock.patch.object(torch.accelerator, "current_accelerator", lambda check_available=False: mtia), \
            mock.patch.object(torch.accelerator, "device_count", lambda: 2):
        facts = gather(environ={})
        assert str(devices.try_gpu()) == facts.device == "cpu"
    assert [(a.kind, a.index) for a in facts.accelerators] == [("mtia", 0), ("mtia", 1)]
    assert facts.gpus == ()


def test_gather_reads_this_process():
    facts = gather()
    assert facts.torch == torch.__version__
    assert facts.python == ".".join(map(str, sys.version_info[:3]))
    assert facts.cuda == torch.version.cuda and facts.hip == torch.version.hip
    assert (facts.build == "CPU") == (torch.version.cuda is None and torch.version.hip is None
                                      and not getattr(torch.version, "xpu", None))
    assert facts.cuda_visible_devices == os.environ.get("CUDA_VISIBLE_DEVICES")
    assert facts.device == str(devices.try_gpu())
    assert len(facts.gpus) == devices.num_gpus()
    assert (facts.cudnn is None) == (not torch.backends.cudnn.is_available())


def test_gather_simulated_files_and_environment():
    facts = gather(
        environ={"CUDA_VISIBLE_DEVICES": ""},
        which=lambda name: f"/usr/bin/{name}" if name == "nvidia-smi" else None,
        exists=lambda path: path in {"/proc/driver/nvidia", "/dev/kfd"},
    )
    assert facts.cuda_visible_devices == ""
    assert facts.nvidia_evidence == ("nvidia-smi found", "/proc/driver/nvidia exists")
    assert facts.amd_evidence == ("/dev/kfd exists",)
    bare = gather(environ={}, which=lambda name: None, exists=lambda path: False)
    assert bare.cuda_visible_devices is None and bare.nvidia_evidence == () and bare.amd_evidence == ()


def test_a_failing_probe_is_reported_not_raised():
    with mock.patch.object(torch.accelerator, "is_available", side_effect=RuntimeError("driver exploded")):
        facts = gather()
    assert facts.accelerators == ()
    assert "probing the accelerators failed: RuntimeError: driver exploded" in facts.warnings


@pytest.mark.parametrize("gpus", [0, 1])
def test_gather_runs_no_program(gpus):
    """It only looks for nvidia-smi on the PATH (fast on every machine); it never starts it.

    The spies record calls rather than raise: ``gather`` turns a failing probe into a warning.
    """
    with fake_gpus(gpus), mock.patch.object(subprocess, "Popen") as popen, \
            mock.patch.object(subprocess, "run") as run, mock.patch.object(os, "system") as system:
        facts = gather(which=lambda name: f"/usr/bin/{name}")
    assert not popen.called and not run.called and not system.called
    assert facts.nvidia_evidence[0] == "nvidia-smi found" and len(facts.gpus) == gpus


def test_command_runs_and_exits_0_without_nvidia_smi():
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no nvidia-smi on this PATH
    result = subprocess.run([sys.executable, "-m", "utils.doctor"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"torch                 {torch.__version__}" in result.stdout
    assert "Advice\n- " in result.stdout
    assert result.stderr == ""
