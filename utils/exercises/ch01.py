"""Checks for chapter 01 · Layers and blocks.

Each check builds its own small, seeded layers on the CPU and leaves the global random generator as it found it.
The chapter teaches no device but the CPU, and the checks use no other (the ``meta`` device would load sympy and
``torch._dynamo`` on its first operation): a float64 configuration shows a tensor that an answer made itself,
with the default dtype, and :class:`~utils.exercises.observe.TorchCalls` sees what an answer asked torch for, so
that a hint names a cause (a ``.detach()``, a tensor made without ``device=``, a move to ``"cpu"``) only where
the check saw it.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from utils.checks import exercise, expect, keeps_global_rng, learner_code
from utils.exercises.common import randn, shape_of, translated
from utils.exercises.observe import TorchCalls
from utils.i18n import N_, _

__all__ = ["check_clones", "check_parallel", "check_router"]


def _linear(n_in: int, n_out: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Linear:
    """An ``nn.Linear`` drawn from ``seed`` (the checks run under ``keeps_global_rng``: the learner's generator
    is restored)."""
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, dtype=dtype)


def _same(a: object, b: torch.Tensor) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b)



#: Conversions to another dtype, as TorchCalls names them.
_CONVERSIONS = {".float", ".double", ".half", ".to", ".type"}

#: An error of __init__ whose cause is known, whatever the exercise.
_NO_SUPER = {
    "cannot assign module before Module.__init__() call": N_("__init__ assigned a module before nn.Module's own "
    "__init__ had run: call super().__init__() first, then store the modules"),
}


def _plain_holder(module: nn.Module, target: nn.Module) -> tuple[str, str] | None:
    """``(attribute, "list")`` when ``module`` keeps ``target`` in a plain list, tuple or dict attribute."""
    for attr, value in vars(module).items():
        if attr in ("_modules", "_parameters", "_buffers"):  # nn.Module's own registries
            continue
        held = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        if any(item is target for item in held):
            return attr, type(value).__name__
    return None


def _cut(seen: TorchCalls) -> str:
    """What kept the gradient from where it must go, among the calls the check saw; else that it is not known."""
    if seen.no_grad:
        return _("your code ran with gradient recording off (torch.no_grad() or torch.inference_mode()): leave it on")
    calls = [call for name, call in ((".detach", ".detach()"), (".data", ".data")) if name in seen.names]
    if ".clone" in seen.names and calls in ([], [".data"]):  # copy.deepcopy reads a parameter's .data and clones it
        return _("your code copied tensors (.clone(), or copy.deepcopy, which clones every parameter), and the "
                 "gradient went to the copies: use the modules and tensors themselves")
    return (_("your code cut the gradient with {calls}: use the tensors themselves").format(calls=", ".join(calls))
            if calls else _("why is not known from here"))


def _expect_gradient(out: object, inputs: list[torch.Tensor], seen: TorchCalls, what: str, hint: str) -> None:
    """A backward from ``out`` gives every tensor in ``inputs`` a gradient that is not all zeros. ``hint`` is the
    message, with ``{cause}`` for what cut the gradient."""
    expect(isinstance(out, torch.Tensor) and out.requires_grad,
           _("{what} does not require grad, so no gradient flows back: {cause}").format(what=what, cause=_cut(seen)))
    with learner_code(_("backpropagating through {what}").format(what=what)):
        out.sum().backward()
    expect(all(t.grad is not None and bool(t.grad.abs().sum() > 0) for t in inputs), hint.format(cause=_cut(seen)))


# ---------------------------------------------------------------- Exercise 1


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


def _expect_where_the_nets_put_it(y: torch.Tensor, seen: TorchCalls) -> None:
    """The output is no tensor that forward made without ``device=``, nor moved to a device written out."""
    expect(not seen.fixed_moves, _("forward moves its result to a fixed device ({calls}): on a GPU that takes it away "
                                   "from x; leave the output where the nets put it").format(
                                       calls=", ".join(seen.fixed_moves)))
    made = seen.maker(y)
    expect(made is None or made[1].get("device") is not None,
           _("forward returns a tensor that torch.{function} made without device=: on a GPU it would be made on the "
             "CPU, away from x. torch.cat of the two outputs needs no tensor of your own (or pass "
             "device=x.device)").format(function=made[0] if made else ""))


def _float64_hint(y: torch.Tensor, seen: TorchCalls) -> str:
    """Why float64 nets gave another dtype, from what forward was seen doing."""
    made = seen.maker(y)
    if made is not None and made[1].get("dtype") is None:
        return _("forward returns a tensor that torch.{function} made without dtype=, so with the default dtype, "
                 "float32: torch.cat of the two outputs needs no tensor of your own (or pass dtype=x.dtype)").format(
                     function=made[0])
    converted = sorted(_CONVERSIONS & seen.names)
    if converted:
        return _("forward converted the output ({calls}): return the nets' outputs as they are").format(
            calls=", ".join(converted))
    return _("why is not known from here: return the nets' outputs as they are, concatenated")


def _build_parallel(cls: type[nn.Module], net1: nn.Module, net2: nn.Module, given: list[nn.Parameter]) -> nn.Module:
    """``cls(net1, net2)`` is an nn.Module, and building it leaves the given nets' values as they were."""
    values = [p.detach().clone() for p in given]
    with learner_code(_("building your block as cls(net1, net2)"),
                      _("not known from here: the error is in your __init__(self, net1, net2)"),
                      causes=translated(_NO_SUPER)):
        block = cls(net1, net2)
    expect(isinstance(block, nn.Module), _("Parallel must subclass nn.Module"))
    expect(all(map(torch.equal, given, values)),
           _("building the block changed the given nets' values: keep them as they are given (they may be trained "
             "already); no reset_parameters() or re-initialization in __init__"))
    return block


