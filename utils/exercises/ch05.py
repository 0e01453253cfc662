"""Checks for chapter 05 · Saving and loading.

Both checks build their own small, seeded models on the CPU and leave the global random generator as they
found it. Exercise 2 also hands the learner's ``load`` a checkpoint "written on a GPU this machine does not
have": the learner's own file, re-saved with every storage tagged with such a device (what a GPU server's
``torch.save`` writes), so a load without ``map_location`` fails here exactly as it would on a laptop.
"""

from __future__ import annotations

import inspect
import numbers
import pickle
import re
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from utils.checkpoint import other_format
from utils.checks import exercise, expect, keeps_global_rng, learner_code
from utils.i18n import N_, _

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


class _DataParallelLike(nn.Module):
    """Whose ``state_dict()`` is what ``nn.DataParallel(_Wrapped())``'s holds: every key under ``module.``,
    and a ``_metadata`` attribute (each submodule's version, by name) that ``load_state_dict`` reads."""

    def __init__(self) -> None:
        super().__init__()
        self.module = _Wrapped()


def _default_prefix(fn: Callable[..., object]) -> object:
    """The default of ``fn``'s ``prefix`` parameter; None when it has none or its signature cannot be read."""
    try:
        param = inspect.signature(fn).parameters.get("prefix")
    except (TypeError, ValueError):
        return None
    return None if param is None or param.default is inspect.Parameter.empty else param.default


_HOW = N_("Remove the prefix once, and only from keys that start with it")


def _removed_repeatedly(key: str, prefix: str) -> str:
    while key.startswith(prefix):
        key = key[len(prefix):]
    return key


#: Ways of stripping a prefix that go wrong, each with what it does. A hint names one only when the answer's
#: result is that way's on every key of the state dict.
_SLIPS = (
    (lambda key, prefix: key.replace(prefix, ""),
     N_("str.replace removes the prefix wherever it occurs in a key, also in the middle. Remove it once, and only "
        "from keys that start with it")),
    (lambda key, prefix: key.lstrip(prefix),
     N_("str.lstrip (and str.strip) remove characters, any of those in the prefix, not the prefix itself: use "
        "key.removeprefix(prefix), or key[len(prefix):] for a key that starts with it")),
    (lambda key, prefix: key.split(prefix)[-1],
     N_("str.split cuts a key at every occurrence of the prefix, and [-1] keeps only the last piece. Remove the "
        "prefix once, and only from keys that start with it")),
    (lambda key, prefix: re.sub("^" + prefix, "", key),
     N_("In a regular expression the prefix needs re.escape: unescaped, its '.' matches any character")),
    (_removed_repeatedly,
     N_("The prefix was removed as many times as it repeats at the start of a key; remove it once (a child "
        "module may itself be called module)")),
    (lambda key, prefix: key[len(prefix):],
     N_("Keys that do not start with the prefix lost their first len(prefix) characters all the same: test "
        "key.startswith(prefix) before cutting")),
)


