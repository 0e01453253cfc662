"""Chapter 02's checks: a catalogue of plausible wrong answers (each with the hint it gets) and right answers
written differently from the notebook's reference (which lives only in the notebook, where nbval runs it)."""

import math

import pytest
import torch
from torch import nn

from utils.checks import outcome
from utils.exercises.ch02 import check_init_xavier, check_initialize_lazy, check_lazy_optimizer


def _bound(m):
    return math.sqrt(6 / (m.in_features + m.out_features))


# ---------------------------------------------------------------- Exercise 1 · Xavier init for apply

def xavier_type_test(m):
    if type(m) == nn.Linear:  # noqa: E721 - the mistake under test: misses subclasses
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def xavier_ignores_the_bias(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)


def xavier_normal_family(m):  # the right std, the wrong family
    if isinstance(m, nn.Linear):
        nn.init.xavier_normal_(m.weight)
        nn.init.zeros_(m.bias)


def xavier_through_data(m):  # a fresh (float32, CPU) tensor assigned through .data
    if isinstance(m, nn.Linear):
        m.weight.data = nn.init.xavier_uniform_(torch.empty(m.out_features, m.in_features))
        m.bias.data = torch.zeros(m.out_features)


def xavier_data_same_dtype(m):  # through .data, with the right dtype and device: new memory all the same
    if isinstance(m, nn.Linear):
        m.weight.data = nn.init.xavier_uniform_(torch.empty_like(m.weight))
        m.bias.data = torch.zeros_like(m.bias)


def xavier_set_(m):  # set_ swaps the storage under the same Parameter
    if isinstance(m, nn.Linear):
        with torch.no_grad():
            m.weight.set_(nn.init.xavier_uniform_(torch.empty_like(m.weight)))
            m.bias.set_(torch.zeros_like(m.bias))


def xavier_new_parameter(m):  # replaces the parameter object instead of filling it
    if isinstance(m, nn.Linear):
        m.weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty_like(m.weight)))
        m.bias = nn.Parameter(torch.zeros_like(m.bias))


def kaiming_instead(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)


def bound_of_the_default(m):  # the uniform family, nn.Linear's bound 1/sqrt(fan_in)
    if isinstance(m, nn.Linear):
        b = 1 / math.sqrt(m.in_features)
        nn.init.uniform_(m.weight, -b, b)
        nn.init.zeros_(m.bias)


def zeroes_every_bias(m):  # also zeroes LayerNorm's bias
    if hasattr(m, "bias") and m.bias is not None:
        nn.init.zeros_(m.bias)
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)


def every_matrix(m):  # the Annotated Transformer's loop, as an apply function: biases keep their values
    for p in m.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)


def no_type_test(m):  # ReLU has no weight
    nn.init.xavier_uniform_(m.weight)
    nn.init.zeros_(m.bias)


def xavier_on_the_bias(m):  # Xavier on a 1-D tensor
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.xavier_uniform_(m.bias)


def xavier_with_relu_gain(m):
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight, gain=nn.init.calculate_gain("relu"))
        nn.init.zeros_(m.bias)


