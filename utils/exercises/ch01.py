"""Checks for chapter 01 · Layers and blocks.

Each check builds its own small, seeded layers on the CPU (and on ``meta`` for the device property, which
costs nothing) and leaves the global random generator as it found it.
"""

from __future__ import annotations

import torch
from torch import nn

from utils.checks import exercise, expect, keeps_global_rng, learner_code
from utils.i18n import N_, _

__all__ = ["check_clones", "check_parallel", "check_router"]


def _seeded_linear(n_in: int, n_out: int, seed: int) -> nn.Linear:
    """An ``nn.Linear`` with values drawn from its own generator (the global one is not touched)."""
    gen = torch.Generator().manual_seed(seed)
    layer = nn.Linear(n_in, n_out, device="meta").to_empty(device="cpu")
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=gen))
        layer.bias.copy_(torch.randn(n_out, generator=gen))
    return layer


def _shape(value: object) -> object:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _same(a: object, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b)


def _causes(table: dict[str, str]) -> dict[str, str]:
    """A table of causes (marked with ``N_``) in the learner's language."""
    return {piece: _(cause) for piece, cause in table.items()}


# ---------------------------------------------------------------- Exercise 1


def _expect_gradients_reach(out: object, params, what: str, *, nonzero: bool, detached: str, missing: str) -> None:
    """``out`` requires grad, and a backward from it gives every tensor in ``params`` a gradient (``nonzero``:
    one that is not all zeros)."""
    expect(out.requires_grad, detached)
    with learner_code(_("backpropagating through {what}").format(what=what)):
        out.sum().backward()
    expect(all(p.grad is not None and (not nonzero or bool(p.grad.abs().sum() > 0)) for p in params), missing)


#: An error of __init__ whose cause is known, whatever the exercise.
_NO_SUPER = {
    "cannot assign module before Module.__init__() call": N_("__init__ assigned a module before nn.Module's own "
    "__init__ had run: call super().__init__() first, then store the modules"),
}


def _parallel_shape_hint(y: torch.Tensor, x: torch.Tensor, net1: nn.Module, net2: nn.Module) -> str:
    """The most likely cause of a wrong output shape, read from the output itself."""
    got = tuple(y.shape)
    with torch.no_grad():
        a, b = net1(x), net2(x)
        if _same(y, net2(a)):
            return _(
                "got shape {shape}: that is net2(net1(x)), a chain. Both nets must see the same x; "
                "concatenate their outputs along dim 1 (torch.cat([...], dim=1))"
            ).format(shape=got)
        if _same(y, a + b):
            return _("got shape {shape}: the two outputs were added. Concatenate them along dim 1 instead").format(
                shape=got)
    if got == (2 * x.shape[0], a.shape[1]):
        return _(
            "got shape {shape}: dim 0 is the batch, so concatenating along it stacks the samples. "
            "Concatenate along dim 1 (the features)"
        ).format(shape=got)
    if y.dim() == 3:
        return _("got shape {shape}: torch.stack adds a new dimension. Concatenate along dim 1 with torch.cat").format(
            shape=got)
    return _("two branches of widths 4 and 4 on a batch of 3 give shape (3, 8); got {shape}").format(shape=got)