def _slip(became: dict[str, str | None], prefix: str) -> str:
    """What the answer did, where one of :data:`_SLIPS` gives its result (``became``: key -> new key) on every
    key; else how to do it right."""
    for way, hint in _SLIPS:
        if all(after is None or way(before, prefix) == after for before, after in became.items()):
            return _(hint)
    return _(_HOW)


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
    hard_coded_used = named and prefix != "module." and not parts and sorted(got) == hard_coded

    def argument(hint: str) -> str:
        """``hint``, followed by the advice to use the argument where the answer ignores it."""
        if not hard_coded_used:
            return hint
        return _("{hint}. Use the prefix argument rather than a hard-coded 'module.'").format(hint=hint)

    became = {before: owner.get(id(value), got[i] if len(got) == len(given) else None)
              for i, (before, value) in enumerate(given.items())}
    for before, expected in zip(given, want, strict=True):
        after = became[before]
        if after == expected:
            continue
        if after is None:
            return argument(_("with prefix={prefix}, the key {key} is missing from the result (expected "
                              "{expected}): keep every key, and a key without the prefix stays as it is").format(
                                  prefix=repr(prefix), key=repr(before), expected=repr(expected)))
        if after == before:
            return argument((_("with prefix={prefix}, the key {key} kept its prefix; expected {expected}: a prefix "
                               "can have several parts, so test key.startswith(prefix), not the key's first part")
                             if parts else
                             _("with prefix={prefix}, the key {key} kept its prefix; expected {expected}")).format(
                                 prefix=repr(prefix), key=repr(before), expected=repr(expected)))
        if parts and not before.startswith(prefix) and after == before.split(".", 1)[1]:
            return argument(_("with prefix={prefix}, the key {key} became {after}; expected {expected}: it "
                              "starts with the prefix's first part only, so it does not start with the prefix and "
                              "stays as it is. Remove the prefix only from keys that start with all of it").format(
                                  prefix=repr(prefix), key=repr(before), after=repr(after), expected=repr(expected)))
        if parts and before.startswith(prefix) and after == before.split(".", 1)[1]:
            return argument(_("with prefix={prefix}, the key {key} became {after}; expected {expected}: a "
                              "prefix can have several parts, so remove all of it (len(prefix) characters), not the "
                              "text up to the first '.'").format(
                                  prefix=repr(prefix), key=repr(before), after=repr(after), expected=repr(expected)))
        how = _slip(became, prefix)
        return argument(_("with prefix={prefix}, the key {key} became {after}; expected {expected}. {how}").format(
            prefix=repr(prefix), key=repr(before), after=repr(after), expected=repr(expected), how=how))
    return argument(_("with prefix={prefix}, expected exactly the keys {keys}; got {actual}").format(
        prefix=repr(prefix), keys=want, actual=got))


def _expect_stripped(fn: Callable[..., object], given: OrderedDict, prefix: str | None, what: str) -> None:
    """``fn`` returns a new dict, ``given`` untouched, with the prefix removed once from the keys that start with it."""
    p = "module." if prefix is None else prefix
    keys, values = list(given), list(given.values())
    meta = getattr(given, "_metadata", None)
    meta_before = None if meta is None else [(k, dict(v)) for k, v in meta.items()]
    with learner_code(what, _("strip_prefix(state_dict, prefix='module.') takes a dict of name -> tensor and "
                              "returns a new one")):
        out = fn(given) if prefix is None else fn(given, prefix=prefix)
    expect(isinstance(out, dict), _("return a dict (an OrderedDict is fine); got {type}").format(
        type=type(out).__name__))
    expect(list(given) == keys and all(a is b for a, b in zip(given.values(), values, strict=True)),
           _("do not modify the state dict you were given: build a new one (a caller may still need the original)"))
    expect(getattr(given, "_metadata", None) is meta and (meta is None or list(meta.items()) == meta_before),
           _("do not modify the state dict you were given, nor its _metadata (the submodules' versions, which "
             "load_state_dict reads): copy.copy(state_dict) shares _metadata with the original, and "
             "consume_prefix_in_state_dict_if_present renames its entries in place. Build a new dict, e.g. "
             "OrderedDict(state_dict) or a dict comprehension"))
    expect(out is not given,
           _("return a new dict, also when no key starts with the prefix: the dict you were given, handed back, is "
             "shared with the caller, so a change to either shows in the other"))
    want = [k[len(p):] if k.startswith(p) else k for k in keys]
    if set(out) != set(want):  # the order of the keys does not matter to load_state_dict
        prefixed = [k for k in keys if k.startswith(p)]
        expect(not (set(out) == set(keys) and prefixed and not keys[0].startswith(p)),
               _("with prefix={prefix}, no key lost the prefix, although {count} of them start with it "
                 "({key}, ...); the first key, {first}, does not. Whether a key loses the prefix "
                 "depends on that key alone: test key.startswith(prefix) for every key, not for the first one").format(
                     prefix=repr(p), count=len(prefixed), key=repr(prefixed[0]), first=repr(keys[0])))
        default = _default_prefix(fn) if prefix is None else None
        expect(not isinstance(default, str) or default == p,
               _("strip_prefix(state_dict), called without a prefix, must strip {prefix}; your default is prefix="
                 "{default}. Give the parameter the default the task names, prefix={prefix}").format(
                     prefix=repr(p), default=repr(default)))
        expect(False, _key_hint(given, out, want, p, named=prefix is not None))
    expect(all(out[w] is v for w, v in zip(want, values, strict=True)),
           _("keep the same tensors as values, not copies: only the names change, and a copy doubles the memory "
             "a large state dict takes"))


