"""``python -m utils.doctor``: what this PyTorch installation can use, and what to do about it.

Run it when a notebook says *Skipped: this cell needs a CUDA device* on a machine that has one, or when
``torch.cuda.is_available()`` surprises you. It prints the Python and torch versions, how torch was
built (CPU only, CUDA, ROCm or XPU), the CUDA and cuDNN versions it was built with, the accelerators
this process can see, ``CUDA_VISIBLE_DEVICES``, Apple's MPS, and advice in plain words.

Two steps, kept apart so that tests and the chapter can feed simulated machines to the second one:

* :func:`gather` collects :class:`Facts` about this process (fast: it never runs ``nvidia-smi``, it only
  looks whether it is on the ``PATH``);
* :func:`advice` and :func:`render` turn any :class:`Facts` into advice and a readable report.

Only :func:`gather` touches the hardware. On a machine with a GPU it initializes CUDA (to read device
names and memory), which is why this module is not imported by ``utils/__init__.py``. Which devices count
as GPUs, and which one the course picks, come from :mod:`utils.devices` (``GPU_TYPES``, ``gpu_type``,
``num_gpus``, ``try_gpu``), so the doctor and the notebooks cannot disagree.

Used by: chapter 08 (section "Which torch is this?", which runs it in the notebook and feeds it simulated
machines) and the course map (chapter 00), which points learners to the command; tested in
``tests/test_doctor.py`` on machines simulated with :func:`utils.fake_gpus.fake_gpus`.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import textwrap
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from utils._validate import check_int
from utils.devices import GPU_TYPES, gpu_type, num_gpus

__all__ = ["BUILDS", "Accelerator", "Facts", "advice", "gather", "main", "render"]

#: What :attr:`Facts.build` can be: how this torch was compiled.
BUILDS = ("CPU", "CUDA", "ROCm", "XPU")

_INSTALL_PAGE = "https://pytorch.org/get-started/locally/"
_WHEELS = "https://download.pytorch.org/whl/"


@dataclass(frozen=True)
class Accelerator:
    """One device this process can see: ``kind`` as in ``torch.device(kind, index)``.

    ``total_memory`` is in bytes, or ``None`` where the backend does not report it.
    """

    kind: str
    index: int
    name: str
    total_memory: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise TypeError(f"kind must be a non-empty str such as 'cuda', got {self.kind!r}")
        check_int(self.index, "index")
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")
        if self.total_memory is not None:
            check_int(self.total_memory, "total_memory")

    def __str__(self) -> str:
        memory = "" if self.total_memory is None else f", {self.total_memory / 2**30:.1f} GiB"
        return f"{self.kind}:{self.index}  {self.name}{memory}"


@dataclass(frozen=True)
class Facts:
    """What :func:`gather` found; build one by hand to describe a simulated machine.

    Attributes:
        python: Python version, e.g. ``'3.11.9'``.
        platform: operating system and machine, e.g. ``'Linux x86_64'``.
        torch: ``torch.__version__``, e.g. ``'2.13.0+cpu'``.
        build: one of :data:`BUILDS`.
        cuda: the CUDA version torch was built with (``torch.version.cuda``), ``None`` if none.
        hip: the ROCm/HIP version torch was built with (``torch.version.hip``), ``None`` if none.
        cudnn: ``torch.backends.cudnn.version()``, e.g. ``91002``; ``None`` when cuDNN is unavailable.
        accelerators: the devices this process can use, in index order.
        cuda_visible_devices: the variable's value; ``None`` when it is not set (``''`` hides every GPU).
        mps_built: this torch was built with Apple MPS support.
        mps_available: an Apple GPU is usable through MPS.
        nvidia_evidence: signs of an NVIDIA driver, e.g. ``('nvidia-smi found',)``; empty if none.
        amd_evidence: signs of an AMD ROCm driver, e.g. ``('/dev/kfd exists',)``; empty if none.
        warnings: messages torch emitted while the devices were being probed.
    """

    python: str
    platform: str
    torch: str
    build: str
    cuda: str | None = None
    hip: str | None = None
    cudnn: int | None = None
    accelerators: tuple[Accelerator, ...] = ()
    cuda_visible_devices: str | None = None
    mps_built: bool = False
    mps_available: bool = False
    nvidia_evidence: tuple[str, ...] = ()
    amd_evidence: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("python", "platform", "torch"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name} must be a str, got {type(getattr(self, name)).__name__}")
        if self.build not in BUILDS:
            raise ValueError(f"build must be one of {BUILDS}, got {self.build!r}")
        for name in ("cuda", "hip", "cuda_visible_devices"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a str or None, got {value!r}")
        if self.cudnn is not None:
            check_int(self.cudnn, "cudnn")
        for name in ("mps_built", "mps_available"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        for name in ("accelerators", "nvidia_evidence", "amd_evidence", "warnings"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(f"{name} must be a tuple, got {type(getattr(self, name)).__name__}")
        if not all(isinstance(a, Accelerator) for a in self.accelerators):
            raise TypeError("accelerators must hold Accelerator objects")
        for name in ("nvidia_evidence", "amd_evidence", "warnings"):
            if not all(isinstance(item, str) for item in getattr(self, name)):
                raise TypeError(f"{name} must hold str")

    @property
    def gpus(self) -> tuple[Accelerator, ...]:
        """The accelerators that are GPUs (``utils.devices.GPU_TYPES``): what ``try_all_gpus()`` lists."""
        return tuple(a for a in self.accelerators if a.kind in GPU_TYPES)

    @property
    def device(self) -> str:
        """The device ``utils.devices.try_gpu()`` picks on this machine: the first GPU, else ``'cpu'``."""
        return f"{self.gpus[0].kind}:{self.gpus[0].index}" if self.gpus else "cpu"


# --- gathering -------------------------------------------------------------------------------------

def _build() -> str:
    if torch.version.hip:
        return "ROCm"
    if torch.version.cuda:
        return "CUDA"
    if getattr(torch.version, "xpu", None):
        return "XPU"
    return "CPU"


def _describe(kind: str, index: int, caught: list[str]) -> Accelerator:
    """Name and memory of one device; a failing probe is recorded in ``caught``, not raised."""
    if kind == "mps":  # one Apple GPU; older releases cannot tell its memory
        try:
            memory = int(torch.mps.recommended_max_memory())
        except Exception:
            memory = None
        return Accelerator("mps", index, "Apple GPU (MPS)", memory)
    try:
        props = getattr(torch, kind).get_device_properties(index)
        memory = getattr(props, "total_memory", None)
        return Accelerator(kind, index, str(getattr(props, "name", kind)), None if memory is None else int(memory))
    except Exception as err:  # a half-working driver must not stop the report
        caught.append(f"reading the name of {kind}:{index} failed: {type(err).__name__}: {err}")
        return Accelerator(kind, index, "name unavailable")


def _accelerators(caught: list[str]) -> tuple[Accelerator, ...]:
    """The GPUs ``utils.devices`` sees, or the devices of a non-GPU accelerator, in index order."""
    kind, count = gpu_type(), num_gpus()
    if kind is None and torch.accelerator.is_available():  # an accelerator that is not a GPU (HPU, MTIA...)
        current = torch.accelerator.current_accelerator()
        kind, count = (current.type, torch.accelerator.device_count()) if current is not None else (None, 0)
    if kind is None:
        return ()
    return tuple(_describe(kind, i, caught) for i in range(count))


def gather(
    environ: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    exists: Callable[[str], bool] = os.path.exists,
) -> Facts:
    """Collect the :class:`Facts` of this process.

    ``environ``, ``which`` and ``exists`` default to ``os.environ``, ``shutil.which`` and
    ``os.path.exists``; tests pass their own to simulate a machine's files. Never raises because a
    probe fails: the failure is recorded in :attr:`Facts.warnings`.
    """
    environ = os.environ if environ is None else environ
    if not isinstance(environ, Mapping):
        raise TypeError(f"environ must be a mapping, got {type(environ).__name__}")
    for name, value in (("which", which), ("exists", exists)):
        if not callable(value):
            raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        try:
            accelerators = _accelerators(caught)
        except Exception as err:  # a broken driver must not stop the report
            accelerators = ()
            caught.append(f"probing the accelerators failed: {type(err).__name__}: {err}")
        try:
            cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        except Exception as err:
            cudnn = None
            caught.append(f"reading the cuDNN version failed: {type(err).__name__}: {err}")
    caught = [str(r.message).strip() for r in records] + caught

    nvidia = []
    if which("nvidia-smi"):
        nvidia.append("nvidia-smi found")
    if exists("/proc/driver/nvidia"):
        nvidia.append("/proc/driver/nvidia exists")
    amd = []
    if which("rocm-smi"):
        amd.append("rocm-smi found")
    if exists("/dev/kfd"):
        amd.append("/dev/kfd exists")

    return Facts(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        torch=torch.__version__,
        build=_build(),
        cuda=torch.version.cuda,
        hip=torch.version.hip,
        cudnn=cudnn,
        accelerators=accelerators,
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        mps_built=torch.backends.mps.is_built(),
        mps_available=torch.backends.mps.is_available(),
        nvidia_evidence=tuple(nvidia),
        amd_evidence=tuple(amd),
        warnings=tuple(dict.fromkeys(caught)),
    )


# --- advice and report -----------------------------------------------------------------------------

def _check_facts(facts: object) -> Facts:
    if not isinstance(facts, Facts):
        raise TypeError(f"facts must be a utils.doctor.Facts, got {type(facts).__name__}")
    return facts


def _cuda_wheels(cuda: str | None) -> str | None:
    """The index of PyTorch's wheels for CUDA ``cuda`` (``'13.0'`` -> ``.../whl/cu130``); ``None`` if unknown."""
    match = re.fullmatch(r"(\d+)\.(\d+)(\.\d+)*", cuda or "")
    return f"{_WHEELS}cu{match[1]}{match[2]}" if match else None