def linear_and_conv(m):  # the popular snippet that also initializes convolutions
    if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def any_two_dim_weight(m):  # "a matrix is a linear layer's weight": an embedding's is a matrix too
    weight = getattr(m, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        nn.init.xavier_uniform_(weight)
        if getattr(m, "bias", None) is not None:
            nn.init.zeros_(m.bias)


def edited_without_no_grad(m):  # the chapter's bound, written into the weight while autograd records
    if isinstance(m, nn.Linear):
        b = math.sqrt(6 / (m.in_features + m.out_features))
        m.weight.uniform_(-b, b)
        m.bias.zero_()


def xavier_class_name_test(m):  # the DCGAN tutorial's test on the class's name
    if m.__class__.__name__.find("Linear") != -1:
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def xavier_frozen_to_edit(m):  # requires_grad turned off to get past the in-place error
    if isinstance(m, nn.Linear):
        b = math.sqrt(6 / (m.in_features + m.out_features))
        m.weight.requires_grad = False
        m.weight.uniform_(-b, b)
        m.bias.requires_grad = False
        m.bias.zero_()


def xavier_no_bias_guard(m):  # nn.init.zeros_(None) on a layer built with bias=False
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def xavier_skips_bias_free_layers(m):  # the guard around the whole layer, not around the bias
    if isinstance(m, nn.Linear) and m.bias is not None:
        nn.init.xavier_uniform_(m.weight)
        nn.init.zeros_(m.bias)


def xavier_drops_the_bias(m):  # "zero biases" by removing them
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        m.bias = None


def xavier_inside_sequentials(m):  # initializes the linear children of an nn.Sequential, never m itself
    if isinstance(m, nn.Sequential):
        for c in m:
            if isinstance(c, nn.Linear):
                nn.init.xavier_uniform_(c.weight)
                if c.bias is not None:
                    nn.init.zeros_(c.bias)


def xavier_children_only(m):  # the linear children of any module: a bare layer has none
    for c in m.children():
        if isinstance(c, nn.Linear):
            nn.init.xavier_uniform_(c.weight)
            if c.bias is not None:
                nn.init.zeros_(c.bias)


def xavier_below_the_root(m):  # every module below m, m itself skipped
    for sub in list(m.modules())[1:]:
        if isinstance(sub, nn.Linear):
            nn.init.xavier_uniform_(sub.weight)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)


def xavier_on_a_copy(m):  # fills copies: the layer keeps its values
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight.detach().clone())
        if m.bias is not None:
            nn.init.zeros_(m.bias.detach().clone())


_CONTAINER_ONLY = "your function initializes a container's children, not m itself"

XAVIER_WRONG = [
    (xavier_type_test, "isinstance(m, nn.Linear), not type(m) == nn.Linear"),
    (xavier_ignores_the_bias, "(an nn.Linear, 300→200) still has non-zero biases: set them with nn.init.zeros_"),
    (xavier_normal_family, "use the uniform variant (xavier_uniform_), not xavier_normal_"),
    (xavier_through_data, "torch.float64)'s weight is torch.float32 now: your function assigned a new tensor to .data"),
    (xavier_new_parameter, "weight is a new Parameter object"),
    (xavier_data_same_dtype, "layer 0 (an nn.Linear, 300→200)'s weight is the same Parameter but no longer uses"),
    (xavier_set_, "no longer uses its own memory: its data was swapped for another tensor (how is not known from "
                  "here)"),
    (kaiming_instead, "Xavier gives sqrt(2 / (fan_in + fan_out)) = 0.0632"),
    (bound_of_the_default, "Xavier gives sqrt(2 / (fan_in + fan_out))"),
    (zeroes_every_bias, "the LayerNorm and the Conv1d changed"),
    (every_matrix, "layer 0 (an nn.Linear, 300→200) still has non-zero biases"),
    (no_type_test, "a module without a weight (ReLU has none): test the module first, isinstance(m, nn.Linear)"),
    (xavier_on_the_bias, "a bias needs nn.init.zeros_"),
    (xavier_with_relu_gain, "with its default gain"),
    (linear_and_conv, "the Conv1d changed: initialize linear layers only"),
    (any_two_dim_weight, "the Embedding changed: initialize linear layers only"),
    (edited_without_no_grad, "inside `with torch.no_grad():`"),
    (xavier_class_name_test, "not type(m) == nn.Linear or its class name"),
    (xavier_frozen_to_edit, "layer 0's weight no longer requires grad, so it would never train"),
    (xavier_no_bias_guard, "a layer built with bias=False has m.bias None. Skip its bias (if m.bias is not None)"),
    (xavier_skips_bias_free_layers, "bias=False) did not get Xavier weights: a layer without a bias is a linear"),
    (xavier_drops_the_bias, "(an nn.Linear, 300→200)'s bias is None now: assigning m.bias = None removes"),
    (xavier_inside_sequentials, "layer 1.proj (an nn.Linear, 240→60, an attribute of a custom module) was left as "
                                "it was, while the layers of a flat nn.Sequential were initialized. A bare nn.Linear "
                                "given to apply is left as it is too, while the same layer inside an nn.Sequential "
                                "is initialized: " + _CONTAINER_ONLY),
    (xavier_children_only, "a bare nn.Linear(250, 90) given to apply itself was left as it was, while the layers of "
                           "a flat nn.Sequential were initialized; the same layer inside an nn.Sequential is "
                           "initialized: " + _CONTAINER_ONLY),
    (xavier_below_the_root, "a bare nn.Linear(250, 90) given to apply itself was left as it was"),
    (xavier_on_a_copy, "layer 0 (an nn.Linear, 300→200) was left as it was: net.apply(init_xavier) changed neither "
                       "its weight nor its bias: why is not known from here"),
]