@exercise("Exercise 1 · Strip the DataParallel prefix")
@keeps_global_rng
def check_strip_prefix(fn: Callable[..., dict]) -> None:
    """``fn(state_dict, prefix="module.")`` returns a new dict with ``prefix`` removed from the start of keys."""
    torch.manual_seed(0)
    # What nn.DataParallel / DistributedDataParallel(model).state_dict() holds: every key under "module.",
    # and _metadata, which must not change either.
    wrapped = _DataParallelLike().state_dict()
    _expect_stripped(fn, wrapped, None, _("calling strip_prefix(state_dict) on a DataParallel state dict"))

    t = [torch.full((1,), float(i)) for i in range(5)]
    mixed = OrderedDict([
        ("module.a", t[0]),
        ("b.module.c", t[1]),  # "module." inside a key, not at its start
        ("module_list.0.weight", t[2]),  # starts with "module" but not with "module."
        ("module.module.w", t[3]),  # a child that is itself called `module`: strip once
        ("head", t[4]),
    ])
    _expect_stripped(fn, mixed, "module.", _("calling strip_prefix(state_dict, prefix='module.') on mixed keys"))

    # The first key without the prefix, later ones with it: the verdict must not hang on the keys' order.
    head_first = OrderedDict([("head", t[4]), ("module.a", t[0]), ("module.encoder.weight", t[1])])
    _expect_stripped(fn, head_first, "module.", _("calling strip_prefix(state_dict, prefix='module.') on keys whose "
                                             "first one has no prefix"))

    compiled = OrderedDict([("_orig_mod.encoder.weight", t[0]), ("_orig_mod.steps", t[1]), ("module.x", t[2])])
    _expect_stripped(fn, compiled, "_orig_mod.", _("calling strip_prefix(state_dict, prefix='_orig_mod.')"))

    # A prefix of two parts, and a key that shares only its first part.
    nested = OrderedDict([("backbone.body.conv.weight", t[0]), ("backbone.head.bias", t[1])])
    _expect_stripped(fn, nested, "backbone.body.", _("calling strip_prefix(state_dict, prefix='backbone.body.')"))

    # Nothing to strip: the result is still a new dict, with the same keys and tensors.
    plain = OrderedDict([("encoder.weight", t[0]), ("head", t[4])])
    _expect_stripped(fn, plain, None, _("calling strip_prefix(state_dict) on a state dict without the prefix"))


# ---------------------------------------------------------------- Exercise 2


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """Mini-batch steps whose batch order and dropout masks come from torch's global generator."""
    model.train()
    for _step in range(steps):
        batch = torch.randperm(len(x))[:8]
        loss = nn.functional.mse_loss(model(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _model() -> nn.Module:
    """Batch norm's running statistics are buffers: model state that is not a parameter, and must come back too."""
    return nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 1))


# The training's learning rate, lowered (as a scheduler does) for the steps after the first save; and the fresh
# optimizers' own, which load must replace.
_LR, _LATER_LR, _OTHER_LR = 0.05, 0.02, 0.01


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


