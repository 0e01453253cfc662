"""Checks for chapter 03 · Parameter tying."""

from __future__ import annotations

import contextlib
import functools
import inspect
import numbers
from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace

import torch
from torch import nn

from utils.checks import exercise, expect, keeps_global_rng, learner_code
from utils.exercises.common import is_whole_number, shape_of, translated
from utils.i18n import N_, _

__all__ = ["check_count_parameters", "check_load_checked", "check_tied_lm"]

_ASSIGN = N_("assign the Parameter in __init__ (self.head.weight = self.embed.weight)")


def _untied_hint(model: nn.Module, tokens: torch.Tensor) -> str:
    """Why ``head.weight`` is not ``embed.weight`` right after construction, as precisely as can be told."""
    embed, head = model.embed, model.head
    same_memory = embed.weight.data_ptr() == head.weight.data_ptr()
    equal = embed.weight.shape == head.weight.shape and torch.equal(embed.weight.detach(), head.weight.detach())
    _run(model, tokens, _("calling the model on a (3, 7) batch of token ids"))
    if head.weight is embed.weight:
        hint = _("the tie appears only after the first forward pass: right after TiedLM(...) is built, "
                 "parameters() still lists two matrices, so an optimizer built then (the usual order) trains two "
                 "weights and saving before a forward saves two. Instead, {advice}")
    elif same_memory:
        hint = _("head.weight shares memory with embed.weight but is a different Parameter (nn.Parameter(... "
                 ".detach()) or .data = ...): each gets its own gradient and the optimizer updates the memory twice. "
                 "Share the Parameter object itself: {advice}")
    elif equal:
        hint = _("head.weight and embed.weight hold equal values but are two Parameters: copying the values "
                 "(copy_, clone) gives two weights that drift apart at the first update. Share the object: {advice}")
    else:
        hint = _("head.weight and embed.weight are two different matrices: the model has two layers where one "
                 "weight should be shared. Create both, then {advice}")
    return hint.format(advice=_(_ASSIGN))


def _head_gradient(head: nn.Linear) -> tuple[list[int], list[torch.Tensor], Callable[[], None]]:
    """Count the calls of ``head`` and record, for each, its part of ``head.weight``'s gradient in the next
    backward pass (grad_output^T @ input, whatever the leading dimensions). Returns calls, parts, a remover."""
    calls: list[int] = []
    parts: list[torch.Tensor] = []

    def record(module: nn.Module, args: tuple, output: object) -> None:
        calls.append(1)
        if isinstance(output, torch.Tensor) and output.requires_grad and args and isinstance(args[0], torch.Tensor):
            seen = args[0].detach()
            output.register_hook(lambda g: parts.append(
                g.reshape(-1, g.shape[-1]).T.float() @ seen.reshape(-1, seen.shape[-1]).float()))

    return calls, parts, head.register_forward_hook(record).remove


def _run(model: nn.Module, tokens: torch.Tensor, what: str) -> object:
    """``model(tokens)``; an error in it is reported as raised while ``what``."""
    with learner_code(what, _("the error is in your forward")):
        return model(tokens)


