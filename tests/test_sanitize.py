"""The sanitizer makes a GPU run's tensor reprs equal to the CPU reference, and nothing more."""

from pathlib import Path

import pytest
import torch
from nbval.plugin import get_sanitize_patterns

RULES = get_sanitize_patterns((Path(__file__).parent / "sanitize.cfg").read_text())


def sanitize(text: str) -> str:
    import re

    for regex, replace in RULES:
        text = re.sub(regex, replace, text)
    return text


def test_every_rule_in_the_file_was_parsed():
    # nbval silently ignores malformed pairs: count the `regex:` lines ourselves.
    lines = (Path(__file__).parent / "sanitize.cfg").read_text().splitlines()
    assert len(RULES) == sum(line.startswith("regex: ") for line in lines) == 3


def cpu_and_gpu_repr(t: torch.Tensor) -> tuple[str, str]:
    """The repr of ``t`` as PyTorch prints it on the CPU and on cuda:0, from PyTorch's own formatter.

    On a GPU the repr gains the suffix ``device='cuda:0'`` before the others, and PyTorch moves any
    suffix that passes the line width onto a new line: both come from ``_add_suffixes``.
    """
    fmt = torch._tensor_str
    body = "tensor(" + fmt._tensor_str(t.detach(), len("tensor("))
    tail = []
    if t.dtype not in (torch.float32, torch.int64, torch.bool):
        tail.append(f"dtype={t.dtype}")
    if t.grad_fn is not None:
        tail.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        tail.append("requires_grad=True")
    cpu = fmt._add_suffixes(body, tail, len("tensor("), False)
    gpu = fmt._add_suffixes(body, ["device='cuda:0'", *tail], len("tensor("), False)
    return cpu, gpu


@pytest.mark.parametrize(
    "cuda_repr, cpu_repr",
    [
        ("tensor([1., 2., 3.], device='cuda:0')", "tensor([1., 2., 3.])"),
        ("tensor(3, device='cuda:1')", "tensor(3)"),
        ("tensor([0.5000], device='mps:0', requires_grad=True)", "tensor([0.5000], requires_grad=True)"),
        (
            "tensor([[0.1000, 0.2000, 0.3000, 0.4000, 0.5000, 0.6000, 0.7000, 0.8000, 0.9000]],\n"
            "       device='cuda:0', grad_fn=<MulBackward0>)",
            "tensor([[0.1000, 0.2000, 0.3000, 0.4000, 0.5000, 0.6000, 0.7000, 0.8000, 0.9000]],\n"
            "       grad_fn=<MulBackward0>)",
        ),
        (
            "tensor([1, 2], device='cuda:0', dtype=torch.int32)",
            "tensor([1, 2], dtype=torch.int32)",
        ),
        (  # a sparse tensor: size=, nnz= and layout= follow the device
            "tensor(indices=tensor([[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11]]),\n"
            "       values=tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10.,\n"
            "                      11.]),\n"
            "       device='cuda:0', size=(12,), nnz=12, layout=torch.sparse_coo)",
            "tensor(indices=tensor([[ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11]]),\n"
            "       values=tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10.,\n"
            "                      11.]),\n"
            "       size=(12,), nnz=12, layout=torch.sparse_coo)",
        ),
        (  # a forward-mode dual tensor: its tangent is on the device too
            "tensor([0., 1., 2., 3., 4., 5., 6., 7., 8.], device='cuda:0',\n"
            "       tangent=tensor([1., 1., 1., 1., 1., 1., 1., 1., 1.], device='cuda:0'))",
            "tensor([0., 1., 2., 3., 4., 5., 6., 7., 8.],\n"
            "       tangent=tensor([1., 1., 1., 1., 1., 1., 1., 1., 1.]))",
        ),
    ],
)
def test_gpu_repr_sanitizes_to_cpu_repr(cuda_repr, cpu_repr):
    assert sanitize(cuda_repr) == sanitize(cpu_repr)


TENSORS = [torch.linspace(0, 1, n).reshape(1, n).requires_grad_() for n in range(1, 13)]
TENSORS += [torch.linspace(0, 1, n) * torch.ones(n, requires_grad=True) for n in (3, 8, 9, 10)]
TENSORS += [torch.arange(n, dtype=torch.int32) for n in (4, 20, 40)]


@pytest.mark.parametrize("t", TENSORS, ids=lambda t: f"{t.dtype}-{t.numel()}")
def test_real_reprs_with_and_without_device_suffix(t):
    cpu, gpu = cpu_and_gpu_repr(t)
    assert cpu == repr(t), "the reconstruction must match PyTorch's real CPU repr"
    assert "device='cuda:0'" in gpu
    assert sanitize(gpu) == sanitize(cpu)


def test_values_are_never_sanitized_away():
    assert sanitize("tensor([1., 2.], device='cuda:0')") != sanitize("tensor([1., 3.])")
    assert sanitize("tensor([1., 2.])") != sanitize("tensor([1., 2.], requires_grad=True)")
    assert sanitize("device(type='cuda', index=0)") == "device(type='cuda', index=0)"