def _cuda_reinstall(f: Facts) -> str:
    """How to install a CUDA build of this torch release: the exact command where the CUDA version is known
    (``Facts.cuda``, from ``torch.version.cuda``), else PyTorch's install selector."""
    index = _cuda_wheels(f.cuda)
    if index:
        return f"e.g. `pip install --force-reinstall torch=={_release(f.torch)} --index-url {index}`"
    return (
        f"with the command that PyTorch's install selector ({_INSTALL_PAGE}) gives for your system; choose a "
        "CUDA version your driver supports (`nvidia-smi` shows the newest it supports)"
    )


def _release(version: str) -> str:
    """``'2.13.0+cpu'`` -> ``'2.13.0'``."""
    return version.split("+", 1)[0]


def _cudnn_text(version: int | None) -> str:
    if version is None:
        return "not available"
    if version >= 10000:  # cuDNN 9 and later: major * 10000 + minor * 100 + patch
        major, minor, patch = version // 10000, version % 10000 // 100, version % 100
    else:  # cuDNN 8: major * 1000 + minor * 100 + patch
        major, minor, patch = version // 1000, version % 1000 // 100, version % 100
    return f"{major}.{minor}.{patch} ({version})"


def advice(facts: Facts) -> list[str]:
    """Plain-language advice for ``facts``, most important first (never empty)."""
    f = _check_facts(facts)
    tips: list[str] = []
    cvd = f.cuda_visible_devices
    cuda_gpus = [a for a in f.accelerators if a.kind == "cuda"]
    gpu_build = f.build in ("CUDA", "ROCm")
    smi = "nvidia-smi -L" if f.build == "CUDA" else "rocm-smi"  # lists the GPUs (ROCm's are cuda:N too)

    # 1. Devices hidden on purpose (or by accident).
    if cvd is not None and cvd.strip() == "":
        tips.append(
            "CUDA_VISIBLE_DEVICES is set to '' so no GPU is visible to this process. If you want a GPU, "
            "unset it (`unset CUDA_VISIBLE_DEVICES`) or list the GPUs to use (`CUDA_VISIBLE_DEVICES=0`) "
            "before Python starts."
        )
    elif cvd is not None and gpu_build and not cuda_gpus:
        tips.append(
            f"CUDA_VISIBLE_DEVICES is set to {cvd!r} and no GPU is visible: it must list indices or UUIDs "
            f"of GPUs this machine has (`{smi}` lists them), e.g. `0` or `0,1`."
        )
    elif cvd is not None and cuda_gpus:
        tips.append(
            f"CUDA_VISIBLE_DEVICES is set to {cvd!r}: this process sees only those GPUs, renumbered from 0, "
            "so cuda:0 is the first GPU in that list."
        )

    # 2. The classic install mistake: a CPU-only build on a machine with a GPU.
    if f.build == "CPU" and f.nvidia_evidence:
        tips.append(
            f"An NVIDIA GPU is present ({' / '.join(f.nvidia_evidence)}) but this torch ({f.torch}) is a "
            f"CPU-only build: reinstall with a CUDA build, {_cuda_reinstall(f)}."
        )
    if f.build == "CPU" and f.amd_evidence:
        tips.append(
            f"An AMD GPU driver is present ({' / '.join(f.amd_evidence)}) but this torch ({f.torch}) is a "
            "CPU-only build: reinstall with a ROCm build, e.g. `pip install --force-reinstall "
            f"torch=={_release(f.torch)} --index-url {_WHEELS}rocm6.4` (replace rocm6.4 with the tag that "
            f"{_INSTALL_PAGE} lists for your system)."
        )

    # 3. A GPU build that finds no GPU, with nothing hiding them.
    if gpu_build and not cuda_gpus and cvd is None:
        toolkit = f"CUDA {f.cuda}" if f.build == "CUDA" else f"ROCm {f.hip}"
        evidence = f.nvidia_evidence if f.build == "CUDA" else f.amd_evidence
        shows = ("`nvidia-smi` shows the newest CUDA version the driver supports" if f.build == "CUDA"
                 else "`rocm-smi --showdriverversion` shows the driver's version")
        if evidence:
            tips.append(
                f"This torch is built for {toolkit} and a GPU driver is present ({' / '.join(evidence)}), "
                "yet torch sees no GPU. The usual cause is a driver older than that toolkit needs "
                f"({shows}): update the driver, or install a torch built for an older "
                "toolkit." + (" The warnings from torch, listed above, may say more." if f.warnings else "")
            )
        else:
            tips.append(
                f"This torch is built for {toolkit} but no GPU driver was found. On a machine without a GPU "
                "that is harmless (everything runs on the CPU); the CPU-only build is a much smaller "
                f"download: `pip install torch=={_release(f.torch)} --index-url {_WHEELS}cpu`."
            )

    if f.build == "XPU" and not any(a.kind == "xpu" for a in f.accelerators):
        tips.append(
            "This torch is built for Intel GPUs (XPU) but sees none: is Intel's GPU driver installed? On a "
            "machine without an Intel GPU everything runs on the CPU, and the CPU-only build is a smaller "
            f"download: `pip install torch=={_release(f.torch)} --index-url {_WHEELS}cpu`."
        )

    # 4. GPUs that work.
    if cuda_gpus:
        n = len(cuda_gpus)
        tips.append(
            f"Ready: {n} GPU{'s' if n > 1 else ''} visible; `try_gpu()` returns cuda:0 and GPU-only cells run."
        )
        if f.build == "CUDA" and f.cudnn is None:
            tips.append(
                "cuDNN is not available, so convolutions and recurrent layers use slower kernels: "
                "the official torch wheels bundle cuDNN, reinstall from them."
            )
    other = [a for a in f.gpus if a.kind != "cuda"]
    if other and other[0].kind == "mps":
        tips.append(
            "Apple GPU ready: `try_gpu()` returns mps:0. MPS lacks a few operations; setting "
            "PYTORCH_ENABLE_MPS_FALLBACK=1 runs those on the CPU instead of failing. CUDA-only cells are skipped."
        )
    elif other:
        tips.append(f"Ready: `try_gpu()` returns {f.device}. CUDA-only cells are skipped.")
    if f.mps_built and not f.mps_available and f.platform.startswith("Darwin"):
        tips.append(
            "This torch supports Apple GPUs but MPS is not available: it needs an Apple-silicon Mac "
            "with macOS 12.3 or later."
        )

    # 5. No GPU and no sign of one: say that this is fine.
    if not f.gpus and f.build == "CPU" and not f.nvidia_evidence and not f.amd_evidence and not f.mps_built:
        tips.append(
            "No GPU found: every chapter runs on the CPU, and cells that need a GPU print 'Skipped'. "
            "For a free GPU, open a chapter in Colab (Runtime > Change runtime type)."
        )
    if not tips:  # a combination none of the cases above covers
        tips.append(f"Nothing to fix found: `try_gpu()` returns {f.device}.")
    return tips