def _tied_model(cls: type[nn.Module], vocab: int, dim: int, seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """``cls(vocab, dim)`` from ``seed``, a (3, 7) batch from the vocabulary's lower half only, and targets."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with learner_code(_("building TiedLM({vocab}, {dim})").format(vocab=vocab, dim=dim),
                          _("the error is in your __init__")):
            model = cls(vocab, dim)
        return model, torch.randint(0, vocab // 2, (3, 7)), torch.randint(0, vocab, (3, 7))


def _expect_layers(model: nn.Module, vocab: int, dim: int) -> tuple[nn.Embedding, nn.Linear]:
    """The model keeps an nn.Embedding(vocab, dim) in self.embed and a bias-free nn.Linear(dim, vocab) in self.head."""
    expect(isinstance(model, nn.Module), _("TiedLM must subclass nn.Module"))
    embed, head = getattr(model, "embed", None), getattr(model, "head", None)
    expect(isinstance(embed, nn.Embedding) and isinstance(head, nn.Linear),
           _("keep the embedding in self.embed (nn.Embedding) and the output layer in self.head (nn.Linear)"))
    expect(tuple(embed.weight.shape) == (vocab, dim),
           _("the embedding of TiedLM({vocab}, {dim}) must have weight shape ({vocab}, {dim}), got "
             "{shape}: build it from the arguments, nn.Embedding(vocab_size, dim)").format(
                 vocab=vocab, dim=dim, shape=tuple(embed.weight.shape)))
    expect(head.in_features == dim and head.out_features == vocab,
           _("the head maps dim features to vocab_size logits: nn.Linear(dim, vocab_size, bias=False), here "
             "nn.Linear({dim}, {vocab}); got nn.Linear({in_features}, {out_features}). Its weight then has "
             "the embedding's shape ({vocab}, {dim}) without any transpose").format(
                 dim=dim, vocab=vocab, in_features=head.in_features, out_features=head.out_features))
    expect(head.bias is None, _("the head has no bias: nn.Linear(dim, vocab_size, bias=False)"))
    return embed, head


def _expect_tied_when_built(model: nn.Module, tokens: torch.Tensor, vocab: int, dim: int) -> None:
    """Right after construction, head.weight is embed.weight: one trainable (vocab, dim) Parameter."""
    embed, head = model.embed, model.head
    if head.weight is not embed.weight:
        expect(False, _untied_hint(model, tokens))
    shared = [p for p in model.parameters() if p.shape == (vocab, dim)]
    expect(len(shared) == 1, _("the model holds {count} ({vocab}, {dim}) parameters; a tied model holds one").format(
        count=len(shared), vocab=vocab, dim=dim))
    expect(embed.weight.requires_grad,
           _("the shared weight does not require grad (requires_grad_(False) froze it): it must train, through both "
             "of its uses"))


def _expect_gradient_through_both_uses(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                                       vocab: int) -> torch.Tensor:
    """The logits come through self.head, and a loss trains the shared weight through both uses."""
    embed, head = model.embed, model.head
    calls, parts, remove = _head_gradient(head)
    try:
        logits = _run(model, tokens, _("calling the model on a (3, 7) batch of token ids"))
        expect(isinstance(logits, torch.Tensor) and logits.shape == (3, 7, vocab),
               _("model(tokens) with tokens of shape (3, 7) must return logits of shape (3, 7, {vocab}); "
                 "got {shape}").format(vocab=vocab, shape=shape_of(logits)))
        expect(bool(calls), _("self.head was never called: the logits must be the output of self.head, so that "
                              "the shared weight is used (and trained) there too"))
        expect(logits.requires_grad,
               _("the logits do not require grad, so no gradient can reach the shared weight: forward ran under "
                 "torch.no_grad(), or its result was detached (.detach(), .data)"))
        with learner_code(_("back-propagating a cross-entropy loss through your model"), _("not known from here")):
            nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).backward()
    finally:
        remove()
    grad = embed.weight.grad
    expect(grad is not None and bool(grad.abs().sum() > 0), _("the loss gives the shared weight no gradient at all"))
    # The two uses' parts: the head's (recorded at each call) and the embedding's (the rest).
    through_embed = grad.float() - sum(parts, torch.zeros(grad.shape))
    present = torch.zeros(vocab, dtype=torch.bool)
    present[tokens.flatten()] = True
    expect(bool(grad[~present].abs().sum(dim=1).gt(0).all()),
           _("no gradient reaches the shared weight through the head: the rows of the tokens absent from the batch, "
             "which only the head's use reaches, got none. self.head must use the shared weight as it is (not "
             "detached), so that the head's use trains it too"))
    expect(bool(through_embed[present].abs().max() > 1e-3 * float(grad.abs().max())),
           _("no gradient reaches the shared weight through the embedding: the rows of the tokens in the batch learn "
             "from the head only. The embedding's output must stay in the graph: no .detach(), .data or "
             "torch.no_grad() around self.embed(tokens)"))
    return logits


def _expect_logits_from_head(model: nn.Module, tokens: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """In eval mode the logits are self.head's output: shifting that shifts every logit alike."""
    model.eval()
    with torch.no_grad():
        together = _run(model, tokens, _("calling the model in eval mode on the batch"))
    # The head may run once or many times (per step, per sample), on any view of its input: if each of its
    # outputs is shifted by `delta` (one exact value per vocabulary entry), every logit must shift by it.
    delta = torch.arange(logits.shape[-1], dtype=torch.float32) / 8 + 1
    handle = model.head.register_forward_hook(lambda module, args, output: output + delta)
    try:
        with torch.no_grad():
            shifted = _run(model, tokens, _("calling the model in eval mode on the batch"))
    finally:
        handle.remove()
    expect(isinstance(together, torch.Tensor) and together.shape == logits.shape and together.is_floating_point()
           and isinstance(shifted, torch.Tensor) and shifted.shape == together.shape
           and shifted.dtype == together.dtype
           and torch.allclose((shifted - together).float(), delta.expand(together.shape), atol=1e-4),
           _("the logits must be the output of self.head: return what self.head returns (reshaped or transposed "
             "back to (batch, seq, vocab_size) if need be), not logits computed beside it or transformed after it"))
    return together


def _sequence_first(module: nn.Module) -> bool:
    """Whether ``module`` is built sequence-first: it has batch_first=False (nn.LSTM, nn.MultiheadAttention), or it
    takes a batch_first argument and holds such a module (nn.TransformerEncoderLayer keeps it in its attention)."""
    if getattr(module, "batch_first", None) is False:
        return True
    try:
        takes_it = "batch_first" in inspect.signature(type(module).__init__).parameters
    except (TypeError, ValueError):  # a constructor without a signature Python can read
        return False
    return takes_it and any(getattr(m, "batch_first", None) is False for m in module.modules())


def _expect_samples_apart(model: nn.Module, tokens: torch.Tensor, together: torch.Tensor) -> None:
    """logits[b] must be what sample b alone gets (a second configuration: batches of one). Where it is not,
    say what was seen: the right logits in a sequence-first order, a sequence-first layer, or samples mixed."""
    alone = []
    for b in range(tokens.shape[0]):
        with torch.no_grad():
            one = _run(model, tokens[b:b + 1], _("calling the model in eval mode on sample {b} alone, a (1, {seq}) "
                                                 "batch").format(b=b, seq=tokens.shape[1]))
        expect(isinstance(one, torch.Tensor) and one.shape == (1, *together.shape[1:]),
               _("a (1, {seq}) batch must give logits of shape (1, {seq}, {vocab}); got {shape}: the batch dimension "
                 "must stay, even when it is 1").format(seq=tokens.shape[1], vocab=together.shape[-1],
                                                        shape=tuple(getattr(one, "shape", ())) or type(one).__name__))
        alone.append(one)
    alone = torch.cat(alone)
    differs = [b for b in range(len(alone)) if not torch.allclose(together[b], alone[b], atol=1e-4)]
    if not differs:
        return
    seq_first = alone.transpose(0, 1).reshape(together.shape)  # the same logits, read in (seq, batch) order
    expect(not torch.allclose(together, seq_first, atol=1e-4),
           _("the logits are right but in the wrong places: logits[b, t] holds the scores of another sample's "
             "position, in (seq, batch) order. A sequence-first (seq, batch, ...) result is put back with "
             ".transpose(0, 1); .view(batch, seq, -1) or .reshape only relabels the same order"))
    layer = next((m for m in model.modules() if m is not model and _sequence_first(m)), None)
    expect(layer is None,
           _("each sample's logits depend on the other samples of the batch: alone, sample {b} gets other logits "
             "than in the batch. Your nn.{layer} is sequence-first (batch_first=False): it reads a (batch, seq, dim) "
             "input's batch axis as the sequence. Build it with batch_first=True").format(
                 b=differs[0], layer=type(layer).__name__))
    expect(False, _("each sample's logits depend on the other samples of the batch: alone, sample {b} gets other "
                    "logits than in the batch. Something in forward mixes the samples (a mean, a normalization or "
                    "attention over dim 0): each sample's logits must come from its own tokens only").format(
                        b=differs[0]))


@exercise("Exercise 1 · Tie a language model's head to its embedding")
@keeps_global_rng
def check_tied_lm(cls: type[nn.Module]) -> None:
    """``cls(vocab_size, dim)`` has ``embed`` (nn.Embedding) and ``head`` (nn.Linear) sharing one weight.

    The tie must exist as soon as the model is built (before any forward pass), be the same
    ``Parameter`` object (not a copy, not a second Parameter on the same memory), the logits must be
    the output of ``head``, each sample's from its own tokens (compared with batches of one), and gradients
    must reach the shared weight through both uses. Tried with two sizes, ``(50, 12)`` and ``(23, 8)``.
    """
    for vocab, dim, seed in ((50, 12, 0), (23, 8, 1)):
        model, tokens, targets = _tied_model(cls, vocab, dim, seed)
        _expect_layers(model, vocab, dim)
        _expect_tied_when_built(model, tokens, vocab, dim)
        logits = _expect_gradient_through_both_uses(model, tokens, targets, vocab)
        together = _expect_logits_from_head(model, tokens, logits)
        _expect_samples_apart(model, tokens, together)


class _CountedLM(nn.Module):
    """A tied language model with a BatchNorm1d: 1600 + 272 + 32 trainable numbers, and 3 buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.body = nn.Linear(16, 16)
        self.norm = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.embed.weight


class _Scaled(nn.Module):
    """A bias-free layer and a 0-dim parameter: 12 + 1 numbers, one of them in a tensor without sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3, bias=False)
        self.temperature = nn.Parameter(torch.tensor(1.0))


