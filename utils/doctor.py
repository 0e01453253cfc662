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
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from utils._validate import check_int
from utils.devices import GPU_TYPES, gpu_type, num_gpus
from utils.i18n import L_, _

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
            raise TypeError(_("kind must be a non-empty str such as 'cuda', got {value}").format(value=repr(self.kind)))
        check_int(self.index, "index")
        if not isinstance(self.name, str):
            raise TypeError(_("name must be a str, got {type}").format(type=type(self.name).__name__))
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
                raise TypeError(_("{name} must be a str, got {type}").format(
                    name=name, type=type(getattr(self, name)).__name__))
        if self.build not in BUILDS:
            raise ValueError(_("build must be one of {builds}, got {value}").format(
                builds=BUILDS, value=repr(self.build)))
        for name in ("cuda", "hip", "cuda_visible_devices"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(_("{name} must be a str or None, got {value}").format(name=name, value=repr(value)))
        if self.cudnn is not None:
            check_int(self.cudnn, "cudnn")
        for name in ("mps_built", "mps_available"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(_("{name} must be a bool, got {value}").format(
                    name=name, value=repr(getattr(self, name))))
        for name in ("accelerators", "nvidia_evidence", "amd_evidence", "warnings"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(_("{name} must be a tuple, got {type}").format(
                    name=name, type=type(getattr(self, name)).__name__))
        if not all(isinstance(a, Accelerator) for a in self.accelerators):
            raise TypeError(_("accelerators must hold Accelerator objects"))
        for name in ("nvidia_evidence", "amd_evidence", "warnings"):
            if not all(isinstance(item, str) for item in getattr(self, name)):
                raise TypeError(_("{name} must hold str").format(name=name))

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
        raise TypeError(_("environ must be a mapping, got {type}").format(type=type(environ).__name__))
    for name, value in (("which", which), ("exists", exists)):
        if not callable(value):
            raise TypeError(_("{name} must be callable, got {type}").format(name=name, type=type(value).__name__))
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
        raise TypeError(_("facts must be a utils.doctor.Facts, got {type}").format(type=type(facts).__name__))
    return facts


def _cuda_wheels(cuda: str | None) -> str | None:
    """The index of PyTorch's wheels for CUDA ``cuda`` (``'13.0'`` -> ``.../whl/cu130``); ``None`` if unknown."""
    match = re.fullmatch(r"(\d+)\.(\d+)(\.\d+)*", cuda or "")
    return f"{_WHEELS}cu{match[1]}{match[2]}" if match else None


def _shown(show: Callable[[str], str], **values: object) -> dict[str, str]:
    """The values for a message's placeholders, each written ``show(str(value))``: :func:`render` shows the
    machine's texts in ASCII."""
    return {name: show(str(value)) for name, value in values.items()}


def _nvidia_on_cpu_build(f: Facts, show: Callable[[str], str]) -> str:
    """The tip for a CPU-only build on a machine with an NVIDIA GPU: how to install a CUDA build of this torch
    release, with the exact command where the CUDA version is known (``Facts.cuda``, from ``torch.version.cuda``),
    else PyTorch's install selector."""
    evidence = " / ".join(f.nvidia_evidence)
    index = _cuda_wheels(f.cuda)
    if index:
        return L_(
            "An NVIDIA GPU is present ({evidence}) but this torch ({version}) is a CPU-only build: reinstall with "
            "a CUDA build, e.g. `pip install --force-reinstall torch=={release} --index-url {index}`."
        ).format(**_shown(show, evidence=evidence, version=f.torch, release=_release(f.torch), index=index))
    return L_(
        "An NVIDIA GPU is present ({evidence}) but this torch ({version}) is a CPU-only build: reinstall with a "
        "CUDA build, with the command that PyTorch's install selector ({page}) gives for your system; choose a "
        "CUDA version your driver supports (`nvidia-smi` shows the newest it supports)."
    ).format(**_shown(show, evidence=evidence, version=f.torch, page=_INSTALL_PAGE))


def _release(version: str) -> str:
    """``'2.13.0+cpu'`` -> ``'2.13.0'``."""
    return version.split("+", 1)[0]


def _cudnn_text(version: int | None) -> str:
    if version is None:
        return _("not available")
    if version >= 10000:  # cuDNN 9 and later: major * 10000 + minor * 100 + patch
        major, minor, patch = version // 10000, version % 10000 // 100, version % 100
    else:  # cuDNN 8: major * 1000 + minor * 100 + patch
        major, minor, patch = version // 1000, version % 1000 // 100, version % 100
    return f"{major}.{minor}.{patch} ({version})"


def _no_gpu_despite_driver(f: Facts, toolkit: str, evidence: str, show: Callable[[str], str]) -> str:
    """The tip for a GPU build that sees no GPU although a driver is present: one whole message for each
    build, with and without the warnings from torch to point to."""
    if f.build == "CUDA" and f.warnings:
        message = L_(
            "This torch is built for {toolkit} and a GPU driver is present ({evidence}), yet torch sees no GPU. "
            "The usual cause is a driver older than that toolkit needs (`nvidia-smi` shows the newest CUDA "
            "version the driver supports): update the driver, or install a torch built for an older toolkit. "
            "The warnings from torch, listed above, may say more."
        )
    elif f.build == "CUDA":
        message = L_(
            "This torch is built for {toolkit} and a GPU driver is present ({evidence}), yet torch sees no GPU. "
            "The usual cause is a driver older than that toolkit needs (`nvidia-smi` shows the newest CUDA "
            "version the driver supports): update the driver, or install a torch built for an older toolkit."
        )
    elif f.warnings:
        message = L_(
            "This torch is built for {toolkit} and a GPU driver is present ({evidence}), yet torch sees no GPU. "
            "The usual cause is a driver older than that toolkit needs (`rocm-smi --showdriverversion` shows the "
            "driver's version): update the driver, or install a torch built for an older toolkit. The warnings "
            "from torch, listed above, may say more."
        )
    else:
        message = L_(
            "This torch is built for {toolkit} and a GPU driver is present ({evidence}), yet torch sees no GPU. "
            "The usual cause is a driver older than that toolkit needs (`rocm-smi --showdriverversion` shows the "
            "driver's version): update the driver, or install a torch built for an older toolkit."
        )
    return message.format(**_shown(show, toolkit=toolkit, evidence=evidence))


def advice(facts: Facts) -> list[str]:
    """Plain-language advice for ``facts``, most important first (never empty)."""
    return _advice(_check_facts(facts), str)


def _advice(f: Facts, show: Callable[[str], str]) -> list[str]:
    """:func:`advice`, each value from ``f`` written ``show(value)`` into its message."""
    tips: list[str] = []
    cvd = f.cuda_visible_devices
    cuda_gpus = [a for a in f.accelerators if a.kind == "cuda"]
    gpu_build = f.build in ("CUDA", "ROCm")
    smi = "nvidia-smi -L" if f.build == "CUDA" else "rocm-smi"  # lists the GPUs (ROCm's are cuda:N too)

    # 1. Devices hidden on purpose (or by accident).
    if cvd is not None and cvd.strip() == "":
        tips.append(L_(
            "CUDA_VISIBLE_DEVICES is set to '' so no GPU is visible to this process. If you want a GPU, "
            "unset it (`unset CUDA_VISIBLE_DEVICES`) or list the GPUs to use (`CUDA_VISIBLE_DEVICES=0`) "
            "before Python starts."
        ))
    elif cvd is not None and gpu_build and not cuda_gpus:
        tips.append(L_(
            "CUDA_VISIBLE_DEVICES is set to {value} and no GPU is visible: it must list indices or UUIDs "
            "of GPUs this machine has (`{command}` lists them), e.g. `0` or `0,1`."
        ).format(**_shown(show, value=repr(cvd), command=smi)))
    elif cvd is not None and cuda_gpus:
        tips.append(L_(
            "CUDA_VISIBLE_DEVICES is set to {value}: this process sees only those GPUs, renumbered from 0, "
            "so cuda:0 is the first GPU in that list."
        ).format(**_shown(show, value=repr(cvd))))

    # 2. The classic install mistake: a CPU-only build on a machine with a GPU.
    if f.build == "CPU" and f.nvidia_evidence:
        tips.append(_nvidia_on_cpu_build(f, show))
    if f.build == "CPU" and f.amd_evidence:
        tips.append(L_(
            "An AMD GPU driver is present ({evidence}) but this torch ({version}) is a CPU-only build: reinstall "
            "with a ROCm build, e.g. `pip install --force-reinstall torch=={release} --index-url {index}` "
            "(replace rocm6.4 with the tag that {page} lists for your system)."
        ).format(**_shown(show, evidence=" / ".join(f.amd_evidence), version=f.torch, release=_release(f.torch),
                          index=f"{_WHEELS}rocm6.4", page=_INSTALL_PAGE)))

    # 3. A GPU build that finds no GPU, with nothing hiding them.
    if gpu_build and not cuda_gpus and cvd is None:
        toolkit = f"CUDA {f.cuda}" if f.build == "CUDA" else f"ROCm {f.hip}"
        evidence = f.nvidia_evidence if f.build == "CUDA" else f.amd_evidence
        if evidence:
            tips.append(_no_gpu_despite_driver(f, toolkit, " / ".join(evidence), show))
        else:
            tips.append(L_(
                "This torch is built for {toolkit} but no GPU driver was found. On a machine without a GPU "
                "that is harmless (everything runs on the CPU); the CPU-only build is a much smaller "
                "download: `pip install torch=={release} --index-url {index}`."
            ).format(**_shown(show, toolkit=toolkit, release=_release(f.torch), index=f"{_WHEELS}cpu")))

    if f.build == "XPU" and not any(a.kind == "xpu" for a in f.accelerators):
        tips.append(L_(
            "This torch is built for Intel GPUs (XPU) but sees none: is Intel's GPU driver installed? On a "
            "machine without an Intel GPU everything runs on the CPU, and the CPU-only build is a smaller "
            "download: `pip install torch=={release} --index-url {index}`."
        ).format(**_shown(show, release=_release(f.torch), index=f"{_WHEELS}cpu")))

    # 4. GPUs that work.
    if cuda_gpus:
        n = len(cuda_gpus)
        tips.append(
            L_("Ready: 1 GPU visible; `try_gpu()` returns cuda:0 and GPU-only cells run.") if n == 1
            else L_("Ready: {count} GPUs visible; `try_gpu()` returns cuda:0 and GPU-only cells run.").format(
                **_shown(show, count=n))
        )
        if f.build == "CUDA" and f.cudnn is None:
            tips.append(L_(
                "cuDNN is not available, so convolutions and recurrent layers use slower kernels: "
                "the official torch wheels bundle cuDNN, reinstall from them."
            ))
    other = [a for a in f.gpus if a.kind != "cuda"]
    if other and other[0].kind == "mps":
        tips.append(L_(
            "Apple GPU ready: `try_gpu()` returns mps:0. MPS lacks a few operations; setting "
            "PYTORCH_ENABLE_MPS_FALLBACK=1 runs those on the CPU instead of failing. CUDA-only cells are skipped."
        ))
    elif other:
        tips.append(L_("Ready: `try_gpu()` returns {device}. CUDA-only cells are skipped.").format(
            **_shown(show, device=f.device)))
    if f.mps_built and not f.mps_available and f.platform.startswith("Darwin"):
        tips.append(L_(
            "This torch supports Apple GPUs but MPS is not available: it needs an Apple-silicon Mac "
            "with macOS 12.3 or later."
        ))

    # 5. No GPU and no sign of one: say that this is fine.
    if not f.gpus and f.build == "CPU" and not f.nvidia_evidence and not f.amd_evidence and not f.mps_built:
        tips.append(L_(
            "No GPU found: every chapter runs on the CPU, and cells that need a GPU print 'Skipped'. "
            "For a free GPU, open a chapter in Colab (Runtime > Change runtime type)."
        ))
    if not tips:  # a combination none of the cases above covers
        tips.append(L_("Nothing to fix found: `try_gpu()` returns {device}.").format(**_shown(show, device=f.device)))
    return tips


def _ascii(text: str) -> str:
    """``text`` with every character outside ASCII replaced by ``?``."""
    return text.encode("ascii", "replace").decode("ascii")


def render(facts: Facts) -> str:
    """A readable report of ``facts``: one line per fact, then one line per tip (a terminal or notebook wraps
    long lines; a tip is one message for translators). What it shows of the machine (versions,
    device names, torch's warnings) is ASCII only, and so is the whole English report: a Windows console with a
    legacy code page can print it. Its own words are in the language set by :func:`utils.i18n.set_language`."""
    f = _check_facts(facts)
    build = (_("CPU only") if f.build == "CPU"
             else _ascii({"CUDA": f"CUDA {f.cuda}", "ROCm": f"ROCm {f.hip}", "XPU": "Intel XPU"}[f.build]))
    if f.accelerators:
        devices = [_ascii(str(a)) for a in f.accelerators]
    else:
        devices = [_("none visible")]
    cvd = _("not set") if f.cuda_visible_devices is None else _ascii(repr(f.cuda_visible_devices))
    mps = _("available") if f.mps_available else (_("built, not available") if f.mps_built else _("not built"))
    nvidia = _ascii(" / ".join(f.nvidia_evidence)) or _("not found")
    amd = _ascii(" / ".join(f.amd_evidence)) or _("not found")
    # One message per line, the name of the fact in its first 22 columns (a translation keeps the values in
    # one column); a further device is listed under the first one.
    lines = [
        L_("PyTorch doctor"),
        "=" * 14,
        L_("Python                {version} ({platform})").format(version=_ascii(f.python),
                                                                  platform=_ascii(f.platform)),
        L_("torch                 {version}").format(version=_ascii(f.torch)),
        L_("build                 {build}").format(build=build),
        L_("cuDNN                 {version}").format(version=_cudnn_text(f.cudnn)),
        L_("devices               {device}").format(device=devices[0]),
        *(" " * 22 + d for d in devices[1:]),
        L_("course device         {device}").format(device=_ascii(f.device)),
        L_("CUDA_VISIBLE_DEVICES  {value}").format(value=cvd),
        L_("Apple MPS             {state}").format(state=mps),
        L_("NVIDIA driver         {state}").format(state=nvidia),
        L_("AMD ROCm driver       {state}").format(state=amd),
    ]
    if f.warnings:
        lines += ["", L_("Warnings from torch")]
        lines += ["- " + _ascii(w) for w in f.warnings]
    lines += ["", L_("Advice")]
    lines += [L_("- {tip}").format(tip=tip) for tip in _advice(f, _ascii)]  # one line per tip, as gettext has it
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the report for this machine; always returns 0 (the report is the result)."""
    if argv is not None and (not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv)):
        raise TypeError(_("argv must be a list of str or None, got {value}").format(value=repr(argv)))
    parser = argparse.ArgumentParser(prog="python -m utils.doctor", description=__doc__.split("\n")[0])
    parser.parse_args(argv)
    print(render(gather()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
