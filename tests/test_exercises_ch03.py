"""Chapter 03's checks: each accepts right answers written in several ways and rejects plausible wrong ones.

The reference answers live in the notebook (nbval runs them); the answers here are written differently.
"""

import math

import numpy as np
import pytest
import torch
from torch import nn

from utils.checks import outcome
from utils.exercises.ch03 import check_count_parameters, check_load_checked, check_tied_lm

# ---------------------------------------------------------------- Exercise 1 · TiedLM


class _Base(nn.Module):
    """Untied: an embedding and a head of the right shapes, nothing shared."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


# Right answers, written differently from the notebook's reference.
class TiedOtherWay(_Base):
    """Tying in the other direction is tying too: one Parameter, two owners."""

    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.embed.weight = self.head.weight


class TiedByMethod(_Base):
    """A tie_weights() method, as libraries write it, called in __init__."""

    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.body = nn.Sequential(nn.LayerNorm(dim), nn.Dropout(0.0))
        self.tie_weights()

    def tie_weights(self):
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


class HeadOnMeta(nn.Module):
    """The head is built on meta (its own weight is never allocated), then given the embedding's."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False, device="meta")
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.embed(tokens)))


class HeadOnFlatView(TiedOtherWay):
    """The head runs on a (batch * seq, dim) view and the logits are reshaped back, as older examples did."""

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(h.reshape(-1, h.shape[-1])).view(*tokens.shape, -1)


class SeqFirstTransposedBack(TiedByMethod):
    """Sequence-first inside, put back with transpose(): the head's output is not the returned tensor."""

    def forward(self, tokens):
        h = self.body(self.embed(tokens.t()))  # (seq, batch, dim)
        return self.head(h).transpose(0, 1)


class HeadPerStep(nn.Module):
    """A GRUCell looped over time, the head called at every step: many calls of the head, stacked."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        x = self.embed(tokens)
        h = x.new_zeros(tokens.shape[0], x.shape[-1])
        steps = []
        for t in range(tokens.shape[1]):
            h = self.cell(x[:, t], h)
            steps.append(self.head(h))
        return torch.stack(steps, dim=1)


class HeadPerSequence(TiedOtherWay):
    """The head called once per sequence of the batch."""

    def forward(self, tokens):
        return torch.stack([self.head(self.embed(seq)) for seq in tokens])


# Wrong answers.
class TwoLayers(_Base):
    """Two layers created where one weight should be shared."""


class CopiedOnce(_Base):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        with torch.no_grad():
            self.head.weight.copy_(self.embed.weight)


class ClonedParameter(_Base):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head.weight = nn.Parameter(self.embed.weight.clone())


class NewParameterOnSameMemory(_Base):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head.weight = nn.Parameter(self.embed.weight.detach())


class SharedThroughData(_Base):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head.weight.data = self.embed.weight.data


class EmbeddingFromHeadWeight(nn.Module):
    """nn.Embedding(_weight=...) wraps the tensor in a new Parameter: shared memory, two Parameters."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.embed = nn.Embedding(vocab_size, dim, _weight=self.head.weight)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class TiedInForward(_Base):
    """The tie is made only at the first forward pass: too late for an optimizer built before it."""

    def forward(self, tokens):
        if self.head.weight is not self.embed.weight:
            self.head.weight = self.embed.weight
        return super().forward(tokens)


class ManualLogitsUnusedHead(_Base):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.embed(tokens) @ self.embed.weight.T


class PooledLogits(TiedOtherWay):
    def forward(self, tokens):
        return super().forward(tokens).mean(dim=1)


class SeqFirstViewedBack(TiedOtherWay):
    """Sequence-first inside (as nn.GRU's default layout), put back with view(): right shape, rows mixed up."""

    def forward(self, tokens):
        h = self.embed(tokens.t())  # (seq, batch, dim)
        return self.head(h).view(*tokens.shape, -1)


class FlatSeqFirstViewedBack(TiedOtherWay):
    """The same mistake with the head on a flat (seq * batch, dim) view."""

    def forward(self, tokens):
        h = self.embed(tokens).transpose(0, 1).reshape(-1, self.embed.embedding_dim)
        return self.head(h).view(*tokens.shape, -1)