def _near_misses(model: nn.Module) -> list[tuple[int, str]]:
    """What plausible wrong counts give on ``model``, each with what it shows (in order: the first match is named).
    The hints are English messages (N_), translated where they are shown."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    every_name = [p for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad]
    one_level = [*model.parameters(recurse=False), *(p for c in model.children() for p in c.parameters(recurse=False))]
    by_value: list[torch.Tensor] = []
    for p in trainable if not any(p.is_meta for p in params) else []:
        if not any(p.shape == q.shape and torch.equal(p, q) for q in by_value):
            by_value.append(p)

    def numbers(tensors: Iterable[torch.Tensor]) -> int:
        return sum(t.numel() for t in tensors)

    return [
        (len(params), N_("the tensors were counted, not the numbers in them: sum p.numel() over the parameters")),
        (numbers(p for name, p in model.named_parameters() if name.endswith("weight") and p.requires_grad),
         N_("only the weights were counted: biases, and parameters with other names (such as a 0-dim temperature), "
            "count too. Sum p.numel() over model.parameters()")),
        (numbers(every_name),
         N_("a shared tensor was counted under each of its names, as state_dict() and "
            "named_parameters(remove_duplicate=False) list it; model.parameters() yields it once")),
        (numbers(params), N_("frozen parameters (requires_grad=False) were counted: only trainable numbers count. "
                             "Keep p.requires_grad")),
        (numbers(model.state_dict().values()),
         N_("the count came from state_dict(), which lists a shared tensor under every name and holds the buffers "
            "too: sum p.numel() over model.parameters()")),
        (numbers([*trainable, *model.buffers()]),
         N_("the buffers (BatchNorm's running statistics) were counted: they are state, not parameters")),
        (numbers({tuple(p.shape): p for p in trainable}.values()),
         N_("tensors of equal shape were counted once, yet two layers of one shape are two sets of parameters: "
            "deduplicate by identity, as model.parameters() does, never by shape or by value")),
        (numbers(by_value) if by_value else -1,
         N_("tensors with equal values were counted once, yet two layers that start equal are two sets of "
            "parameters: deduplicate by identity, as model.parameters() does, never by shape or by value")),
        (numbers({p.data_ptr(): p for p in trainable}.values()),
         N_("tensors with the same data_ptr() were counted once: on the meta device every data_ptr() is 0 (there is "
            "no memory). Deduplicate by identity: sum p.numel() over model.parameters()")),
        (numbers(p for p in one_level if p.requires_grad),
         N_("only the parameters of the model and of its children were counted, yet parameters sit at every depth: "
            "model.parameters() walks the whole tree")),
    ]


#: Errors from counting by sizes or by attributes, with what they show.
_COUNTING_ERRORS = {
    "len() of a 0-d tensor": N_("a 0-dim parameter (one number, such as a temperature) has no len(): count with "
                                "p.numel()"),
    "tuple index out of range": N_("a parameter has fewer sizes than the code reads (a bias has one, a 0-dim "
                                   "parameter none): count with p.numel()"),
    "'NoneType' object has no attribute": N_("a layer built with bias=False has bias None: count what "
                                             "model.parameters() yields instead of reading .weight and .bias"),
    "meta tensor": N_("on the meta device tensors have shapes but no data (every data_ptr() is 0, values cannot be "
                      "read): sum p.numel() over model.parameters(), which yields each shared tensor once"),
}


def _count_cases() -> list[tuple[str, nn.Module, int, str]]:
    """(what the model is, the model, its count, what the count is made of): English, translated where shown."""
    shared = nn.Linear(3, 3)
    frozen = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    frozen[0].requires_grad_(False)
    on_meta = _CountedLM().to("meta")  # built on the CPU: nn.Embedding's init on meta would import torch._dynamo
    on_meta.head.weight = on_meta.embed.weight  # a move to meta unties (chapter 03, section 4): tie again
    return [
        ("nn.Linear(3, 2)", nn.Linear(3, 2), 8, N_("3*2 weights and 2 biases")),
        (N_("a layer used twice"), nn.Sequential(shared, nn.ReLU(), shared), 12, N_("one Linear(3, 3), once")),
        (N_("a nested network, Sequential(Sequential(Linear(2, 3), ReLU()), Linear(3, 2))"),
         nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.ReLU()), nn.Linear(3, 2)), 17, N_("9 + 8, at two depths")),
        (N_("a bias-free Linear(4, 3) with a 0-dim temperature"), _Scaled(), 13, N_("12 weights and one number")),
        (N_("two LayerNorm(4) and a Linear(4, 4)"), nn.Sequential(nn.LayerNorm(4), nn.LayerNorm(4), nn.Linear(4, 4)),
         36, N_("8 + 8 + 20: two LayerNorm layers that start equal are still two")),
        (N_("a tied language model with BatchNorm"), _CountedLM(), 1600 + 272 + 32,
         N_("the tied matrix once, and no buffers")),
        (N_("a model whose first layer is frozen"), frozen, 10, N_("only the trainable Linear(4, 2)")),
        (N_("the tied language model built on the meta device"), on_meta, 1600 + 272 + 32,
         N_("the same count as with memory")),
    ]


def _expect_zero_explained(count: Callable[[nn.Module], int], model: nn.Module, label: str, expected: int) -> None:
    """A count of 0 is not a filter on p.grad (None before any backward), nor a walk that skips a bare layer."""
    probe = nn.Linear(3, 2)
    probe.weight.grad = torch.zeros_like(probe.weight)
    with learner_code(_("calling count_parameters on nn.Linear(3, 2) whose weight alone has a .grad"),
                      _("not known from here: the error is in your count_parameters")):
        on_probe = count(probe)
    expect(not (isinstance(on_probe, numbers.Integral) and on_probe == 6),
           _("for {model} expected {expected}, got 0: p.grad is None until a backward pass has run, so a "
             "model fresh from __init__ has no gradients, yet all its parameters are trainable. Filter on "
             "p.requires_grad, not on p.grad").format(model=label, expected=expected))
    expect(not isinstance(model, nn.Linear),
           _("for {model}, a bare layer without submodules, expected {expected}, got 0: the layer's own "
             "parameters were not counted. A walk over children() (or named_children()) finds nothing in a "
             "bare layer; model.parameters() yields the model's own parameters and every submodule's").format(
                 model=label, expected=expected))


def _expect_count(count: Callable[[nn.Module], int], label: str, model: nn.Module, expected: int,
                  made_of: str) -> None:
    """``count(model)`` is the int ``expected``; a near miss is named by what it counted."""
    with learner_code(_("calling count_parameters on {model}").format(model=label),
                      _("not known from here: the error is in your count_parameters"),
                      causes=translated(_COUNTING_ERRORS)):
        got = count(model)
    expect(is_whole_number(got),
           _("return an int, got {type} (for {model}); wrap a tensor or float in int(...)").format(
               type=type(got).__name__, model=label))
    got = int(got)  # a NumPy integer (np.sum of the sizes) counts too
    if got == 0 != expected:  # a fresh model has no .grad yet: a filter on p.grad keeps nothing
        _expect_zero_explained(count, model, label, expected)
    cause = next((why for near, why in _near_misses(model) if near == got != expected), None)
    if cause is not None:
        expect(False, _("for {model} expected {expected} ({made_of}), got {count}: {cause}").format(
            model=label, expected=expected, made_of=_(made_of), count=got, cause=_(cause)))
    expect(got == expected, _("for {model} expected {expected} ({made_of}), got {count}: sum p.numel() over "
                              "model.parameters(), keeping p.requires_grad").format(
                                  model=label, expected=expected, made_of=_(made_of), count=got))


@exercise("Exercise 2 · Count parameters once")
@keeps_global_rng
def check_count_parameters(count: Callable[[nn.Module], int]) -> None:
    """``count(model)``: the trainable numbers in ``model``, each shared tensor once, no buffers, meta too.

    Each model separates near misses: counting tensors, weights only, every name, state_dict(), buffers, frozen
    parameters, equal shapes or values, data_ptr() (all 0 on meta), one level of the tree, a filter on p.grad."""
    for label, model, expected, made_of in _count_cases():
        _expect_count(count, _(label), model, expected, made_of)


class _TinyLM(nn.Module):
    def __init__(self, tie: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 4)
        self.norm = nn.LayerNorm(4)
        self.head = nn.Linear(4, 20, bias=False)
        if tie:
            self.head.weight = self.embed.weight


class _Twins(nn.Module):
    """No tie at all: equal shapes everywhere, and the two norms start with equal values."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(4), nn.LayerNorm(4)
        self.lin1, self.lin2 = nn.Linear(4, 4), nn.Linear(4, 4)


