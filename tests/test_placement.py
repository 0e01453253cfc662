"""utils.placement, the helpers of chapters 07 and 08: what .to() cannot reach (chapter 07), and the formulas
of the GPU memory cells (chapter 08), checked on the CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from utils.placement import ALLOCATOR_BLOCK, adam_step_peak, allocator_block_bytes, allocator_segment_bytes, strays

MiB = 2**20

def test_strays():
    inner = nn.Module()
    inner.scale = torch.ones(2)
    outer = nn.Sequential(nn.Linear(2, 2))
    outer.block = inner
    outer.helpers = [nn.LayerNorm(2)]  # a module with tensors of its own, which .to() does not see
    outer.activations = [nn.ReLU()]  # no tensor to move: fine
    outer.aliases = {"first": outer[0]}  # a second name for a registered module, which .to() moves: fine
    outer.sizes = (1, 2)  # not tensors: fine
    outer._cache = torch.zeros(2)  # an underscore does not hide it
    outer.register_buffer("fine", torch.zeros(1))
    assert strays(outer) == [
        "helpers (list of modules or tensors)",
        "_cache (plain tensor attribute)",
        "block.scale (plain tensor attribute)",
    ]
    assert strays(nn.Linear(2, 2)) == []
    assert strays(nn.BatchNorm1d(3)) == []
    with pytest.raises(TypeError, match="module"):
        strays([nn.Linear(2, 2)])


@pytest.mark.parametrize(
    ("nbytes", "block", "segment"),
    [
        (0, 0, 0),
        (1, 512, 2 * MiB),
        (512, 512, 2 * MiB),
        (513, 1024, 2 * MiB),
        (4000, 4096, 2 * MiB),
        (MiB, MiB, 2 * MiB),
        (MiB + 1, MiB + 512, 20 * MiB),
        (10 * MiB - 512, 10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB, 10 * MiB),
        (100 * MiB + 4, 100 * MiB + 512, 102 * MiB),
    ],
)
def test_allocator_rounding(nbytes, block, segment):
    assert allocator_block_bytes(nbytes) == block
    assert allocator_segment_bytes(nbytes) == segment
    assert block % ALLOCATOR_BLOCK == 0 and nbytes <= block < nbytes + ALLOCATOR_BLOCK


def test_allocator_bad_input_is_named():
    with pytest.raises(ValueError, match="nbytes"):
        allocator_block_bytes(-1)
    with pytest.raises(TypeError, match="nbytes"):
        allocator_segment_bytes(1.5)


def test_adam_step_peak_counts_five_tensors_per_parameter():
    # The chapter's GPU model: Linear(1024, 4096) -> ReLU -> Linear(4096, 1024), a batch of 256.
    numels = [4096 * 1024, 4096, 1024 * 4096, 1024]
    batch = [256 * 1024 * 4, 256 * 8]
    peak = adam_step_peak(numels, 4, batch)
    params = 4 * sum(numels)  # every size is a multiple of 512 bytes: no rounding
    assert peak == {
        "parameters": params,
        "gradients": params,
        "Adam state": 2 * params,
        "Adam's temporary": params,
        "others": 256 * 1024 * 4 + 2048,
    }
    assert sum(peak.values()) == 5 * params + 256 * 1024 * 4 + 2048
    # Forgetting any of the four parameter-sized terms moves the total by at least 32 MiB, far more
    # than the 8 MiB the chapter's GPU cell allows for the allocator's leftovers.
    assert min(peak[k] for k in ("parameters", "gradients", "Adam's temporary")) > 32 * MiB - 1
    # Rounding: a 3-number float32 bias books a 512-byte block in each of the five roles.
    assert sum(adam_step_peak([3]).values()) == 5 * 512
    assert adam_step_peak([3], element_size=8)["Adam state"] == 2 * 512


def test_adam_step_peak_bad_input_is_named():
    with pytest.raises(ValueError, match="element_size"):
        adam_step_peak([3], element_size=0)
    with pytest.raises(TypeError, match=r"param_numels\[i\]"):
        adam_step_peak([3.0])
    with pytest.raises(ValueError, match=r"others\[i\]"):
        adam_step_peak([3], others=[-1])


def test_chapter_07_recaps_registration_in_one_table_and_teaches_reading_values():
    """07 recaps what ``.to()`` reaches (taught in 01 and 04) in one table, and teaches that reading values
    (``.numpy()``, ``np.asarray``, plotting, ``.item()``, ``.tolist()``) needs the host, with a GPU cell."""
    import nbformat

    from tools import course

    core = course.core_path(nbformat.read(course.NOTEBOOKS / "07_gpu_placement.ipynb", as_version=4))
    recaps = [c.source for c in core if c.cell_type == "markdown" and "As chapters [01]" in c.source]
    assert len(recaps) == 1 and "[04]" in recaps[0]
    rows = ("| plain tensor attribute", "| module in a Python list", "| `register_buffer`", "| `nn.ModuleList`")
    assert all(row in recaps[0] for row in rows)
    code = "\n".join(c.source for c in core if c.cell_type == "code")
    assert all(read in code for read in (".numpy()", "np.asarray", ".detach().cpu().numpy()", ".tolist()", ".item()"))
    assert any("requires-cuda" in c.metadata.get("tags", []) and "Figure().subplots().plot" in c.source for c in core)
