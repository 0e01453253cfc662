"""Chapter 05's checks: each plausible wrong answer gets the hint that names its mistake, and right answers
written differently from the notebook's reference pass. (The reference itself runs in the notebook.)"""

import copy
import re
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from utils.checkpoint import load_checkpoint, save_checkpoint
from utils.checks import STUB_MESSAGE, outcome
from utils.exercises.ch05 import check_resume, check_strip_prefix

# ---------------------------------------------------------------- Exercise 1: wrong answers


def with_replace(state_dict, prefix="module."):
    return OrderedDict((k.replace(prefix, ""), v) for k, v in state_dict.items())


def with_lstrip(state_dict, prefix="module."):
    return OrderedDict((k.lstrip(prefix), v) for k, v in state_dict.items())


def with_split(state_dict, prefix="module."):
    return OrderedDict((k.split(prefix)[-1], v) for k, v in state_dict.items())


def in_place(state_dict, prefix="module."):
    for k in list(state_dict):
        if k.startswith(prefix):
            state_dict[k[len(prefix):]] = state_dict.pop(k)
    return state_dict


def consume_in_place(state_dict, prefix="module."):
    consume_prefix_in_state_dict_if_present(state_dict, prefix)
    return state_dict


def consume_on_a_shallow_copy(state_dict, prefix="module."):  # copy.copy shares the caller's _metadata
    out = copy.copy(state_dict)
    consume_prefix_in_state_dict_if_present(out, prefix)
    return out


def default_without_dot(state_dict, prefix="module"):
    return {k.removeprefix(prefix): v for k, v in state_dict.items()}


def drops_others(state_dict, prefix="module."):
    return OrderedDict((k[len(prefix):], v) for k, v in state_dict.items() if k.startswith(prefix))


def cuts_every_key(state_dict, prefix="module."):
    return {k[len(prefix):]: v for k, v in state_dict.items()}


def unescaped_regex(state_dict, prefix="module."):
    return {re.sub("^" + prefix, "", k): v for k, v in state_dict.items()}


def strips_repeatedly(state_dict, prefix="module."):
    out = {}
    for k, v in state_dict.items():
        while k.startswith(prefix):
            k = k[len(prefix):]
        out[k] = v
    return out


def all_or_nothing(state_dict, prefix="module."):
    if all(k.startswith(prefix) for k in state_dict):
        return {k[len(prefix):]: v for k, v in state_dict.items()}
    return dict(state_dict)


def hard_coded(state_dict, prefix="module."):
    return {(k[7:] if k.startswith("module.") else k): v for k, v in state_dict.items()}


def copies_values(state_dict, prefix="module."):
    return {(k[len(prefix):] if k.startswith(prefix) else k): v.clone() for k, v in state_dict.items()}


def list_of_pairs(state_dict, prefix="module."):
    return [(k.removeprefix(prefix), v) for k, v in state_dict.items()]


def other_signature(state_dict, strip="module."):
    return {k.removeprefix(strip): v for k, v in state_dict.items()}