class HeadInOutSwapped(nn.Module):
    """nn.Linear(vocab_size, dim): its weight is (dim, vocab_size) until the tie replaces it, so it runs."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(vocab_size, dim, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class HeadWithBias(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class ModuleListCalled(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight
        self.body = nn.ModuleList([nn.Linear(dim, dim), nn.ReLU()])

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens)))


class _TransformerLM(nn.Module):
    """A small Transformer body between the tied embedding and head, with learned positions."""

    batch_first = True

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(16, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=2 * dim, batch_first=self.batch_first)
        self.body = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.body(self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))))


class TransformerBatchFirst(_TransformerLM):
    pass


class TransformerSeqFirst(_TransformerLM):
    """batch_first forgotten: attention runs across the samples of the batch. Reversing the batch cannot show
    it (attention treats its positions alike); changing one sample does."""

    batch_first = False


class DetachedEmbedding(TiedOtherWay):
    """The embedding's output detached: its rows learn through the head only."""

    def forward(self, tokens):
        return self.head(self.embed(tokens).detach())


class EmbeddingUnderNoGrad(TiedOtherWay):
    def forward(self, tokens):
        with torch.no_grad():
            h = self.embed(tokens)
        return self.head(h)


class EmbeddingFromData(TiedOtherWay):
    """The lookup done by hand on .data: the embedding's use is invisible to autograd."""

    def forward(self, tokens):
        return self.head(nn.functional.embedding(tokens, self.embed.weight.data))


class _DetachedLinear(nn.Linear):
    def forward(self, x):
        return nn.functional.linear(x, self.weight.detach())


class HeadWithDetachedWeight(nn.Module):
    """The head's use of the shared weight is detached: it learns through the embedding only."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = _DetachedLinear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


class FrozenShared(TiedOtherWay):
    def __init__(self, vocab_size, dim):
        super().__init__(vocab_size, dim)
        self.embed.weight.requires_grad_(False)


class ForwardUnderNoGrad(TiedOtherWay):
    @torch.no_grad()
    def forward(self, tokens):
        return self.head(self.embed(tokens))


class LSTMTransposed(nn.Module):
    """A sequence-first LSTM used rightly: the batch goes in as (seq, batch, dim) and comes back transposed."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.lstm = nn.LSTM(dim, dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens).transpose(0, 1))
        return self.head(h.transpose(0, 1))


class LSTMWithoutBatchFirst(LSTMTransposed):
    """nn.LSTM's default layout forgotten: it runs along the batch. No .view anywhere, so the hint must not say so."""

    def forward(self, tokens):
        h, _ = self.lstm(self.embed(tokens))
        return self.head(h)


class BatchCentered(TiedOtherWay):
    """Centres the embeddings over the batch: each sample's logits depend on the others."""

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(h - h.mean(dim=0))


class SqueezedLogits(TiedOtherWay):
    """.squeeze() to tidy up: a batch of one loses its batch dimension."""

    def forward(self, tokens):
        return super().forward(tokens).squeeze()


