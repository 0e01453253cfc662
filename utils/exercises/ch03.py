"""Checks for chapter 03 · Parameter tying."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from utils.checks import exercise, expect

__all__ = ["check_tied_lm", "check_count_parameters"]


@exercise("Exercise 1 · Tie a language model's head to its embedding")
def check_tied_lm(cls: type[nn.Module]) -> None:
    """``cls(vocab_size, dim)`` has ``embed`` (nn.Embedding) and ``head`` (nn.Linear) sharing one weight."""
    vocab, dim = 50, 12
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls(vocab, dim)
        tokens = torch.randint(0, vocab, (3, 7))
        targets = torch.randint(0, vocab, (3, 7))
    expect(isinstance(model, nn.Module), "TiedLM must subclass nn.Module")
    embed, head = getattr(model, "embed", None), getattr(model, "head", None)
    expect(isinstance(embed, nn.Embedding) and isinstance(head, nn.Linear),
           "keep the embedding in self.embed (nn.Embedding) and the output layer in self.head (nn.Linear)")
    expect(tuple(embed.weight.shape) == (vocab, dim),
           f"the embedding of TiedLM({vocab}, {dim}) must have weight shape ({vocab}, {dim})")
    seen = []
    handle = head.register_forward_hook(lambda module, args, output: seen.append(output))
    try:
        logits = model(tokens)
    finally:
        handle.remove()
    expect(isinstance(logits, torch.Tensor) and logits.shape == (3, 7, vocab),
           f"model(tokens) with tokens of shape (3, 7) must return logits of shape (3, 7, {vocab}); "
           f"got {getattr(logits, 'shape', type(logits))}")
    expect(len(seen) == 1 and torch.equal(seen[0], logits), "the logits must be the output of self.head")
    expect(
        head.weight is embed.weight,
        "head.weight and embed.weight must be the same Parameter object: assign it "
        "(self.head.weight = self.embed.weight); copying the values gives two weights that drift apart",
    )
    shared = [p for p in model.parameters() if p.shape == (vocab, dim)]
    expect(len(shared) == 1, f"the model holds {len(shared)} ({vocab}, {dim}) parameters; a tied model holds one")
    nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1)).backward()
    expect(embed.weight.grad is not None and bool(embed.weight.grad.abs().sum() > 0),
           "the loss must reach the shared weight through the head")


@exercise("Exercise 2 · Count parameters once")
def check_count_parameters(count: Callable[[nn.Module], int]) -> None:
    """``count(model)`` is the number of trainable numbers in ``model``, each shared tensor counted once."""

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.body = nn.Linear(16, 16)
            self.norm = nn.BatchNorm1d(16)  # 32 parameters and 3 buffers
            self.head = nn.Linear(16, 100, bias=False)
            self.head.weight = self.embed.weight

    shared = nn.Linear(3, 3)
    cases = [
        (nn.Linear(3, 2), 8, "nn.Linear(3, 2) has 3*2 weights and 2 biases"),
        (nn.Sequential(shared, nn.ReLU(), shared), 12, "a layer used twice has its 12 parameters once"),
        (TinyLM(), 1600 + 272 + 32,
         "a tied embedding/head counts once, and BatchNorm's running statistics are buffers, not parameters"),
    ]
    for model, expected, why in cases:
        got = count(model)
        expect(isinstance(got, int) and not isinstance(got, bool), f"return an int, got {type(got).__name__}")
        expect(got == expected, f"expected {expected}, got {got}: {why}. "
                                "Sum p.numel() over model.parameters(), which yields a shared tensor once")