def split_first_dot(state_dict, prefix="module."):
    return {(k.split(".", 1)[1] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


def same_if_nothing(state_dict, prefix="module."):
    if not any(k.startswith(prefix) for k in state_dict):
        return state_dict
    return {k.removeprefix(prefix): v for k, v in state_dict.items()}


def first_part_only(state_dict, prefix="module."):  # tests the key's first part, not the whole prefix
    return {(k[len(prefix):] if k.split(".")[0] + "." == prefix else k): v for k, v in state_dict.items()}


def part_by_part(state_dict, prefix="module."):  # strips each part of the prefix on its own
    out = {}
    for k, v in state_dict.items():
        for part in prefix.split(".")[:-1]:
            k = k.removeprefix(part + ".")
        out[k] = v
    return out


def first_key_decides(state_dict, prefix="module."):  # "saved from DataParallel?" judged by the first key
    if next(iter(state_dict)).startswith(prefix):
        return {k.removeprefix(prefix): v for k, v in state_dict.items()}
    return dict(state_dict)


def first_key_decides_by_index(state_dict, prefix="module."):
    if list(state_dict)[0].startswith(prefix):
        return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}
    return OrderedDict(state_dict)


STRIP_WRONG = {
    with_replace: "the key 'module.submodule.weight' became 'subweight'; expected 'submodule.weight'. str.replace "
                  "removes the prefix wherever it occurs",
    with_lstrip: "the key 'module.encoder.weight' became 'ncoder.weight'; expected 'encoder.weight'. str.lstrip (and "
                 "str.strip) remove characters",
    with_split: "the key 'module.submodule.weight' became 'weight'; expected 'submodule.weight'. str.split cuts a "
                "key at every occurrence of the prefix",
    in_place: "do not modify the state dict you were given",
    consume_in_place: "do not modify the state dict you were given",
    consume_on_a_shallow_copy: "nor its _metadata",
    default_without_dot: "your default is prefix='module'. Give the parameter the default the task names",
    drops_others: "the key 'b.module.c' is missing from the result",
    cuts_every_key: "the key 'b.module.c' became 'e.c'; expected 'b.module.c'. Keys that do not start with the "
                    "prefix lost their first len(prefix) characters",
    unescaped_regex: "the key 'module_list.0.weight' became 'list.0.weight'; expected 'module_list.0.weight'. In "
                     "a regular expression the prefix needs re.escape",
    strips_repeatedly: "the key 'module.module.w' became 'w'; expected 'module.w'. The prefix was removed as many "
                       "times as it repeats",
    all_or_nothing: "the key 'module.a' kept its prefix; expected 'a'",
    hard_coded: "Use the prefix argument rather than a hard-coded 'module.'",
    copies_values: "keep the same tensors as values, not copies",
    list_of_pairs: "return a dict (an OrderedDict is fine); got list",
    other_signature: "calling strip_prefix(state_dict, prefix='module.') on mixed keys raised TypeError",
    split_first_dot: "the key 'backbone.body.conv.weight' became 'body.conv.weight'; expected 'conv.weight': a "
                     "prefix can have several parts",
    same_if_nothing: "return a new dict, also when no key starts with the prefix",
    first_part_only: "kept its prefix; expected 'conv.weight': a prefix can have several parts, so test "
                     "key.startswith(prefix)",
    part_by_part: "the key 'backbone.head.bias' became 'head.bias'; expected 'backbone.head.bias': it starts "
                  "with the prefix's first part only",
    first_key_decides: "no key lost the prefix, although 2 of them start with it ('module.a', ...); the first "
                       "key, 'head', does not",
    first_key_decides_by_index: "test key.startswith(prefix) for every key, not for the first one",
}


@pytest.mark.parametrize("wrong", list(STRIP_WRONG), ids=lambda f: f.__name__)
def test_strip_prefix_names_the_mistake(wrong):
    verdict, hint = outcome(check_strip_prefix, wrong)
    assert verdict == "failed"
    assert STRIP_WRONG[wrong] in hint, hint


SLIPS = ("str.replace", "str.lstrip", "str.split", "re.escape", "removed as many times", "lost their first")


@pytest.mark.parametrize("wrong", [with_replace, with_lstrip, with_split, cuts_every_key, unescaped_regex,
                                   strips_repeatedly], ids=lambda f: f.__name__)
def test_strip_prefix_names_only_the_way_the_answer_stripped(wrong):
    # The key that several ways would mangle alike ('module.module.w': replace, split, lstrip and a loop all give
    # 'w') is judged by what the answer did to every key, so the hint names one way, the answer's.
    hint = outcome(check_strip_prefix, wrong)[1]
    assert [way for way in SLIPS if way in hint] == [next(way for way in SLIPS if way in STRIP_WRONG[wrong])], hint


# ---------------------------------------------------------------- Exercise 1: right answers


def with_removeprefix(state_dict, prefix="module."):
    return OrderedDict((k.removeprefix(prefix), v) for k, v in state_dict.items())


def with_escaped_regex(state_dict, prefix="module."):
    pattern = re.compile("^" + re.escape(prefix))
    return {pattern.sub("", k, count=1): v for k, v in state_dict.items()}


def with_partition(state_dict, prefix="module."):
    out = OrderedDict()
    for k, v in state_dict.items():
        head, found, tail = k.partition(prefix)
        out[tail if found and not head else k] = v
    return out


def consume_on_a_copy(state_dict, prefix="module."):
    copy = OrderedDict(state_dict)
    consume_prefix_in_state_dict_if_present(copy, prefix)
    return copy


def rename_in_a_shallow_copy(state_dict, prefix="module."):  # shares _metadata, but leaves it alone
    out = copy.copy(state_dict)
    for k in list(out):
        if k.startswith(prefix):
            out[k[len(prefix):]] = out.pop(k)
    return out


def default_none(state_dict, prefix=None):
    prefix = "module." if prefix is None else prefix
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in state_dict.items()}


