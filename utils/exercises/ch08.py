"""Checks for chapter 08 · Operating a GPU.

Exercise 1 (memory of a training step) runs a real Adam step on the CPU on several small models and
compares the answer with the bytes the step really holds.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn

from utils.checks import exercise, expect, learner_code
from utils.exercises.common import calling, is_whole_number, own_rng
from utils.i18n import N_, _

__all__ = ["check_accumulate", "check_training_bytes"]

# --- Exercise 1 ------------------------------------------------------------------------------------


PARAMS, GRADS, STATES = "parameters", "gradients", "Adam's two averages"  # the parts of a step's bytes


def _nbytes(tensors: Iterable[torch.Tensor], copies: Callable[[torch.Tensor], int] = lambda t: 1) -> int:
    """The bytes of ``tensors``, each held ``copies(t)`` times."""
    return sum(copies(t) * t.numel() * t.element_size() for t in tensors)


def _measured(model: nn.Module) -> dict[str, int]:
    """Run one Adam step on a copy and add up what it holds (the ground truth for exercise 1)."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    optimizer = torch.optim.Adam(trainable, lr=1e-3)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    dtype = first.weight.dtype
    x = torch.randn(3, first.in_features, dtype=dtype, generator=torch.Generator().manual_seed(0))
    out = model(x)
    F.mse_loss(out, torch.zeros_like(out)).backward()
    optimizer.step()
    return {PARAMS: _nbytes(params), GRADS: _nbytes(p.grad for p in trainable),
            STATES: _nbytes(optimizer.state[p][k] for p in trainable for k in ("exp_avg", "exp_avg_sq"))}


def _step_copies(p: torch.Tensor) -> int:
    """How many tensors of its size a parameter holds in an Adam step: itself, and a gradient and two averages if
    it is trained."""
    return 4 if p.requires_grad else 1


def _likely_cause(model: nn.Module, parts: dict[str, int], got: int) -> str | None:
    """The popular mistake that gives ``got`` bytes for ``model``, if one does."""
    unique = list(model.parameters())
    every = [p for _, p in model.named_parameters(remove_duplicate=False)]
    nbytes, trained = _nbytes(unique), _nbytes(p for p in unique if p.requires_grad)
    buffers = _nbytes(model.buffers())
    want = sum(parts.values())
    copies = sum(_step_copies(p) * p.numel() for p in unique)
    one_level = {id(p): p for child in model.children() for p in child.parameters(recurse=False)}.values()
    layer_flag = {}  # each parameter -> requires_grad of its layer's first parameter (the weight)
    for m in model.modules():
        own = list(m.parameters(recurse=False))
        for p in own:
            layer_flag.setdefault(id(p), own[0].requires_grad)
    per_layer = _nbytes(unique, lambda p: 4 if layer_flag[id(p)] else 1)
    guesses = [  # the likelier mistake first where two give the same total
        (per_layer, _("requires_grad belongs to each parameter, not to its layer: here every weight is frozen and "
                      "every bias is trained, so read p.requires_grad of each parameter")),
        (4 * nbytes, _("frozen parameters (requires_grad=False) get no gradient and no Adam state")),
        (4 * copies, _("each number takes its dtype's size (p.element_size()), not always 4 bytes")),
        (unique[0].element_size() * copies,
         _("each parameter counts with its own dtype's size (p.element_size() of every parameter): this "
           "model mixes float64 and float32, so one size for the whole model is wrong")),
        (_nbytes(every, _step_copies),
         _("a layer used twice holds its parameters once, and a weight shared by two layers is one tensor: "
           "model.parameters() already skips the repeat (model.modules() does not, for a shared weight)")),
        (want + buffers, _("buffers (such as BatchNorm's running statistics) are not trained: do not count them")),
        (want + 4 * buffers,
         _("buffers (such as BatchNorm's running statistics) are not trained: do not count them")),
        (8 * want, _("count bytes, not bits")),
        # before "gradients missing", which gives the same total in float64 but fails the float32 case first
        (nbytes + trained + 8 * sum(p.numel() for p in unique if p.requires_grad),
         _("Adam's two averages have the parameter's dtype (p.element_size() bytes each), not always 4 bytes")),
        (nbytes + 2 * trained,
         _("the gradients are missing (one per trainable parameter, of its size and dtype)")),
        (nbytes + trained, _("Adam's two running averages are missing (exp_avg and exp_avg_sq)")),
        (_nbytes(one_level, _step_copies),
         _("the count reads only the parameters of the model's direct children: a bare layer has no children, "
           "and a nested nn.Sequential keeps its layers one level further down. model.parameters() walks the "
           "whole tree")),
    ]
    return next((cause for total, cause in guesses if total == got and total != want), None)