class FixedVocabulary(nn.Module):
    """The vocabulary size of one example written out."""

    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embed = nn.Embedding(50, dim)
        self.head = nn.Linear(dim, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


@pytest.mark.parametrize("right", [TiedOtherWay, TiedByMethod, HeadOnMeta, HeadOnFlatView, SeqFirstTransposedBack,
                                   TransformerBatchFirst, HeadPerStep, HeadPerSequence, LSTMTransposed])
def test_tied_lm_accepts(right):
    assert outcome(check_tied_lm, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (TwoLayers, "two different matrices"),
        (CopiedOnce, "equal values but are two Parameters"),
        (ClonedParameter, "equal values but are two Parameters"),
        (NewParameterOnSameMemory, "shares memory with embed.weight but is a different Parameter"),
        (SharedThroughData, "shares memory with embed.weight but is a different Parameter"),
        (EmbeddingFromHeadWeight, "shares memory with embed.weight but is a different Parameter"),
        (TiedInForward, "only after the first forward pass"),
        (ManualLogitsUnusedHead, "self.head was never called: the logits must be the output of self.head"),
        (DetachedEmbedding, "no gradient reaches the shared weight through the embedding"),
        (EmbeddingUnderNoGrad, "no gradient reaches the shared weight through the embedding"),
        (EmbeddingFromData, "no gradient reaches the shared weight through the embedding"),
        (HeadWithDetachedWeight, "no gradient reaches the shared weight through the head: the rows of the tokens "
         "absent from the batch, which only the head's use reaches, got none"),
        (FrozenShared, "the shared weight does not require grad (requires_grad_(False) froze it)"),
        (ForwardUnderNoGrad, "the logits do not require grad, so no gradient can reach the shared weight"),
        (FixedVocabulary, "the embedding of TiedLM(23, 8) must have weight shape (23, 8), got (50, 8)"),
        (SeqFirstViewedBack, "the logits are right but in the wrong places"),
        (FlatSeqFirstViewedBack, "the logits are right but in the wrong places"),
        (PooledLogits, "shape (3, 7, 50)"),
        (HeadWithBias, "no bias"),
        (HeadInOutSwapped, "nn.Linear(dim, vocab_size, bias=False), here nn.Linear(12, 50)"),
        (ModuleListCalled, "nn.ModuleList was called like a module"),
        (TransformerSeqFirst, "Your nn.TransformerEncoderLayer is sequence-first (batch_first=False)"),
        (LSTMWithoutBatchFirst, "alone, sample 1 gets other logits than in the batch. Your nn.LSTM is sequence-first"),
        (BatchCentered, "Something in forward mixes the samples"),
        (SqueezedLogits, "a (1, 7) batch must give logits of shape (1, 7, 50); got (7, 50)"),
    ],
)
def test_tied_lm_rejects(wrong, hint):
    verdict, message = outcome(check_tied_lm, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 1")
    assert hint in message


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (LSTMWithoutBatchFirst, ".transpose(0, 1)"),   # it has no .view: the layout hint would name another cause
        (BatchCentered, "batch_first"),                # it has no sequence-first layer
        (SeqFirstViewedBack, "batch_first"),           # the logits are right, only misplaced
    ],
)
def test_tied_lm_names_only_the_cause_it_saw(wrong, cause):
    assert cause not in outcome(check_tied_lm, wrong)[1]


# ---------------------------------------------------------------- Exercise 2 · count_parameters


def count_trainable_flat(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_by_identity(model):
    seen = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad:
            seen[id(p)] = p.numel()
    return sum(seen.values())


def count_with_vector(model):
    trainable = [p for p in model.parameters() if p.requires_grad]
    return int(nn.utils.parameters_to_vector(trainable).numel())


def count_with_numpy(model):
    """np.sum of the sizes is a NumPy integer: a whole number all the same."""
    return np.sum([p.numel() for p in model.parameters() if p.requires_grad])


def count_from_state_dict(model):
    return sum(t.numel() for t in model.state_dict().values())


def count_with_duplicates(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))


def count_as_tensor(model):
    return torch.tensor([p.numel() for p in model.parameters()]).sum()


def count_tensors(model):
    return len(list(model.parameters()))


def count_with_buffers(model):
    return sum(t.numel() for t in [*model.parameters(), *model.buffers()])


def count_unique_shapes(model):
    return sum(p.numel() for p in {tuple(p.shape): p for p in model.parameters() if p.requires_grad}.values())


def count_unique_values(model):
    unique = []
    for p in model.parameters():
        if p.requires_grad and not any(p.shape == q.shape and torch.equal(p, q) for q in unique):
            unique.append(p)
    return sum(p.numel() for p in unique)


def count_unique_data_ptr(model):
    return sum({p.data_ptr(): p.numel() for p in model.parameters() if p.requires_grad}.values())


def count_including_frozen(model):
    return sum(p.numel() for p in model.parameters())


def count_with_grad(model):  # "trainable" read as "has a gradient": a fresh model has none
    return sum(p.numel() for p in model.parameters() if p.grad is not None)


def count_children_only(model):  # one level down, and nothing of the model's own
    return sum(p.numel() for child in model.children() for p in child.parameters(recurse=False) if p.requires_grad)


def count_one_level(model):  # the model's own parameters and its children's, each once: one level down only
    seen = {}
    for m in (model, *model.children()):
        for p in m.parameters(recurse=False):
            if p.requires_grad:
                seen[id(p)] = p.numel()
    return sum(seen.values())


def count_through_numpy(model):  # reads the values: a meta tensor has none
    return sum(p.detach().cpu().numpy().size for p in model.parameters() if p.requires_grad)


def count_weights_only(model):
    return sum(m.weight.numel() for m in model.modules() if isinstance(getattr(m, "weight", None), torch.Tensor))