def walks_backwards(state_dict, prefix="module."):  # another order of the keys: the same verdict
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in reversed(state_dict.items())}


@pytest.mark.parametrize("right", [with_removeprefix, with_escaped_regex, with_partition, consume_on_a_copy,
                                   rename_in_a_shallow_copy, default_none, walks_backwards],
                         ids=lambda f: f.__name__)
def test_strip_prefix_accepts(right):
    assert outcome(check_strip_prefix, right) == ("passed", "")


# ---------------------------------------------------------------- Exercise 2: wrong answers


def save_state(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "rng": torch.get_rng_state()}, path)


def _restore(checkpoint, model, optimizer, parts=("model", "optimizer", "rng")):
    if "model" in parts:
        model.load_state_dict(checkpoint["model"])
    if "optimizer" in parts:
        optimizer.load_state_dict(checkpoint["optimizer"])
    if "rng" in parts:
        torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def save_without_rng(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)


def load_without_rng(path, model, optimizer):
    return _restore(torch.load(path, map_location="cpu"), model, optimizer, ("model", "optimizer"))


def load_without_optimizer(path, model, optimizer):
    return _restore(torch.load(path, map_location="cpu"), model, optimizer, ("model", "rng"))


def load_without_model(path, model, optimizer):
    return _restore(torch.load(path, map_location="cpu"), model, optimizer, ("optimizer", "rng"))


def load_returns_three(path, model, optimizer):
    _restore(torch.load(path, map_location="cpu"), model, optimizer)
    return 3


def load_without_map_location(path, model, optimizer):
    return _restore(torch.load(path), model, optimizer)


def load_checkpoint_without_map_location(path, model, optimizer):
    return _restore(load_checkpoint(path), model, optimizer)


def load_into_a_new_optimizer(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)  # rebinds the name; the caller's is untouched
    return _restore(checkpoint, model, optimizer)


def load_whole_file_non_strict(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint, strict=False)  # the checkpoint, not checkpoint["model"]: nothing matches
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def reseed_instead(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu")
    _restore(checkpoint, model, optimizer, ("model", "optimizer"))
    torch.manual_seed(checkpoint["step"])
    return checkpoint["step"]


def save_optimizer_settings_only(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "lr": optimizer.param_groups[0]["lr"], "step": step,
                "rng": torch.get_rng_state()}, path)


