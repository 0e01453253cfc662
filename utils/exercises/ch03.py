"""Checks for chapter 03 · Parameter tying."""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable

import torch
from torch import nn

from utils.checks import exercise, expect, keeps_global_rng, learner_code
from utils.i18n import N_, _

__all__ = ["check_count_parameters", "check_load_checked", "check_tied_lm"]

_ASSIGN = N_("assign the Parameter in __init__ (self.head.weight = self.embed.weight)")


def _untied_hint(embed: nn.Embedding, head: nn.Linear, forward: Callable[[], object]) -> str:
    """Why ``head.weight`` is not ``embed.weight`` right after construction, as precisely as can be told."""
    same_memory = embed.weight.data_ptr() == head.weight.data_ptr()
    equal = embed.weight.shape == head.weight.shape and torch.equal(embed.weight.detach(), head.weight.detach())
    forward()
    if head.weight is embed.weight:
        return _(
            "the tie appears only after the first forward pass: right after TiedLM(...) is built, "
            "parameters() still lists two matrices, so an optimizer built then (the usual order) trains two "
            "weights and saving before a forward saves two. Instead, {advice}"
        ).format(advice=_(_ASSIGN))
    if same_memory:
        return _(
            "head.weight shares memory with embed.weight but is a different Parameter (nn.Parameter(... .detach()) "
            "or .data = ...): each gets its own gradient and the optimizer updates the memory twice. "
            "Share the Parameter object itself: {advice}"
        ).format(advice=_(_ASSIGN))
    if equal:
        return _(
            "head.weight and embed.weight hold equal values but are two Parameters: copying the values "
            "(copy_, clone) gives two weights that drift apart at the first update. Share the object: {advice}"
        ).format(advice=_(_ASSIGN))
    return _(
        "head.weight and embed.weight are two different matrices: the model has two layers where one "
        "weight should be shared. Create both, then {advice}"
    ).format(advice=_(_ASSIGN))


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