def _expect_concatenated(block: nn.Module, x: torch.Tensor, net1: nn.Module, net2: nn.Module) -> torch.Tensor:
    """``block(x)`` is net1(x) then net2(x) along dim 1, in x's dtype, where the nets put it. Returns it."""
    with learner_code(_("calling your block on a batch x"), _("not known from here: the error is in your "
                                                             "forward(self, x)")), TorchCalls() as seen:
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
    expect(torch.allclose(y[:, 4:], b),
           _("the last 4 columns must be net2(x): net2 sees the same input x as net1, not net1's output"))
    _expect_where_the_nets_put_it(y, seen)
    return y


def _expect_nets_registered(cls: type[nn.Module], net1: nn.Module, net2: nn.Module,
                            given: list[nn.Parameter]) -> None:
    """Right after construction, before any forward, the given nets themselves are registered submodules."""
    with learner_code(_("building your block as cls(net1, net2)")):
        fresh = cls(net1, net2)
    own = {id(p) for p in fresh.parameters()}
    if not all(id(p) in own for p in given):
        expect(len(own) < len(given), _("the block's parameters are not the given nets' parameters: store net1 and "
                                        "net2 themselves, not copies, so that training the block trains them"))
        hidden = next(filter(None, (_plain_holder(fresh, net) for net in (net1, net2))), None)
        expect(hidden is None, _("right after Parallel(net1, net2) is built, the nets sit in a plain {kind}, "
                                 "self.{attribute}, which parameters(), .to() and optimizers do not see: assign each "
                                 "net to an attribute, or put both in an nn.ModuleList").format(
                                     kind=hidden[1] if hidden else "", attribute=hidden[0] if hidden else ""))
        expect(False, _("right after Parallel(net1, net2) is built, both nets' parameters must be registered: assign "
                        "each net to an attribute, or put both in an nn.ModuleList"))
    expect(all(any(module is net for module in fresh.modules()) for net in (net1, net2)),
           _("register net1 and net2 themselves as submodules (self.net1 = net1, or nn.ModuleList([net1, net2])), "
             "not only their parameters: .train() and .eval() reach only submodules, state_dict() names their "
             "tensors after them, and .to() moves their buffers"))