@pytest.mark.parametrize(("wrong", "hint"), XAVIER_WRONG, ids=[w.__name__ for w, _ in XAVIER_WRONG])
def test_init_xavier_rejects(wrong, hint):
    verdict, message = outcome(check_init_xavier, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 1 · An init function for Module.apply: not yet.")
    assert hint in message


def xavier_by_hand(m):
    if isinstance(m, nn.Linear):
        nn.init.uniform_(m.weight, -_bound(m), _bound(m))
        if m.bias is not None:
            nn.init.constant_(m.bias, 0.0)


def xavier_under_no_grad(m):
    if not isinstance(m, nn.Linear):
        return
    fan_out, fan_in = m.weight.shape
    with torch.no_grad():
        m.weight.uniform_(-math.sqrt(6 / (fan_in + fan_out)), math.sqrt(6 / (fan_in + fan_out)))
        if m.bias is not None:
            m.bias.zero_()


def xavier_copied_in(m):
    if isinstance(m, nn.Linear):
        with torch.no_grad():
            m.weight.copy_(nn.init.xavier_uniform_(torch.empty_like(m.weight), gain=1.0))
            if getattr(m, "bias", None) is not None:
                m.bias.fill_(0)


def xavier_via_parameters(m):
    if isinstance(m, nn.Linear):
        for name, p in m.named_parameters(recurse=False):
            (nn.init.xavier_uniform_ if name == "weight" else nn.init.zeros_)(p)


def xavier_every_module_below(m):  # right, if wasteful: each layer is drawn again for each of its ancestors
    for sub in m.modules():
        if isinstance(sub, nn.Linear):
            nn.init.xavier_uniform_(sub.weight)
            if sub.bias is not None:
                nn.init.zeros_(sub.bias)


@pytest.mark.parametrize(
    "right", [xavier_by_hand, xavier_under_no_grad, xavier_copied_in, xavier_via_parameters, xavier_every_module_below]
)
def test_init_xavier_accepts_right_answers(right):
    assert outcome(check_init_xavier, right) == ("passed", "")


def test_init_xavier_tests_the_family_not_only_the_std_and_the_bound():
    # Inside the bound, std exactly b/sqrt(3), yet not uniform: half arcsine (variance b²/2), half
    # triangular (variance b²/6).
    def mixture(m):
        if isinstance(m, nn.Linear):
            b = _bound(m)
            u = torch.rand(m.weight.shape, dtype=torch.float64)
            arcsine = torch.sin(math.pi * (u - 0.5))
            triangular = torch.rand(m.weight.shape, dtype=torch.float64) + u - 1
            pick = torch.rand(m.weight.shape) < 0.5
            with torch.no_grad():
                m.weight.copy_(b * torch.where(pick, arcsine, triangular))
                m.bias.zero_()

    verdict, message = outcome(check_init_xavier, mixture)
    assert verdict == "failed" and "not uniformly distributed" in message


def test_init_xavier_check_leaves_the_global_generator_alone():
    torch.manual_seed(7)
    expected = torch.rand(2)
    torch.manual_seed(7)
    outcome(check_init_xavier, xavier_by_hand)
    assert torch.equal(torch.rand(2), expected)


# ---------------------------------------------------------------- Exercise 2 · a lazy network

def _kaiming(m):
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        nn.init.zeros_(m.bias)


def lazy_init_before_dry_run_type_test(net, example_input):
    def init(m):
        if type(m) == nn.Linear:  # noqa: E721 - the mistake under test
            _kaiming(m)

    net.apply(init)
    net(example_input)
    return net


def lazy_init_before_dry_run(net, example_input):
    net.apply(_kaiming)
    net(example_input)
    return net


def lazy_no_dry_run(net, example_input):
    net.apply(lambda m: _kaiming(m) if isinstance(m, nn.Linear) and not m.has_uninitialized_params() else None)
    return net


def lazy_fan_out(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return net


def lazy_returns_nothing(net, example_input):
    net(example_input)
    net.apply(_kaiming)


def lazy_kaiming_uniform(net, example_input):  # the right std, the wrong family
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return net


def lazy_dummy_input(net, example_input):  # a hand-made dry-run input: float32, not the example's dtype
    net(torch.randn(1, example_input.shape[1]))
    net.apply(_kaiming)
    return net


def lazy_through_data(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            m.weight.data = torch.randn(m.out_features, m.in_features) * math.sqrt(2 / m.in_features)
            m.bias.data.zero_()
    return net


def lazy_keeps_the_bias(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    return net


def lazy_wrong_width(net, example_input):  # a dry run with a guessed width
    net(torch.rand(1, 256, dtype=example_input.dtype))
    net.apply(_kaiming)
    return net


def lazy_kaiming_default_slope(net, example_input):  # nn.Linear's slope a=sqrt(5), in the normal family
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, a=math.sqrt(5))
            nn.init.zeros_(m.bias)
    return net


def lazy_xavier(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            nn.init.zeros_(m.bias)
    return net


def lazy_test_on_lazy_linear(net, example_input):  # after the dry run no LazyLinear is left
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.LazyLinear):
            _kaiming(m)
    return net


def lazy_by_dimension(net, example_input):  # a 1-D parameter is not always a bias
    net(example_input)
    for p in net.parameters():
        if p.dim() > 1:
            nn.init.kaiming_normal_(p, nonlinearity="relu")
        else:
            nn.init.zeros_(p)
    return net


def lazy_dummy_with_the_dtype(net, example_input):  # the dtype right, the device the default one
    net(torch.randn(1, example_input.shape[1], dtype=example_input.dtype))
    net.apply(_kaiming)
    return net


def lazy_top_level_only(net, example_input):  # children() misses the layer in the nested nn.Sequential
    net(example_input)
    for m in net.children():
        _kaiming(m)
    return net


def lazy_drops_the_bias(net, example_input):  # "zero biases" by removing them
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            m.bias = None
    return net


def lazy_inference_mode(net, example_input):
    with torch.inference_mode():
        net(example_input)
    net.apply(_kaiming)
    return net


def lazy_frozen_to_edit(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            m.weight.requires_grad_(False).normal_(0, math.sqrt(2 / m.in_features))
            m.bias.requires_grad_(False).zero_()
    return net


def lazy_below_the_root(net, example_input):  # skips "the container", and with it a bare layer
    net(example_input)
    for m in list(net.modules())[1:]:
        _kaiming(m)
    return net


def lazy_walks_the_children(net, example_input):  # a recursive walk over children, never net itself
    net(example_input)

    def walk(module):
        for child in module.children():
            _kaiming(child)
            walk(child)

    walk(net)
    return net


def lazy_loops_over_net(net, example_input):  # one level down by hand; a bare layer is not iterable
    net(example_input)
    for m in net:
        for sub in m if isinstance(m, nn.Sequential) else [m]:
            _kaiming(sub)
    return net


def lazy_uniform_by_hand(net, example_input):  # the right std, drawn uniform with Tensor.uniform_: no nn.init call
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            b = math.sqrt(3) * math.sqrt(2 / m.in_features)
            with torch.no_grad():
                m.weight.uniform_(-b, b)
                m.bias.zero_()
    return net


_ROOT_LEFT_OUT = ("a bare nn.LazyLinear(200) given as the network kept nn.Linear's default init (std 0.0472, "
                  "1/sqrt(3 fan_in) = 0.0471), while the layers inside a network were initialized: your walk leaves "
                  "out net itself")

LAZY_WRONG = [
    (lazy_init_before_dry_run_type_test, "your init never ran. Dry run first, then test isinstance(m, nn.Linear)"),
    (lazy_test_on_lazy_linear, "a test on nn.LazyLinear finds none"),
    (lazy_by_dimension, "the LayerNorm changed: initialize the linear layers only"),
    (lazy_dummy_with_the_dtype, "your function made a tensor with torch.randn without device="),
    (lazy_inference_mode, "layer 0's weight is an inference tensor"),
    (lazy_frozen_to_edit, "layer 0's weight no longer requires grad"),
    (lazy_init_before_dry_run, "run net(example_input) once, with the example itself"),
    (lazy_no_dry_run, "still uninitialized"),
    (lazy_fan_out, "That is sqrt(2 / fan_out): use mode='fan_in'"),
    (lazy_returns_nothing, "return the network"),
    (lazy_kaiming_uniform, "not normally distributed: Kaiming *normal* is asked for, and your function drew them "
                           "with kaiming_uniform_"),
    (lazy_uniform_by_hand, "not normally distributed: Kaiming *normal* is asked for, use nn.init.kaiming_normal_"),
    (lazy_dummy_input, "its width, dtype and device"),
    (lazy_through_data, "the network was float64: your function assigned a new tensor to .data"),
    (lazy_keeps_the_bias, "bias must be zero"),
    (lazy_xavier, "Use nn.init.kaiming_normal_(m.weight, nonlinearity='relu')"),
    (lazy_kaiming_default_slope, "is what a=sqrt(5) gives"),
    (lazy_wrong_width, "must have weight shape (256, 300), it has (256, 256)"),
    (lazy_top_level_only, "net.children() (or `for m in net`) visits the top level only"),
    (lazy_drops_the_bias, "layer 0's bias is None now: assigning m.bias = None removes the bias"),
    (lazy_below_the_root, _ROOT_LEFT_OUT),
    (lazy_walks_the_children, _ROOT_LEFT_OUT),
    (lazy_loops_over_net, "raised TypeError: 'Linear' object is not iterable. Likely cause: the network here is a "
                          "single layer, not a container, and `for m in net` needs a container"),
]


@pytest.mark.parametrize(("wrong", "hint"), LAZY_WRONG, ids=[w.__name__ for w, _ in LAZY_WRONG])
def test_initialize_lazy_rejects(wrong, hint):
    verdict, message = outcome(check_initialize_lazy, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 2 · Initialize a lazy network: not yet.")
    assert hint in message


def lazy_default_kaiming_arguments(net, example_input):
    net(example_input)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight)  # leaky_relu with slope 0 is ReLU; fan_in is the default
            with torch.no_grad():
                m.bias.zero_()
    return net


def lazy_normal_by_hand(net, example_input):
    with torch.no_grad():
        net(example_input)  # a dry run needs no graph
        for _, m in net.named_modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, math.sqrt(2 / m.in_features))
                m.bias.fill_(0.0)
    return net


def lazy_one_row_dry_run(net, example_input):
    net(example_input[:1])
    for m in net.modules():
        if isinstance(m, nn.Linear):
            std = nn.init.calculate_gain("relu") / math.sqrt(m.weight.shape[1])
            nn.init.normal_(m.weight, 0.0, std)
            nn.init.constant_(m.bias, 0)
    return net


@pytest.mark.parametrize("right", [lazy_default_kaiming_arguments, lazy_normal_by_hand, lazy_one_row_dry_run])
def test_initialize_lazy_accepts_right_answers(right):
    assert outcome(check_initialize_lazy, right) == ("passed", "")


# ---------------------------------------------------------------- Exercise 3 · an optimizer for a lazy network

def _groups(params):
    params = list(params)
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 1e-4},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def optimizer_before_dry_run(net, example_input):  # the groups read the placeholders' ndim
    params = list(net.parameters())
    opt = torch.optim.SGD([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 1e-4},
                           {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}], lr=0.1)
    net(example_input)
    return opt


def optimizer_without_dry_run(net, example_input):
    params = list(net.parameters())
    return torch.optim.SGD([{"params": [p for p in params if p.ndim >= 2], "weight_decay": 1e-4},
                            {"params": [p for p in params if p.ndim < 2]}], lr=0.1)


def optimizer_dim_before_dry_run(net, example_input):  # p.dim() on a placeholder raises
    opt = torch.optim.SGD(_groups(net.parameters()), lr=0.1)
    net(example_input)
    return opt


def optimizer_decays_everything(net, example_input):
    net(example_input)
    return torch.optim.SGD(net.parameters(), lr=0.1, weight_decay=1e-4)


def optimizer_groups_by_name(net, example_input):  # misses BatchNorm's 1-D weight
    net(example_input)
    named = list(net.named_parameters())
    return torch.optim.SGD([{"params": [p for n, p in named if "bias" not in n], "weight_decay": 1e-4},
                            {"params": [p for n, p in named if "bias" in n], "weight_decay": 0.0}], lr=0.1)


def optimizer_decays_the_vectors(net, example_input):  # the condition upside down
    net(example_input)
    params = list(net.parameters())
    return torch.optim.SGD([{"params": [p for p in params if p.dim() < 2], "weight_decay": 1e-4},
                            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.0}], lr=0.1)


