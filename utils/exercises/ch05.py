"""Checks for chapter 05 · Saving and loading.

Both checks build their own small, seeded models on the CPU and leave the global random generator as they
found it. Exercise 2 also hands the learner's ``load`` a checkpoint "written on a GPU this machine does not
have": the learner's own file, re-saved with every storage tagged with such a device (what a GPU server's
``torch.save`` writes), so a load without ``map_location`` fails here exactly as it would on a laptop.
"""

from __future__ import annotations

import pickle
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from utils.checkpoint import other_format
from utils.checks import exercise, expect, keeps_global_rng, learner_code

__all__ = ["check_resume", "check_strip_prefix"]


# ---------------------------------------------------------------- Exercise 1


class _Wrapped(nn.Module):
    """A model whose child ``submodule`` has ``module.`` inside its keys, and an ``encoder`` whose name starts
    with letters of ``module.`` (what ``str.lstrip`` removes)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 3)
        self.submodule = nn.Linear(3, 2)
        self.register_buffer("steps", torch.tensor(7))


_HOW = (
    "Remove the prefix once, and only from keys that start with it: str.replace removes it anywhere in a "
    "key, str.lstrip / str.strip remove characters rather than a prefix, and in a regular expression the "
    "prefix needs re.escape (a '.' matches any character)"
)


def _key_hint(given: OrderedDict, out: dict, want: list[str], prefix: str, named: bool) -> str:
    """Name the first key of ``given`` that did not become its ``want`` entry in ``out``.

    Each given key is followed through the tensor it holds (values stay the same tensors); an answer that
    copies the values is followed by position instead. ``named``: the prefix was passed as an argument.
    """
    got = list(out)
    owner = {id(v): k for k, v in out.items()}
    # A prefix other than the default, passed as an argument, and the result a hard-coded 'module.' gives.
    # (A prefix of several parts is checked after '_orig_mod.', which a hard-coded answer does not pass.)
    parts = prefix.count(".") > 1
    hard_coded = sorted(k.removeprefix("module.") for k in given)
    argument = (". Use the prefix argument rather than a hard-coded 'module.'"
                if named and prefix != "module." and not parts and sorted(got) == hard_coded else "")
    for i, ((before, value), expected) in enumerate(zip(given.items(), want, strict=True)):
        after = owner.get(id(value), got[i] if len(got) == len(given) else None)
        if after == expected:
            continue
        if after is None:
            return (f"with prefix={prefix!r}, the key {before!r} is missing from the result (expected "
                    f"{expected!r}): keep every key, and a key without the prefix stays as it is{argument}")
        if after == before:
            several = (": a prefix can have several parts, so test key.startswith(prefix), not the key's first part"
                       if parts else "")
            return (f"with prefix={prefix!r}, the key {before!r} kept its prefix; expected "
                    f"{expected!r}{several}{argument}")
        if parts and not before.startswith(prefix) and after == before.split(".", 1)[1]:
            return (f"with prefix={prefix!r}, the key {before!r} became {after!r}; expected {expected!r}: it "
                    "starts with the prefix's first part only, so it does not start with the prefix and stays as "
                    "it is. Remove the prefix only from keys that start with all of it")
        if parts and before.startswith(prefix) and after == before.split(".", 1)[1]:
            return (f"with prefix={prefix!r}, the key {before!r} became {after!r}; expected {expected!r}: a "
                    "prefix can have several parts, so remove all of it (len(prefix) characters), not the text "
                    "up to the first '.'")
        return (f"with prefix={prefix!r}, the key {before!r} became {after!r}; expected {expected!r}. "
                f"{_HOW}{argument}")
    return f"with prefix={prefix!r}, expected exactly the keys {want}; got {got}{argument}"


def _judge_keys(fn: Callable[..., object], given: OrderedDict, prefix: str | None, what: str) -> None:
    """Call ``fn`` on ``given`` and check the result against the correct stripping."""
    p = "module." if prefix is None else prefix
    keys, values = list(given), list(given.values())
    with learner_code(what, "strip_prefix(state_dict, prefix='module.') takes a dict of name -> tensor and "
                            "returns a new one"):
        out = fn(given) if prefix is None else fn(given, prefix=prefix)
    expect(isinstance(out, dict), f"return a dict (an OrderedDict is fine); got {type(out).__name__}")
    expect(
        list(given) == keys and all(a is b for a, b in zip(given.values(), values, strict=True)),
        "do not modify the state dict you were given: build a new one (a caller may still need the original)",
    )
    expect(
        out is not given,
        "return a new dict, also when no key starts with the prefix: the dict you were given, handed back, is "
        "shared with the caller, so a change to either shows in the other",
    )
    want = [k[len(p):] if k.startswith(p) else k for k in keys]
    if sorted(out) != sorted(want):  # the order of the keys does not matter to load_state_dict
        expect(False, _key_hint(given, out, want, p, named=prefix is not None))
    expect(
        all(out[w] is v for w, v in zip(want, values, strict=True)),
        "keep the same tensors as values, not copies: only the names change, and a copy doubles the memory "
        "a large state dict takes",
    )


@exercise("Exercise 1 · Strip the DataParallel prefix")
@keeps_global_rng
def check_strip_prefix(fn: Callable[..., dict]) -> None:
    """``fn(state_dict, prefix="module.")`` returns a new dict with ``prefix`` removed from the start of keys."""
    torch.manual_seed(0)
    model = _Wrapped()
    # What nn.DataParallel / DistributedDataParallel(model).state_dict() holds: every key under "module.".
    wrapped = OrderedDict(("module." + k, v) for k, v in model.state_dict().items())
    _judge_keys(fn, wrapped, None, "calling strip_prefix(state_dict) on a DataParallel state dict")

    t = [torch.full((1,), float(i)) for i in range(5)]
    mixed = OrderedDict([
        ("module.a", t[0]),
        ("b.module.c", t[1]),  # "module." inside a key, not at its start
        ("module_list.0.weight", t[2]),  # starts with "module" but not with "module."
        ("module.module.w", t[3]),  # a child that is itself called `module`: strip once
        ("head", t[4]),
    ])
    _judge_keys(fn, mixed, "module.", "calling strip_prefix(state_dict, prefix='module.') on mixed keys")

    compiled = OrderedDict([("_orig_mod.encoder.weight", t[0]), ("_orig_mod.steps", t[1]), ("module.x", t[2])])
    _judge_keys(fn, compiled, "_orig_mod.", "calling strip_prefix(state_dict, prefix='_orig_mod.')")

    # A prefix of two parts, and a key that shares only its first part.
    nested = OrderedDict([("backbone.body.conv.weight", t[0]), ("backbone.head.bias", t[1])])
    _judge_keys(fn, nested, "backbone.body.", "calling strip_prefix(state_dict, prefix='backbone.body.')")

    # Nothing to strip: the result is still a new dict, with the same keys and tensors.
    plain = OrderedDict([("encoder.weight", t[0]), ("head", t[4])])
    _judge_keys(fn, plain, None, "calling strip_prefix(state_dict) on a state dict without the prefix")


# ---------------------------------------------------------------- Exercise 2


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """Mini-batch steps whose batch order and dropout masks come from torch's global generator."""
    model.train()
    for _ in range(steps):
        batch = torch.randperm(len(x))[:8]
        loss = nn.functional.mse_loss(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))