class _MixedPrecision(nn.Module):
    """A float64 layer feeding a float32 one: one model, two element sizes."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(5, 7, dtype=torch.float64)
        self.second = nn.Linear(7, 3)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)).float())


class _SharedWeight(nn.Module):
    """Two layers, one weight (as chapter 03 ties an embedding to a head): one tensor, two owners."""

    def __init__(self):
        super().__init__()
        self.encode, self.decode = nn.Linear(4, 4), nn.Linear(4, 4)
        self.decode.weight = self.encode.weight

    def forward(self, x):
        return self.decode(torch.relu(self.encode(x)))


def _cases() -> dict[str, nn.Module]:
    mlp = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    frozen = copy.deepcopy(mlp)
    frozen[0].requires_grad_(False)
    biases_only = copy.deepcopy(mlp)
    for layer in (biases_only[0], biases_only[2]):
        layer.weight.requires_grad_(False)
    shared = nn.Linear(6, 6)
    tied = nn.Sequential(nn.Linear(4, 6), shared, nn.ReLU(), shared)
    normed = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    return {
        N_("a float32 MLP"): mlp,
        N_("the same MLP with its first layer frozen"): frozen,
        N_("the same MLP with its weights frozen and its biases trained"): biases_only,
        N_("an MLP whose layers have no bias (bias=False)"): nn.Sequential(nn.Linear(5, 7, bias=False), nn.ReLU(),
                                                                           nn.Linear(7, 3, bias=False)),
        N_("the MLP in float64"): copy.deepcopy(mlp).double(),
        N_("the MLP in bfloat16"): copy.deepcopy(mlp).to(torch.bfloat16),
        N_("a model that uses one layer twice"): tied,
        N_("a model whose two layers share one weight"): _SharedWeight(),
        N_("a model with BatchNorm buffers"): normed,
        N_("a model with a float64 and a float32 layer"): _MixedPrecision(),
        N_("a bare nn.Linear(5, 3) layer"): nn.Linear(5, 3),
        N_("an MLP nested in an nn.Sequential"): nn.Sequential(nn.Sequential(nn.Linear(5, 7), nn.ReLU()),
                                                               nn.Linear(7, 3)),
    }


def _cause_of_error(fn: Callable[[nn.Module], int], model: nn.Module, err: Exception) -> str:
    """Why ``fn`` raised on ``model``, where the check can see it: the same call with gradients in place works (it
    read ``p.grad``, which is None before a backward), or a ``None`` it tripped on is a layer's missing bias."""
    trained = copy.deepcopy(model)
    for p in trained.parameters():
        if p.requires_grad:
            p.grad = torch.zeros_like(p)
    try:
        fn(trained)
    except Exception:
        pass
    else:
        return _("the model has not been trained, so p.grad is None: count from each parameter's numel() and "
                 "element_size()")
    if "NoneType" in str(err) and any(getattr(m, "bias", False) is None for m in model.modules()):
        return _("a layer built with bias=False has bias None: count the tensors model.parameters() gives, which "
                 "skips it")
    return ""


