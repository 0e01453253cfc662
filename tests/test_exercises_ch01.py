"""Chapter 01's checks: right answers written differently from the notebook's pass, plausible wrong ones
(many of them published in study notes) get the hint that names their mistake.

The reference solutions live only in the notebook, which the notebook suite runs.
"""

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from utils.checks import STUB_MESSAGE, outcome, rejection
from utils.exercises.ch01 import check_clones, check_parallel, check_router

# ---------------------------------------------------------------- Exercise 1 · Parallel


class _Pair(nn.Module):
    """Stores the two nets as attributes; the subclasses below differ only in forward."""

    def __init__(self, net1, net2):
        super().__init__()
        self.net1, self.net2 = net1, net2


class Serial(_Pair):  # the popular published answer: a chain, not side by side
    def forward(self, x):
        return self.net2(self.net1(x))


class Added(_Pair):
    def forward(self, x):
        return self.net1(x) + self.net2(x)


class ConcatAlongBatch(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=0)


class Stacked(_Pair):
    def forward(self, x):
        return torch.stack([self.net1(x), self.net2(x)], dim=1)


class SwappedOrder(_Pair):
    def forward(self, x):
        return torch.cat([self.net2(x), self.net1(x)], dim=1)


class SameNetTwice(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net1(x)], dim=1)


class HiddenInList(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = [net1, net2]

    def forward(self, x):
        return torch.cat([net(x) for net in self.nets], dim=1)


class HiddenInDict(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = {"a": net1, "b": net2}

    def forward(self, x):
        return torch.cat([self.nets["a"](x), self.nets["b"](x)], dim=1)


class CalledModuleList(nn.Module):  # calls the container like a module
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = nn.ModuleList([net1, net2])

    def forward(self, x):
        return torch.cat(self.nets(x), dim=1)


class MisspeltForward(_Pair):
    def foward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class Detached(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x).detach(), self.net2(x).detach()], dim=1)


class DetachedInput(_Pair):  # the nets still learn, but nothing flows back to the layers before the block
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x.detach())], dim=1)


class CatWithoutList(_Pair):
    def forward(self, x):
        return torch.cat(self.net1(x), self.net2(x))


class DataInForward(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x).data], dim=1)


class DeepCopies(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.net1, self.net2 = copy.deepcopy(net1), copy.deepcopy(net2)

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class PreallocatedOnDefaultDevice(_Pair):
    def forward(self, x):
        a, b = self.net1(x), self.net2(x)
        out = torch.zeros(x.shape[0], a.shape[1] + b.shape[1])  # no device=x.device
        out[:, : a.shape[1]] = a
        out[:, a.shape[1] :] = b
        return out


class MovedToCpu(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1).to("cpu")


class RegisteredInForward(nn.Module):  # lazy: nothing registered until the first forward
    def __init__(self, net1, net2):
        super().__init__()
        self._nets = (net1, net2)

    def forward(self, x):
        self.net1, self.net2 = self._nets
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class NotAModule:
    def __init__(self, net1, net2):
        self.net1, self.net2 = net1, net2

    def __call__(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class NoSuperInit(nn.Module):
    def __init__(self, net1, net2):
        self.net1, self.net2 = net1, net2

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class ReturnsTuple(_Pair):
    def forward(self, x):
        return self.net1(x), self.net2(x)


class PreallocatedWithoutDtype(_Pair):
    def forward(self, x):
        a, b = self.net1(x), self.net2(x)
        out = torch.zeros(x.shape[0], a.shape[1] + b.shape[1], device=x.device)  # float32, whatever the nets
        out[:, : a.shape[1]] = a
        out[:, a.shape[1] :] = b
        return out


class CastToFloat(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1).float()


class CastToDouble(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1).double()


class ParametersOnly(nn.Module):
    """Registers the nets' parameters, not the nets: a Dropout or BatchNorm inside never sees .eval()."""

    def __init__(self, net1, net2):
        super().__init__()
        self.nets = [net1, net2]
        self.params = nn.ParameterList([*net1.parameters(), *net2.parameters()])

    def forward(self, x):
        return torch.cat([net(x) for net in self.nets], dim=1)


class Squeezed(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1).squeeze()


class SqueezedBranches(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x).squeeze(), self.net2(x).squeeze()], dim=-1)