def optimizer_linear_layers_only(net, example_input):  # forgets the BatchNorm parameters
    net(example_input)
    linears = [m for m in net if isinstance(m, nn.Linear)]
    return torch.optim.SGD([{"params": [m.weight for m in linears], "weight_decay": 1e-4},
                            {"params": [m.bias for m in linears], "weight_decay": 0.0}], lr=0.1)


def optimizer_a_parameter_twice(net, example_input):
    net(example_input)
    weights = [m.weight for m in net if isinstance(m, nn.Linear)]
    return torch.optim.SGD([{"params": weights, "weight_decay": 1e-4},
                            {"params": list(net.parameters()), "weight_decay": 0.0}], lr=0.1)


def optimizer_on_a_copy(net, example_input):  # trains a copy of the network
    import copy

    net(example_input)
    return torch.optim.SGD(_groups(copy.deepcopy(net).parameters()), lr=0.1)


def optimizer_adam(net, example_input):
    net(example_input)
    return torch.optim.Adam(_groups(net.parameters()), lr=0.1)


def optimizer_returns_the_network(net, example_input):
    net(example_input)
    torch.optim.SGD(_groups(net.parameters()), lr=0.1)
    return net


def optimizer_wrong_decay(net, example_input):
    net(example_input)
    groups = _groups(net.parameters())
    groups[0]["weight_decay"] = 1e-2
    return torch.optim.SGD(groups, lr=0.1)