def _clone(value: object) -> object:
    return value.clone() if isinstance(value, torch.Tensor) else value


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
    """What a resume needs, by part (the keys of ``_NOT_RESTORED``)."""
    weights = model.state_dict()
    params = {name for name, _ in model.named_parameters()}
    opt = optimizer.state_dict()
    return {
        "parameters": {k: v.clone() for k, v in weights.items() if k in params},
        "buffers": {k: v.clone() for k, v in weights.items() if k not in params},
        "optimizer state": {i: {k: _clone(v) for k, v in s.items()} if isinstance(s, dict) else s
                            for i, s in opt["state"].items()},
        "optimizer settings": [{k: v for k, v in g.items() if k != "params"} if isinstance(g, dict) else g
                               for g in opt["param_groups"]],
        "rng": torch.get_rng_state(),
    }


def _same(a: object, b: object) -> bool:
    """Equal values, tensors compared exactly; False, never an error, for values that do not compare."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(u, v) for u, v in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:
        return False


_SAVE_HINT = N_("save(path, model, optimizer, step) writes the checkpoint to path and returns nothing in particular")
_LOAD_HINT = N_("load(path, model, optimizer) restores into the model and optimizer it is given and returns the step")

# Each part of the state, as it reads in a hint, and what to do when it does not come back.
_NOT_RESTORED = {
    "parameters": (
        N_("the model's weights"),
        N_("after load the model must hold the saved weights: model.load_state_dict(checkpoint[...]) into the model "
           "you are given (with strict=True, so that a wrong key cannot pass silently)"),
    ),
    "buffers": (
        N_("the model's buffers"),
        N_("after load the model's buffers (here batch norm's running mean and variance) must hold the saved values "
           "too: save model.state_dict(), which holds the buffers as well as the parameters, and load it with "
           "model.load_state_dict(...)"),
    ),
    "optimizer state": (
        N_("the optimizer's state"),
        N_("the optimizer's state (Adam's step counts and moving averages) is not restored: save "
           "optimizer.state_dict() and load it with optimizer.load_state_dict(...) into the optimizer you are given"),
    ),
    "optimizer settings": (
        N_("the optimizer's settings"),
        N_("the optimizer's settings (its param_groups: the learning rate, the betas, ...) are not restored: "
           "save the whole optimizer.state_dict(), which holds 'param_groups' as well as 'state', and load it with "
           "optimizer.load_state_dict(...)"),
    ),
    "rng": (
        N_("torch's random state"),
        N_("torch's random state is not restored, so the batch order and the dropout masks after resuming "
           "differ: save torch.get_rng_state() and restore it with torch.set_rng_state(...)"),
    ),
}


def _expect_restored(step: object, want_step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     saved: dict[str, object], fresh: dict[str, object], path: Path,
                     later: tuple[int, dict[str, object]] | None = None) -> None:
    """``saved``: the state written to ``path``; ``fresh``: the model's and optimizer's before load; ``later``: the
    step and state of a save made after this file's, which a value kept outside the file (in a variable of the
    learner's program) would give instead."""
    expect(not isinstance(step, torch.Tensor) or step.numel() != 1 or step.item() != want_step,
           _("load must return the step that save was given, the int {step}, not a tensor holding it "
             "(got {value}): store the int itself in the checkpoint (torch.load with weights_only=True reads ints), "
             "or return .item()").format(step=want_step, value=repr(step)))
    expect(type(step) is int or not isinstance(step, numbers.Real) or step != want_step,
           _("load must return the step as the int that save was given, {step}, not the "
             "{type} {value}: store step itself in the checkpoint (not float(step)), or return int(...)").format(
                 step=want_step, type=type(step).__name__, value=repr(step)))
    if later is not None:
        expect(not (type(step) is int and step == later[0]),
               _("load returned {value}, the step of a later save, for the file saved as step {step}: store the "
                 "step in the checkpoint file itself, not in a variable of your program (a new process starts "
                 "without it), so that each file gives back its own").format(value=step, step=want_step))
    adam_counts = {int(s["step"]) for s in saved["optimizer state"].values() if isinstance(s, dict) and "step" in s}
    expect(not (type(step) is int and step != want_step and step in adam_counts),
           _("load must return the step that save was given ({step} for this one); got {value}, Adam's own count of "
             "its updates, which the optimizer's state holds: store step itself in the checkpoint").format(
                 step=want_step, value=repr(step)))
    expect(type(step) is int and step == want_step,
           _("load must return the step that save was given, stored in the checkpoint ({step} for this one); got "
             "{value}").format(step=want_step, value=repr(step)))
    with learner_code(_("reading model.state_dict() and optimizer.state_dict() after load"),
                      _("restore the model and the optimizer with their own load_state_dict methods")):
        now = _snapshot(model, optimizer)
    for part, (name, hint) in _NOT_RESTORED.items():
        if _same(now[part], saved[part]):
            continue
        if later is not None:
            expect(not _same(now[part], later[1][part]),
                   _("after loading the file saved as step {step}, {what} came from a later save (step "
                     "{later_step}), not from this file: store it in the checkpoint file itself, not in a variable of "
                     "your program (a new process starts without it)").format(
                         step=want_step, what=_(name), later_step=later[0]))
        if part == "buffers":
            _expect_buffers_restored(now[part], saved[part], fresh[part], path)
        if part == "rng":
            _expect_rng_restored(now[part], saved[part], path)
        observed = _lr_observed(now[part], saved[part]) if part == "optimizer settings" else None
        if observed is not None:
            expect(False, _("the optimizer's settings (its param_groups: the learning rate, the betas, ...) are not "
                            "restored: after load the learning rate is {lr}, the saved one {saved_lr}: save the "
                            "whole optimizer.state_dict(), which holds 'param_groups' as well as 'state', and load "
                            "it with optimizer.load_state_dict(...)").format(lr=observed[0], saved_lr=observed[1]))
        expect(False, _(hint))