@exercise("Exercise 1 · Memory of a training step")
@own_rng
def check_training_bytes(fn: Callable[[nn.Module], int]) -> None:
    """``fn(model) -> int``: bytes of parameters + gradients + Adam's two moment estimates.

    Frozen parameters (``requires_grad=False``) have no gradient and no Adam state; each parameter
    counts with its own dtype's size; a parameter used twice counts once; buffers do not count. The
    model passed in is fresh: it has run no forward or backward, so its ``.grad`` fields are ``None``.
    """
    for label, model in _cases().items():
        parts = _measured(model)
        want = sum(parts.values())
        try:
            got = fn(copy.deepcopy(model))
        except Exception as err:
            with calling(_("your function on {label}").format(label=_(label)), _cause_of_error(fn, model, err)):
                raise
        expect(
            is_whole_number(got),
            (_("return an int (bytes); got {type} (use integer arithmetic, or int(...))") if isinstance(got, float)
             else _("return an int (bytes); got {type}")).format(type=type(got).__name__))
        got = int(got)  # a NumPy integer (from np.prod) counts too
        cause = None if got == want else _likely_cause(model, parts, got)
        expect(got == want, (
            _("for {label}: {got} bytes, but one Adam step holds {want} = {params} (parameters) + {grads} "
              "(gradients) + {states} (Adam's two averages). Likely cause: {cause}") if cause else
            _("for {label}: {got} bytes, but one Adam step holds {want} = {params} (parameters) + {grads} "
              "(gradients) + {states} (Adam's two averages)")).format(
                label=_(label), got=got, want=want, params=parts[PARAMS], grads=parts[GRADS], states=parts[STATES],
                cause=cause))


# --- Exercise 2 ------------------------------------------------------------------------------------


#: (a function that makes a fresh model, loss function, x and y from the check's seeded generator; the micro-batch
#: sizes to try on them): sizes that divide the batch, that do not, and that cover it in one piece.
_ACCUMULATE_CASES = [
    (lambda: (nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2)), F.mse_loss, torch.randn(10, 3),
              torch.randn(10, 2)), (2, 4)),
    (lambda: (nn.Sequential(nn.Sequential(nn.Linear(4, 6), nn.Tanh()), nn.Linear(6, 3)), F.cross_entropy,
              torch.randn(7, 4), torch.randint(0, 3, (7,))), (3, 7)),
    (lambda: (nn.Linear(2, 1), F.l1_loss, torch.randn(8, 2), torch.randn(8, 1)), (4, 3)),
]


def _grads_of(model: nn.Module, loss_fn: Callable, pieces: list[tuple[torch.Tensor, torch.Tensor]],
              weights: list[float], keep: str = "all") -> list[torch.Tensor]:
    """The gradients that ``sum(w * loss_fn(model(xb), yb))`` leaves, on a copy (``keep="last"``: the last piece's)."""
    model = copy.deepcopy(model)
    if keep == "last":
        pieces, weights = pieces[-1:], weights[-1:]
    total = sum(w * loss_fn(model(xb), yb) for (xb, yb), w in zip(pieces, weights, strict=True))
    return list(torch.autograd.grad(total, list(model.parameters())))


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(p, q, rtol=1e-4, atol=1e-6) for p, q in zip(a, b, strict=True))