@exercise("Exercise 1 · A parallel block")
@keeps_global_rng
def check_parallel(cls: type[nn.Module]) -> None:
    """``cls(net1, net2)``: ``forward(x)`` runs both given nets on ``x`` and concatenates along dim 1."""
    built = _("building your block as cls(net1, net2)")
    called = _("calling your block on a batch x")
    # Square layers first: a chain of the two nets runs without an error here, and must still fail.
    net1, net2 = _seeded_linear(4, 4, 1), _seeded_linear(4, 4, 2)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    given_values = [t.clone() for t in (*net1.parameters(), *net2.parameters())]
    with learner_code(built, _("not known from here: the error is in your __init__(self, net1, net2)"),
                      causes=_causes(_NO_SUPER)):
        block = cls(net1, net2)
    expect(isinstance(block, nn.Module), _("Parallel must subclass nn.Module"))
    expect(
        all(torch.equal(t, before) for t, before in zip((*net1.parameters(), *net2.parameters()), given_values,
                                                        strict=True)),
        _("building the block changed the given nets' values: keep them as they are given (they may be trained "
          "already); no reset_parameters() or re-initialization in __init__"),
    )
    with learner_code(called, _("not known from here: the error is in your forward(self, x)")):
        y = block(x)
    expect(isinstance(y, torch.Tensor), _("forward must return one tensor, got {type}").format(type=type(y).__name__))
    expect(y.shape == (3, 8), _parallel_shape_hint(y, x, net1, net2))
    expect(y.dtype == x.dtype, _("the block turned the nets' {dtype} outputs into {out_dtype}: return them as they "
                                 "are").format(dtype=x.dtype, out_dtype=y.dtype))
    with torch.no_grad():
        a, b = net1(x), net2(x)
    if torch.allclose(y[:, :4], b) and torch.allclose(y[:, 4:], a):
        expect(False, _("the outputs are in the wrong order: net1(x) comes first, then net2(x)"))
    expect(torch.allclose(y[:, :4], a), _("the first 4 columns must be net1(x), with x the block's own input"))
    expect(
        torch.allclose(y[:, 4:], b),
        _("the last 4 columns must be net2(x): net2 sees the same input x as net1, not net1's output"),
    )

    # Registration, checked on a fresh block before any forward: right after construction.
    with learner_code(built):
        fresh = cls(net1, net2)
    own = {id(p) for p in fresh.parameters()}
    given = [*net1.parameters(), *net2.parameters()]
    if not all(id(p) in own for p in given):
        expect(
            len(own) < len(given),
            _("the block's parameters are not the given nets' parameters: store net1 and net2 themselves, "
              "not copies, so that training the block trains them"),
        )
        expect(
            False,
            _("right after Parallel(net1, net2) is built, both nets' parameters must be registered: assign each "
              "net to an attribute (or put both in an nn.ModuleList); a plain list or dict hides them"),
        )
    expect(
        all(any(module is net for module in fresh.modules()) for net in (net1, net2)),
        _("register net1 and net2 themselves as submodules (self.net1 = net1, or nn.ModuleList([net1, net2])), "
          "not only their parameters: .train() and .eval() reach only submodules, state_dict() names their "
          "tensors after them, and .to() moves their buffers"),
    )

    # A batch of one sample stays a batch: (1, 8), not (8,).
    with learner_code(_("calling your block on a batch x of one sample, shape (1, 4)"),
                      _("not known from here. A batch of 3 samples worked; keep the batch dimension (no squeeze())")):
        y1 = block(x[:1])
    expect(
        isinstance(y1, torch.Tensor) and y1.shape == (1, 8) and torch.allclose(y1, y[:1]),
        _("a batch of one sample, shape (1, 4), must give shape (1, 8) and the first row of the batch's output; got "
          "{shape}: keep the batch dimension (no squeeze())").format(shape=_shape(y1)),
    )

    # Branches of different widths, one of them 1, on 5 input features, the second branch a small network of
    # its own: a chain cannot even run here, a squeeze breaks it, and so does reading a Linear's sizes.
    wide1 = _seeded_linear(5, 1, 4)
    wide2 = nn.Sequential(_seeded_linear(5, 3, 5), nn.Tanh(), _seeded_linear(3, 5, 6))
    x5 = torch.randn(3, 5, generator=torch.Generator().manual_seed(7))
    any_module = {
        "'Sequential' object has no attribute": _("a net can be any module, here an nn.Sequential, which has no "
        "weight, in_features or out_features: call each net and read the widths from its output (torch.cat needs "
        "none)"),
    }
    with learner_code(_("building your block as cls(net1, net2) with net2 an nn.Sequential"), causes=any_module):
        wide = cls(wide1, wide2)
    with learner_code(
        _("calling your block on a batch x of 5 features, with branches of widths 1 and 5 (net2 an nn.Sequential)"),
        _("not known from here. Unlike the first batch, x has 5 features, net1 gives 1 column and net2 is an "
          "nn.Sequential: feed x as it comes to both nets and keep each output as it is, (n, width)"),
        causes={
            **any_module,
            "must have same number of dimensions": _("a branch's output lost a dimension: a width-1 output squeezed "
            "(squeeze(), squeeze(-1)) has shape (n,), not (n, 1); keep each output as it is"),
        },
    ):
        z = wide(x5)
    expect(
        isinstance(z, torch.Tensor) and z.shape == (3, 6),
        _("branches of widths 1 and 5 must give 6 output columns, shape (3, 6); got {shape}").format(shape=_shape(z)),
    )
    with torch.no_grad():
        expect(
            torch.allclose(z[:, :1], wide1(x5)) and torch.allclose(z[:, 1:], wide2(x5)),
            _("with branches of widths 1 and 5, the columns must be net1(x) then net2(x)"),
        )

    # Gradients flow into both given nets.
    _expect_gradients_reach(
        y, given, _("your block's output"), nonzero=True,
        detached=_("the output does not require grad, so no gradient reaches the nets: do not .detach() the branch "
                   "outputs or use .data"),
        missing=_("gradients must reach both nets' weights and biases: do not .detach() the branch outputs or use "
                  ".data"),
    )

    # ... and on into the input, through both branches: layers before the block learn from both nets.
    x_in = x.clone().requires_grad_()
    with learner_code(called):
        y_in = block(x_in)
    with learner_code(_("backpropagating through your block's output")):
        y_in.sum().backward()
    with torch.no_grad():
        through_both = (net1.weight.sum(0) + net2.weight.sum(0)).expand_as(x)   # d(sum of outputs)/dx
    expect(
        x_in.grad is not None and torch.allclose(x_in.grad, through_both),
        _("the gradient must flow back to x through both nets, so that layers before the block learn: feed x "
          "itself to each net, not x.detach() or x.data"),
    )

    # The output lands on the input's device, with the nets' dtype (meta tensors have no values: this costs
    # nothing; float64 nets show a buffer made with the default dtype).
    meta1, meta2 = (nn.Linear(4, n, device="meta", dtype=torch.float64) for n in (4, 5))
    with learner_code(built):
        on_meta = cls(meta1, meta2)
    with learner_code(
        _("calling your block on a batch x whose float64 nets and x live on the 'meta' device"),
        _("a tensor created inside forward (torch.zeros, torch.empty, torch.tensor) lands on the default device "
          "unless you pass device=x.device; torch.cat of the outputs needs no new tensor"),
    ):
        m = on_meta(torch.empty(3, 4, device="meta", dtype=torch.float64))
    expect(
        isinstance(m, torch.Tensor) and m.device.type == "meta" and m.shape == (3, 9),
        _("with nets and input on one device, the output must be on that device too, shape (3, 9): create "
          "nothing on the default device inside forward"),
    )
    expect(
        m.dtype == torch.float64,
        _("float64 nets gave a {dtype} output: a tensor created inside forward gets "
          "the default dtype (float32) unless you pass dtype=x.dtype as well; torch.cat of the outputs needs no "
          "new tensor").format(dtype=str(m.dtype).removeprefix("torch.")),
    )