def _tensors_in(path: Path) -> list[torch.Tensor]:
    """Every tensor the checkpoint at ``path`` holds, at any depth of its dicts, lists and tuples."""
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(torch.load(path, map_location="cpu", weights_only=True))
            if isinstance(leaf, torch.Tensor)]


def _holds(path: Path, *values: torch.Tensor) -> bool:
    """The file holds each of ``values`` (an equal tensor somewhere in it)."""
    tensors = _tensors_in(path)
    return all(any(_same(t, v) for t in tensors) for v in values)


def _expect_buffers_restored(now: dict, saved: dict, fresh: dict, path: Path) -> None:
    """Name what was observed about batch norm's buffers after load, where it is more than "not restored"."""
    count = next(k for k in saved if k.endswith("num_batches_tracked"))
    extra = int(now[count]) - int(saved[count]) if isinstance(now.get(count), torch.Tensor) else 0
    expect(extra <= 0,
           _("after load batch norm's num_batches_tracked is {now}, {extra} more than saved: the model ran forward in "
             "training mode after its buffers were restored, which updates the running statistics (and draws "
             "dropout masks). Run no forward pass in load, or only in eval mode").format(
                 now=int(now[count]), extra=extra))
    statistics = [v for k, v in saved.items() if k != count]
    expect(not (_same(now, fresh) and _holds(path, *statistics)),
           _("the file holds the model's buffers (batch norm's running mean and variance), but load leaves the "
             "model's as they were: restore the whole model.state_dict() with model.load_state_dict(...), which "
             "copies the buffers as well as the parameters"))


def _seed_of(state: torch.Tensor) -> int:
    generator = torch.Generator()
    generator.set_state(state)
    return generator.initial_seed()


def _expect_rng_restored(now: torch.Tensor, saved: torch.Tensor, path: Path) -> None:
    """Name what was observed about torch's random state after load, where it is more than "not restored"."""
    seed = _seed_of(now)
    expect(not torch.equal(now, torch.Generator().manual_seed(seed).get_state()),
           _("after load torch's generator is freshly seeded (seed {seed}), as torch.manual_seed leaves it: a seed "
             "starts the random stream over from its beginning, while the run had drawn from it. Restore the state "
             "itself: save torch.get_rng_state() and call torch.set_rng_state(...) in load").format(seed=seed))
    expect(seed != _seed_of(saved),
           _("torch's random state was restored, then drawn from: after load the generator has the saved state's "
             "seed but has moved on from it, so something in load draws random numbers after torch.set_rng_state "
             "(a random tensor, a layer's initialization, dropout in a forward pass). Restore the random state last"))
    expect(not _holds(path, saved),
           _("the file holds torch's random state, but load does not restore it, so the batch order and the dropout "
             "masks after resuming differ: call torch.set_rng_state(...) with it in load"))