def _expect_batch_of_one(block: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """A batch of one sample stays a batch: (1, 8), not (8,), the first row of the batch's output."""
    with learner_code(_("calling your block on a batch x of one sample, shape (1, 4)"),
                      _("not known from here. A batch of 3 samples worked; keep the batch dimension (no squeeze())")):
        y1 = block(x[:1])
    expect(isinstance(y1, torch.Tensor) and y1.shape == (1, 8) and torch.allclose(y1, y[:1]),
           _("a batch of one sample, shape (1, 4), must give shape (1, 8) and the first row of the batch's output; got "
             "{shape}: keep the batch dimension (no squeeze())").format(shape=shape_of(y1)))


def _expect_any_branches(cls: type[nn.Module]) -> None:
    """Branches of widths 1 and 5 (net2 an nn.Sequential), in float64, give net1(x) then net2(x), as they are."""
    wide1 = _linear(5, 1, 4, torch.float64)
    wide2 = nn.Sequential(_linear(5, 3, 5, torch.float64), nn.Tanh(), _linear(3, 5, 6, torch.float64))
    x5 = randn(3, 5, seed=7, dtype=torch.float64)
    any_module = {
        "'Sequential' object has no attribute": _("a net can be any module, here an nn.Sequential, which has no "
        "weight, in_features or out_features: call each net and read the widths from its output (torch.cat needs "
        "none)"),
    }
    with learner_code(_("building your block as cls(net1, net2) with net2 an nn.Sequential"), causes=any_module):
        wide = cls(wide1, wide2)
    with learner_code(
        _("calling your block on a float64 batch x of 5 features, with float64 branches of widths 1 and 5 (net2 an "
          "nn.Sequential)"),
        _("not known from here. Unlike the first batch, x has 5 features, net1 gives 1 column and net2 is an "
          "nn.Sequential: feed x as it comes to both nets and keep each output as it is, (n, width)"),
        causes={
            **any_module,
            "must have same number of dimensions": _("a branch's output lost a dimension: a width-1 output squeezed "
            "(squeeze(), squeeze(-1)) has shape (n,), not (n, 1); keep each output as it is"),
        },
    ), TorchCalls() as seen:
        z = wide(x5)
    expect(
        isinstance(z, torch.Tensor) and z.shape == (3, 6),
        _("branches of widths 1 and 5 must give 6 output columns, shape (3, 6); got {shape}").format(shape=shape_of(z)),
    )
    expect(z.dtype == torch.float64, _("float64 nets gave a {dtype} output: {cause}").format(
        dtype=str(z.dtype).removeprefix("torch."), cause=_float64_hint(z, seen)))
    with torch.no_grad():
        expect(torch.allclose(z[:, :1], wide1(x5)) and torch.allclose(z[:, 1:], wide2(x5)),
               _("with branches of widths 1 and 5, the columns must be net1(x) then net2(x)"))
    _expect_where_the_nets_put_it(z, seen)


def _expect_gradient_into_nets_and_x(block: nn.Module, x: torch.Tensor, net1: nn.Module, net2: nn.Module,
                                     given: list[nn.Parameter]) -> None:
    """Gradients flow into both given nets, and on into x through both: layers before the block learn too."""
    x_in = x.clone().requires_grad_()
    with learner_code(_("calling your block on a batch x")), TorchCalls() as seen:
        y_in = block(x_in)
    _expect_gradient(y_in, given, seen, _("your block's output"),
                     _("gradients must reach both nets' weights and biases: {cause}"))
    with torch.no_grad():
        through_both = (net1.weight.sum(0) + net2.weight.sum(0)).expand_as(x)  # d(sum of outputs)/dx
    expect(x_in.grad is not None and torch.allclose(x_in.grad, through_both),
           _("the gradient must flow back to x through both nets, so that layers before the block learn: {cause}")
           .format(cause=_cut(seen)))


@exercise("Exercise 1 · A parallel block")
@keeps_global_rng
def check_parallel(cls: type[nn.Module]) -> None:
    """``cls(net1, net2)``: ``forward(x)`` runs both given nets on ``x`` and concatenates along dim 1."""
    # Square layers first: a chain of the two nets runs without an error here, and must still fail.
    net1, net2 = _linear(4, 4, 1), _linear(4, 4, 2)
    x = randn(3, 4, seed=3)
    given = [*net1.parameters(), *net2.parameters()]
    block = _build_parallel(cls, net1, net2, given)
    y = _expect_concatenated(block, x, net1, net2)
    _expect_nets_registered(cls, net1, net2, given)
    _expect_batch_of_one(block, x, y)
    _expect_any_branches(cls)
    _expect_gradient_into_nets_and_x(block, x, net1, net2, given)


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
    return {"topic": nn.Sequential(_linear(6, 8, 13), nn.ReLU(), _linear(8, 2, 14)), "sentiment": _linear(6, 1, 15)}


def _expect_registered(fresh: nn.Module, heads: dict[str, nn.Module]) -> None:
    """Each given head is a submodule of ``fresh`` (a router before any forward), under its task's name."""
    found = dict(fresh.named_modules(remove_duplicate=False))
    for task, head in heads.items():
        where = [name for name, module in found.items() if module is head]
        if any(name.rsplit(".", 1)[-1] == task for name in where):
            continue
        expect(not where, _("heads[{task}] is registered as {name}, not under its name {task}: nn.ModuleDict(heads) "
                            "keeps the names (an nn.ModuleList numbers them)").format(
                                task=repr(task), name=repr(where[0]) if where else ""))
        expect(not any(name.rsplit(".", 1)[-1] == task for name in found),
               _("a module named {task} is registered, but it is not the head you were given: register the given "
                 "modules, not copies, so that training the router trains them").format(task=repr(task)))
        hidden = _plain_holder(fresh, head)
        expect(hidden is None, _("right after Router(heads) is built, heads[{task}] sits in a plain {kind}, "
                                 "self.{attribute}, which parameters(), .to() and optimizers do not see: use "
                                 "nn.ModuleDict(heads)").format(
                                     task=repr(task), kind=hidden[1] if hidden else "",
                                     attribute=hidden[0] if hidden else ""))
        expect(False, _("right after Router(heads) is built, heads[{task}] must be registered under its name: use "
                        "nn.ModuleDict(heads)").format(task=repr(task)))


def _routing(what: str) -> contextlib.AbstractContextManager[None]:
    """:func:`learner_code` for a call of the router, ``what``, with the router's known causes."""
    return learner_code(what, _("not known from here: the error is in your forward(self, x, task), which returns "
                                "heads[task](x)"), causes=translated(_ANY_HEAD))


def _build_router(cls: type[nn.Module], heads: dict[str, nn.Module], built: str) -> nn.Module:
    """``cls(heads)`` is an nn.Module that takes the names from the dict it is given."""
    names = ", ".join(repr(task) for task in heads)
    with learner_code(built, _("not known from here: the error is in your __init__(self, heads)"),
                      causes=translated({**_NO_SUPER, **_ANY_HEAD})):
        try:
            router = cls(heads)
        except KeyError as err:
            expect(False, _("building the router over heads named {names} looked up the name {name}, which is not "
                            "one of them: take the names from the dict you are given (nn.ModuleDict(heads) keeps "
                            "them all), not from a fixed list").format(names=names, name=repr(err.args[0])))
    expect(isinstance(router, nn.Module), _("Router must subclass nn.Module"))
    return router


def _batch_first(router: nn.Module, x: torch.Tensor, task: str) -> object:
    """``router(x, task)``, which takes the batch first, then the task's name."""
    with _routing(_("calling router(x, {task})").format(task=repr(task))):
        try:
            return router(x, task)
        except (KeyError, TypeError) as err:
            # The batch was used as the task's name: the arguments are taken in the wrong order.
            expect(not (err.args and isinstance(err.args[0], torch.Tensor)),
                   _("the batch x was looked up as a task's name: {order}").format(order=_(_ORDER)))
            raise


def _expect_every_route(router: nn.Module, heads: dict[str, nn.Module], x: torch.Tensor) -> None:
    """``router(x, task=task)`` returns heads[task](x), for every task."""
    for task, head in heads.items():
        with _routing(_("calling router(x, task={task})").format(task=repr(task))):
            out = router(x, task=task)
        with torch.no_grad():
            want = head(x)
        expect(_same(out, want), _("router(x, {task}) must return heads[{task}](x)").format(task=repr(task)))


def _expect_gradient_through_head(router: nn.Module, head: nn.Module, x: torch.Tensor, trained: str) -> None:
    """Gradients flow through the chosen head into its parameters and into x, in train and in eval mode."""
    for mode in ("train", "eval"):
        getattr(router, mode)()
        x_in = x.clone().requires_grad_()
        call = (_("router(x, {task}) in training mode") if mode == "train"
                else _("router(x, {task}) in evaluation mode, after router.eval()")).format(task=repr(trained))
        with _routing(_("calling {call}").format(call=call)), TorchCalls() as seen:
            out = router(x_in, trained)
        for p in head.parameters():
            p.grad = None
        _expect_gradient(out, [*head.parameters(), x_in], seen, call,
                         _("gradients must reach every parameter of heads[{task}] and flow back to x: {cause}").format(
                             task=repr(trained), cause="{cause}"))
        x_ref = x.clone().requires_grad_()
        (want,) = torch.autograd.grad(head(x_ref).sum(), x_ref)
        expect(torch.allclose(x_in.grad, want),
               _("the gradient that reaches x must be the one heads[{task}](x) gives, in {call}").format(
                   task=repr(trained), call=call))


def _check_routes(cls: type[nn.Module], heads: dict[str, nn.Module], x: torch.Tensor, trained: str) -> nn.Module:
    """A router over ``heads``: registered, every route right, gradients through ``heads[trained]``."""
    built = _("building your router as cls(heads) with heads named {names}").format(
        names=", ".join(repr(task) for task in heads))
    router = _build_router(cls, heads, built)
    first = next(iter(heads))
    out = _batch_first(router, x, first)
    with learner_code(built):
        fresh = cls(heads)  # registration is checked before any forward
    _expect_registered(fresh, heads)
    expect(isinstance(out, torch.Tensor), _("router(x, {task}) must return a tensor, got {type}").format(
        task=repr(first), type=type(out).__name__))
    _expect_every_route(router, heads, x)
    _expect_gradient_through_head(router, heads[trained], x, trained)
    return router.train()


@exercise("Exercise 2 · A router over named heads")
@keeps_global_rng
def check_router(cls: type[nn.Module]) -> None:
    """``cls(heads: dict[str, nn.Module])``; ``forward(x, task)`` applies ``heads[task]``, all registered."""
    heads = {task: _linear(6, width, seed) for task, (width, seed) in _HEADS.items()}
    router = _check_routes(cls, heads, randn(5, 6, seed=12), "label")
    # Other names, a head that is a network of its own, another batch size.
    _check_routes(cls, _other_heads(), randn(2, 6, seed=16), "topic")

    with learner_code(_("calling router.to(torch.float64)")):
        router.to(torch.float64)
    expect(all(p.dtype == torch.float64 for h in heads.values() for p in h.parameters()),
           _(".to(torch.float64) must convert every head, and some stayed float32: why is not known from here "
             "(every head is registered)"))
    x = randn(5, 6, seed=12, dtype=torch.float64)
    with learner_code(_("calling router(x, 'label') on a float64 batch after .to(torch.float64)"),
                      _("not known from here: the error is in your forward(self, x, task), which returns "
                        "heads[task](x)")):
        out = router(x, "label")
    expect(_same(out, heads["label"](x)), _("after .to(torch.float64), router(x, 'label') must still work"))


# ---------------------------------------------------------------- Exercise 3


def _tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return dict(module.state_dict(keep_vars=True))


def _frozen_block() -> nn.Module:
    """A small block whose values differ from a fresh one, in eval mode, with non-default buffers."""
    block = nn.Sequential(_linear(3, 4, 20), nn.BatchNorm1d(4))
    gen = torch.Generator().manual_seed(21)
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
    """What clones must leave as it found it: the modes, and a copy of every value."""
    return _modes(module), {k: t.detach().clone() for k, t in _tensors(module).items()}


def _expect_module_left_alone(module: nn.Module, call: str, before) -> None:
    """``call`` left the module's modes and values as they were."""
    modes, values = before
    original = _tensors(module)
    expect(_modes(module) == modes
           and all(k in original and torch.equal(original[k].detach(), v) for k, v in values.items()),
           _("{call} changed the module itself (its train/eval mode or its values): leave it as it is; copy.deepcopy "
             "reads it without changing it").format(call=call))


def _expect_n_copies(copies: object, module: nn.Module, n: int, call: str, seen: TorchCalls) -> None:
    """``call`` returned an nn.ModuleList of ``n`` distinct copies, none the module, none moved."""
    expect(isinstance(copies, nn.ModuleList),
           _("{call} must return an nn.ModuleList, got {type}: a plain list (or an nn.Sequential) "
             "is not what the task asks for, and a list is not registered when assigned to a module").format(
                 call=call, type=type(copies).__name__))
    expect(len(copies) == n, _("{call} must hold {n} copies, got {count}").format(call=call, n=n, count=len(copies)))
    expect(len({id(c) for c in copies}) == n,
           _("{call} holds the same object more than once, so the copies share their weights: [m] * n repeats one "
             "object (and deepcopy of such a list keeps it one object); deep-copy the module once per copy").format(
                 call=call))
    expect(all(c is not module for c in copies),
           _("{call} contains the original module itself: every entry must be a copy, independent of the "
             "original").format(call=call))
    expect(not seen.moves, _("each copy must stay on the module's device, and {call} moved tensors ({calls}): "
                             "copy.deepcopy keeps them where they are, do not move the copies").format(
                                 call=call, calls=", ".join(seen.moves)))


def _expect_same_tensor_kinds(copies: nn.ModuleList, module: nn.Module, original: dict[str, torch.Tensor]) -> None:
    """Each copy has the module's parameters and buffers, as trainable as the module's, and none of its objects."""
    for c in copies:
        mine = _tensors(c)
        expect(set(mine) == set(original),
               _("each copy must have the same parameters and buffers as the module: {names}").format(
                   names=sorted(original)))
        params = [name for name, _ in module.named_parameters()]
        expect([name for name, _ in c.named_parameters()] == params,
               _("each copy must keep the module's parameters as parameters ({names}), so that it trains on its own: "
                 "copy.deepcopy keeps them; a tensor registered as a buffer instead is never trained").format(
                     names=params))
        expect([p.requires_grad for p in c.parameters()] == [p.requires_grad for p in module.parameters()],
               _("each copy's parameters must require grad where the module's do, so that it trains on its own: "
                 "copy.deepcopy keeps the flags; do not freeze the copies with requires_grad_(False)"))
        shared = [k for k in original if mine[k] is original[k]]
        expect(not shared, _("a copy shares {name} with the original: copy.copy is shallow (it keeps the same "
                             "Parameter objects); use copy.deepcopy").format(name=repr(shared[0]) if shared else ""))


def _expect_own_memory(copies: nn.ModuleList, original: dict[str, torch.Tensor]) -> None:
    """No tensor of a copy shares memory with the module or with another copy."""
    seen_memory = {t.untyped_storage().data_ptr() for t in original.values()}
    for c in copies:
        for k, t in _tensors(c).items():
            ptr = t.untyped_storage().data_ptr()
            expect(ptr not in seen_memory, _("{name} of a copy shares its memory with the module or another copy: "
                                             "each copy needs tensors of its own (copy.deepcopy gives them)").format(
                                                 name=repr(k)))
            seen_memory.add(ptr)


def _expect_same_values_and_modes(copies: nn.ModuleList, original: dict[str, torch.Tensor],
                                  modes: list[tuple[str, bool]], seen: TorchCalls) -> None:
    """Each copy starts with the module's dtypes and values, and in its train/eval mode, submodule by submodule."""
    shown = ", ".join(f"{name} {'train' if training else 'eval'}" for name, training in modes)
    drawn = sorted({".uniform_", ".normal_", ".random_", "kaiming_uniform_", "rand", "randn"} & seen.names)
    converted = sorted(_CONVERSIONS & seen.names)
    for c in copies:
        mine = _tensors(c)
        for k, t in original.items():
            expect(mine[k].dtype == t.dtype, _("each copy must keep the module's dtypes: {name} is {dtype} in a copy, "
                                               "{module_dtype} in the module; {cause}").format(
                                                   name=repr(k), dtype=mine[k].dtype, module_dtype=t.dtype,
                                                   cause=(_("clones converted it ({calls})").format(
                                                       calls=", ".join(converted)) if converted
                                                          else _("why is not known from here"))))
            expect(torch.equal(mine[k].detach(), t.detach()),
                   _("each copy must start with the module's values: {name} differs. {cause}").format(
                       name=repr(k), cause=_("clones drew new values ({calls}): copy.deepcopy copies parameters and "
                                             "buffers, a new layer or reset_parameters() draws new ones").format(
                                                 calls=", ".join(drawn)) if drawn
                       else _("Why is not known from here: copy.deepcopy copies parameters and buffers")))
        expect(_modes(c) == modes,
               _("each copy must be in the module's train/eval mode, submodule by submodule (here: {modes}): "
                 "copy.deepcopy keeps every flag; calling .train() or .eval() on a copy sets them all alike").format(
                     modes=shown))


_ANY_MODULE = {
    "object has no attribute": N_("clones(module, n) must work for any module, whatever its class and arguments: "
                                  "copy.deepcopy(module)"),
}


def _clones(clones, module: nn.Module, n: int, calling: str, call: str) -> nn.ModuleList:
    """Run ``clones(module, n)`` and check the copies it returns."""
    before = _state(module)
    with learner_code(calling, _("not known from here: the error is in clones(module, n)"),
                      causes=translated(_ANY_MODULE)), TorchCalls() as seen:
        copies = clones(module, n)
    _expect_module_left_alone(module, call, before)
    _expect_n_copies(copies, module, n, call, seen)
    original = _tensors(module)
    _expect_same_tensor_kinds(copies, module, original)
    _expect_own_memory(copies, original)
    _expect_same_values_and_modes(copies, original, before[0], seen)
    return copies


@exercise("Exercise 3 · N independent copies")
@keeps_global_rng
def check_clones(clones) -> None:
    """``clones(module, n)``: an ``nn.ModuleList`` of ``n`` deep copies (same values, device and mode)."""
    layer = _linear(3, 4, 30)
    copies = _clones(clones, layer, 3, _("calling clones(layer, 3) on an nn.Linear(3, 4)"), "clones(layer, 3)")
    # Each copy trains on its own: a backward through one reaches its parameters only, and an edit stays in it.
    copies[0](randn(2, 3, seed=31)).sum().backward()
    expect(
        all(p.grad is not None for p in copies[0].parameters())
        and all(p.grad is None for p in (*layer.parameters(), *copies[1].parameters())),
        _("a backward through copy 0 must give gradients to copy 0's parameters only, not to the module's or "
          "another copy's: each copy computes with its own parameters"),
    )
    with torch.no_grad():
        copies[0].weight.add_(1.0)
    expect(torch.equal(copies[1].weight, layer.weight) and not torch.equal(copies[0].weight, layer.weight),
           _("changing one copy must change neither the module nor the other copies"))

    for n, training in ((1, False), (4, False), (2, True)):
        block = _frozen_block()
        if training:
            block.train()
            block[1].eval()  # a frozen BatchNorm inside a block in training, as when fine-tuning
        calling = (_("calling clones(block, {n}) on a Linear + BatchNorm1d block in training with its BatchNorm1d "
                     "in eval mode") if training
                   else _("calling clones(block, {n}) on a Linear + BatchNorm1d block in eval mode")).format(n=n)
        _clones(clones, block, n, calling, f"clones(block, {n})")

    # A nested float64 network: the frozen BatchNorm1d sits two levels down, inside a block in training mode.
    nested = nn.Sequential(_frozen_block(), nn.Dropout(0.5)).double().train()
    nested[0][1].eval()
    _clones(clones, nested, 2, _("calling clones(net, 2) on a float64 nn.Sequential(block, Dropout) in training, the "
                                 "block's BatchNorm1d in eval mode"), "clones(net, 2)")