def _gradient_cause(grads: list[torch.Tensor], fresh: nn.Module, loss_fn: Callable, x: torch.Tensor,
                    y: torch.Tensor, size: int) -> str:
    """The mistake whose gradients ``grads`` are, among the common ones (the gradients of each, on a copy)."""
    pieces = list(zip(x.split(size), y.split(size), strict=True))
    shares = [len(xb) / len(x) for xb, _ in pieces]
    per_row = y[0].numel()  # mse_loss's mean is over every element: rows times columns
    causes = [
        (_grads_of(fresh, loss_fn, pieces, [1.0] * len(pieces)),
         _("Each micro-batch's mean loss went to backward as it is, so the gradients add up to about "
           "{count} times the batch's: scale each loss by its share of the rows, len(xb) / len(x)").format(
               count=len(pieces))),
        (_grads_of(fresh, loss_fn, pieces, [1 / len(pieces)] * len(pieces)),
         _("Each loss was divided by the number of micro-batches, but they are not all the same size here: "
           "scale each by its share of the rows, len(xb) / len(x)")),
        (_grads_of(fresh, loss_fn, pieces, shares, keep="last"),
         _("Only the last micro-batch's gradient is left: gradients add up in .grad by themselves, so do not "
           "zero them (zero_grad) between micro-batches")),
        (_grads_of(fresh, loss_fn, [(x, y)], [float(per_row)]) if per_row > 1 else None,
         _("The gradients are {count} times the batch's, as from a loss summed over each micro-batch and divided "
           "by len(x): each row of y holds {count} numbers, and {loss}'s mean is over all of them. Scale each "
           "micro-batch's mean loss by len(xb) / len(x) instead").format(count=per_row, loss=loss_fn.__name__)),
    ]
    return next((hint for got, hint in causes if got is not None and _close(grads, got)),
                _("The cause is unknown: compare with loss_fn(model(x), y).backward() on a copy of the model"))


class _Watch:
    """What the answer does with the model, in order: each forward (its rows, and whether autograd recorded it)
    and each backward that reaches a forward's output."""

    def __init__(self, model: nn.Module) -> None:
        self.events: list[tuple] = []  # ("forward", rows, recorded) or ("backward",)
        self._handle = model.register_forward_hook(self._forward)

    def _forward(self, module: nn.Module, args: tuple, out: object) -> None:
        recorded = isinstance(out, torch.Tensor) and out.requires_grad
        self.events.append(("forward", len(args[0]), recorded))
        if recorded:
            out.register_hook(lambda grad: self.events.append(("backward",)))

    def close(self) -> None:
        self._handle.remove()

    @property
    def rows(self) -> list[int]:
        return [e[1] for e in self.events if e[0] == "forward"]

    @property
    def recorded(self) -> bool:
        return any(e[0] == "forward" and e[2] for e in self.events)

    @property
    def backwards(self) -> int:
        return sum(e[0] == "backward" for e in self.events)

    def each_forward_then_its_backward(self) -> bool:
        kinds = [e[0] for e in self.events]
        return kinds == ["forward", "backward"] * (len(kinds) // 2)

    def all_backwards_last(self) -> bool:
        kinds = [e[0] for e in self.events]
        return "forward" not in kinds[kinds.index("backward"):]


#: A piece of the error ``backward()`` raises on a loss that autograd did not record.
_NO_GRAPH = "does not require grad and does not have a grad_fn"
_AUTOGRAD_OFF = N_("the model ran with autograd off (under torch.no_grad() or torch.inference_mode()), so no graph "
                   "was recorded to go back through: run the forward with autograd on")
_CUT_OFF = N_("backward was called on a loss cut off from the model's graph (.detach(), .item(), torch.tensor(...)) "
              "after the model ran: call backward on the loss loss_fn returns")
_NO_GRAD_YET = N_("the parameters start without gradients, so p.grad is None: backward creates them; do not clear or "
                  "scale them before the first backward")


@exercise("Exercise 2 · Accumulate gradients")
@own_rng
def check_accumulate(fn: Callable[..., None]) -> None:
    """``fn(model, loss_fn, x, y, size)``: the whole batch's gradient, from micro-batches of at most ``size`` rows.

    Tried on an MLP with ``mse_loss`` (two outputs per row), a nested classifier with ``cross_entropy`` and a bare
    layer with ``l1_loss``, with sizes that divide the batch, that do not, and that cover it in one piece.
    """
    for make, size in ((make, size) for make, sizes in _ACCUMULATE_CASES for size in sizes):
        model, loss_fn, x, y = make()
        label = _("{rows} rows in micro-batches of at most {size} ({loss}, {model})").format(
            rows=len(x), size=size, loss=loss_fn.__name__, model=type(model).__name__)
        fresh = copy.deepcopy(model)
        watch = _watched(fn, model, loss_fn, x, y, size, label)
        _expect_gradient_into_every_parameter(model, watch, label)
        expect(
            all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters(), strict=True)),
            _("for {label}: the parameters changed. Only accumulate the gradients: the optimizer steps later").format(
                label=label))
        _expect_micro_batches(watch, size, len(x), label)
        _expect_backward_after_each_forward(watch, label)
        grads = [p.grad for p in model.parameters()]
        if not _close(grads, _grads_of(fresh, loss_fn, [(x, y)], [1.0])):
            expect(False, _("for {label}: the gradients differ from the whole batch's. {cause}").format(
                label=label, cause=_gradient_cause(grads, fresh, loss_fn, x, y, size)))