def render(facts: Facts, width: int = 100) -> str:
    """A readable report of ``facts``: one line per fact, then the advice. ASCII only."""
    f = _check_facts(facts)
    width = check_int(width, "width", 40)
    build = {"CPU": "CPU only", "CUDA": f"CUDA {f.cuda}", "ROCm": f"ROCm {f.hip}", "XPU": "Intel XPU"}[f.build]
    if f.accelerators:
        devices = [str(a) for a in f.accelerators]
    else:
        devices = ["none visible"]
    cvd = "not set" if f.cuda_visible_devices is None else repr(f.cuda_visible_devices)
    mps = "available" if f.mps_available else ("built, not available" if f.mps_built else "not built")
    rows = [
        ("Python", f"{f.python} ({f.platform})"),
        ("torch", f.torch),
        ("build", build),
        ("cuDNN", _cudnn_text(f.cudnn)),
        ("devices", devices[0]),
        *(("", d) for d in devices[1:]),
        ("course device", f.device),
        ("CUDA_VISIBLE_DEVICES", cvd),
        ("Apple MPS", mps),
        ("NVIDIA driver", " / ".join(f.nvidia_evidence) or "not found"),
        ("AMD ROCm driver", " / ".join(f.amd_evidence) or "not found"),
    ]
    key = max(len(k) for k, _ in rows) + 2
    lines = ["PyTorch doctor", "=" * 14]
    lines += [f"{k:<{key}}{v}" for k, v in rows]
    if f.warnings:
        lines += ["", "Warnings from torch"]
        for w in f.warnings:
            lines += textwrap.wrap(w, width, initial_indent="- ", subsequent_indent="  ", break_long_words=False)
    lines += ["", "Advice"]
    for tip in advice(f):
        lines += textwrap.wrap(
            tip, width, initial_indent="- ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
    return "\n".join(lines).encode("ascii", "replace").decode("ascii")


def main(argv: list[str] | None = None) -> int:
    """Print the report for this machine; always returns 0 (the report is the result)."""
    if argv is not None and (not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv)):
        raise TypeError(f"argv must be a list of str or None, got {argv!r}")
    parser = argparse.ArgumentParser(prog="python -m utils.doctor", description=__doc__.split("\n")[0])
    parser.parse_args(argv)
    print(render(gather()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