# ---------------------------------------------------------------- Exercise 2

_HEADS = {"price": (1, 10), "label": (3, 11), "box": (4, 12)}

_ORDER = N_("forward(self, x, task) takes the batch first, then the task's name, and returns heads[task](x)")

#: Errors of the router whose cause is known: a head taken for an nn.Linear, a parameter not named task.
_ANY_HEAD = {
    "'Sequential' object has no attribute": N_("a head can be any module, here an nn.Sequential, which has no weight "
    "or bias of its own: call the head, heads[task](x)"),
    "unexpected keyword argument 'task'": N_("the check calls router(x, task=...) too: forward(self, x, task) takes "
    "the batch first, then the task's name, and returns heads[task](x)"),
}


def _other_heads() -> dict[str, nn.Module]:
    """A second set of heads: other names, one head a small network of its own."""
    return {
        "topic": nn.Sequential(_seeded_linear(6, 8, 13), nn.ReLU(), _seeded_linear(8, 2, 14)),
        "sentiment": _seeded_linear(6, 1, 15),
    }


def _check_routes(cls: type[nn.Module], heads: dict[str, nn.Module], x: torch.Tensor, trained: str) -> nn.Module:
    """Build a router over ``heads``; check registration, every route and the gradient into ``heads[trained]``."""
    names = ", ".join(repr(task) for task in heads)
    built = _("building your router as cls(heads) with heads named {names}").format(names=names)
    hint_call = _("not known from here: the error is in your forward(self, x, task), which returns heads[task](x)")
    first = next(iter(heads))
    with learner_code(built, _("not known from here: the error is in your __init__(self, heads)"),
                      causes=_causes({**_NO_SUPER, **_ANY_HEAD})):
        try:
            router = cls(heads)
        except KeyError as err:
            expect(
                False,
                _("building the router over heads named {names} looked up the name {name}, which is not "
                  "one of them: take the names from the dict you are given (nn.ModuleDict(heads) keeps them all), "
                  "not from a fixed list").format(names=names, name=repr(err.args[0])),
            )
    expect(isinstance(router, nn.Module), _("Router must subclass nn.Module"))
    with learner_code(_("calling router(x, {task})").format(task=repr(first)), hint_call, causes=_causes(_ANY_HEAD)):
        try:
            out = router(x, first)
        except (KeyError, TypeError) as err:
            # The batch was used as the task's name: the arguments are taken in the wrong order.
            expect(
                not (err.args and isinstance(err.args[0], torch.Tensor)),
                _("the batch x was looked up as a task's name: {order}").format(order=_(_ORDER)),
            )
            raise

    # Registration under each task's name, on a fresh router before any forward.
    with learner_code(built):
        fresh = cls(heads)
    found = {name: module for name, module in fresh.named_modules(remove_duplicate=False)}
    for task, head in heads.items():
        where = [name for name, module in found.items() if module is head]
        if any(name.rsplit(".", 1)[-1] == task for name in where):
            continue
        if where:
            expect(
                False,
                _("heads[{task}] is registered as {name}, not under its name {task}: "
                  "nn.ModuleDict(heads) keeps the names (an nn.ModuleList numbers them)").format(
                      task=repr(task), name=repr(where[0])),
            )
        expect(
            not any(name.rsplit(".", 1)[-1] == task for name in found),
            _("a module named {task} is registered, but it is not the head you were given: register the "
              "given modules, not copies, so that training the router trains them").format(task=repr(task)),
        )
        expect(
            False,
            _("right after Router(heads) is built, heads[{task}] must be registered under its name: a plain dict "
              "hides it from parameters(), .to() and optimizers; use nn.ModuleDict(heads)").format(task=repr(task)),
        )

    expect(isinstance(out, torch.Tensor), _("router(x, {task}) must return a tensor, got {type}").format(
        task=repr(first), type=type(out).__name__))
    for task, head in heads.items():
        with learner_code(_("calling router(x, task={task})").format(task=repr(task)), hint_call,
                          causes=_causes(_ANY_HEAD)):
            out = router(x, task=task)
        with torch.no_grad():
            want = head(x)
        expect(_same(out, want), _("router(x, {task}) must return heads[{task}](x)").format(task=repr(task)))

    # Gradients reach the chosen head, so that training the router trains it.
    with learner_code(_("calling router(x, {task})").format(task=repr(trained)), hint_call, causes=_causes(_ANY_HEAD)):
        out = router(x, trained)
    _expect_gradients_reach(
        out, heads[trained].parameters(), f"router(x, {trained!r})", nonzero=False,
        detached=_("router(x, {task}) does not require grad, so no gradient reaches the heads and they never "
                   "train: do not .detach() the output, use .data or run forward under torch.no_grad()").format(
                       task=repr(trained)),
        missing=_("gradients must reach every parameter of heads[{task}]: return heads[task](x) itself, not a "
                  "copy of it").format(task=repr(trained)),
    )
    return router