def _watched(fn: Callable[..., None], model: nn.Module, loss_fn: Callable, x: torch.Tensor, y: torch.Tensor,
             size: int, label: str) -> _Watch:
    """What ``fn(model, loss_fn, x, y, size)`` did with the model; an error it raises becomes a hint."""
    watch = _Watch(model)
    try:
        fn(model, loss_fn, x, y, size)
    except Exception:
        causes = {_NO_GRAPH: _(_CUT_OFF if watch.recorded else _AUTOGRAD_OFF)}
        if not watch.backwards:  # before any backward, the None it met is most likely a p.grad
            causes["'NoneType' object has no attribute"] = _(_NO_GRAD_YET)
        with learner_code(_("your function on {label}").format(label=label), causes=causes):
            raise
    finally:
        watch.close()
    return watch


def _expect_gradient_into_every_parameter(model: nn.Module, watch: _Watch, label: str) -> None:
    """Autograd recorded the forward, backward ran, and every parameter has a gradient."""
    expect(watch.recorded or not watch.rows, _("for {label}: no gradient reached the parameters: {cause}").format(
        label=label, cause=_(_AUTOGRAD_OFF)))
    expect(watch.backwards, _("for {label}: no gradient reached the parameters: backward was never called. Call "
                              "loss.backward() on each micro-batch's loss").format(label=label))
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    expect(not missing, _("for {label}: no gradient reached {names}: every parameter needs the gradient of the "
                          "whole batch's loss").format(label=label, names=", ".join(missing)))


def _expect_micro_batches(watch: _Watch, size: int, total: int, label: str) -> None:
    """The model ran on micro-batches of at most ``size`` rows that add up to the batch's ``total``."""
    expect(
        max(watch.rows) <= size,
        _("for {label}: the model saw {rows} rows in one call. Run it on micro-batches of at "
          "most {size} rows: x.split({size})").format(label=label, rows=max(watch.rows), size=size))
    expect(sum(watch.rows) == total,
           _("for {label}: the model saw {rows} rows in all, but the batch has {total}").format(
               label=label, rows=sum(watch.rows), total=total))


def _expect_backward_after_each_forward(watch: _Watch, label: str) -> None:
    """Each micro-batch's backward runs right after its forward, before the next forward."""
    counts = dict(label=label, backward=watch.backwards, forward=len(watch.rows))
    expect(
        watch.each_forward_then_its_backward() or not watch.all_backwards_last(),
        _("for {label}: backward ran {backward} time(s) after all {forward} forward calls. Call backward on "
          "each micro-batch's loss before the next forward: one backward on the summed losses keeps every "
          "micro-batch's activations alive, which is what accumulation avoids").format(**counts))
    expect(
        watch.each_forward_then_its_backward(),
        _("for {label}: the model ran {forward} times and backward reached its outputs {backward} times, not "
          "once right after each forward: call backward on each micro-batch's loss before the next "
          "forward").format(**counts))