def load_optimizer_settings_only(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    for group in optimizer.param_groups:
        group["lr"] = checkpoint["lr"]
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def save_whole_objects(path, model, optimizer, step):
    torch.save({"model": model, "optimizer": optimizer, "step": step, "rng": torch.get_rng_state()}, path)


def load_whole_objects(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(checkpoint["model"].state_dict())
    optimizer.load_state_dict(checkpoint["optimizer"].state_dict())
    torch.set_rng_state(checkpoint["rng"])
    return checkpoint["step"]


def save_nothing(path, model, optimizer, step):
    pass


def save_without_step(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": torch.get_rng_state()},
               path)


def load_step_from_adam(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    torch.set_rng_state(checkpoint["rng"])
    return int(checkpoint["optimizer"]["state"][0]["step"])  # Adam's count, equal to the step only by chance


def load_state(path, model, optimizer):
    return _restore(torch.load(path, map_location="cpu"), model, optimizer)


def save_step_as_tensor(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": torch.tensor(step),
                "rng": torch.get_rng_state()}, path)


def load_with_assign(path, model, optimizer):  # the model gets new Parameters; the optimizer keeps the old
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"], assign=True)
    return _restore(checkpoint, model, optimizer, parts=("optimizer", "rng"))


def save_safetensors(path, model, optimizer, step):  # named tensors only
    from safetensors.torch import save_file

    save_file({**model.state_dict(), "step": torch.tensor(step), "rng": torch.get_rng_state()}, str(path))


def load_safetensors(path, model, optimizer):
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    torch.set_rng_state(tensors.pop("rng"))
    step = int(tensors.pop("step"))
    model.load_state_dict(tensors)
    return step


def save_parameters_only(path, model, optimizer, step):  # no buffers: batch norm's running statistics
    torch.save({"model": dict(model.named_parameters()), "optimizer": optimizer.state_dict(), "step": step,
                "rng": torch.get_rng_state()}, path)


def load_parameters_only(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(checkpoint["model"], strict=False)
    return _restore(checkpoint, model, optimizer, parts=("optimizer", "rng"))


def save_adam_state_only(path, model, optimizer, step):  # no param_groups: the learning rate is lost
    torch.save({"model": model.state_dict(), "adam": optimizer.state_dict()["state"], "step": step,
                "rng": torch.get_rng_state()}, path)


def load_adam_state_only(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    for i, p in enumerate(model.parameters()):
        optimizer.state[p] = checkpoint["adam"][i]
    return _restore(checkpoint, model, optimizer, parts=("model", "rng"))


def load_adam_state_and_a_fixed_lr(path, model, optimizer):  # the run's first learning rate, from its config
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    for i, p in enumerate(model.parameters()):
        optimizer.state[p] = checkpoint["adam"][i]
    for group in optimizer.param_groups:
        group["lr"] = 0.05
    return _restore(checkpoint, model, optimizer, parts=("model", "rng"))


_KEPT = {}  # a variable of the program, which a new process starts without


def save_step_in_a_variable(path, model, optimizer, step):
    _KEPT["step"] = step
    save_without_step(path, model, optimizer, step)


def load_step_from_a_variable(path, model, optimizer):
    _restore({**torch.load(path, map_location="cpu", weights_only=True), "step": None}, model, optimizer)
    return _KEPT["step"]


def save_rng_in_a_variable(path, model, optimizer, step):
    _KEPT["rng"] = torch.get_rng_state()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path)


def load_rng_from_a_variable(path, model, optimizer):
    torch.set_rng_state(_KEPT["rng"])
    return _restore(torch.load(path, map_location="cpu", weights_only=True), model, optimizer, ("model", "optimizer"))


def save_optimizer_beside(path, model, optimizer, step):  # a second file, which a copy of path leaves behind
    torch.save({"model": model.state_dict(), "step": step, "rng": torch.get_rng_state()}, path)
    torch.save(optimizer.state_dict(), Path(path).with_suffix(".opt"))


def load_optimizer_beside(path, model, optimizer):
    optimizer.load_state_dict(torch.load(Path(path).with_suffix(".opt"), map_location="cpu", weights_only=True))
    return _restore(torch.load(path, map_location="cpu", weights_only=True), model, optimizer, ("model", "rng"))


def save_step_as_float(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": float(step),
                "rng": torch.get_rng_state()}, path)


def save_step_as_numpy(path, model, optimizer, step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": np.int64(step),
                "rng": torch.get_rng_state()}, path)


def save_numpy_rng_too(path, model, optimizer, step):  # "to be safe": numpy's generator is not drawn from
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "rng": torch.get_rng_state(), "np_rng": np.random.get_state()}, path)


