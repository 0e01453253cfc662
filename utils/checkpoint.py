"""Saving checkpoints without losing the previous one, and loading them safely.

Three functions, one error type:

``save_checkpoint(obj, path)``
    Writes ``torch.save(obj)`` to a temporary file in the same folder, flushes it and fsyncs it to
    disk, then renames it over ``path`` with :func:`os.replace`. The rename is atomic: whoever reads
    ``path`` sees either the old checkpoint or the complete new one, never half a file. A crash while
    writing (an exception, a full disk, a killed process) leaves the previous checkpoint untouched. On
    an exception the temporary file is removed at once; one left by a killed process (its name holds
    the writer's process id) is removed by the next save to the same path, once that process is gone.

``load_checkpoint(path)``
    ``torch.load(path, weights_only=True)``: tensors, containers and plain Python values load; pickled
    code is refused. Before loading it checks that the file is a complete archive whose records match
    their CRC-32 checksums, so a truncated or corrupt file raises :class:`CheckpointError` naming the
    file, instead of an ``EOFError`` without a message, an ``OSError: Invalid argument``, or (for a
    flipped bit inside a tensor) silently wrong numbers. Files it does not load get an error that
    says what they are: the legacy (pre-1.6) ``torch.save`` format, a safetensors file, or an archive
    whose pickle is damaged.

``load_weights(module, path, key=...)``
    Loads a state dict from a checkpoint into a module. Keys that do not match are reported by name
    before anything is copied (the module is left untouched when it raises); ``strict=False`` loads
    the keys that match and returns the ones that did not.

Nothing here initializes CUDA; pass ``map_location`` to load GPU checkpoints on a CPU-only machine.
Used by chapter 05 (saving and loading) and chapter 10's training program (``utils.ddp_train``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import secrets
import shutil
import struct
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import torch
from torch import nn

from utils._validate import check_bool, check_path, check_str
from utils.i18n import L_, _

__all__ = ["CheckpointError", "atomic_write", "load_checkpoint", "load_weights", "save_checkpoint"]

#: What ``torch.load`` accepts as ``map_location``.
MapLocation = str | torch.device | Mapping[str, str] | Callable[..., Any] | None


class CheckpointError(RuntimeError):
    """A checkpoint file is incomplete or corrupt, or does not fit the module it is loaded into."""


def _temporary_name(stem: str) -> str:
    """``.NAME.PID-RANDOM.tmp``: hidden, next to the target, and naming the process that writes it."""
    return f".{stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _open_temporary(folder: Path, stem: str) -> tuple[int, Path]:
    """Create a new, empty, hidden file next to the target; the umask applies as for any new file."""
    for _attempt in range(100):
        candidate = folder / _temporary_name(stem)
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
        except FileExistsError:
            continue
        return fd, candidate
    raise FileExistsError(_("could not create a temporary file in {folder}").format(folder=folder))  # pragma: no cover


def _process_is_gone(pid: int) -> bool:
    if pid == os.getpid() or os.name != "posix":  # our own (another thread may be writing), or unknowable
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but belongs to someone else
        return False
    except OverflowError:  # no process can have this id, so no save of ours wrote the file: keep it
        return False
    return False


def remove_orphans(path: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed saves to ``path`` left behind; return what was removed.

    Only temporaries of ``path`` itself are touched (not those of other files in the folder), and only
    those whose writing process no longer runs, so a save in progress elsewhere keeps its file.
    """
    target = check_path(path, "path")
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(\d+)-[0-9a-f]{{8}}\.tmp")
    removed = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(target.parent):
            match = pattern.fullmatch(entry.name)
            if match and entry.is_file(follow_symlinks=False) and _process_is_gone(int(match.group(1))):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX; folders cannot be opened this way on Windows)."""
    if os.name != "posix":  # pragma: no cover
        return
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> Path:
    """Write ``path`` through ``write(file)`` atomically; return ``path`` as a :class:`~pathlib.Path`.

    ``write`` fills a temporary file in the same folder (a rename is only atomic within one file
    system), which is flushed and fsynced before :func:`os.replace` puts it in place: readers see the
    old file or the new one, never half of one. If ``write`` raises, the temporary file is deleted,
    the exception propagates, and a file already at ``path`` is unchanged. A file that is replaced
    keeps its permission bits. Temporaries that killed writes to ``path`` left behind are removed
    first (:func:`remove_orphans`).

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``, or ``write`` is not callable.
        ValueError: ``path`` is empty, names a folder, or its folder does not exist.
    """
    target = check_path(path, "path")
    if not callable(write):
        raise TypeError(_("write must be callable, got {type}").format(type=type(write).__name__))
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(_("path: the folder {folder} does not exist").format(folder=folder))
    if target.is_dir():
        raise ValueError(_("path: {path} is a folder, not a file").format(path=target))
    remove_orphans(target)
    fd, temporary = _open_temporary(folder, target.name)
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        if target.exists():
            shutil.copymode(target, temporary)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)
    return target


def save_checkpoint(obj: object, path: str | os.PathLike[str]) -> Path:
    """Save ``obj`` with ``torch.save`` to ``path`` atomically; return ``path`` as a :class:`~pathlib.Path`.

    See :func:`atomic_write`: if ``torch.save`` raises part-way, a checkpoint already at ``path`` is
    unchanged and no temporary file is left behind.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``.
        ValueError: ``path`` is empty, names a folder, or its folder does not exist.
    """
    return atomic_write(path, lambda file: torch.save(obj, file))


def _check_map_location(value: object) -> None:
    if not (value is None or isinstance(value, str | torch.device | Mapping) or callable(value)):
        raise TypeError(_(
            "map_location must be None, a str, a torch.device, a mapping or a callable, got {type} {value}"
        ).format(type=type(value).__name__, value=repr(value)))


def load_checkpoint(path: str | os.PathLike[str], *, map_location: MapLocation = None, verify: bool = True) -> Any:
    """Load a checkpoint written by ``torch.save`` (or :func:`save_checkpoint`) with ``weights_only=True``.

    Args:
        path: the file.
        map_location: passed to ``torch.load``; e.g. ``"cpu"`` loads a GPU checkpoint on a CPU-only
            machine, ``"meta"`` reads shapes and dtypes without the data.
        verify: compare every record of the archive with its CRC-32 first. This reads the file once
            more; pass ``False`` for very large files when the bytes are known to be good.

    Only the zip format that ``torch.save`` has written by default since PyTorch 1.6 is accepted.
    A pickle that needs code to load (a whole model object, an arbitrary class) raises
    ``pickle.UnpicklingError`` from ``torch.load``, unchanged: allow-list trusted classes with
    ``torch.serialization.safe_globals`` around the call.

    Raises:
        TypeError: ``path`` is not a ``str`` or ``os.PathLike``, ``verify`` is not a bool, or
            ``map_location`` is none of the kinds ``torch.load`` accepts.
        ValueError: ``path`` is empty.
        FileNotFoundError: there is no file at ``path``.
        CheckpointError: the file is empty, truncated, not a checkpoint, or corrupt; the message
            names the file.
    """
    source = check_path(path, "path")
    check_bool(verify, "verify")
    _check_map_location(map_location)
    if not source.is_file():
        raise FileNotFoundError(_("no checkpoint at {path}").format(path=source))
    if source.stat().st_size == 0:
        raise CheckpointError(L_("{path} is empty: the save that wrote it did not finish").format(path=source))
    _refuse_other_formats(source)
    try:
        with zipfile.ZipFile(source) as archive:
            names = archive.namelist()
            damaged = archive.testzip() if verify else None
    except (zipfile.BadZipFile, EOFError, OSError) as err:
        raise CheckpointError(L_(
            "{path} is not a complete checkpoint (truncated, or not written by torch.save): {error}"
        ).format(path=source, error=err)) from None
    if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        raise CheckpointError(L_(
            "{path} is not a complete checkpoint: it has no data.pkl record (did the save that wrote it fail?)"
        ).format(path=source))
    if damaged is not None:
        raise CheckpointError(L_("{path} is corrupt: its record {record} does not match its checksum").format(
            path=source, record=repr(damaged)))
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        if _REFUSED.search(str(err)):
            raise  # the file asks for code to run: refused on purpose, with torch's own explanation
        after = str(err).rsplit("WeightsUnpickler error:", 1)[-1]
        reason = next((line.strip() for line in after.splitlines() if line.strip()), "")
        raise CheckpointError(L_("{path} is damaged: its pickle (data.pkl) could not be read: {reason}").format(
            path=source, reason=reason)) from None
    except (EOFError, UnicodeDecodeError, ValueError, KeyError, IndexError, struct.error) as err:
        raise CheckpointError(L_("{path} is damaged: its pickle (data.pkl) could not be read: {reason}").format(
            path=source, reason=f"{type(err).__name__}: {err}")) from None
    except zipfile.BadZipFile as err:
        raise CheckpointError(L_("{path} could not be read as a checkpoint: {error}").format(
            path=source, error=repr(err))) from None
    except RuntimeError as err:
        if "PytorchStreamReader" in str(err):
            raise CheckpointError(L_("{path} could not be read as a checkpoint: {error}").format(
                path=source, error=err)) from None
        raise


#: How torch's weights-only unpickler words a refusal of code (as opposed to bytes it cannot parse).
_REFUSED = re.compile(r"was not an allowed global|is blocked|must be \S+ to load")


def other_format(source: Path) -> str | None:
    """``"safetensors"`` or ``"legacy"`` (the pre-1.6 ``torch.save`` format) when the file at ``source`` is
    one of them, judged by its first bytes; ``None`` otherwise. Chapter 05's check uses it too."""
    with open(source, "rb") as file:
        head = file.read(16)
    size = source.stat().st_size
    if len(head) >= 9 and head[8:9] == b"{" and 0 < struct.unpack("<Q", head[:8])[0] <= size - 8:
        return "safetensors"  # an 8-byte header length, then the JSON header
    if head[:1] == b"\x80":  # a bare pickle stream (protocol 2+), as the legacy format begins
        return "legacy"
    return None