def _normed() -> nn.Sequential:
    """A tie around a BatchNorm1d, whose running statistics are buffers: a checkpoint holds more than Parameters."""
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 4))
    model[2].weight = model[0].weight
    return model


def _perturbed(model: nn.Module, seed: int) -> nn.Module:
    """``model`` with every parameter set to distinct random values (a tie stays a tie)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return model


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _holds(model: nn.Module, state: dict[str, torch.Tensor]) -> bool:
    now = model.state_dict()
    return now.keys() == state.keys() and all(torch.equal(now[k], v) for k, v in state.items())


@contextlib.contextmanager
def _calls(model: nn.Module, method: str) -> Iterator[list[dict[str, object]]]:
    """Record every call of ``model.<method>`` with all its arguments, defaults included (on this instance only)."""
    real = getattr(model, method)
    signature, calls = inspect.signature(real), []

    def watched(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        calls.append(dict(bound.arguments))
        return real(*args, **kwargs)

    object.__setattr__(model, method, watched)
    try:
        yield calls
    finally:
        del model.__dict__[method]


def _load_cases() -> SimpleNamespace:
    """The models and checkpoints of Exercise 3, drawn in one fixed order from seed 0."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        cases = SimpleNamespace(model=_perturbed(_TinyLM(), 1), other=_perturbed(_TinyLM(), 2))
        cases.untied = _perturbed(_TinyLM(tie=False), 3).state_dict()
        cases.twins, cases.twins_file = _Twins(), _perturbed(_Twins(), 4).state_dict()
        layer = nn.Linear(3, 3)
        cases.shared = nn.Sequential(layer, nn.ReLU(), layer)
        cases.shared_file = {"0.weight": torch.randn(3, 3), "0.bias": torch.randn(3),
                             "2.weight": torch.randn(3, 3), "2.bias": torch.randn(3)}
        cases.thrice = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        cases.thrice.extend([cases.thrice[0], nn.ReLU(), cases.thrice[0]])  # one Linear under the names 0, 2 and 4
        cases.thrice_file = {k: v + 0.5 for k, v in cases.thrice.state_dict().items()}  # tied, and new to the model
        cases.normed, cases.normed_file = _normed(), _perturbed(_normed(), 9).state_dict()
        cases.deep = nn.Sequential(nn.Sequential(nn.Linear(3, 3), nn.Tanh()), nn.Linear(3, 3))
        cases.deep[1].weight = cases.deep[0][0].weight  # tied across two levels: 0.0.weight and 1.weight
        cases.deep_file = {k: torch.randn(v.shape) for k, v in cases.deep.state_dict().items()}
        cases.bare, cases.bare_file = nn.Linear(3, 3), nn.Linear(3, 3).state_dict()
        cases.normed_file.update({"1.running_mean": torch.randn(4), "1.running_var": torch.rand(4) + 0.5,
                                  "1.num_batches_tracked": torch.tensor(3)})
    return cases