@exercise("Exercise 2 · A router over named heads")
@keeps_global_rng
def check_router(cls: type[nn.Module]) -> None:
    """``cls(heads: dict[str, nn.Module])``; ``forward(x, task)`` applies ``heads[task]``, all registered."""
    hint_call = _("not known from here: the error is in your forward(self, x, task), which returns heads[task](x)")
    heads = {task: _seeded_linear(6, width, seed) for task, (width, seed) in _HEADS.items()}
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(12))
    router = _check_routes(cls, heads, x, "label")
    # Other names, a head that is a network of its own, another batch size.
    _check_routes(cls, _other_heads(), torch.randn(2, 6, generator=torch.Generator().manual_seed(16)), "topic")

    with learner_code(_("calling router.to(torch.float64)")):
        router.to(torch.float64)
    expect(
        all(p.dtype == torch.float64 for h in heads.values() for p in h.parameters()),
        _(".to(torch.float64) must convert every head: a plain dict hides them from .to()"),
    )
    with learner_code(_("calling router(x, 'label') on a float64 batch after .to(torch.float64)"), hint_call):
        out = router(x.double(), "label")
    expect(_same(out, heads["label"](x.double())), _("after .to(torch.float64), router(x, 'label') must still work"))

    # Heads and batch on another device ('meta' stands in for a GPU): the router follows them.
    placed = _("the router must not pick a device: keep the heads where they are given and use x as it comes "
               "(no .to(device), .cuda() or .cpu() inside the router); the caller moves it with router.to(device)")
    meta_heads = {task: nn.Linear(6, width, device="meta") for task, (width, _) in _HEADS.items()}
    off_meta = {"meta": placed}  # an error that takes a meta tensor off its device
    with learner_code(_("building your router as cls(heads) with heads on the 'meta' device"),
                      _("not known from here: the error is in your __init__(self, heads)"), causes=off_meta):
        on_meta = cls(meta_heads)
    with learner_code(_("calling router(x, 'box') with heads and x on the 'meta' device"), hint_call,
                      causes=off_meta):
        m = on_meta(torch.empty(5, 6, device="meta"), "box")
    expect(
        isinstance(m, torch.Tensor) and m.device.type == "meta" and m.shape == (5, 4),
        _("with the heads and x on one device, the output must be there too, shape (5, 4): {advice}").format(
            advice=placed),
    )