def _lr_observed(now: object, saved: object) -> tuple[str, str] | None:
    """The learning rates after load and saved (their reprs), where both can be read and differ; else None."""
    try:
        got, want = now[0]["lr"], saved[0]["lr"]  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        return None
    if got == want:
        return None
    return repr(got), repr(want)


def _expect_readable(path: Path) -> None:
    """The file at ``path`` exists and loads with ``weights_only=True``; else a hint on how it was written."""
    expect(path.is_file(), _("save(path, model, optimizer, step) must write the file at path"))
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        expect(other_format(path) != "safetensors",
               _("the file is a safetensors file, which holds named tensors only: not the optimizer's state "
                 "with its settings, the step or the random state. Write one dict of them all with torch.save "
                 "(or save_checkpoint)"))
        try:
            unsafe = sorted(name for name in torch.serialization.get_unsafe_globals_in_checkpoint(path)
                            if name.startswith("numpy"))
        except Exception:  # a file torch.save did not write, or the legacy format
            unsafe = ["numpy"] if "numpy" in str(err) else []
        expect(not unsafe,
               _("the checkpoint must load with torch.load(path, weights_only=True), and it holds numpy objects "
                 "({names}), which that refuses: store the step as a Python int (int(step), not "
                 "np.int64) and tensors rather than arrays. Only torch's random state is needed: the check draws "
                 "from torch's generator alone").format(names=", ".join(unsafe)))
        expect(not isinstance(err, pickle.UnpicklingError),
               _("the checkpoint must load with torch.load(path, weights_only=True), and it holds a pickled "
                 "object (torch.save(model) or torch.save(optimizer) pickle whole objects): store state dicts, "
                 "tensors and numbers"))
        # a file torch.load cannot read at all means the same to a learner
        expect(False, _("torch.load(path, weights_only=True) cannot read the file ({error}): "
                        "write it with torch.save (or save_checkpoint)").format(error=type(err).__name__))


def _trained(x: torch.Tensor, y: torch.Tensor, steps: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model built from seed 0, trained ``steps`` steps at the training's learning rate, and its optimizer."""
    torch.manual_seed(0)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=_LR)
    _train(model, optimizer, x, y, steps)
    return model, optimizer


def _expect_saved(save: Callable[..., object], path: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                  step: int, what: str) -> dict[str, object]:
    """``save`` writes at ``path`` a file that loads with ``weights_only=True``; the state it was given."""
    saved = _snapshot(model, optimizer)
    with learner_code(what, _(_SAVE_HINT)):
        save(path, model, optimizer, step)
    _expect_readable(path)
    return saved


