"""Checks for chapter 05 · Saving and loading."""

from __future__ import annotations

import copy
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_resume", "check_strip_prefix"]


class _Wrapped(nn.Module):
    """A model whose second child is called ``submodule``: ``"module."`` also occurs inside its keys."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 3)
        self.submodule = nn.Linear(3, 2)
        self.register_buffer("steps", torch.tensor(7))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.submodule(torch.relu(self.encoder(x)))


@exercise("Exercise 1 · Strip the DataParallel prefix")
def check_strip_prefix(fn: Callable[..., dict]) -> None:
    """``fn(state_dict, prefix="module.")`` returns a new dict with ``prefix`` removed from the start of keys."""
    torch.manual_seed(0)
    model = _Wrapped()
    saved = nn.DataParallel(copy.deepcopy(model)).state_dict()  # a copy: with one GPU, DataParallel moves it there
    saved = OrderedDict((k, v.cpu()) for k, v in saved.items())
    keys_before = list(saved)
    out = fn(saved)
    expect(isinstance(out, dict), f"return a dict (an OrderedDict is fine); got {type(out).__name__}")
    expect(list(saved) == keys_before, "do not modify the state dict you were given: build a new one")
    want = ["steps", "encoder.weight", "encoder.bias", "submodule.weight", "submodule.bias"]
    expect(
        list(out) == want,
        f"expected the keys {want} in this order; got {list(out)}. Remove the prefix only at the start "
        "of a key: str.replace also removes it inside 'submodule.', and str.lstrip removes characters, "
        "not a prefix",
    )
    expect(all(out[k] is saved["module." + k] for k in want), "keep the same tensors as values")
    plain = _Wrapped()
    plain.load_state_dict(out)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    expect(torch.equal(plain(x), model(x)), "the stripped state dict must load into the plain model")

    mixed = OrderedDict([("module.a", torch.zeros(1)), ("b.module.c", torch.ones(1))])
    out = fn(mixed)
    expect(list(out) == ["a", "b.module.c"], "keys that do not start with the prefix must stay as they are")
    out = fn(OrderedDict([("_orig_mod.w", torch.zeros(1))]), prefix="_orig_mod.")
    expect(list(out) == ["w"], "use the prefix argument, not a hard-coded 'module.'")


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


@exercise("Exercise 2 · A checkpoint that resumes exactly")
def check_resume(save: Callable[..., object], load: Callable[..., int]) -> None:
    """``save(path, model, optimizer, step)`` and ``load(path, model, optimizer) -> step``.

    Training 3 steps, saving, loading into a fresh model and optimizer in a "new process" (another
    random seed) and training 3 more must give exactly the weights of 6 uninterrupted steps.
    """
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 4, generator=gen), torch.randn(32, 1, generator=gen)
    with torch.random.fork_rng(devices=[]), tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "resume.pt"
        torch.manual_seed(0)
        straight = _model()
        opt = torch.optim.Adam(straight.parameters(), lr=0.05)
        _train(straight, opt, x, y, 6)

        torch.manual_seed(0)
        first = _model()
        opt = torch.optim.Adam(first.parameters(), lr=0.05)
        _train(first, opt, x, y, 3)
        rng_at_save = torch.get_rng_state()
        save(path, first, opt, 3)
        expect(path.is_file(), "save(path, model, optimizer, step) must write the file at path")
        try:
            torch.load(path, weights_only=True)
        except Exception as err:  # any failure here means the same to a learner
            expect(False, f"the checkpoint must load with weights_only=True; it fails with {type(err).__name__}. "
                          "Store state dicts, tensors and numbers, not objects")

        torch.manual_seed(1234)  # a new process: other initial weights, another random stream
        resumed = _model()
        opt = torch.optim.Adam(resumed.parameters(), lr=0.05)
        step = load(path, resumed, opt)
        expect(step == 3, f"load must return the step that was saved (3); got {step!r}")
        expect(
            all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), first.state_dict().values(),
                                                  strict=True)),
            "after load the model must hold the saved weights: model.load_state_dict(checkpoint['model'])",
        )
        expect(
            len(opt.state_dict()["state"]) > 0,
            "the optimizer's state (Adam's moving averages) is not restored: save optimizer.state_dict() and "
            "load it with optimizer.load_state_dict(...)",
        )
        expect(
            torch.equal(torch.get_rng_state(), rng_at_save),
            "torch's random state is not restored, so the batch order and the dropout masks after resuming "
            "differ: save torch.get_rng_state() and restore it with torch.set_rng_state(...)",
        )
        _train(resumed, opt, x, y, 3)
        expect(
            all(torch.equal(a, b) for a, b in zip(resumed.parameters(), straight.parameters(), strict=True)),
            "after 3 + 3 steps the weights differ from 6 uninterrupted steps",
        )