def _absent_gpu() -> str:
    """A CUDA device this machine does not have: ``cuda:1`` on a laptop or a one-GPU machine."""
    return f"cuda:{max(torch.cuda.device_count(), 1)}"


def _retagged(source: Path, target: Path, location: str) -> None:
    """Re-save the checkpoint at ``source`` to ``target`` as if every tensor had been saved from ``location``.

    ``torch.save`` asks ``torch.serialization.location_tag`` where each storage lives and writes that tag
    next to the bytes; ``torch.load`` restores each storage to its tag unless ``map_location`` says otherwise.
    """
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: location):
        torch.save(checkpoint, target)
    tags: set[str] = set()
    torch.load(target, map_location=lambda storage, tag: tags.add(tag) or storage, weights_only=True)
    if tags - {location}:  # pragma: no cover - a torch whose save no longer asks location_tag
        raise RuntimeError(f"could not write a checkpoint tagged {location}; got the tags {sorted(tags)}")


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict, torch.Tensor]:
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    state = {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.state_dict()["state"].items()}
    return weights, state, torch.get_rng_state()


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        a[i].keys() == b[i].keys() and all(torch.equal(a[i][k].cpu(), b[i][k].cpu()) for k in a[i]) for i in a
    )


_SAVE_HINT = "save(path, model, optimizer, step) writes the checkpoint to path and returns nothing in particular"
_LOAD_HINT = "load(path, model, optimizer) restores into the model and optimizer it is given and returns the step"


def _expect_restored(step: object, want_step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     saved: tuple[dict, dict, torch.Tensor]) -> None:
    weights, state, rng = saved
    expect(
        not isinstance(step, torch.Tensor) or step.numel() != 1 or step.item() != want_step,
        f"load must return the step that save was given, the int {want_step}, not a tensor holding it "
        f"(got {step!r}): store the int itself in the checkpoint (torch.load with weights_only=True reads ints), "
        "or return .item()",
    )
    expect(
        type(step) is int and step == want_step,
        f"load must return the step that save was given, stored in the checkpoint ({want_step} for this one), "
        f"not a constant or Adam's own step count; got {step!r}",
    )
    expect(
        all(torch.equal(v, weights[k]) for k, v in model.state_dict().items()),
        "after load the model must hold the saved weights: model.load_state_dict(checkpoint[...]) into the model "
        "you are given (with strict=True, so that a wrong key cannot pass silently)",
    )
    loaded_state = {i: dict(s) for i, s in optimizer.state_dict()["state"].items()}
    expect(
        _same_state(loaded_state, state),
        "the optimizer's state (Adam's step counts and moving averages) is not restored: save "
        "optimizer.state_dict() and load it with optimizer.load_state_dict(...) into the optimizer you are given",
    )
    expect(
        torch.equal(torch.get_rng_state(), rng),
        "torch's random state is not restored, so the batch order and the dropout masks after resuming "
        "differ: save torch.get_rng_state() and restore it with torch.set_rng_state(...)",
    )