def count_weights_and_biases(model):  # reads .bias of every layer: a bias-free one has None
    return sum(m.weight.numel() + m.bias.numel() for m in model.modules() if isinstance(m, (nn.Linear, nn.LayerNorm,
                                                                                           nn.Embedding)))


def count_by_len(model):  # len(p.flatten())...  written as len() of rows times the rest: a 0-dim tensor has no len
    return sum(len(p) * (p[0].numel() if p.dim() > 1 else 1) for p in model.parameters() if p.requires_grad)


def count_two_sizes(model):  # (rows, columns): a bias has one size
    return sum(p.shape[0] * (p.shape[1] if p.dim() == 2 else 1) for p in model.parameters() if p.requires_grad)


def count_math_prod(model):
    return sum(math.prod(p.shape) for p in model.parameters() if p.requires_grad)


def count_as_float(model):
    return float(sum(p.numel() for p in model.parameters() if p.requires_grad))


@pytest.mark.parametrize("right", [count_trainable_flat, count_by_identity, count_with_vector, count_with_numpy,
                                   count_math_prod])
def test_count_accepts(right):
    assert outcome(check_count_parameters, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (count_from_state_dict, "for a layer used twice expected 12 (one Linear(3, 3), once), got 24: a shared "
         "tensor was counted under each of its names"),
        (count_with_duplicates, "got 24: a shared tensor was counted under each of its names"),
        (count_as_tensor, "return an int, got Tensor"),
        (count_tensors, "for nn.Linear(3, 2) expected 8 (3*2 weights and 2 biases), got 2: the tensors were counted"),
        (count_weights_only, "for nn.Linear(3, 2) expected 8 (3*2 weights and 2 biases), got 6: only the weights"),
        (count_weights_and_biases, "a layer built with bias=False has bias None"),
        (count_by_len, "a 0-dim parameter (one number, such as a temperature) has no len()"),
        (count_two_sizes, "a parameter has fewer sizes than the code reads"),
        (count_with_buffers, "the buffers (BatchNorm's running statistics) were counted"),
        (count_unique_shapes, "got 20: tensors of equal shape were counted once"),
        (count_unique_values, "got 28: tensors with equal values were counted once"),
        (count_unique_data_ptr, "every data_ptr() is 0"),
        (count_including_frozen, "frozen parameters (requires_grad=False) were counted"),
        (count_as_float, "return an int, got float"),
        (count_through_numpy, "Likely cause: on the meta device tensors have shapes but no data"),
        (count_children_only, "for nn.Linear(3, 2), a bare layer without submodules, expected 8, got 0: the layer's "
         "own parameters were not counted"),
        (count_one_level, "for a nested network, Sequential(Sequential(Linear(2, 3), ReLU()), Linear(3, 2)) expected "
         "17 (9 + 8, at two depths), got 8: only the parameters of the model and of its children were counted"),
        (count_with_grad, "Filter on p.requires_grad, not on p.grad"),
    ],
)
def test_count_rejects(wrong, hint):
    verdict, message = outcome(check_count_parameters, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 2")
    assert hint in message


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (count_weights_only, "not the numbers in them"),   # it counts numbers, of the weights only
        (count_tensors, "only the weights"),
        (count_including_frozen, "state_dict()"),          # it never reads state_dict(): frozen weights counted
        (count_unique_values, "equal shape"),
        (count_one_level, "the tensors were counted"),     # 8 numbers, where the nested network has 4 tensors
    ],
)
def test_count_names_only_the_cause_it_saw(wrong, cause):
    assert cause not in outcome(check_count_parameters, wrong)[1]


# ---------------------------------------------------------------- Exercise 3 · load_checked


def _disagreeing(groups, state_dict):
    return [names for names in groups if len(names) > 1
            and any(not torch.equal(state_dict[names[0]], state_dict[n]) for n in names[1:])]


def load_checked_keep_vars(model, state_dict):
    """Groups by identity through state_dict(keep_vars=True), which hands out the Parameters themselves."""
    groups = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    bad = _disagreeing(groups.values(), state_dict)
    if bad:
        raise ValueError(f"untied checkpoint for tied parameters {bad}")
    model.load_state_dict(state_dict)


