"""Catalogue for the checks of chapter 08 · Operating a GPU (utils/exercises/ch08.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from utils.checks import outcome
from utils.exercises.ch08 import check_accumulate, check_training_bytes

# --- Exercise 1 · Memory of a training step ----------------------------------------------------------
# Right answers, each written differently from the notebook's reference (a loop with a copy count).


def by_nbytes(model):
    trainable = sum(p.nbytes for p in model.parameters() if p.requires_grad)
    return sum(p.nbytes for p in model.parameters()) + 3 * trainable


def by_identity(model):
    seen = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = p
    return sum(p.numel() * p.element_size() * (1 + 3 * p.requires_grad) for p in seen.values())


def by_bits(model):
    def bytes_per_number(dtype):
        return (torch.finfo(dtype).bits if dtype.is_floating_point else torch.iinfo(dtype).bits) // 8

    total = 0
    for p in model.parameters():
        size = p.numel() * bytes_per_number(p.dtype)
        total += size + (3 * size if p.requires_grad else 0)
    return int(total)


def with_numpy_prod(model):
    """np.prod of the shapes: the total is a NumPy integer (np.int64), not an int."""
    return sum((1 + 3 * p.requires_grad) * np.prod(p.shape) * p.element_size() for p in model.parameters())


RIGHT_BYTES = [by_nbytes, by_identity, by_bits, with_numpy_prod]


def sixteen_bytes_each(model):
    return 16 * sum(p.numel() for p in model.parameters())


def assumes_float32(model):
    return sum(16 * p.numel() if p.requires_grad else 4 * p.numel() for p in model.parameters())


def ignores_frozen(model):
    return sum(4 * p.numel() * p.element_size() for p in model.parameters())


def forgets_gradients(model):
    return sum((3 if p.requires_grad else 1) * p.nbytes for p in model.parameters())


def forgets_adam(model):
    return sum((2 if p.requires_grad else 1) * p.nbytes for p in model.parameters())


def counts_repeats(model):
    return sum((4 if p.requires_grad else 1) * p.nbytes for _, p in model.named_parameters(remove_duplicate=False))


def counts_per_module(model):  # each module's own parameters: a weight shared by two layers counts twice
    return sum((4 if p.requires_grad else 1) * p.nbytes for m in model.modules() for p in m.parameters(recurse=False))


def counts_buffers(model):
    return by_nbytes(model) + sum(b.nbytes for b in model.buffers())


def counts_state_dict(model):
    return sum(4 * t.numel() * t.element_size() for t in model.state_dict().values())


def counts_bits(model):
    return 8 * by_nbytes(model)


def reads_the_gradients(model):
    return sum(p.nbytes + p.grad.nbytes + 2 * p.nbytes for p in model.parameters())


def one_size_for_all(model):
    """The element size of the first parameter, used for every parameter."""
    size = next(model.parameters()).element_size()
    return size * sum((4 if p.requires_grad else 1) * p.numel() for p in model.parameters())


def returns_float(model):
    return float(by_nbytes(model))


def returns_megabytes(model):
    return by_nbytes(model) / 2**20


def adam_state_in_float32(model):  # Adam's averages taken as 4 bytes whatever the dtype
    return sum(2 * p.nbytes + 8 * p.numel() if p.requires_grad else p.nbytes for p in model.parameters())


def walks_children_only(model):  # one level of the tree: a bare layer has no children
    params = {id(p): p for child in model.children() for p in child.parameters(recurse=False)}.values()
    return sum((4 if p.requires_grad else 1) * p.nbytes for p in params)


def frozen_per_layer(model):  # a layer's weight decides for its bias too
    total = 0
    for m in model.modules():
        own = list(m.parameters(recurse=False))
        if own:
            total += (4 if own[0].requires_grad else 1) * sum(p.nbytes for p in own)
    return total


def assumes_every_layer_has_a_bias(model):
    total = 0
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.BatchNorm1d)):
            for p in (m.weight, m.bias):
                total += (4 if p.requires_grad else 1) * p.numel() * p.element_size()
    return total


WRONG_BYTES = [
    (frozen_per_layer, "for the same MLP with its weights frozen and its biases trained: 264 bytes"),
    (frozen_per_layer, "requires_grad belongs to each parameter, not to its layer"),
    (assumes_every_layer_has_a_bias, "your function on an MLP whose layers have no bias (bias=False) raised "
                                     "AttributeError"),
    (assumes_every_layer_has_a_bias, "a layer built with bias=False has bias None"),
    (walks_children_only, "for a bare nn.Linear(5, 3) layer: 0 bytes"),
    (walks_children_only, "the count reads only the parameters of the model's direct children"),
    (sixteen_bytes_each, "for the same MLP with its first layer frozen: 1056 bytes"),
    (assumes_float32, "each number takes its dtype's size"),
    (ignores_frozen, "frozen parameters (requires_grad=False) get no gradient and no Adam state"),
    (forgets_gradients, "the gradients are missing"),
    (forgets_adam, "Adam's two running averages are missing"),
    (counts_repeats, "a layer used twice holds its parameters once"),
    (counts_per_module, "for a model whose two layers share one weight: 640 bytes, but one Adam step holds 384"),
    (counts_per_module, "model.modules() does not, for a shared weight"),
    (counts_buffers, "buffers (such as BatchNorm's running statistics) are not trained"),
    (counts_state_dict, "frozen parameters"),
    (counts_bits, "count bytes, not bits"),
    (reads_the_gradients, "p.grad is None"),
    (one_size_for_all, "for a model with a float64 and a float32 layer: 2112 bytes"),
    (one_size_for_all, "one size for the whole model is wrong"),
    (returns_float, "return an int (bytes); got float (use integer arithmetic"),
    (returns_megabytes, "return an int (bytes); got float"),
    (adam_state_in_float32, "for the MLP in float64: 1584 bytes"),
    (adam_state_in_float32, "Adam's two averages have the parameter's dtype"),
]


@pytest.mark.parametrize("right", RIGHT_BYTES, ids=lambda f: f.__name__)
def test_training_bytes_accepts_right_answers(right):
    assert outcome(check_training_bytes, right) == ("passed", "")


@pytest.mark.parametrize(("wrong", "hint"), WRONG_BYTES, ids=lambda w: getattr(w, "__name__", ""))
def test_training_bytes_rejects(wrong, hint):
    verdict, message = outcome(check_training_bytes, wrong)
    assert verdict == "failed"
    assert hint in message, message


def test_training_bytes_hint_breaks_the_total_down():
    _, message = outcome(check_training_bytes, forgets_gradients)
    assert "for a float32 MLP: 792 bytes, but one Adam step holds 1056 = 264 (parameters) + 264 (gradients)" in message


def test_the_p_grad_hint_only_where_the_answer_read_p_grad():
    """An error on a None is blamed on p.grad only when the same call works once the gradients exist."""
    assert "p.grad is None" in outcome(check_training_bytes, reads_the_gradients)[1]
    assert "p.grad is None" not in outcome(check_training_bytes, assumes_every_layer_has_a_bias)[1]

    def fails_otherwise(model):
        raise TypeError("unsupported operand")

    message = outcome(check_training_bytes, fails_otherwise)[1]
    assert "raised TypeError: unsupported operand." in message and "Likely cause" not in message, message


def test_each_trap_is_caught_on_its_own():
    """With the frozen case out of the way, counting the state_dict still fails (tied weights, buffers)."""

    def frozen_aware(count):
        def fn(model):
            if any(not p.requires_grad for p in model.parameters()):
                return by_nbytes(model)
            return count(model)

        return fn

    assert "uses one layer twice" in outcome(check_training_bytes, frozen_aware(counts_state_dict))[1]

    def tied_aware(model):  # counts the state_dict without duplicates: still counts the buffers
        unique = {t.data_ptr(): t for t in model.state_dict().values()}
        return sum(4 * t.numel() * t.element_size() for t in unique.values())

    assert "with BatchNorm buffers" in outcome(check_training_bytes, frozen_aware(tied_aware))[1]


def bytes_stub(model):
    raise NotImplementedError("your code here")


def test_only_the_stub_is_not_attempted(capsys):
    assert outcome(check_training_bytes, bytes_stub) == ("not attempted", "")
    check_training_bytes(bytes_stub)
    assert "not attempted yet" in capsys.readouterr().out


def test_a_learners_own_not_implemented_error_is_a_hint():
    def half_done(model):
        raise NotImplementedError  # not the stub's message

    verdict, message = outcome(check_training_bytes, half_done)
    assert verdict == "failed" and "raised NotImplementedError" in message


def test_checks_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    outcome(check_training_bytes, lambda model: 0)
    assert torch.equal(torch.rand(3), expected)


# --- Exercise 2 · Accumulate gradients -------------------------------------------------------------------


def by_share(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb) * len(xb) / len(x)).backward()


def by_summed_loss(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb, reduction="sum") / y.numel()).backward()   # mean over every element of y


def divided_at_the_end(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb) * len(xb)).backward()
    with torch.no_grad():
        for p in model.parameters():
            p.grad /= len(x)


def near_equal_pieces(model, loss_fn, x, y, size):
    count = math.ceil(len(x) / size)
    for xb, yb in zip(x.tensor_split(count), y.tensor_split(count), strict=True):
        (loss_fn(model(xb), yb) * (len(xb) / len(x))).backward()


RIGHT_ACCUMULATE = [by_share, by_summed_loss, divided_at_the_end, near_equal_pieces]


def not_divided(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        loss_fn(model(xb), yb).backward()


def divided_by_count(model, loss_fn, x, y, size):
    pieces = list(zip(x.split(size), y.split(size), strict=True))
    for xb, yb in pieces:
        (loss_fn(model(xb), yb) / len(pieces)).backward()


def whole_batch(model, loss_fn, x, y, size):
    loss_fn(model(x), y).backward()


def zeroes_between(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        model.zero_grad()
        (loss_fn(model(xb), yb) * len(xb) / len(x)).backward()


def one_backward_at_the_end(model, loss_fn, x, y, size):
    total = sum(loss_fn(model(xb), yb) * len(xb) / len(x) for xb, yb in zip(x.split(size), y.split(size), strict=True))
    total.backward()


def takes_a_step(model, loss_fn, x, y, size):
    by_share(model, loss_fn, x, y, size)
    torch.optim.SGD(model.parameters(), lr=0.1).step()


def under_no_grad(model, loss_fn, x, y, size):
    with torch.no_grad():
        for xb, yb in zip(x.split(size), y.split(size), strict=True):
            loss_fn(model(xb), yb)


def detaches_the_loss(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb).detach() * len(xb) / len(x)).backward()


def never_calls_backward(model, loss_fn, x, y, size):
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        loss_fn(model(xb), yb) * len(xb) / len(x)


def zeroes_missing_gradients_first(model, loss_fn, x, y, size):
    for p in model.parameters():
        p.grad.zero_()  # there is no .grad yet
    by_share(model, loss_fn, x, y, size)


def sum_over_rows(model, loss_fn, x, y, size):  # right for one output per row
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb, reduction="sum") / len(x)).backward()


def two_forwards_per_backward(model, loss_fn, x, y, size):
    pieces = list(zip(x.split(size), y.split(size), strict=True))
    for i in range(0, len(pieces), 2):
        pair = pieces[i:i + 2]
        sum(loss_fn(model(xb), yb) * len(xb) / len(x) for xb, yb in pair).backward()


def first_layer_only(model, loss_fn, x, y, size):
    first = next(model.parameters())
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb) * len(xb) / len(x)).backward(inputs=[first])


def drops_the_last_rows(model, loss_fn, x, y, size):
    full = len(x) // size * size
    for xb, yb in zip(x[:full].split(size), y[:full].split(size), strict=True):
        (loss_fn(model(xb), yb) * len(xb) / full).backward()


def scaled_by_size(model, loss_fn, x, y, size):  # size / len(x): right except for a short last piece
    for xb, yb in zip(x.split(size), y.split(size), strict=True):
        (loss_fn(model(xb), yb) * size / len(x)).backward()


WRONG_ACCUMULATE = [
    (not_divided, "for 10 rows in micro-batches of at most 2 (mse_loss, Sequential): the gradients differ"),
    (not_divided, "add up to about 5 times the batch's: scale each loss by its share of the rows"),
    (divided_by_count, "for 10 rows in micro-batches of at most 4"),
    (divided_by_count, "Each loss was divided by the number of micro-batches, but they are not all the same size"),
    (whole_batch, "the model saw 10 rows in one call. Run it on micro-batches of at most 2 rows"),
    (zeroes_between, "Only the last micro-batch's gradient is left"),
    (one_backward_at_the_end, "backward ran 5 time(s) after all 5 forward calls"),
    (takes_a_step, "the parameters changed. Only accumulate the gradients"),
    (under_no_grad, "no gradient reached the parameters: the model ran with autograd off (under torch.no_grad()"),
    (never_calls_backward, "no gradient reached the parameters: backward was never called"),
    (detaches_the_loss, "backward was called on a loss cut off from the model's graph"),
    (zeroes_missing_gradients_first, "'NoneType' object has no attribute 'zero_'. Likely cause: the parameters "
                                     "start without gradients"),
    (sum_over_rows, "The gradients are 2 times the batch's, as from a loss summed over each micro-batch"),
    (two_forwards_per_backward, "the model ran 5 times and backward reached its outputs 5 times, not once right "
                                "after each forward"),
    (first_layer_only, "for 10 rows in micro-batches of at most 2 (mse_loss, Sequential): no gradient reached 0.bias, "
                       "2.weight, 2.bias"),
    (drops_the_last_rows, "the model saw 8 rows in all, but the batch has 10"),
    (scaled_by_size, "The cause is unknown"),
]


@pytest.mark.parametrize("right", RIGHT_ACCUMULATE, ids=lambda f: f.__name__)
def test_accumulate_accepts_right_answers(right):
    assert outcome(check_accumulate, right) == ("passed", "")


@pytest.mark.parametrize(("wrong", "hint"), WRONG_ACCUMULATE, ids=lambda w: getattr(w, "__name__", ""))
def test_accumulate_rejects(wrong, hint):
    verdict, message = outcome(check_accumulate, wrong)
    assert verdict == "failed"
    assert hint in message, message


def test_accumulate_hints_name_only_what_was_seen():
    """A loss cut off after the model is not blamed on torch.no_grad(), nor the reverse."""
    assert "torch.no_grad()" not in outcome(check_accumulate, detaches_the_loss)[1]
    assert ".detach()" not in outcome(check_accumulate, under_no_grad)[1]


def test_accumulate_stub_is_not_attempted():
    def stub(model, loss_fn, x, y, size):
        raise NotImplementedError("your code here")

    assert outcome(check_accumulate, stub) == ("not attempted", "")