@exercise("Exercise 2 · A checkpoint that resumes exactly")
@keeps_global_rng
def check_resume(save: Callable[..., object], load: Callable[..., int]) -> None:
    """``save(path, model, optimizer, step)`` and ``load(path, model, optimizer) -> step``.

    Training 3 steps, saving, loading into a fresh model and optimizer in a "new process" (another random
    seed) and training 3 more must give exactly the weights of 6 uninterrupted steps. A second checkpoint,
    written after 5 steps but saved as step 500 (so that Adam's own step count is not the answer) and
    tagged with a GPU this machine lacks, must load too, restore its own values and return 500.
    """
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "resume.pt"
        torch.manual_seed(0)
        straight = _model()
        opt = torch.optim.Adam(straight.parameters(), lr=0.05)
        _train(straight, opt, x, y, 6)

        torch.manual_seed(0)
        first = _model()
        opt = torch.optim.Adam(first.parameters(), lr=0.05)
        _train(first, opt, x, y, 3)
        at_3 = _snapshot(first, opt)
        with learner_code("calling save_training_state(path, model, optimizer, 3)", _SAVE_HINT):
            save(path, first, opt, 3)
        expect(path.is_file(), "save(path, model, optimizer, step) must write the file at path")
        try:
            torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:
            expect(other_format(path) != "safetensors",
                   "the file is a safetensors file, which holds named tensors only: not the optimizer's state "
                   "with its settings, the step or the random state. Write one dict of them all with torch.save "
                   "(or save_checkpoint)")
            expect(not isinstance(err, pickle.UnpicklingError),
                   "the checkpoint must load with torch.load(path, weights_only=True), and it holds a pickled "
                   "object (torch.save(model) or torch.save(optimizer) pickle whole objects): store state dicts, "
                   "tensors and numbers")
            # a file torch.load cannot read at all means the same to a learner
            expect(False, f"torch.load(path, weights_only=True) cannot read the file ({type(err).__name__}): "
                          "write it with torch.save (or save_checkpoint)")

        torch.manual_seed(1234)  # a new process: other initial weights, another random stream
        resumed = _model()
        opt2 = torch.optim.Adam(resumed.parameters(), lr=0.05)
        params = list(resumed.parameters())
        with learner_code("calling load_training_state(path, model, optimizer) on that file", _LOAD_HINT):
            step = load(path, resumed, opt2)
        _expect_restored(step, 3, resumed, opt2, at_3)
        expect(
            all(a is b for a, b in zip(resumed.parameters(), params, strict=True)),
            "load replaced the model's Parameters with new tensors (load_state_dict(..., assign=True) does "
            "that), so the optimizer you were given still holds the old ones and would train those instead: load "
            "without assign=True, which copies the saved values into the Parameters the optimizer holds",
        )
        _train(resumed, opt2, x, y, 3)
        expect(
            all(torch.equal(a, b) for a, b in zip(resumed.parameters(), straight.parameters(), strict=True)),
            "after 3 + 3 steps the weights differ from 6 uninterrupted steps",
        )

        # Two more steps, then a checkpoint as a GPU server writes it: other values, tags of an absent GPU.
        _train(first, opt, x, y, 2)
        at_5 = _snapshot(first, opt)
        written = Path(folder) / "written.pt"
        with learner_code("calling save_training_state(path, model, optimizer, 500)", _SAVE_HINT):
            save(written, first, opt, 500)  # the caller's step, which need not be Adam's count (5)
        gpu = _absent_gpu()
        from_gpu = Path(folder) / "from_gpu.pt"
        _retagged(written, from_gpu, gpu)
        torch.manual_seed(4321)
        fresh = _model()
        opt3 = torch.optim.Adam(fresh.parameters(), lr=0.05)
        with learner_code(
            f"calling load_training_state on a checkpoint written on {gpu}, a GPU this machine does not have",
            "torch.load puts every tensor back on the device it was saved from unless told otherwise: "
            "load with map_location='cpu' (load_state_dict then copies the weights to the model's device, and "
            "the optimizer moves its state to its parameters' device)",
        ):
            step = load(from_gpu, fresh, opt3)
        _expect_restored(step, 500, fresh, opt3, at_5)