def load_checked_modules(model, state_dict):
    """Walks every owner of every Parameter."""
    owners = {}
    for prefix, module in model.named_modules(remove_duplicate=False):
        for name, p in module.named_parameters(recurse=False):
            owners.setdefault(p, []).append(f"{prefix}.{name}" if prefix else name)
    for names in owners.values():
        first = state_dict[names[0]]
        for other in names[1:]:
            if not torch.equal(first, state_dict[other]):
                raise ValueError(f"{names[0]} and {other} share one Parameter but differ in the checkpoint")
    model.load_state_dict(state_dict)


def load_checked_pairwise(model, state_dict):
    names = [name for name, _ in model.named_parameters(remove_duplicate=False)]
    clashes = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
               if model.get_parameter(a) is model.get_parameter(b)
               and not torch.equal(state_dict[a], state_dict[b])]
    if clashes:
        raise ValueError("tied parameters disagree: " + ", ".join(f"{a} != {b}" for a, b in clashes))
    model.load_state_dict(state_dict)


def load_plain(model, state_dict):
    model.load_state_dict(state_dict)


def load_checked_default_names(model, state_dict):
    """named_parameters() lists a shared Parameter once, so no group ever has two names."""
    groups = {}
    for name, p in model.named_parameters():
        groups.setdefault(id(p), []).append(name)
    bad = _disagreeing(groups.values(), state_dict)
    if bad:
        raise ValueError(str(bad))
    model.load_state_dict(state_dict)


def load_checked_by_shape(model, state_dict):
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(tuple(p.shape), []).append(name)
    bad = _disagreeing(groups.values(), state_dict)
    if bad:
        raise ValueError(str(bad))
    model.load_state_dict(state_dict)


def load_checked_by_value(model, state_dict):
    named = list(model.named_parameters(remove_duplicate=False))
    bad = [(a, b) for i, (a, p) in enumerate(named) for b, q in named[i + 1:]
           if p.shape == q.shape and torch.equal(p, q) and not torch.equal(state_dict[a], state_dict[b])]
    if bad:
        raise ValueError(str(bad))
    model.load_state_dict(state_dict)


def load_checked_fixed_names(model, state_dict):
    if not torch.equal(state_dict["embed.weight"], state_dict["head.weight"]):
        raise ValueError("embed.weight and head.weight differ")
    model.load_state_dict(state_dict)


def load_checked_fixed_names_guarded(model, state_dict):
    keys = ("embed.weight", "head.weight")
    if all(k in state_dict for k in keys) and not torch.equal(state_dict[keys[0]], state_dict[keys[1]]):
        raise ValueError("embed.weight and head.weight differ")
    model.load_state_dict(state_dict)


def load_then_compare(model, state_dict):
    model.load_state_dict(state_dict)
    now = model.state_dict()
    lost = [k for k, v in state_dict.items() if not torch.equal(now[k], v)]
    if lost:
        raise ValueError(f"lost: {lost}, tied with others")


def load_checked_assert(model, state_dict):
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    assert not _disagreeing(groups.values(), state_dict), "untied checkpoint"
    model.load_state_dict(state_dict)


def load_checked_same_storage(model, state_dict):
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        if len({state_dict[n].data_ptr() for n in names}) > 1:
            raise ValueError(f"{names} are not tied in the checkpoint")
    model.load_state_dict(state_dict)


def load_checked_no_names(model, state_dict):
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    if _disagreeing(groups.values(), state_dict):
        raise ValueError("this checkpoint is not tied")
    model.load_state_dict(state_dict)


def load_checked_assign(model, state_dict):
    load_checked_keep_vars(model, {k: v for k, v in state_dict.items()})
    model.load_state_dict(state_dict, assign=True)


def load_checked_then_cloned_in(model, state_dict):
    """Checks rightly, then puts a clone of every entry into the model: a new Parameter, with its own memory, per
    name."""
    load_checked_keep_vars(model, state_dict)
    model.load_state_dict({k: v.clone() for k, v in state_dict.items()}, assign=True)


def load_checked_by_hand(model, state_dict):
    """Checks rightly, then copies each entry into the model's tensor: a key the checkpoint lacks goes unnoticed."""
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    if _disagreeing(groups.values(), state_dict):
        raise ValueError(f"untied checkpoint for tied parameters {_disagreeing(groups.values(), state_dict)}")
    own = model.state_dict()
    with torch.no_grad():
        for key, value in state_dict.items():
            own[key].copy_(value)