_ID_HINT = N_("find the names that share one Parameter by identity, e.g. group "
              "model.named_parameters(remove_duplicate=False) by id(p)")


def _load_unrefused(load: Callable[[nn.Module, dict], object], model: nn.Module, state: dict, what: str,
                    refused: Callable[[ValueError], str] | None, causes: dict[str, str] | None = None) -> None:
    """``load(model, state)`` raises no ValueError; ``refused(error)`` is the hint if it does."""
    with learner_code(what, _("not known from here: the error is in your load_checked"), causes=causes):
        try:
            load(model, state)
        except ValueError as err:
            if refused is None:
                raise
            expect(False, refused(err))


def _tied_refusal(err: ValueError) -> str:
    by_shape = "norm.weight" in str(err) and "norm.bias" in str(err)  # untied, equal shapes, unequal values
    if by_shape:
        return _("a tied checkpoint (embed.weight equal to head.weight) was refused ({error}): norm.weight and "
                 "norm.bias have equal shapes but are two Parameters. A tie is an identity, not equal shapes: "
                 "{advice}").format(error=err, advice=_(_ID_HINT))
    return _("a tied checkpoint (embed.weight equal to head.weight) was refused ({error}): its names that share one "
             "Parameter agree, so it must load. {advice}").format(error=err, advice=_(_ID_HINT))