def optimizer_matrices_off_by_one(net, example_input):  # p.dim() > 2: a weight matrix has 2
    net(example_input)
    params = list(net.parameters())
    return torch.optim.SGD([{"params": [p for p in params if p.dim() > 2], "weight_decay": 1e-4},
                            {"params": [p for p in params if p.dim() <= 2], "weight_decay": 0.0}], lr=0.1)


def optimizer_one_row_dry_run(net, example_input):  # batch norm cannot train on one sample
    net(example_input[:1])
    return torch.optim.SGD(_groups(net.parameters()), lr=0.1)


def optimizer_float32_cpu_dummy(net, example_input):  # neither the example's dtype nor its device
    net(torch.randn(2, example_input.shape[1]))
    return torch.optim.SGD(_groups(net.parameters()), lr=0.1)


def optimizer_inference_mode(net, example_input):
    with torch.inference_mode():
        net(example_input)
    return torch.optim.SGD(_groups(net.parameters()), lr=0.1)


def optimizer_by_layer_type(net, example_input):  # by type, and a layer built with bias=False gives None
    net(example_input)
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm1d)]
    return torch.optim.SGD([{"params": [m.weight for m in linears], "weight_decay": 1e-4},
                            {"params": [m.bias for m in linears] + [p for m in norms for p in m.parameters()],
                             "weight_decay": 0.0}], lr=0.1)