def _check_tied_lm_once(cls: type[nn.Module], vocab: int, dim: int, seed: int) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with learner_code(_("building TiedLM({vocab}, {dim})").format(vocab=vocab, dim=dim),
                          _("the error is in your __init__")):
            model = cls(vocab, dim)
        tokens = torch.randint(0, vocab // 2, (3, 7))  # the upper half of the vocabulary is absent from the batch
        targets = torch.randint(0, vocab, (3, 7))
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

    def first_forward() -> None:
        with learner_code(_("calling the model on a (3, 7) batch of token ids"), _("the error is in your forward")):
            model(tokens)

    if head.weight is not embed.weight:
        expect(False, _untied_hint(embed, head, first_forward))
    shared = [p for p in model.parameters() if p.shape == (vocab, dim)]
    expect(len(shared) == 1, _("the model holds {count} ({vocab}, {dim}) parameters; a tied model holds one").format(
        count=len(shared), vocab=vocab, dim=dim))
    expect(embed.weight.requires_grad,
           _("the shared weight does not require grad (requires_grad_(False) froze it): it must train, through both "
             "of its uses"))

    calls, parts, remove = _head_gradient(head)
    try:
        with learner_code(_("calling the model on a (3, 7) batch of token ids"), _("the error is in your forward")):
            logits = model(tokens)
        expect(isinstance(logits, torch.Tensor) and logits.shape == (3, 7, vocab),
               _("model(tokens) with tokens of shape (3, 7) must return logits of shape (3, 7, {vocab}); "
                 "got {shape}").format(
                     vocab=vocab,
                     shape=tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__))
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
    through_head = sum(parts, torch.zeros(vocab, dim))
    through_embed = grad.float() - through_head
    scale = float(grad.abs().max())
    present = torch.zeros(vocab, dtype=torch.bool)
    present[tokens.flatten()] = True
    expect(bool(grad[~present].abs().sum(dim=1).gt(0).all()),
           _("no gradient reaches the shared weight through the head: the rows of the tokens absent from the batch, "
             "which only the head's use reaches, got none. self.head must use the shared weight as it is (not "
             "detached), so that the head's use trains it too"))
    expect(bool(through_embed[present].abs().max() > 1e-3 * scale),
           _("no gradient reaches the shared weight through the embedding: the rows of the tokens in the batch learn "
             "from the head only. The embedding's output must stay in the graph: no .detach(), .data or "
             "torch.no_grad() around self.embed(tokens)"))

    model.eval()
    with torch.no_grad(), learner_code(_("calling the model in eval mode on the batch, then on it in reverse order"),
                                       _("the error is in your forward")):
        ahead, reversed_ = model(tokens), model(tokens.flip(0))
    # The head may run once or many times (per step, per sample), on any view of its input: if each of its
    # outputs is shifted by `delta` (one exact value per vocabulary entry), every logit must shift by it.
    delta = torch.arange(vocab, dtype=torch.float32) / 8 + 1
    handle = head.register_forward_hook(lambda module, args, output: output + delta)
    try:
        with torch.no_grad(), learner_code(_("calling the model in eval mode on the batch"),
                                           _("the error is in your forward")):
            shifted = model(tokens)
    finally:
        handle.remove()
    expect(isinstance(ahead, torch.Tensor) and ahead.shape == logits.shape and ahead.is_floating_point()
           and isinstance(shifted, torch.Tensor) and shifted.shape == ahead.shape and shifted.dtype == ahead.dtype
           and torch.allclose((shifted - ahead).float(), delta.expand(ahead.shape), atol=1e-4),
           _("the logits must be the output of self.head: return what self.head returns (reshaped or transposed "
             "back to (batch, seq, vocab_size) if need be), not logits computed beside it or transformed after it"))
    expect(isinstance(reversed_, torch.Tensor) and reversed_.shape == ahead.shape
           and torch.allclose(reversed_, ahead.flip(0), atol=1e-5),
           _("logits[b, t] must belong to tokens[b, t]: reversing the batch must reverse the logits, but here the "
             "head's outputs come back in another order. A sequence-first (seq, batch, ...) result needs "
             ".transpose(0, 1), not .view(batch, seq, -1)"))
    # Attention over the batch axis passes the test above (it treats its positions alike): change one sample.
    changed = tokens.clone()
    changed[0] = (changed[0] + 1) % vocab
    with torch.no_grad(), learner_code(_("calling the model in eval mode on the batch with sample 0's tokens "
                                         "changed"), _("the error is in your forward")):
        other = model(changed)
    expect(isinstance(other, torch.Tensor) and other.shape == ahead.shape
           and torch.allclose(other[1:], ahead[1:], atol=1e-5),
           _("each sample's logits must depend on its own tokens only, but changing sample 0's tokens changed the "
             "logits of samples 1 and 2. A body that is sequence-first by default (nn.TransformerEncoderLayer, "
             "nn.MultiheadAttention, nn.GRU, nn.LSTM) reads a (batch, seq, dim) input's batch axis as the sequence: "
             "build it with batch_first=True"))


@exercise("Exercise 1 · Tie a language model's head to its embedding")
@keeps_global_rng
def check_tied_lm(cls: type[nn.Module]) -> None:
    """``cls(vocab_size, dim)`` has ``embed`` (nn.Embedding) and ``head`` (nn.Linear) sharing one weight.

    The tie must exist as soon as the model is built (before any forward pass), be the same
    ``Parameter`` object (not a copy, not a second Parameter on the same memory), the logits must be
    the output of ``head``, and gradients must reach the shared weight through both uses. Tried with two
    sizes, ``(50, 12)`` and ``(23, 8)``.
    """
    _check_tied_lm_once(cls, 50, 12, seed=0)
    _check_tied_lm_once(cls, 23, 8, seed=1)


@exercise("Exercise 2 · Count parameters once")
@keeps_global_rng
def check_count_parameters(count: Callable[[nn.Module], int]) -> None:
    """``count(model)``: the trainable numbers in ``model``, each shared tensor once, no buffers, meta too."""

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.body = nn.Linear(16, 16)
            self.norm = nn.BatchNorm1d(16)  # 32 parameters and 3 buffers
            self.head = nn.Linear(16, 100, bias=False)
            self.head.weight = self.embed.weight

    shared = nn.Linear(3, 3)
    frozen = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    frozen[0].requires_grad_(False)
    on_meta = TinyLM().to("meta")  # built on the CPU: nn.Embedding's init on meta would import torch._dynamo
    on_meta.head.weight = on_meta.embed.weight  # a move to meta unties (chapter 03, section 4): tie again
    cases = [
        ("nn.Linear(3, 2)", nn.Linear(3, 2), 8, N_("nn.Linear(3, 2) has 3*2 weights and 2 biases: count numbers "
         "(p.numel()), not tensors")),
        (N_("a layer used twice"), nn.Sequential(shared, nn.ReLU(), shared), 12,
         N_("a layer used twice has its 12 parameters once; state_dict() and named_parameters(remove_duplicate=False) "
            "list it under both names. Sum p.numel() over model.parameters()")),
        (N_("a nested network, Sequential(Sequential(Linear(2, 3), ReLU()), Linear(3, 1))"),
         nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.ReLU()), nn.Linear(3, 1)), 13,
         N_("parameters sit at every depth (9 in the inner Linear(2, 3), 4 in Linear(3, 1)): model.parameters() "
            "walks the whole tree, a walk over children() with parameters(recurse=False) stops one level down")),
        (N_("two LayerNorm(4) and a Linear(4, 4)"), nn.Sequential(nn.LayerNorm(4), nn.LayerNorm(4), nn.Linear(4, 4)),
         36,
         N_("two LayerNorm(4) layers have equal shapes and, at first, equal values, yet they are two sets of "
            "parameters (8 + 8 + 20 = 36): deduplicate by identity, as model.parameters() does, "
            "never by shape or by value")),
        (N_("a tied language model with BatchNorm"), TinyLM(), 1600 + 272 + 32,
         N_("the tied embedding/head counts once, and BatchNorm's running statistics are buffers, not parameters")),
        (N_("a model whose first layer is frozen"), frozen, 10,
         N_("only trainable numbers count: a frozen layer (requires_grad=False) does not. Keep p.requires_grad")),
        (N_("the tied language model built on the meta device"), on_meta, 1600 + 272 + 32,
         N_("on the meta device tensors have shapes but no data (every data_ptr() is 0, values cannot be read): "
            "sum p.numel() over model.parameters(), which yields each shared tensor once")),
    ]
    for label_en, model, expected, why_en in cases:
        label, why = _(label_en), _(why_en)  # the table holds the English messages (N_): shown translated
        on_meta = {"meta tensor": why} if "meta device" in label_en else None  # an error that reads a meta tensor
        with learner_code(_("calling count_parameters on {model}").format(model=label),
                          _("not known from here: the error is in your count_parameters"), causes=on_meta):
            got = count(model)
        expect(isinstance(got, numbers.Integral) and not isinstance(got, bool),
               _("return an int, got {type} (for {model}); wrap a tensor or float in int(...)").format(
                   type=type(got).__name__, model=label))
        got = int(got)  # a NumPy integer (np.sum of the sizes) counts too
        if got == 0 != expected:  # a fresh model has no .grad yet: a filter on p.grad keeps nothing
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
        expect(got == expected, _("for {model} expected {expected}, got {count}: {cause}").format(
            model=label, expected=expected, count=got, cause=why))


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


