"""Chapter 02's checks accept the reference answers and reject the plausible wrong ones."""

import pytest
import torch
from torch import nn

from utils import ExerciseFailed
from utils.exercises.ch02 import check_init_xavier, check_initialize_lazy


def init_xavier(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def init_xavier_type_check(m):
    if type(m) == nn.Linear:  # noqa: E721 - the mistake under test
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def init_xavier_normal(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight)
        nn.init.zeros_(m.bias)


def init_kaiming(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)


def init_xavier_keep_bias(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)


def init_everything_with_a_bias(m):
    if hasattr(m, "bias") and m.bias is not None:
        nn.init.zeros_(m.bias)
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)


def test_init_xavier_accepts_reference(capsys):
    check_init_xavier(init_xavier)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (init_xavier_type_check, "isinstance"),
        (init_xavier_normal, "xavier_normal_"),
        (init_kaiming, "sqrt(2 / (fan_in + fan_out))"),
        (init_xavier_keep_bias, "zeros_"),
        (init_everything_with_a_bias, "LayerNorm"),
    ],
)
def test_init_xavier_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=r"Exercise 1") as failure:
        check_init_xavier(wrong)
    assert hint in str(failure.value)


def test_init_xavier_check_leaves_the_global_generator_alone():
    torch.manual_seed(7)
    expected = torch.rand(2)
    torch.manual_seed(7)
    check_init_xavier(init_xavier)
    assert torch.equal(torch.rand(2), expected)


def init_kaiming_relu(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)


def initialize_lazy(net, example_input):
    net(example_input)
    net.apply(init_kaiming_relu)
    return net


def initialize_before_dry_run_type_check(net, example_input):
    def init(m):
        if type(m) == nn.Linear:  # noqa: E721 - the mistake under test
            init_kaiming_relu(m)

    net.apply(init)
    net(example_input)
    return net


def initialize_before_dry_run_isinstance(net, example_input):
    net.apply(init_kaiming_relu)
    net(example_input)
    return net


def initialize_without_dry_run(net, example_input):
    def init(m):
        if isinstance(m, nn.Linear) and not m.has_uninitialized_params():
            init_kaiming_relu(m)

    net.apply(init)
    return net


def initialize_fan_out(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return net


def initialize_returns_nothing(net, example_input):
    initialize_lazy(net, example_input)


def test_initialize_lazy_accepts_reference(capsys):
    check_initialize_lazy(initialize_lazy)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (initialize_before_dry_run_type_check, "type(m) == nn.Linear"),
        (initialize_before_dry_run_isinstance, "dry run"),
        (initialize_without_dry_run, "still uninitialized"),
        (initialize_fan_out, "sqrt(2 / fan_in)"),
        (initialize_returns_nothing, "return the network"),
    ],
)
def test_initialize_lazy_rejects(wrong, hint):
    with pytest.raises(ExerciseFailed, match=r"Exercise 2") as failure:
        check_initialize_lazy(wrong)
    assert hint in str(failure.value)


def test_unattempted_exercises_say_so(capsys):
    def stub(*args):
        raise NotImplementedError("your code here")

    check_init_xavier(stub)
    check_initialize_lazy(stub)
    assert capsys.readouterr().out.count("not attempted yet") == 2


def test_an_unrelated_error_in_the_answer_is_not_hidden():
    def broken(net, example_input):
        raise ValueError("something else")

    with pytest.raises(ValueError, match="something else"):
        check_initialize_lazy(broken)