def _expect_loaded(load: Callable[..., int], path: Path, saved: tuple[int, dict[str, object]], seed: int, what: str,
                   hint: str, later: tuple[int, dict[str, object]] | None = None,
                   beside: list[str] | None = None) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Into a fresh model and optimizer (another seed, another learning rate), ``load`` restores the step and the
    state ``saved`` at ``path`` in the Parameters the optimizer holds; the model and the optimizer."""
    torch.manual_seed(seed)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=_OTHER_LR)
    params, before = list(model.parameters()), _snapshot(model, optimizer)
    with learner_code(what, hint):
        try:
            step = load(path, model, optimizer)
        except FileNotFoundError:
            expect(not beside,
                   _("load raised FileNotFoundError on a copy of the checkpoint file: save also wrote {names} "
                     "next to path, and a copy of the file at path does not bring those along. Write everything "
                     "(model, optimizer, step, random state) into the one file at path, as one dict").format(
                         names=beside))
            raise
    _expect_restored(step, saved[0], model, optimizer, saved[1], before, path, later)
    expect(all(a is b for a, b in zip(model.parameters(), params, strict=True)),
           _("load replaced the model's Parameters with new tensors (load_state_dict(..., assign=True) does "
             "that), so the optimizer you were given still holds the old ones and would train those instead: load "
             "without assign=True, which copies the saved values into the Parameters the optimizer holds"))
    return model, optimizer


def _expect_loaded_from_an_absent_gpu(load: Callable[..., int], path: Path, written: Path,
                                      saved: dict[str, object]) -> None:
    """The file ``written`` (step 500), tagged with a GPU this machine lacks, loads and restores its own state."""
    gpu, from_gpu = _absent_gpu(), written.with_name("from_gpu.pt")
    _retagged(written, from_gpu, gpu)
    beside = sorted(p.name for p in written.parent.iterdir() if p.name not in {path.name, written.name, from_gpu.name})
    _expect_loaded(
        load, from_gpu, (500, saved), 4321,
        _("calling load_training_state on a checkpoint written on {device}, a GPU this machine does not "
          "have").format(device=gpu),
        _("torch.load puts every tensor back on the device it was saved from unless told otherwise: "
          "load with map_location='cpu' (load_state_dict then copies the weights to the model's device, and "
          "the optimizer moves its state to its parameters' device)"), beside=beside)


@exercise("Exercise 2 · A checkpoint that resumes exactly")
@keeps_global_rng
def check_resume(save: Callable[..., object], load: Callable[..., int]) -> None:
    """``save(path, model, optimizer, step)`` and ``load(path, model, optimizer) -> step``.

    Training 3 steps, saving, loading into a fresh model and optimizer in a "new process" (another random
    seed, another learning rate) and training 3 more must give exactly the weights of 6 uninterrupted steps.
    A second checkpoint, written after 5 steps (the last 2 at a lower learning rate, as a scheduler sets it) but
    saved as step 500 (so that Adam's own step count is not the answer) and tagged with a GPU this machine lacks,
    must load too, restore its own values and return 500.
    Last, the first file, loaded again, must still give back its own values: state kept outside the file (in
    a variable of the program) would be that of the later save.
    """
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
    with tempfile.TemporaryDirectory() as folder:
        path, written = Path(folder) / "resume.pt", Path(folder) / "written.pt"
        straight = _trained(x, y, 6)[0]
        first, opt = _trained(x, y, 3)
        at_3 = _expect_saved(save, path, first, opt, 3, _("calling save_training_state(path, model, optimizer, 3)"))
        resumed, opt2 = _expect_loaded(load, path, (3, at_3), 1234,
                                       _("calling load_training_state(path, model, optimizer) on that file"),
                                       _(_LOAD_HINT))
        _train(resumed, opt2, x, y, 3)
        expect(all(torch.equal(a, b) for a, b in zip(resumed.parameters(), straight.parameters(), strict=True)),
               _("after 3 + 3 steps the weights differ from 6 uninterrupted steps"))

        # Two more steps at a lower learning rate (as a scheduler sets it), then a checkpoint as a GPU server
        # writes it: other values, other settings, tags of an absent GPU.
        for group in opt.param_groups:
            group["lr"] = _LATER_LR
        _train(first, opt, x, y, 2)
        at_5 = _expect_saved(save, written, first, opt, 500,  # the caller's step, which need not be Adam's count (5)
                             _("calling save_training_state(path, model, optimizer, 500)"))
        _expect_loaded_from_an_absent_gpu(load, path, written, at_5)

        # The first file again, after the second was written: each file gives back its own values.
        _expect_loaded(load, path, (3, at_3), 99, _("calling load_training_state on the file saved as step 3, again "
                                                     "after the one saved as step 500"), _(_LOAD_HINT),
                       later=(500, at_5))