# ---------------------------------------------------------------- Exercise 3


def _tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return dict(module.state_dict(keep_vars=True))


def _frozen_block() -> nn.Module:
    """A small block whose values differ from a fresh one, in eval mode, with non-default buffers."""
    gen = torch.Generator().manual_seed(21)
    block = nn.Sequential(_seeded_linear(3, 4, 20), nn.BatchNorm1d(4, device="meta").to_empty(device="cpu"))
    with torch.no_grad():
        block[1].weight.copy_(torch.rand(4, generator=gen) + 0.5)
        block[1].bias.copy_(torch.randn(4, generator=gen))
        block[1].running_mean.copy_(torch.randn(4, generator=gen))
        block[1].running_var.copy_(torch.rand(4, generator=gen) + 0.5)
        block[1].num_batches_tracked.fill_(7)
    return block.eval()


def _modes(module: nn.Module) -> list[tuple[str, bool]]:
    """Each submodule's class name and train (True) / eval (False) flag, in the order of ``modules()``."""
    return [(type(sub).__name__, sub.training) for sub in module.modules()]


def _state(module: nn.Module) -> tuple[list[tuple[str, bool]], dict[str, torch.Tensor]]:
    """What clones must leave as it found it: the modes, and a copy of every value (meta ones have none)."""
    return _modes(module), {k: t.detach().clone() for k, t in _tensors(module).items() if t.device.type != "meta"}


def _check_copies(copies: object, module: nn.Module, n: int, call: str, before) -> None:
    modes, values = before
    original = _tensors(module)
    expect(
        _modes(module) == modes
        and all(k in original and torch.equal(original[k].detach(), v) for k, v in values.items()),
        _("{call} changed the module itself (its train/eval mode or its values): leave it as it is; copy.deepcopy "
          "reads it without changing it").format(call=call),
    )
    expect(
        isinstance(copies, nn.ModuleList),
        _("{call} must return an nn.ModuleList, got {type}: a plain list (or an nn.Sequential) "
          "is not what the task asks for, and a list is not registered when assigned to a module").format(
              call=call, type=type(copies).__name__),
    )
    expect(len(copies) == n, _("{call} must hold {n} copies, got {count}").format(call=call, n=n, count=len(copies)))
    expect(
        len({id(c) for c in copies}) == n,
        _("{call} holds the same object more than once, so the copies share their weights: [m] * n repeats one "
          "object (and deepcopy of such a list keeps it one object); deep-copy the module once per copy").format(
              call=call),
    )
    expect(
        all(c is not module for c in copies),
        _("{call} contains the original module itself: every entry must be a copy, independent of the original").format(
            call=call),
    )
    for c in copies:
        mine = _tensors(c)
        expect(
            set(mine) == set(original),
            _("each copy must have the same parameters and buffers as the module: {names}").format(
                names=sorted(original)),
        )
        params = [name for name, _ in module.named_parameters()]
        expect(
            [name for name, _ in c.named_parameters()] == params,
            _("each copy must keep the module's parameters as parameters ({names}), so that it trains on its own: "
              "copy.deepcopy keeps them; a tensor registered as a buffer instead is never trained").format(
                  names=params),
        )
        expect(
            [p.requires_grad for p in c.parameters()] == [p.requires_grad for p in module.parameters()],
            _("each copy's parameters must require grad where the module's do, so that it trains on its own: "
              "copy.deepcopy keeps the flags; do not freeze the copies with requires_grad_(False)"),
        )
        shared = [k for k in original if mine[k] is original[k]]
        if shared:
            expect(
                False,
                _("a copy shares {name} with the original: copy.copy is shallow (it keeps the same Parameter "
                  "objects); use copy.deepcopy").format(name=repr(shared[0])),
            )
    seen = {(t.device.type, t.untyped_storage().data_ptr()) for t in original.values() if t.device.type != "meta"}
    for c in copies:
        for k, t in _tensors(c).items():
            if t.device.type == "meta":
                continue
            key = (t.device.type, t.untyped_storage().data_ptr())
            expect(
                key not in seen,
                _("{name} of a copy shares its memory with the module or another copy: each copy needs tensors of "
                  "its own (copy.deepcopy gives them)").format(name=repr(k)),
            )
            seen.add(key)
    for c in copies:
        mine = _tensors(c)
        for k, t in original.items():
            expect(
                mine[k].device == t.device,
                _("each copy must stay on the module's device ({device}); {name} is on {copy_device}: "
                  "do not move the copies").format(device=t.device, name=repr(k), copy_device=mine[k].device),
            )
            expect(
                mine[k].dtype == t.dtype and (t.device.type == "meta" or torch.equal(mine[k].detach(), t.detach())),
                _("each copy must start with the module's values: {name} differs. copy.deepcopy copies parameters "
                  "and buffers; building a new layer (or reset_parameters) draws new ones").format(name=repr(k)),
            )
        shown = ", ".join(f"{name} {'train' if training else 'eval'}" for name, training in modes)
        expect(
            _modes(c) == modes,
            _("each copy must be in the module's train/eval mode, submodule by submodule (here: {modes}): "
              "copy.deepcopy keeps every flag; calling .train() or .eval() on a copy sets them all alike").format(
                  modes=shown),
        )