def _expect_tied_checkpoint_loaded(load: Callable[[nn.Module, dict], object], model: nn.Module, state: dict) -> None:
    """A tied checkpoint loads into a tied model, and the tie stays one Parameter."""
    _load_unrefused(load, model, state, _("calling load_checked(tied model, tied checkpoint)"), _tied_refusal)
    expect(_holds(model, state), _("a tied checkpoint must be loaded: call model.load_state_dict(state_dict)"))
    embed_w, head_w = model.embed.weight, model.head.weight
    expect(head_w is embed_w or head_w.data_ptr() != embed_w.data_ptr(),
           _("the model lost its tie: head.weight and embed.weight are now two Parameters over one memory, as "
             "load_state_dict(..., assign=True) leaves a tied checkpoint (parameters() counts the matrix twice, an "
             "optimizer steps it twice). Load with model.load_state_dict(state_dict), which copies the values into "
             "the existing, tied Parameter"))
    expect(head_w is embed_w,
           _("the model lost its tie: head.weight and embed.weight are now two Parameters with two memories, "
             "replaced while loading. Load with model.load_state_dict(state_dict), which copies the values into the "
             "existing, tied Parameter"))


def _expect_refused(load: Callable[[nn.Module, dict], object], target: nn.Module, state: dict,
                    keys: tuple[str, ...] | list[tuple[str, ...]], checkpoint: tuple[str, str], why: str = "") -> None:
    """A checkpoint whose tied names disagree raises ValueError naming them, and leaves the model unchanged.

    ``keys``: the keys the message must name; a list gives several groups that disagree, and naming the keys of any
    one of them will do (an answer may stop at the first group it finds, in any order). ``checkpoint``: what is
    loaded, as said within a sentence and at its start (two messages). ``why``: the likely cause of a load."""
    what, subject = checkpoint
    alternatives = keys if isinstance(keys, list) else [keys]
    before = _snapshot(target)
    raised = other_error = None
    with learner_code(_("calling load_checked with {checkpoint}").format(checkpoint=what),
                      _("not known from here: the error is in your load_checked")), \
            _calls(target, "named_parameters") as walks:
        try:
            load(target, state)
        except ValueError as err:
            raised = err
        except (AssertionError, RuntimeError) as err:  # an assert, or a refusal of another type
            if isinstance(err, NotImplementedError):  # the stub's, or torch's: not a refusal
                raise
            other_error = err
    expect(other_error is None,
           _("with {checkpoint}, your load_checked raised {error}: when tied names disagree, raise ValueError "
             "(not assert, not RuntimeError)").format(
                 checkpoint=what, error=f"{type(other_error).__name__}: {other_error}"))
    expect(raised is not None or not _holds(target, before),
           _("nothing happened with {checkpoint}: load it, or raise ValueError when tied names disagree").format(
               checkpoint=what))
    once = walks and not any(walk["remove_duplicate"] is False for walk in walks)
    expect(raised is not None or why or not once,
           _("{checkpoint} was loaded without complaint, and one of the two matrices is now lost. Your "
             "load_checked walked model.named_parameters(), which lists a shared Parameter once, under its first "
             "name, so no group ever had two names: named_parameters(remove_duplicate=False) lists every "
             "owner's name").format(checkpoint=subject))
    expect(raised is not None,
           _("{checkpoint} was loaded without complaint, and one of the two matrices is now lost. {advice}").format(
               checkpoint=subject,
               advice=why or _("Before loading, compare the values of every group of names that share one "
                               "Parameter, and raise ValueError when they differ")))
    expect(_holds(target, before),
           _("the model was changed before the ValueError: check the checkpoint first, then load; "
             "when it raises, the model must be unchanged"))
    expect(any(all(k in str(raised) for k in group) for group in alternatives),
           _("the ValueError must name the keys that disagree ({keys}); got: {error}").format(
               keys=functools.reduce(lambda keys, other_keys: _("{keys}; or {other_keys}").format(
                   keys=keys, other_keys=other_keys), (", ".join(g) for g in alternatives)),
               error=raised))