def load_rng_then_probe(path, model, optimizer):  # restores the generator first, then draws from it
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    torch.set_rng_state(checkpoint["rng"])
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.eval()
    with torch.no_grad():
        assert torch.isfinite(model(torch.randn(2, 4))).all()  # a sanity check on a random input
    model.train()
    return checkpoint["step"]


def load_then_probe_in_training_mode(path, model, optimizer):  # a forward pass after the restore, in train mode
    step = _restore(torch.load(path, map_location="cpu", weights_only=True), model, optimizer)
    with torch.no_grad():
        model(torch.zeros(2, 4))
    return step


def load_parameters_by_name(path, model, optimizer):  # the file holds the buffers; only the parameters come back
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(checkpoint["model"][name])
    return _restore(checkpoint, model, optimizer, ("optimizer", "rng"))


def reseed_with_the_run_seed(path, model, optimizer):  # the seed the run started with, not its state
    step = _restore(torch.load(path, map_location="cpu"), model, optimizer, ("model", "optimizer"))
    torch.manual_seed(0)
    return step


RESUME_WRONG = [
    (save_state, load_rng_then_probe, "torch's random state was restored, then drawn from"),
    (save_state, load_then_probe_in_training_mode, "num_batches_tracked is 4, 1 more than saved: the model ran "
                                                   "forward in training mode"),
    (save_state, load_parameters_by_name, "the file holds the model's buffers (batch norm's running mean and "
                                          "variance), but load leaves the model's as they were"),
    (save_state, reseed_with_the_run_seed, "freshly seeded (seed 0), as torch.manual_seed leaves it"),
    (save_state, load_without_rng, "the file holds torch's random state, but load does not restore it"),
    (save_without_rng, load_without_rng, "torch's random state is not restored, so the batch order"),
    (save_state, reseed_instead, "after load torch's generator is freshly seeded (seed 3)"),
    (save_state, load_without_optimizer, "the optimizer's state (Adam's step counts and moving averages)"),
    (save_state, load_into_a_new_optimizer, "into the optimizer you are given"),
    (save_optimizer_settings_only, load_optimizer_settings_only, "the optimizer's state (Adam's step counts"),
    (save_state, load_without_model, "after load the model must hold the saved weights"),
    (save_state, load_whole_file_non_strict, "after load the model must hold the saved weights"),
    (save_state, load_returns_three, "stored in the checkpoint (500 for this one); got 3"),
    (save_without_step, load_step_from_adam, "(500 for this one); got 5, Adam's own count of its updates"),
    (save_state, load_without_map_location, "a GPU this machine does not have raised RuntimeError"),
    (save_state, load_checkpoint_without_map_location, "load with map_location='cpu'"),
    (save_whole_objects, load_whole_objects, "holds a pickled object (torch.save(model)"),
    (save_nothing, load_state, "must write the file at path"),
    (save_step_as_tensor, load_state, "the int 3, not a tensor holding it (got tensor(3))"),
    (save_state, load_with_assign, "load replaced the model's Parameters with new tensors"),
    (save_safetensors, load_safetensors, "the file is a safetensors file"),
    (save_parameters_only, load_parameters_only, "the model's buffers (here batch norm's running mean"),
    (save_adam_state_only, load_adam_state_only, "the optimizer's settings (its param_groups: the learning rate, "
                                                 "the betas, ...) are not restored: after load the learning rate "
                                                 "is 0.01, the saved one 0.05"),
    (save_adam_state_only, load_adam_state_and_a_fixed_lr, "are not restored: after load the learning rate is "
                                                           "0.05, the saved one 0.02"),
    (save_step_in_a_variable, load_step_from_a_variable, "load returned 500, the step of a later save, for the "
                                                         "file saved as step 3"),
    (save_rng_in_a_variable, load_rng_from_a_variable, "torch's random state came from a later save (step 500)"),
    (save_optimizer_beside, load_optimizer_beside, "save also wrote ['resume.opt', 'written.opt'] next to path"),
    (save_step_as_float, load_state, "the int that save was given, 3, not the float 3.0"),
    (save_step_as_numpy, load_state, "it holds numpy objects (numpy."),
    (save_numpy_rng_too, load_state, "numpy.ndarray), which that refuses"),
]