@exercise("Exercise 3 · N independent copies")
@keeps_global_rng
def check_clones(clones) -> None:
    """``clones(module, n)``: an ``nn.ModuleList`` of ``n`` deep copies (same values, device and mode)."""
    hint = _("not known from here: the error is in clones(module, n)")
    any_module = {
        "object has no attribute": _("clones(module, n) must work for any module, whatever its class and "
                                     "arguments: copy.deepcopy(module)"),
    }
    layer = _seeded_linear(3, 4, 30)
    before = _state(layer)
    with learner_code(_("calling clones(layer, 3) on an nn.Linear(3, 4)"), hint, causes=any_module):
        copies = clones(layer, 3)
    _check_copies(copies, layer, 3, "clones(layer, 3)", before)
    with torch.no_grad():
        copies[0].weight.add_(1.0)
    expect(
        torch.equal(copies[1].weight, layer.weight) and not torch.equal(copies[0].weight, layer.weight),
        _("changing one copy must change neither the module nor the other copies"),
    )

    for n, training in ((1, False), (4, False), (2, True)):
        block = _frozen_block()
        if training:
            block.train()
            block[1].eval()  # a frozen BatchNorm inside a block in training, as when fine-tuning
        calling = (_("calling clones(block, {n}) on a Linear + BatchNorm1d block in training with its BatchNorm1d "
                     "in eval mode") if training
                   else _("calling clones(block, {n}) on a Linear + BatchNorm1d block in eval mode")).format(n=n)
        before = _state(block)
        with learner_code(calling, hint, causes=any_module):
            copies = clones(block, n)
        _check_copies(copies, block, n, f"clones(block, {n})", before)

    # A nested network: the frozen BatchNorm1d sits two levels down, inside a block in training mode.
    nested = nn.Sequential(_frozen_block(), nn.Dropout(0.5)).train()
    nested[0][1].eval()
    before = _state(nested)
    with learner_code(_("calling clones(net, 2) on an nn.Sequential(block, Dropout) in training, the block's "
                        "BatchNorm1d in eval mode"), hint, causes=any_module):
        copies = clones(nested, 2)
    _check_copies(copies, nested, 2, "clones(net, 2)", before)

    on_meta = nn.Linear(3, 4, device="meta")
    before = _state(on_meta)
    with learner_code(
        _("calling clones(layer, 2) on a layer on the 'meta' device"),
        _("each copy must stay on the module's device: copy.deepcopy keeps it there, do not move the copies with "
          ".to()"),
    ):
        copies = clones(on_meta, 2)
    _check_copies(copies, on_meta, 2, _("clones(layer, 2) of a meta layer"), before)