def _expect_no_tie_loaded(load: Callable[[nn.Module, dict], object], twins: nn.Module, state: dict) -> None:
    """A model without ties, although shapes and initial values repeat, loads its checkpoint."""
    no_such_names = _("this model has no embed.weight or head.weight: do not assume those names exist; "
                      "{advice}").format(advice=_(_ID_HINT))
    _load_unrefused(
        load, twins, state, _("calling load_checked on a model without ties (two LayerNorm(4), two Linear(4, 4))"),
        lambda err: _("a model without any tie was refused ({error}): its two LayerNorm layers start with equal "
                      "values and its layers have equal shapes, but they are separate Parameters. "
                      "Equal values or shapes are not a tie: {advice}").format(error=err, advice=_(_ID_HINT)),
        causes={"embed.weight": no_such_names, "head.weight": no_such_names})
    expect(_holds(twins, state), _("a checkpoint for a model without ties must be loaded"))


def _expect_separate_storage_loaded(load: Callable[[nn.Module, dict], object], separate: dict) -> None:
    """Tied entries with equal values but separate storage (cloned, or from safetensors) load, keeping the tie."""
    target = _perturbed(_TinyLM(), 7)
    _load_unrefused(
        load, target, separate, _("calling load_checked(tied model, tied checkpoint whose tied entries were cloned)"),
        lambda err: _("a checkpoint whose tied entries are equal but stored separately was refused ({error}): "
                      "files saved with safetensors or cloned tensors share no memory. Compare the values "
                      "(torch.equal), not the storage").format(error=err))
    expect(_holds(target, separate) and target.head.weight is target.embed.weight,
           _("a tied checkpoint with separately stored, equal entries must be loaded, keeping the tie"))


def _expect_every_name_compared(load: Callable[[nn.Module, dict], object], thrice: nn.Module, state: dict) -> None:
    """One Parameter under three names: any one of them may be the odd one out, and is named."""
    for odd in ("0.weight", "2.weight", "4.weight"):
        odd_state = {k: v.clone() for k, v in state.items()}
        odd_state[odd] += 1
        _expect_refused(load, thrice, odd_state, (odd,),
                        (_("a checkpoint where {name}, one of three names of one weight, differs").format(name=odd),
                         _("A checkpoint where {name}, one of three names of one weight, differs").format(name=odd)),
                        _("A Parameter can have more than two names: compare every name of a group with the first, "
                          "not just one pair (a dict from one name to the next keeps only the last pair)"))


def _expect_buffers_loaded(load: Callable[[nn.Module, dict], object], normed: nn.Sequential, state: dict) -> None:
    """Buffers (BatchNorm's running statistics) are in the checkpoint too, and are not Parameters: it loads."""
    buffers_hint = _("a checkpoint also holds buffers (BatchNorm's running_mean, running_var, num_batches_tracked), "
                     "which are not Parameters: take the names that share one Parameter from "
                     "model.named_parameters(remove_duplicate=False), not from the checkpoint's keys "
                     "(model.get_parameter raises on a buffer's name)")
    _load_unrefused(
        load, normed, state, _("calling load_checked(tied model with a BatchNorm1d, tied checkpoint)"),
        lambda err: _("a tied checkpoint for a model with a BatchNorm1d was refused ({error}): {cause}").format(
            error=err, cause=buffers_hint),
        causes={"is not an nn.Parameter": buffers_hint})
    expect(_holds(normed, state) and normed[2].weight is normed[0].weight,
           _("a tied checkpoint for a model with a BatchNorm1d must be loaded, buffers included, keeping the tie: "
             "call model.load_state_dict(state_dict)"))