@exercise("Exercise 3 · Refuse an untied checkpoint")
@keeps_global_rng
def check_load_checked(load: Callable[[nn.Module, dict], object]) -> None:
    """``load(model, state_dict)`` loads, unless names sharing one Parameter carry different values.

    Then it raises ``ValueError`` naming those keys and leaves ``model`` unchanged. Ties are found by
    identity: equal shapes or values are not ties, and tied entries need not share storage in the file.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model, other = _perturbed(_TinyLM(), 1), _perturbed(_TinyLM(), 2)
        untied = _perturbed(_TinyLM(tie=False), 3).state_dict()
        twins, twins_file = _Twins(), _perturbed(_Twins(), 4).state_dict()
        layer = nn.Linear(3, 3)
        shared = nn.Sequential(layer, nn.ReLU(), layer)
        shared_file = {"0.weight": torch.randn(3, 3), "0.bias": torch.randn(3),
                       "2.weight": torch.randn(3, 3), "2.bias": torch.randn(3)}
        thrice = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
        thrice.extend([thrice[0], nn.ReLU(), thrice[0]])       # one Linear under the names 0, 2 and 4
        thrice_file = {k: v + 0.5 for k, v in thrice.state_dict().items()}   # tied, and new to the model
        normed, normed_file = _normed(), _perturbed(_normed(), 9).state_dict()
        deep = nn.Sequential(nn.Sequential(nn.Linear(3, 3), nn.Tanh()), nn.Linear(3, 3))
        deep[1].weight = deep[0][0].weight                     # tied across two levels: 0.0.weight and 1.weight
        deep_file = {k: torch.randn(v.shape) for k, v in deep.state_dict().items()}
        bare, bare_file = nn.Linear(3, 3), nn.Linear(3, 3).state_dict()
        normed_file.update({"1.running_mean": torch.randn(4), "1.running_var": torch.rand(4) + 0.5,
                            "1.num_batches_tracked": torch.tensor(3)})

    id_hint = _("find the names that share one Parameter by identity, e.g. group "
                "model.named_parameters(remove_duplicate=False) by id(p)")

    # 1. A tied checkpoint into a tied model: it loads, and the tie stays.
    tied_file = other.state_dict()
    unknown = _("not known from here: the error is in your load_checked")
    with learner_code(_("calling load_checked(tied model, tied checkpoint)"), unknown):
        try:
            load(model, tied_file)
        except ValueError as err:
            expect(False, _("a tied checkpoint (embed.weight equal to head.weight) was refused ({error}). Only names "
                            "that share one Parameter must agree: a tie is an identity, not equal shapes. "
                            "Find the names that share one Parameter by identity, e.g. group "
                            "model.named_parameters(remove_duplicate=False) by id(p)").format(error=err))
    expect(_holds(model, tied_file), _("a tied checkpoint must be loaded: call model.load_state_dict(state_dict)"))
    expect(model.head.weight is model.embed.weight,
           _("the model lost its tie: load with model.load_state_dict(state_dict), which copies values into the "
             "existing Parameters (assign=True, or new Parameters, give each name its own tensor)"))

    # 2. An untied checkpoint into a tied model: ValueError naming both keys, the model untouched.
    def refuses(target: nn.Module, state: dict, keys: tuple[str, ...] | list[tuple[str, ...]],
                checkpoint: tuple[str, str], why: str = "") -> None:
        """``keys``: the keys the message must name; a list gives several groups that disagree, and naming the
        keys of any one of them will do (an answer may stop at the first group it finds, in any order).
        ``checkpoint``: what is loaded, as said within a sentence and at its start (two messages)."""
        what, subject = checkpoint
        alternatives = keys if isinstance(keys, list) else [keys]
        before = _snapshot(target)
        raised = None
        with learner_code(_("calling load_checked with {checkpoint}").format(checkpoint=what),
                          _("not known from here: the error is in your load_checked. When tied names disagree, raise "
                            "ValueError (not assert, not RuntimeError)")):
            try:
                load(target, state)
            except ValueError as err:
                raised = err
        expect(raised is not None or not _holds(target, before),
               _("nothing happened with {checkpoint}: load it, or raise ValueError when tied names disagree").format(
                   checkpoint=what))
        expect(raised is not None,
               _("{checkpoint} was loaded without complaint, and one of the two matrices is now lost. {advice}").format(
                   checkpoint=subject,
                   advice=why or _("Before loading, compare the values of every group of names that share one "
                                   "Parameter; note that model.named_parameters() lists a shared Parameter once, "
                                   "under its first name, while named_parameters(remove_duplicate=False) lists "
                                   "every owner's name")))
        expect(_holds(target, before),
               _("the model was changed before the ValueError: check the checkpoint first, then load; "
                 "when it raises, the model must be unchanged"))
        expect(any(all(k in str(raised) for k in group) for group in alternatives),
               _("the ValueError must name the keys that disagree ({keys}); got: {error}").format(
                   keys=functools.reduce(lambda keys, other_keys: _("{keys}; or {other_keys}").format(
                       keys=keys, other_keys=other_keys), (", ".join(g) for g in alternatives)),
                   error=raised))

    refuses(_perturbed(_TinyLM(), 5), untied, ("embed.weight", "head.weight"),
            (_("an untied checkpoint for a tied model"),
             _("An untied checkpoint for a tied model")))

    # 3. No tie at all, although shapes and initial values repeat: it loads.
    no_such_names = _("this model has no embed.weight or head.weight: do not assume those names exist; "
                      "{advice}").format(advice=id_hint)
    with learner_code(_("calling load_checked on a model without ties (two LayerNorm(4), two Linear(4, 4))"), unknown,
                      causes={"embed.weight": no_such_names, "head.weight": no_such_names}):
        try:
            load(twins, twins_file)
        except ValueError as err:
            expect(False, _("a model without any tie was refused ({error}): its two LayerNorm layers start with equal "
                            "values and its layers have equal shapes, but they are separate Parameters. "
                            "Equal values or shapes are not a tie: {advice}").format(error=err, advice=id_hint))
    expect(_holds(twins, twins_file), _("a checkpoint for a model without ties must be loaded"))

    # 4. A layer used twice: the tie has other names, and two groups disagree (weights and biases). An answer
    # may walk the groups in any order and stop at the first: either group's keys will do.
    refuses(shared, shared_file, [("0.weight", "2.weight"), ("0.bias", "2.bias")],
            (_("an untied checkpoint for a Sequential that uses one Linear twice"),
             _("An untied checkpoint for a Sequential that uses one Linear twice")))

    # 5. Tied entries with equal values but separate storage (cloned, or from safetensors): it loads.
    separate = {k: v.clone() for k, v in _perturbed(_TinyLM(), 6).state_dict().items()}
    target = _perturbed(_TinyLM(), 7)
    with learner_code(_("calling load_checked(tied model, tied checkpoint whose tied entries were cloned)"), unknown):
        try:
            load(target, separate)
        except ValueError as err:
            expect(False, _("a checkpoint whose tied entries are equal but stored separately was refused ({error}): "
                            "files saved with safetensors or cloned tensors share no memory. Compare the values "
                            "(torch.equal), not the storage").format(error=err))
    expect(_holds(target, separate) and target.head.weight is target.embed.weight,
           _("a tied checkpoint with separately stored, equal entries must be loaded, keeping the tie"))

    # 6. Tied entries that differ in one number, by a few millionths of it: still two values, one would be lost.
    nearly = {k: v.clone() for k, v in separate.items()}
    nearly["head.weight"][0, 0] *= 1 + 4e-6
    refuses(_perturbed(_TinyLM(), 8), nearly, ("embed.weight", "head.weight"),
            (_("a checkpoint whose tied entries differ in one number, by four millionths of it"),
             _("A checkpoint whose tied entries differ in one number, by four millionths of it")),
            _("torch.allclose (and isclose) call such values equal, yet loading keeps only one of them: compare "
              "exactly, with torch.equal"))

    # 7. One Parameter under three names: any one of them may be the odd one out.
    for odd in ("0.weight", "2.weight", "4.weight"):
        state = {k: v.clone() for k, v in thrice_file.items()}
        state[odd] += 1
        refuses(thrice, state, (odd,),
                (_("a checkpoint where {name}, one of three names of one weight, differs").format(name=odd),
                 _("A checkpoint where {name}, one of three names of one weight, differs").format(name=odd)),
                _("A Parameter can have more than two names: compare every name of a group with the first, not "
                  "just one pair (a dict from one name to the next keeps only the last pair)"))

    # 8. Buffers (BatchNorm's running statistics) are in the checkpoint too, and are not Parameters: it loads.
    buffers_hint = _("a checkpoint also holds buffers (BatchNorm's running_mean, running_var, num_batches_tracked), "
                     "which are not Parameters: take the names that share one Parameter from "
                     "model.named_parameters(remove_duplicate=False), not from the checkpoint's keys "
                     "(model.get_parameter raises on a buffer's name)")
    with learner_code(_("calling load_checked(tied model with a BatchNorm1d, tied checkpoint)"), unknown,
                      causes={"is not an nn.Parameter": buffers_hint}):
        try:
            load(normed, normed_file)
        except ValueError as err:
            expect(False, _("a tied checkpoint for a model with a BatchNorm1d was refused ({error}): {cause}").format(
                error=err, cause=buffers_hint))
    expect(_holds(normed, normed_file) and normed[2].weight is normed[0].weight,
           _("a tied checkpoint for a model with a BatchNorm1d must be loaded, buffers included, keeping the tie: "
             "call model.load_state_dict(state_dict)"))

    # 9. A tie two levels down, in a nested network, and a bare layer without ties (it loads).
    refuses(deep, deep_file, ("0.0.weight", "1.weight"),
            (_("an untied checkpoint for a nested network whose inner Linear (0.0) shares its weight with the outer "
               "one (1)"),
             _("An untied checkpoint for a nested network whose inner Linear (0.0) shares its weight with the outer "
               "one (1)")),
            _("The tie sits two levels down: walk every module at every depth, e.g. "
              "model.named_parameters(remove_duplicate=False), not only the model's children"))
    with learner_code(_("calling load_checked on a bare nn.Linear(3, 3) (no ties)"), unknown):
        load(bare, bare_file)
    expect(_holds(bare, bare_file), _("a checkpoint for a bare nn.Linear(3, 3) without ties must be loaded"))

    # 10. A checkpoint that lacks a key, its ties intact: the strict load_state_dict refuses it.
    partial = {k: v for k, v in _perturbed(_TinyLM(), 10).state_dict().items() if k != "norm.bias"}
    try:
        load(_perturbed(_TinyLM(), 11), partial)
    except Exception:  # the RuntimeError of a strict load, or the answer's own refusal
        pass
    else:
        expect(False, _("a checkpoint without norm.bias was loaded without complaint, leaving norm.bias as it was: "
                        "load with model.load_state_dict(state_dict), which is strict by default and raises on "
                        "missing or unexpected keys; do not pass strict=False"))