def _refuse_other_formats(source: Path) -> None:
    """Name the formats that are not a ``torch.save`` zip archive, before the zip check calls them broken."""
    found = other_format(source)
    if found == "safetensors":
        raise CheckpointError(L_(
            "{path} is a safetensors file, not a torch.save checkpoint: load it with "
            "safetensors.torch.load_file(path)"
        ).format(path=source))
    if found == "legacy":
        raise CheckpointError(L_(
            "{path} is in the legacy torch.save format (PyTorch before 1.6, or "
            "_use_new_zipfile_serialization=False), which load_checkpoint does not read: it cannot verify "
            "it. Load it once with torch.load(path, weights_only=True) and save it again with save_checkpoint."
        ).format(path=source))


def _shown(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(repr(k) for k in keys[:limit])
    if len(keys) > limit:
        return _("{keys}, ... ({count} more)").format(keys=shown, count=len(keys) - limit)
    return shown


def load_weights(
    module: nn.Module,
    path: str | os.PathLike[str],
    *,
    key: str | None = None,
    strict: bool = True,
    strip_prefix: str | None = "module.",
    map_location: MapLocation = "cpu",
) -> nn.modules.module._IncompatibleKeys:
    """Load the state dict saved at ``path`` (or at ``checkpoint[key]``) into ``module``.

    Args:
        module: the model to fill.
        path: a checkpoint written by ``torch.save`` / :func:`save_checkpoint`; loaded with
            :func:`load_checkpoint` (so ``weights_only=True``).
        key: where the state dict sits in a full checkpoint, e.g. ``"model"``; ``None`` when the file
            is the state dict itself.
        strict: with ``True`` every key must match; with ``False`` matching keys are loaded and the
            others returned.
        strip_prefix: removed from the keys when *every* key starts with it and the module's own keys
            do not (``"module."`` is what ``nn.DataParallel`` and ``DistributedDataParallel`` add, so
            such a checkpoint loads into the plain model and into a wrapped one); ``None`` to keep
            keys as saved.
        map_location: passed to ``torch.load``; the default loads onto the CPU (``load_state_dict``
            then copies into the module's own device and dtype).

    Returns:
        ``load_state_dict``'s result: ``missing_keys`` and ``unexpected_keys``.

    Raises:
        TypeError / ValueError: a bad argument, named in the message (``key`` absent from the
            checkpoint is a ValueError listing the keys that are there).
        CheckpointError: keys are missing or unexpected (with ``strict=True``), or a tensor's shape
            differs from the module's (whatever ``strict``). The module is left untouched.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(_("module must be an nn.Module, got {type}").format(type=type(module).__name__))
    check_str(key, "key", allow_none=True, empty=True)
    check_bool(strict, "strict")
    check_str(strip_prefix, "strip_prefix", allow_none=True)
    source = check_path(path, "path")
    loaded = load_checkpoint(source, map_location=map_location)
    if key is not None:
        if not isinstance(loaded, Mapping) or key not in loaded:
            there = _shown(sorted(map(str, loaded))) if isinstance(loaded, Mapping) else type(loaded).__name__
            raise ValueError(_("key {key} is not in the checkpoint {file}; it holds: {there}").format(
                key=repr(key), file=source.name, there=there))
        loaded = loaded[key]
    if not isinstance(loaded, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in loaded.items()
    ):
        message = (L_("{path} does not hold a state dict of tensors (a full checkpoint? pass key=..., "
                      "e.g. key='model')") if isinstance(loaded, Mapping)
                   else L_("{path} does not hold a state dict of tensors"))
        raise CheckpointError(message.format(path=source))
    state = dict(loaded)
    expected = module.state_dict()
    if (
        strip_prefix is not None
        and state
        and all(k.startswith(strip_prefix) for k in state)
        and not all(k.startswith(strip_prefix) for k in expected)
    ):
        state = {k[len(strip_prefix) :]: v for k, v in state.items()}

    name = type(module).__name__
    resized = [  # a lazy module's parameters have no shape yet: load_state_dict gives them one
        _("{key}: checkpoint {saved}, model {expected}").format(
            key=k, saved=tuple(v.shape), expected=tuple(expected[k].shape))
        for k, v in state.items()
        if k in expected and not nn.parameter.is_lazy(expected[k]) and v.shape != expected[k].shape
    ]
    if resized:
        raise CheckpointError(L_(
            "{file} does not fit {model}: shapes differ for {shapes}. "
            "Drop those keys from the state dict to load the rest with strict=False."
        ).format(file=source.name, model=name, shapes="; ".join(resized)))
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if strict and (missing or unexpected):
        if missing and unexpected:
            message = L_("{file} does not fit {model}: missing from the checkpoint: {missing}; not in the model: "
                         "{unexpected}. Pass strict=False to load only the keys that match.")
        elif missing:
            message = L_("{file} does not fit {model}: missing from the checkpoint: {missing}. "
                         "Pass strict=False to load only the keys that match.")
        else:
            message = L_("{file} does not fit {model}: not in the model: {unexpected}. "
                         "Pass strict=False to load only the keys that match.")
        raise CheckpointError(message.format(file=source.name, model=name, missing=_shown(missing),
                                             unexpected=_shown(unexpected)))
    return module.load_state_dict(state, strict=strict)