def load_checked_allclose(model, state_dict):  # "equal" up to a tolerance: one of two near values is lost
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        if any(not torch.allclose(state_dict[names[0]], state_dict[n]) for n in names[1:]):
            raise ValueError(f"{names} differ in the checkpoint")
    model.load_state_dict(state_dict)


def load_checked_if_tensors_differ(model, state_dict):  # `if a != b` on whole tensors
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        for n in names[1:]:
            if state_dict[names[0]] != state_dict[n]:
                raise ValueError(f"{names[0]} and {n} differ")
    model.load_state_dict(state_dict)


def load_checked_last_pair(model, state_dict):  # a tie seen as a pair: a third name overwrites the second
    first, pairs = {}, {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            pairs[first[id(p)]] = name
        else:
            first[id(p)] = name
    for a, b in pairs.items():
        if not torch.equal(state_dict[a], state_dict[b]):
            raise ValueError(f"{a} and {b} differ")
    model.load_state_dict(state_dict)


def load_checked_first_two(model, state_dict):  # compares the first two names of each group only
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    for names in groups.values():
        if len(names) > 1 and not torch.equal(state_dict[names[0]], state_dict[names[1]]):
            raise ValueError(f"{names[0]} and {names[1]} differ")
    model.load_state_dict(state_dict)


def load_checked_chain(model, state_dict):  # each name against the one before it
    last = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in last and not torch.equal(state_dict[last[id(p)]], state_dict[name]):
            raise ValueError(f"{last[id(p)]} and {name} share one Parameter but differ in the checkpoint")
        last[id(p)] = name
    model.load_state_dict(state_dict)


def load_checked_not_strict(model, state_dict):  # strict=False: a checkpoint that lacks keys loads silently
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    bad = _disagreeing(groups.values(), state_dict)
    if bad:
        raise ValueError(f"untied checkpoint for tied parameters {bad}")
    model.load_state_dict(state_dict, strict=False)


def load_checked_by_checkpoint_keys(model, state_dict):  # get_parameter raises on a buffer's name
    groups = {}
    for key in state_dict:
        groups.setdefault(id(model.get_parameter(key)), []).append(key)
    bad = _disagreeing(groups.values(), state_dict)
    if bad:
        raise ValueError(f"untied checkpoint for tied parameters {bad}")
    model.load_state_dict(state_dict)


def _groups(model, order):
    groups = {}
    for name, p in order(list(model.named_parameters(remove_duplicate=False))):
        groups.setdefault(id(p), []).append(name)
    return list(groups.values())


def load_checked_reversed(model, state_dict):
    """Walks the names backwards and stops at the first group that disagrees (here the biases of a layer used
    twice come before its weights)."""
    for names in _groups(model, lambda named: named[::-1]):
        for n in names[1:]:
            if not torch.equal(state_dict[names[0]], state_dict[n]):
                raise ValueError(f"{names[0]} and {n} share one Parameter but differ in the checkpoint")
    model.load_state_dict(state_dict)


def load_checked_sorted_keys(model, state_dict):
    """Walks the checkpoint's keys in sorted order, skipping buffers, and names the first group that disagrees."""
    parameters = dict(model.named_parameters(remove_duplicate=False))
    groups = {}
    for key in sorted(state_dict):
        if key in parameters:
            groups.setdefault(id(parameters[key]), []).append(key)
    for names in groups.values():
        if any(not torch.equal(state_dict[names[0]], state_dict[n]) for n in names[1:]):
            raise ValueError(f"tied entries disagree: {names}")
    model.load_state_dict(state_dict)


def load_checked_minority(model, state_dict):
    """Names the odd ones out of each group (both names of a pair)."""
    for names in _groups(model, lambda named: named):
        agree = [sum(torch.equal(state_dict[a], state_dict[b]) for b in names) for a in names]
        if min(agree) < len(names):
            odd = [n for n, k in zip(names, agree, strict=True) if k < max(agree)] or names
            raise ValueError(f"these entries disagree with the other names of their Parameter: {odd}")
    model.load_state_dict(state_dict)


def load_checked_children_only(model, state_dict):
    """Walks the model's children, one level down (repeats kept): a tie further down is missed."""
    groups = {}
    for prefix, child in model._modules.items():
        for name, p in child.named_parameters(recurse=False):
            groups.setdefault(id(p), []).append(f"{prefix}.{name}")
    for names in groups.values():
        for n in names[1:]:
            if not torch.equal(state_dict[names[0]], state_dict[n]):
                raise ValueError(f"{names[0]} and {n} differ")
    model.load_state_dict(state_dict)


def load_checked_only_the_others(model, state_dict):
    """Names only the names that differ from the group's first: when the first is the odd one, the others."""
    for names in _groups(model, lambda named: named):
        differ = [n for n in names[1:] if not torch.equal(state_dict[names[0]], state_dict[n])]
        if differ:
            raise ValueError(f"differ from the first name of their Parameter: {differ}")
    model.load_state_dict(state_dict)


@pytest.mark.parametrize(
    "right", [load_checked_keep_vars, load_checked_modules, load_checked_pairwise, load_checked_chain,
              load_checked_reversed, load_checked_sorted_keys, load_checked_minority]
)
def test_load_checked_accepts(right):
    assert outcome(check_load_checked, right) == ("passed", "")


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (load_plain, "loaded without complaint"),
        (load_checked_default_names, "Your load_checked walked model.named_parameters(), which lists a shared "
         "Parameter once"),
        (load_checked_by_shape, "a tied checkpoint (embed.weight equal to head.weight) was refused"),
        (load_checked_by_shape, "norm.weight and norm.bias have equal shapes but are two Parameters"),
        (load_checked_by_value, "Equal values or shapes are not a tie"),
        (load_checked_fixed_names, "raised KeyError"),
        (load_checked_fixed_names_guarded, "for a Sequential that uses one Linear twice was loaded"),
        (load_then_compare, "the model was changed before the ValueError"),
        (load_checked_assert, "raise ValueError (not assert, not RuntimeError)"),
        (load_checked_same_storage, "equal but stored separately was refused"),
        (load_checked_no_names, "must name the keys that disagree"),
        (load_checked_assign, "the model lost its tie: head.weight and embed.weight are now two Parameters over one "
         "memory, as load_state_dict(..., assign=True) leaves a tied checkpoint"),
        (load_checked_then_cloned_in, "head.weight and embed.weight are now two Parameters with two memories"),
        (load_checked_by_hand, "a checkpoint without norm.bias was loaded without complaint"),
        (load_checked_allclose, "Values that differ this little passed as equal: a comparison with a tolerance"),
        (load_checked_if_tensors_differ, "Compare whole tensors with torch.equal(a, b)"),
        (load_checked_last_pair, "A Parameter can have more than two names"),
        (load_checked_first_two, "A Parameter can have more than two names"),
        (load_checked_not_strict, "your load_checked passed strict=False"),
        (load_checked_by_checkpoint_keys, "model.get_parameter raises on a buffer's name"),
        (load_checked_children_only, "The tie sits two levels down: walk every module at every depth"),
        (load_checked_only_the_others, "the ValueError must name the keys that disagree (embed.weight, head.weight); "
         "got: differ from the first name of their Parameter: ['head.weight']"),
    ],
)
def test_load_checked_rejects(wrong, hint):
    verdict, message = outcome(check_load_checked, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 3")
    assert hint in message


@pytest.mark.parametrize(
    ("wrong", "cause"),
    [
        (load_plain, "named_parameters()"),             # it walks nothing
        (load_checked_by_hand, "strict=False"),         # it never passes strict=False
        (load_checked_then_cloned_in, "one memory"),    # its two Parameters have two memories
        (load_checked_assign, "two memories"),
        (load_checked_same_storage, "equal shapes"),    # it compares storage, not shapes
        (load_checked_fixed_names, "ValueError (not assert"),   # a KeyError is no refusal of another type
    ],
)
def test_load_checked_names_only_the_cause_it_saw(wrong, cause):
    assert cause not in outcome(check_load_checked, wrong)[1]


# ---------------------------------------------------------------- stubs


def test_unattempted_exercises_say_so():
    class Stub(nn.Module):
        def __init__(self, *args):
            super().__init__()
            raise NotImplementedError("your code here")

    def stub(*args):
        raise NotImplementedError("your code here")

    assert outcome(check_tied_lm, Stub) == ("not attempted", "")
    assert outcome(check_count_parameters, stub) == ("not attempted", "")
    assert outcome(check_load_checked, stub) == ("not attempted", "")
