"""Chapter 05's checks accept the reference answers and reject the plausible wrong ones."""

from collections import OrderedDict

import pytest
import torch

from utils import ExerciseFailed
from utils.checkpoint import load_checkpoint, save_checkpoint
from utils.exercises.ch05 import check_resume, check_strip_prefix


def strip_prefix(state_dict, prefix="module."):
    return OrderedDict((k[len(prefix):] if k.startswith(prefix) else k, v) for k, v in state_dict.items())


def with_replace(state_dict, prefix="module."):
    return OrderedDict((k.replace(prefix, ""), v) for k, v in state_dict.items())


def with_lstrip(state_dict, prefix="module."):
    return OrderedDict((k.lstrip(prefix), v) for k, v in state_dict.items())


def in_place(state_dict, prefix="module."):
    for k in list(state_dict):
        if k.startswith(prefix):
            state_dict[k[len(prefix):]] = state_dict.pop(k)
    return state_dict


def drops_others(state_dict, prefix="module."):
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))


def hard_coded(state_dict, prefix="module."):
    return strip_prefix(state_dict)


def copies_values(state_dict, prefix="module."):
    return OrderedDict((k, v.clone()) for k, v in strip_prefix(state_dict, prefix).items())


def test_strip_prefix_accepts_reference(capsys):
    check_strip_prefix(strip_prefix)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong", [with_replace, with_lstrip, in_place, drops_others, hard_coded, copies_values])
def test_strip_prefix_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_strip_prefix(wrong)


def save_state(path, model, optimizer, step):
    save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                     "rng": torch.get_rng_state()}, path)


def load_state(path, model, optimizer):
    checkpoint = load_checkpoint(path)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def load_without_rng(path, model, optimizer):
    checkpoint = load_checkpoint(path)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["step"]


def load_without_optimizer(path, model, optimizer):
    checkpoint = load_checkpoint(path)
    model.load_state_dict(checkpoint["model"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def load_without_model(path, model, optimizer):
    checkpoint = load_checkpoint(path)
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def load_wrong_step(path, model, optimizer):
    load_state(path, model, optimizer)
    return 0


def save_whole_objects(path, model, optimizer, step):
    torch.save({"model": model, "optimizer": optimizer, "step": step, "rng": torch.get_rng_state()}, path)


def load_whole_objects(path, model, optimizer):
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"].state_dict())
    optimizer.load_state_dict(checkpoint["optimizer"].state_dict())
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def save_nothing(path, model, optimizer, step):
    pass


def test_resume_accepts_reference(capsys):
    before = torch.get_rng_state()
    check_resume(save_state, load_state)
    assert "passed" in capsys.readouterr().out
    assert torch.equal(torch.get_rng_state(), before), "the check must not disturb the caller's random stream"


@pytest.mark.parametrize(
    "save, load",
    [
        (save_state, load_without_rng),
        (save_state, load_without_optimizer),
        (save_state, load_without_model),
        (save_state, load_wrong_step),
        (save_whole_objects, load_whole_objects),
        (save_nothing, load_state),
    ],
)
def test_resume_rejects(save, load):
    with pytest.raises(ExerciseFailed):
        check_resume(save, load)


def test_resume_names_the_missing_piece():
    with pytest.raises(ExerciseFailed, match="random state"):
        check_resume(save_state, load_without_rng)
    with pytest.raises(ExerciseFailed, match="optimizer"):
        check_resume(save_state, load_without_optimizer)


def strip_stub(state_dict, prefix="module."):
    raise NotImplementedError("your code here")


def save_stub(path, model, optimizer, step):
    raise NotImplementedError("your code here")


def load_stub(path, model, optimizer):
    raise NotImplementedError("your code here")


def test_stubs_are_not_attempted_yet(capsys):
    check_strip_prefix(strip_stub)
    check_resume(save_stub, load_stub)
    check_resume(save_state, load_stub)
    assert capsys.readouterr().out.count("not attempted yet") == 3