def optimizer_top_level_own_params(net, example_input):  # recurse=False on the children: misses a nested layer
    net(example_input)
    return torch.optim.SGD(_groups(p for m in net.children() for p in m.parameters(recurse=False)), lr=0.1)


def optimizer_children_params(net, example_input):  # the children's parameters: a bare layer has no children
    net(example_input)
    return torch.optim.SGD(_groups(p for m in net.children() for p in m.parameters()), lr=0.1)


def optimizer_every_module_parameters(net, example_input):  # a layer's parameters come again with its container's
    net(example_input)
    params = [p for m in net.modules() for p in m.parameters()]
    return torch.optim.SGD(_groups(params), lr=0.1)


def optimizer_weights_and_all_matrices(net, example_input):  # the layers' weights, then every matrix again
    net(example_input)
    weights = [m.weight for m in net.modules() if isinstance(m, nn.Linear)]
    matrices = [p for p in net.parameters() if p.dim() >= 2]
    return torch.optim.SGD([{"params": weights + matrices, "weight_decay": 1e-4},
                            {"params": [p for p in net.parameters() if p.dim() < 2], "weight_decay": 0.0}], lr=0.1)


OPTIMIZER_WRONG = [
    (optimizer_before_dry_run, "your function read the parameters' shapes (.ndim) before the dry run, and a lazy "
                               "layer's placeholder reports p.ndim == 1"),
    (optimizer_without_dry_run, "still uninitialized"),
    (optimizer_dim_before_dry_run, "no shape (p.dim(), p.shape, p.numel()) until the dry run"),
    (optimizer_decays_everything, "0.bias is 1-D (a bias or a normalization scale): it must get weight_decay=0"),
    (optimizer_groups_by_name, "1.weight is 1-D"),
    (optimizer_decays_the_vectors, "the condition is upside down"),
    (optimizer_linear_layers_only, "the optimizer does not hold 1.weight"),
    (optimizer_a_parameter_twice, "each parameter goes into exactly one group"),
    (optimizer_on_a_copy, "the optimizer holds copies of the network's parameters"),
    (optimizer_adam, "return a torch.optim.SGD, not Adam"),
    (optimizer_returns_the_network, "return the optimizer, not the network"),
    (optimizer_wrong_decay, "must get weight_decay=0.0001, it gets 0.01"),
    (optimizer_matrices_off_by_one, "no weight matrix gets weight decay, though the groups were chosen after the "
                                    "dry run"),
    (optimizer_one_row_dry_run, "run the network on the whole example batch"),
    (optimizer_float32_cpu_dummy, "your function made a tensor with torch.randn without device="),
    (optimizer_every_module_parameters, "0.weight is listed 2 times in one group: PyTorch only warns, then every "
                                        "step updates it 2 times"),
    (optimizer_weights_and_all_matrices, "0.weight is listed 2 times in one group"),
    (optimizer_inference_mode, "layer 0's weight is an inference tensor"),
    (optimizer_by_layer_type, "raised TypeError: optimizer can only optimize Tensors, but one of the params is "
                              "NoneType. Likely cause: a None went into a group: a layer built with bias=False has "
                              "m.bias None"),
    (optimizer_top_level_own_params, "on a nested network (an nn.Sequential inside an nn.Sequential), the optimizer "
                                     "does not hold 0.0.weight: every parameter must be in a group. The flat "
                                     "network's parameters were all held, this one sits a level down"),
    (optimizer_children_params, "with a bare nn.LazyLinear(5) as the network, the optimizer does not hold weight: "
                                "every parameter must be in a group. The nested network's parameters were all held; "
                                "here the network is the layer itself"),
]