@pytest.mark.parametrize("save, load, hint", RESUME_WRONG, ids=lambda x: getattr(x, "__name__", "hint"))
def test_resume_names_the_mistake(save, load, hint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    verdict, message = outcome(check_resume, save, load)
    assert verdict == "failed"
    assert hint in message, message


# ---------------------------------------------------------------- Exercise 2: right answers


def save_as_tuple(path, model, optimizer, step):
    save_checkpoint((model.state_dict(), optimizer.state_dict(), step, torch.get_rng_state()), path)


def load_as_tuple(path, model, optimizer):
    weights, opt_state, step, rng = load_checkpoint(path, map_location="cpu")
    model.load_state_dict(weights)
    optimizer.load_state_dict(opt_state)
    torch.set_rng_state(rng)
    return step


def save_nested(path, model, optimizer, step):
    torch.save({"state": {"net": model.state_dict(), "opt": optimizer.state_dict()},
                "meta": {"step": step, "cpu_rng": torch.get_rng_state()}}, path)


def load_nested(path, model, optimizer):
    checkpoint = torch.load(path, map_location=lambda storage, tag: storage, weights_only=True)
    model.load_state_dict(checkpoint["state"]["net"])
    optimizer.load_state_dict(checkpoint["state"]["opt"])
    torch.random.set_rng_state(checkpoint["meta"]["cpu_rng"])
    return int(checkpoint["meta"]["step"])


def load_step_from_a_tensor(path, model, optimizer):
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    _restore(checkpoint, model, optimizer)
    return checkpoint["step"].item()


def load_onto_the_model_device(path, model, optimizer):
    checkpoint = torch.load(path, map_location=next(model.parameters()).device, weights_only=True)
    torch.set_rng_state(checkpoint["rng"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model.load_state_dict(checkpoint["model"])
    return checkpoint["step"]


@pytest.mark.parametrize(
    "save, load",
    [(save_as_tuple, load_as_tuple), (save_nested, load_nested), (save_state, load_onto_the_model_device),
     (save_step_as_tensor, load_step_from_a_tensor)],
    ids=lambda f: f.__name__,
)
def test_resume_accepts(save, load):
    before = torch.get_rng_state()
    assert outcome(check_resume, save, load) == ("passed", "")
    assert torch.equal(torch.get_rng_state(), before), "the check must not disturb the caller's random stream"


# ---------------------------------------------------------------- the stubs


def strip_stub(state_dict, prefix="module."):
    raise NotImplementedError(STUB_MESSAGE)


def save_stub(path, model, optimizer, step):
    raise NotImplementedError(STUB_MESSAGE)


def load_stub(path, model, optimizer):
    raise NotImplementedError(STUB_MESSAGE)


def test_stubs_are_not_attempted_yet():
    assert outcome(check_strip_prefix, strip_stub) == ("not attempted", "")
    assert outcome(check_resume, save_stub, load_stub) == ("not attempted", "")
    assert outcome(check_resume, save_state, load_stub) == ("not attempted", "")


def test_a_torch_error_in_the_answer_is_a_hint_not_a_traceback():
    def load_typo(path, model, optimizer):
        return _restore(torch.load(path, map_location="cpu")["modle"], model, optimizer)

    verdict, hint = outcome(check_resume, save_state, load_typo)
    assert verdict == "failed" and "raised KeyError" in hint and "returns the step" in hint