def _expect_bare_layer_loaded(load: Callable[[nn.Module, dict], object], bare: nn.Linear, state: dict) -> None:
    """A bare layer without ties loads its checkpoint."""
    _load_unrefused(load, bare, state, _("calling load_checked on a bare nn.Linear(3, 3) (no ties)"), None)
    expect(_holds(bare, state), _("a checkpoint for a bare nn.Linear(3, 3) without ties must be loaded"))


def _expect_strict(load: Callable[[nn.Module, dict], object]) -> None:
    """A checkpoint that lacks a key, its ties intact, is refused, as the strict load_state_dict refuses it."""
    partial = {k: v for k, v in _perturbed(_TinyLM(), 10).state_dict().items() if k != "norm.bias"}
    target = _perturbed(_TinyLM(), 11)
    try:
        with _calls(target, "load_state_dict") as loads:
            load(target, partial)
    except Exception:  # the RuntimeError of a strict load, or the answer's own refusal
        return
    lax = any(call["strict"] is False for call in loads)
    expect(not lax, _("a checkpoint without norm.bias was loaded without complaint, leaving norm.bias as it was: "
                      "your load_checked passed strict=False. Load with model.load_state_dict(state_dict), which "
                      "is strict by default and raises on missing or unexpected keys"))
    expect(False, _("a checkpoint without norm.bias was loaded without complaint, leaving norm.bias as it was: "
                    "load with model.load_state_dict(state_dict), which is strict by default and raises on "
                    "missing or unexpected keys"))


@exercise("Exercise 3 · Refuse an untied checkpoint")
@keeps_global_rng
def check_load_checked(load: Callable[[nn.Module, dict], object]) -> None:
    """``load(model, state_dict)`` loads, unless names sharing one Parameter carry different values.

    Then it raises ``ValueError`` naming those keys and leaves ``model`` unchanged. Ties are found by
    identity: equal shapes or values are not ties, and tied entries need not share storage in the file.
    """
    cases = _load_cases()
    _expect_tied_checkpoint_loaded(load, cases.model, cases.other.state_dict())
    _expect_refused(load, _perturbed(_TinyLM(), 5), cases.untied, ("embed.weight", "head.weight"),
                    (_("an untied checkpoint for a tied model"), _("An untied checkpoint for a tied model")))
    _expect_no_tie_loaded(load, cases.twins, cases.twins_file)
    # A layer used twice: two groups disagree (weights and biases), and either group's keys will do.
    _expect_refused(load, cases.shared, cases.shared_file, [("0.weight", "2.weight"), ("0.bias", "2.bias")],
                    (_("an untied checkpoint for a Sequential that uses one Linear twice"),
                     _("An untied checkpoint for a Sequential that uses one Linear twice")))
    separate = {k: v.clone() for k, v in _perturbed(_TinyLM(), 6).state_dict().items()}
    _expect_separate_storage_loaded(load, separate)
    # Tied entries that differ in one number, by a few millionths of it: still two values, one would be lost.
    nearly = {k: v.clone() for k, v in separate.items()}
    nearly["head.weight"][0, 0] *= 1 + 4e-6
    _expect_refused(load, _perturbed(_TinyLM(), 8), nearly, ("embed.weight", "head.weight"),
                    (_("a checkpoint whose tied entries differ in one number, by four millionths of it"),
                     _("A checkpoint whose tied entries differ in one number, by four millionths of it")),
                    _("Values that differ this little passed as equal: a comparison with a tolerance (torch.allclose, "
                      "isclose, a threshold) calls them equal, yet loading keeps only one of them. Compare exactly, "
                      "with torch.equal"))
    _expect_every_name_compared(load, cases.thrice, cases.thrice_file)
    _expect_buffers_loaded(load, cases.normed, cases.normed_file)
    _expect_refused(load, cases.deep, cases.deep_file, ("0.0.weight", "1.weight"),
                    (_("an untied checkpoint for a nested network whose inner Linear (0.0) shares its weight with the "
                       "outer one (1)"),
                     _("An untied checkpoint for a nested network whose inner Linear (0.0) shares its weight with the "
                       "outer one (1)")),
                    _("The tie sits two levels down: walk every module at every depth, e.g. "
                      "model.named_parameters(remove_duplicate=False), not only the model's children"))
    _expect_bare_layer_loaded(load, cases.bare, cases.bare_file)
    _expect_strict(load)