class SqueezedFeatures(_Pair):
    """Drops a width-1 output's last dimension: fine for widths 4 and 4, an error for a branch of width 1."""

    def forward(self, x):
        return torch.cat([self.net1(x).squeeze(-1), self.net2(x).squeeze(-1)], dim=-1)


class ResetsTheNets(_Pair):
    """"A fresh start": wipes whatever the nets had learnt."""

    def __init__(self, net1, net2):
        super().__init__(net1, net2)
        for net in (net1, net2):
            net.reset_parameters()

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class PreallocatedFromOutFeatures(_Pair):
    """Reads the widths from the nets' out_features: right for two nn.Linear, an error for any other net."""

    def forward(self, x):
        n1 = self.net1.out_features
        out = x.new_empty(x.shape[0], n1 + self.net2.out_features)
        out[:, :n1] = self.net1(x)
        out[:, n1:] = self.net2(x)
        return out


class FeaturesHardCoded(_Pair):
    """Reshapes x to the 4 features of the first example."""

    def forward(self, x):
        x = x.reshape(-1, 4)
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class NoGradForward(_Pair):
    @torch.no_grad()
    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=1)


class CpuInForward(_Pair):
    def forward(self, x):
        return torch.cat([self.net1(x).cpu(), self.net2(x).cpu()], dim=1)


class PreallocatedWithDtypeOnly(_Pair):
    """The right dtype (x's), but made on the default device."""

    def forward(self, x):
        a, b = self.net1(x), self.net2(x)
        out = torch.empty(x.shape[0], a.shape[1] + b.shape[1], dtype=x.dtype)
        out[:, : a.shape[1]] = a
        out[:, a.shape[1] :] = b
        return out


class SerialInDouble(_Pair):
    """Two mistakes at once: the chain's hint must still come, not an error of the check's own comparison."""

    def forward(self, x):
        return self.net2(self.net1(x)).double()


PARALLEL_WRONG = {
    ParametersOnly: "register net1 and net2 themselves as submodules",
    Squeezed: "a batch of one sample, shape (1, 4), must give shape (1, 8)",
    SqueezedBranches: "keep the batch dimension (no squeeze())",
    SqueezedFeatures: "a width-1 output squeezed (squeeze(), squeeze(-1)) has shape (n,), not (n, 1)",
    PreallocatedFromOutFeatures: "'Sequential' object has no attribute 'out_features'. Likely cause: a net can be any "
    "module",
    FeaturesHardCoded: "Likely cause: not known from here. Unlike the first batch, x has 5 features",
    ResetsTheNets: "building the block changed the given nets' values",
    SerialInDouble: "two branches of widths 4 and 4 on a batch of 3 give shape (3, 8); got (3, 4)",
    Serial: "that is net2(net1(x)), a chain",
    Added: "the two outputs were added",
    ConcatAlongBatch: "concatenating along it stacks the samples",
    Stacked: "torch.stack adds a new dimension",
    SwappedOrder: "the outputs are in the wrong order",
    SameNetTwice: "the last 4 columns must be net2(x)",
    HiddenInList: "the nets sit in a plain list, self.nets",
    HiddenInDict: "the nets sit in a plain dict, self.nets",
    CalledModuleList: "an nn.ModuleList was called like a module",
    MisspeltForward: "check the spelling of `def forward(self, ...)`",
    Detached: "your block's output does not require grad, so no gradient flows back: your code cut the gradient "
    "with .detach()",
    DataInForward: "gradients must reach both nets' weights and biases: your code cut the gradient with .data",
    DetachedInput: "the gradient must flow back to x through both nets, so that layers before the block learn: your "
    "code cut the gradient with .detach()",
    CatWithoutList: "not torch.cat(a, b)",
    DeepCopies: "not copies, so that training the block trains them",
    PreallocatedOnDefaultDevice: "forward returns a tensor that torch.zeros made without device=",
    MovedToCpu: "forward moves its result to a fixed device (.to('cpu'))",
    RegisteredInForward: "right after Parallel(net1, net2) is built, the nets sit in a plain tuple, self._nets",
    NotAModule: "Parallel must subclass nn.Module",
    NoSuperInit: "before nn.Module's own __init__ had run: call super().__init__() first, then store the modules",
    ReturnsTuple: "forward must return one tensor, got tuple",
    CastToDouble: "turned the nets' torch.float32 outputs into torch.float64",
    PreallocatedWithoutDtype: "float64 nets gave a float32 output: forward returns a tensor that torch.zeros made "
    "without dtype=",
    CastToFloat: "float64 nets gave a float32 output: forward converted the output (.float)",
    NoGradForward: "your code ran with gradient recording off",
    CpuInForward: "forward moves its result to a fixed device (.cpu())",
    PreallocatedWithDtypeOnly: "forward returns a tensor that torch.empty made without device=",
}