def test_a_parameter_listed_twice_in_one_group_only_warns_and_is_stepped_twice():
    # What the hint says of optimizer_every_module_parameters: PyTorch warns, and each step updates it twice.
    p = nn.Parameter(torch.ones(2))
    with pytest.warns(UserWarning, match="duplicate parameters"):
        opt = torch.optim.SGD([{"params": [p, p]}], lr=0.1)
    p.grad = torch.ones(2)
    opt.step()
    assert torch.allclose(p.detach(), torch.full((2,), 0.8))   # two steps of lr * grad = 0.1


@pytest.mark.parametrize(("wrong", "hint"), OPTIMIZER_WRONG, ids=[w.__name__ for w, _ in OPTIMIZER_WRONG])
def test_lazy_optimizer_rejects(wrong, hint):
    verdict, message = outcome(check_lazy_optimizer, wrong)
    assert verdict == "failed"
    assert message.startswith("Exercise 3 · An optimizer for a lazy network: not yet.")
    assert hint in message


def optimizer_built_first_grouped_by_module(net, example_input):
    # Built before the dry run, and right: torch materializes each placeholder in place (the same object
    # becomes a Parameter), and these groups are chosen by module, not by shape.
    weights = [m.weight for m in net.modules() if isinstance(m, nn.Linear)]
    rest = [p for p in net.parameters() if all(p is not w for w in weights)]
    opt = torch.optim.SGD([{"params": weights, "weight_decay": 1e-4}, {"params": rest}], lr=0.1)
    net(example_input)
    return opt


def optimizer_by_ndim_after_no_grad_dry_run(net, example_input):
    with torch.no_grad():
        net(example_input)
    decay = [p for p in net.parameters() if p.ndim >= 2]
    rest = [p for p in net.parameters() if p.ndim < 2]
    return torch.optim.SGD([{"params": decay, "weight_decay": 1e-4}, {"params": rest, "weight_decay": 0}], lr=0.1)


def optimizer_by_named_dim(net, example_input):
    net(example_input)
    groups = {True: [], False: []}
    for _, p in net.named_parameters():
        groups[p.dim() > 1].append(p)
    opt = torch.optim.SGD(groups[False], lr=0.1)
    opt.add_param_group({"params": groups[True], "weight_decay": 1e-4})
    return opt


@pytest.mark.parametrize(
    "right", [optimizer_built_first_grouped_by_module, optimizer_by_ndim_after_no_grad_dry_run, optimizer_by_named_dim]
)
def test_lazy_optimizer_accepts_right_answers(right):
    assert outcome(check_lazy_optimizer, right) == ("passed", "")


# ---------------------------------------------------------------- all three

@pytest.mark.parametrize("check", [check_init_xavier, check_initialize_lazy, check_lazy_optimizer])
def test_only_the_stub_is_not_attempted(check):
    def stub(*args):
        raise NotImplementedError("your code here")

    def missing_forward(*args):  # PyTorch's own NotImplementedError is a hint, not "not attempted"
        nn.Module()(torch.ones(1))

    assert outcome(check, stub) == ("not attempted", "")
    verdict, message = outcome(check, missing_forward)
    assert verdict == "failed" and "NotImplementedError" in message and "forward" in message


@pytest.mark.parametrize("check", [check_init_xavier, check_initialize_lazy, check_lazy_optimizer])
def test_an_error_in_the_answer_becomes_a_hint_that_quotes_it(check):
    def broken(*args):
        raise ValueError("something else")

    verdict, message = outcome(check, broken)
    assert verdict == "failed" and "raised ValueError: something else. Likely cause:" in message


@pytest.mark.parametrize("check", [check_init_xavier, check_initialize_lazy, check_lazy_optimizer])
def test_not_a_function(check):
    verdict, message = outcome(check, 42)
    assert verdict == "failed" and "pass the function itself" in message