@pytest.mark.parametrize("wrong", PARALLEL_WRONG, ids=lambda c: c.__name__)
def test_parallel_rejects_with_its_hint(wrong):
    verdict, hint = outcome(check_parallel, wrong)
    assert verdict == "failed"
    assert PARALLEL_WRONG[wrong] in hint, hint


class ParallelModuleList(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.branches = nn.ModuleList([net1, net2])

    def forward(self, x):
        return torch.cat([branch(x) for branch in self.branches], dim=-1)


class ParallelAddModule(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.add_module("left", net1)
        self.add_module("right", net2)

    def forward(self, x):
        return torch.hstack((self.left(x), self.right(x)))


class ParallelPreallocated(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = nn.ModuleDict({"first": net1, "second": net2})

    def forward(self, x):
        a, b = self.nets["first"](x), self.nets["second"](x)
        out = x.new_empty(x.shape[0], a.shape[1] + b.shape[1])  # on x's device, with x's dtype
        out[:, : a.shape[1]] = a
        out[:, a.shape[1] :] = b
        return out


class ParallelConcat(nn.Module):
    def __init__(self, *nets):
        super().__init__()
        self.nets = nn.Sequential(*nets)  # a Sequential used as a registered list, never called

    def forward(self, x):
        return torch.concat([net(x) for net in self.nets], 1)


@pytest.mark.parametrize(
    "right", [ParallelModuleList, ParallelAddModule, ParallelPreallocated, ParallelConcat], ids=lambda c: c.__name__
)
def test_parallel_accepts_other_right_answers(right):
    assert outcome(check_parallel, right) == ("passed", "")


# ---------------------------------------------------------------- Exercise 2 · Router


class PlainDictRouter(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = dict(heads)

    def forward(self, x, task):
        return self.heads[task](x)


class _ModuleDictRouter(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = nn.ModuleDict(heads)


class AlwaysFirstHead(_ModuleDictRouter):
    def forward(self, x, task):
        return next(iter(self.heads.values()))(x)


class ModuleListRouter(nn.Module):  # registered, but numbered instead of named
    def __init__(self, heads):
        super().__init__()
        self.names = list(heads)
        self.heads = nn.ModuleList(heads.values())

    def forward(self, x, task):
        return self.heads[self.names.index(task)](x)


class SortedIndexRouter(ModuleListRouter):  # a position computed from the sorted names
    def forward(self, x, task):
        return self.heads[sorted(self.names).index(task)](x)


class MisspeltForwardRouter(_ModuleDictRouter):
    def foward(self, x, task):
        return self.heads[task](x)


class SwappedArguments(_ModuleDictRouter):
    def forward(self, task, x):
        return self.heads[task](x)


class AllHeads(_ModuleDictRouter):
    def forward(self, x, task):
        return {name: head(x) for name, head in self.heads.items()}


class CalledModuleDict(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads(x)[task]


class CopiedHeads(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.heads = nn.ModuleDict({name: copy.deepcopy(head) for name, head in heads.items()})

    def forward(self, x, task):
        return self.heads[task](x)


class RegisteredOnFirstUse(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.pending = dict(heads)

    def forward(self, x, task):
        if task not in self._modules:
            self.add_module(task, self.pending[task])
        return self._modules[task](x)


class DetachedRouter(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads[task](x).detach()


class NoGradRouter(_ModuleDictRouter):
    @torch.no_grad()
    def forward(self, x, task):
        return self.heads[task](x)


class DataRouter(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads[task](x).data


class CopyInForwardRouter(_ModuleDictRouter):  # right values, but the gradients go to a throwaway copy
    def forward(self, x, task):
        return copy.deepcopy(self.heads[task])(x)


class DetachedInputRouter(_ModuleDictRouter):  # the head still learns; nothing flows back to the layers before
    def forward(self, x, task):
        return self.heads[task](x.detach())


class DetachedInputInEval(_ModuleDictRouter):  # "evaluation needs no gradient": eval() is not no_grad()
    def forward(self, x, task):
        out = self.heads[task](x)
        return out if self.training else out.detach()


class InputDetachedInEval(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads[task](x if self.training else x.detach())


class NoGradInEval(_ModuleDictRouter):
    def forward(self, x, task):
        with torch.set_grad_enabled(self.training):
            return self.heads[task](x)


class GetOnModuleDict(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads.get(task)(x)


class AttributeOfModuleDict(_ModuleDictRouter):
    def forward(self, x, task):
        return self.heads.task(x)


class SecondArgumentNamedName(_ModuleDictRouter):
    def forward(self, x, name):  # router(x, task="price") then fails
        return self.heads[name](x)


class FixedNamesRouter(nn.Module):
    """The three names of the first example, written out: another set of heads cannot be built."""

    def __init__(self, heads):
        super().__init__()
        self.price, self.label, self.box = heads["price"], heads["label"], heads["box"]

    def forward(self, x, task):
        return getattr(self, task)(x)


class LinearOnlyRouter(_ModuleDictRouter):
    """Reads a head's weight and bias: right for nn.Linear heads only."""

    def forward(self, x, task):
        head = self.heads[task]
        return nn.functional.linear(x, head.weight, head.bias)


class FirstLayerOnlyRouter(_ModuleDictRouter):
    """Runs a network head's first layer only: right for bare layers."""

    def forward(self, x, task):
        head = self.heads[task]
        return (head[0] if isinstance(head, nn.Sequential) else head)(x)


class RouterWithoutSuperInit(nn.Module):
    def __init__(self, heads):
        self.heads = nn.ModuleDict(heads)

    def forward(self, x, task):
        return self.heads[task](x)


ROUTER_WRONG = {
    RouterWithoutSuperInit: "raised AttributeError: cannot assign module before Module.__init__() call. Likely cause: "
    "__init__ assigned a module before nn.Module's own __init__ had run",
    FixedNamesRouter: "building the router over heads named 'topic', 'sentiment' looked up the name 'price'",
    LinearOnlyRouter: "'Sequential' object has no attribute 'weight'. Likely cause: a head can be any module",
    FirstLayerOnlyRouter: "router(x, 'topic') must return heads['topic'](x)",
    PlainDictRouter: "heads['price'] sits in a plain dict, self.heads",
    AlwaysFirstHead: "router(x, 'label') must return heads['label'](x)",
    ModuleListRouter: "is registered as 'heads.0', not under its name 'price'",
    SortedIndexRouter: "is registered as 'heads.0', not under its name 'price'",
    MisspeltForwardRouter: "check the spelling of `def forward(self, ...)`",
    SwappedArguments: "takes the batch first, then the task's name",
    AllHeads: "must return a tensor, got dict",
    CalledModuleDict: "an nn.ModuleDict was called like a module",
    CopiedHeads: "it is not the head you were given",
    RegisteredOnFirstUse: "right after Router(heads) is built, heads['price'] sits in a plain dict, self.pending",
    DetachedRouter: "router(x, 'label') in training mode does not require grad, so no gradient flows back: your code "
    "cut the gradient with .detach()",
    NoGradRouter: "your code ran with gradient recording off",
    DataRouter: "your code cut the gradient with .data",
    CopyInForwardRouter: "gradients must reach every parameter of heads['label'] and flow back to x: your code copied "
    "tensors",
    DetachedInputRouter: "gradients must reach every parameter of heads['label'] and flow back to x: your code cut "
    "the gradient with .detach()",
    DetachedInputInEval: "router(x, 'label') in evaluation mode, after router.eval() does not require grad",
    InputDetachedInEval: "gradients must reach every parameter of heads['label'] and flow back to x: your code cut "
    "the gradient with .detach()",
    NoGradInEval: "router(x, 'label') in evaluation mode, after router.eval() does not require grad, so no gradient "
    "flows back: your code ran with gradient recording off",
    GetOnModuleDict: "it has no .get()",
    AttributeOfModuleDict: "heads.task looks for a module named 'task'",
    SecondArgumentNamedName: "forward(self, x, task) takes the batch first, then the task's name",
}


@pytest.mark.parametrize("wrong", ROUTER_WRONG, ids=lambda c: c.__name__)
def test_router_rejects_with_its_hint(wrong):
    verdict, hint = outcome(check_router, wrong)
    assert verdict == "failed"
    assert ROUTER_WRONG[wrong] in hint, hint


def test_sorted_index_router_would_pick_the_wrong_head_once_registered_by_name():
    class Named(SortedIndexRouter):
        def __init__(self, heads):
            nn.Module.__init__(self)
            self.names = list(heads)
            self.heads = nn.ModuleList(heads.values())
            for name, head in heads.items():
                self.add_module(name, head)

    verdict, hint = outcome(check_router, Named)
    assert verdict == "failed" and "must return heads[" in hint, hint


class AddModuleRouter(nn.Module):
    def __init__(self, heads):
        super().__init__()
        for name, head in heads.items():
            self.add_module(name, head)

    def forward(self, x, task):
        return self.get_submodule(task)(x)


class SetattrRouter(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.tasks = tuple(heads)
        for name, head in heads.items():
            setattr(self, name, head)

    def forward(self, x, task):
        return getattr(self, task)(x)


class RouterIsAModuleDict(nn.ModuleDict):
    def forward(self, x, task):
        return self[task](x)


class UpdatedModuleDict(nn.Module):
    def __init__(self, heads):
        super().__init__()
        self.by_task = nn.ModuleDict()
        self.by_task.update(heads)

    def forward(self, x, task):
        head = self.by_task[task]
        return head(x)


@pytest.mark.parametrize(
    "right", [AddModuleRouter, SetattrRouter, RouterIsAModuleDict, UpdatedModuleDict], ids=lambda c: c.__name__
)
def test_router_accepts_other_right_answers(right):
    assert outcome(check_router, right) == ("passed", "")


# ---------------------------------------------------------------- Exercise 3 · clones


def repeated_object(module, n):
    return nn.ModuleList([module] * n)


def deepcopy_of_repeated_list(module, n):
    return copy.deepcopy(nn.ModuleList([module] * n))  # deepcopy keeps one object one object


def plain_list(module, n):
    return [copy.deepcopy(module) for _ in range(n)]


def sequential(module, n):
    return nn.Sequential(*(copy.deepcopy(module) for _ in range(n)))


def shallow_copies(module, n):
    return nn.ModuleList(copy.copy(module) for _ in range(n))


def original_first(module, n):
    return nn.ModuleList([module, *(copy.deepcopy(module) for _ in range(n - 1))])


def one_too_few(module, n):
    return nn.ModuleList(copy.deepcopy(module) for _ in range(n - 1))


def rebuilt_linear(module, n):
    return nn.ModuleList(nn.Linear(module.in_features, module.out_features) for _ in range(n))


def reinitialized(module, n):
    copies = nn.ModuleList(copy.deepcopy(module) for _ in range(n))
    for c in copies:
        for m in c.modules():
            if hasattr(m, "reset_parameters"):
                m.reset_parameters()
    return copies


def moved_to_default_device(module, n):
    device = torch.device("cpu")  # "always .to(device)"
    return nn.ModuleList(copy.deepcopy(module).to(device) for _ in range(n))


def switched_to_train(module, n):
    return nn.ModuleList(copy.deepcopy(module) for _ in range(n)).train()


def shared_memory(module, n):
    copies = nn.ModuleList()
    for _ in range(n):
        c = copy.deepcopy(module)
        with torch.no_grad():
            for name, _ in list(c.named_parameters()):
                owner = c.get_submodule(name.rpartition(".")[0])
                setattr(owner, name.rpartition(".")[2], nn.Parameter(module.get_parameter(name).detach()))
        copies.append(c)
    return copies


def frozen_copies(module, n):
    return nn.ModuleList(copy.deepcopy(module).requires_grad_(False) for _ in range(n))


def parameters_as_buffers(module, n):
    copies = nn.ModuleList()
    for _ in range(n):
        c = copy.deepcopy(module)
        for sub in c.modules():
            for name, p in list(sub._parameters.items()):
                if p is not None:
                    del sub._parameters[name]
                    sub.register_buffer(name, p.detach().clone())
        copies.append(c)
    return copies


def looped_over_n(module, n):
    return nn.ModuleList(copy.deepcopy(module) for _ in n)


def switched_to_eval(module, n):
    return nn.ModuleList(copy.deepcopy(module).eval() for _ in range(n))


def trains_the_original_first(module, n):
    module.train()  # "make sure the copies train": it changes the caller's module, and the copies with it
    return nn.ModuleList(copy.deepcopy(module) for _ in range(n))


def mode_of_the_top_only(module, n):
    return nn.ModuleList(copy.deepcopy(module).train(module.training) for _ in range(n))


def modes_one_level_deep(module, n):
    """Sets each copy's modes back child by child: one level down only."""
    copies = nn.ModuleList()
    for _ in range(n):
        c = copy.deepcopy(module).train()  # "ready to train", then the modes put back
        c.training = module.training
        for mine, theirs in zip(c.children(), module.children(), strict=True):
            mine.train(theirs.training)
        copies.append(c)
    return copies


def converted_to_float(module, n):  # "float32, like every tensor": the module's dtypes are the copies' too
    return nn.ModuleList(copy.deepcopy(module).float() for _ in range(n))


def runs_the_original(module, n):
    """Copies that compute with the module's own weights: their forward is the module's bound method."""
    copies = nn.ModuleList(copy.deepcopy(module) for _ in range(n))
    for c in copies:
        c.forward = module.forward
    return copies


def values_edited(module, n):  # no new draw seen: the hint must not claim one
    copies = nn.ModuleList(copy.deepcopy(module) for _ in range(n))
    with torch.no_grad():
        for c in copies:
            for p in c.parameters():
                p.mul_(0.5)
    return copies


CLONES_WRONG = {
    modes_one_level_deep: "(here: Sequential train, Sequential train, Linear train, BatchNorm1d eval, Dropout train)",
    switched_to_eval: "(here: Linear train)",
    trains_the_original_first: "changed the module itself (its train/eval mode or its values)",
    mode_of_the_top_only: "(here: Sequential train, Linear train, BatchNorm1d eval)",
    looped_over_n: "loop over range(n), `for _ in range(n)`, not over n itself",
    repeated_object: "holds the same object more than once",
    deepcopy_of_repeated_list: "deepcopy of such a list keeps it one object",
    plain_list: "must return an nn.ModuleList, got list",
    sequential: "must return an nn.ModuleList, got Sequential",
    shallow_copies: "copy.copy is shallow",
    original_first: "contains the original module itself",
    one_too_few: "must hold 3 copies, got 2",
    rebuilt_linear: "each copy must start with the module's values: 'weight' differs. clones drew new values",
    reinitialized: "each copy must start with the module's values: 'weight' differs. clones drew new values",
    moved_to_default_device: "each copy must stay on the module's device, and clones(layer, 3) moved tensors "
    "(.to('cpu')): copy.deepcopy keeps them where they are",
    converted_to_float: "'0.0.weight' is torch.float32 in a copy, torch.float64 in the module; clones converted it "
    "(.float)",
    runs_the_original: "a backward through copy 0 must give gradients to copy 0's parameters only",
    values_edited: "each copy must start with the module's values: 'weight' differs. Why is not known from here",
    switched_to_train: "in the module's train/eval mode",
    shared_memory: "shares its memory with the module or another copy",
    frozen_copies: "do not freeze the copies with requires_grad_(False)",
    parameters_as_buffers: "a tensor registered as a buffer instead is never trained",
}


@pytest.mark.parametrize("wrong", CLONES_WRONG, ids=lambda f: f.__name__)
def test_clones_rejects_with_its_hint(wrong):
    verdict, hint = outcome(check_clones, wrong)
    assert verdict == "failed"
    assert CLONES_WRONG[wrong] in hint, hint


def clones_appended(module, n):
    copies = nn.ModuleList()
    for _ in range(n):
        copies.append(copy.deepcopy(module))
    return copies


def clones_mapped(module, n):
    return nn.ModuleList(map(copy.deepcopy, [module] * n))  # one deepcopy call per entry: n objects


def clones_extended(module, n):
    copies = nn.ModuleList()
    copies.extend(copy.deepcopy(nn.ModuleList([module]))[0] for _ in range(n))
    return copies


@pytest.mark.parametrize("right", [clones_appended, clones_mapped, clones_extended], ids=lambda f: f.__name__)
def test_clones_accepts_other_right_answers(right):
    assert outcome(check_clones, right) == ("passed", "")


# ---------------------------------------------------------------- all three


def stub_class(*args):
    class Stub(nn.Module):
        def __init__(self, *args):
            super().__init__()

        def forward(self, *args):
            raise NotImplementedError(STUB_MESSAGE)

    return Stub


def stub_function(module, n):
    raise NotImplementedError(STUB_MESSAGE)


@pytest.mark.parametrize(
    ("check", "stub"),
    [(check_parallel, stub_class()), (check_router, stub_class()), (check_clones, stub_function)],
    ids=["parallel", "router", "clones"],
)
def test_stubs_are_not_attempted_and_rejection_refuses_them(check, stub, capsys):
    assert outcome(check, stub) == ("not attempted", "")
    check(stub)
    assert "not attempted yet" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not attempted"):
        rejection(check, stub)


@pytest.mark.parametrize(
    ("check", "answer"),
    [(check_parallel, ParallelModuleList), (check_router, AddModuleRouter), (check_clones, clones_appended)],
    ids=["parallel", "router", "clones"],
)
def test_checks_leave_the_global_generator_alone(check, answer):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    outcome(check, answer)
    assert torch.equal(torch.rand(3), expected)


def test_the_checks_load_no_part_of_torch_that_the_chapter_does_not_teach():
    # Chapter 01 teaches neither the meta device nor optimizers. An operation on 'meta' loads sympy and torch.fx's
    # symbolic shapes, a meta matrix product torch._dynamo: seconds of a learner's first Run All, for the checks
    # alone. Run in a fresh interpreter, with right answers, the checks load none of them.
    probe = textwrap.dedent("""
        import copy, json, sys
        import torch
        from torch import nn
        from utils.exercises.ch01 import check_clones, check_parallel, check_router

        class Parallel(nn.Module):
            def __init__(self, net1, net2):
                super().__init__()
                self.net1, self.net2 = net1, net2

            def forward(self, x):
                return torch.cat([self.net1(x), self.net2(x)], dim=1)

        class Router(nn.Module):
            def __init__(self, heads):
                super().__init__()
                self.heads = nn.ModuleDict(heads)

            def forward(self, x, task):
                return self.heads[task](x)

        check_parallel(Parallel)
        check_router(Router)
        check_clones(lambda module, n: nn.ModuleList(copy.deepcopy(module) for _ in range(n)))
        heavy = {"sympy", "torch._dynamo", "torch.fx.experimental.symbolic_shapes"}
        print(json.dumps(sorted(heavy & set(sys.modules))))
    """)
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert run.stdout.count("passed") == 3, run.stdout
    assert json.loads(run.stdout.splitlines()[-1]) == []
