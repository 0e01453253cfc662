"""Chapter 06's checks: each rejects a catalogue of plausible wrong answers with the hint that fits, and
accepts right answers written differently from the notebook's reference solutions (which nbval runs)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from utils.checks import STUB_MESSAGE, outcome
from utils.exercises.ch06 import check_count_tokens, check_one_hot, check_segment_mean, check_select_scores


def assert_rejected(check, answer, hint):
    verdict, message = outcome(check, answer)
    assert verdict == "failed", f"{answer.__name__} was {verdict}"
    assert hint in message, f"{answer.__name__}: {message}"
    assert "Traceback" not in message


def assert_accepted(check, answer):
    verdict, message = outcome(check, answer)
    assert verdict == "passed", f"{answer.__name__}: {message}"


# --- Exercise 1 · one-hot with scatter ---------------------------------------------------------------


def one_hot_wrong_dim(labels, num_classes):
    return torch.zeros(len(labels), num_classes, device=labels.device).scatter_(0, labels.unsqueeze(1), 1.0)


def one_hot_from_max_label(labels, num_classes):
    width = int(labels.max()) + 1
    return torch.zeros(len(labels), width, device=labels.device).scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_integer(labels, num_classes):
    out = torch.zeros(len(labels), num_classes, dtype=torch.long, device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1), 1)


def one_hot_unsqueeze_in_place(labels, num_classes):
    labels.unsqueeze_(1)
    return torch.zeros(labels.shape[0], num_classes, device=labels.device).scatter_(1, labels, 1.0)


def one_hot_index_not_unsqueezed(labels, num_classes):       # PyTorch refuses: index has one dim too few
    return torch.zeros(len(labels), num_classes, device=labels.device).scatter_(1, labels, 1.0)


def one_hot_index_as_one_row(labels, num_classes):         # (1, N): every label lands in row 0
    return torch.zeros(len(labels), num_classes, device=labels.device).scatter_(1, labels.unsqueeze(0), 1.0)


def one_hot_index_moved_with_to_out(labels, num_classes):    # .to(out) also converts the index to float
    out = torch.zeros(len(labels), num_classes)
    return out.scatter_(1, labels.unsqueeze(1).to(out), 1.0)


def one_hot_default_device(labels, num_classes):
    return torch.zeros(len(labels), num_classes).scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_from_empty(labels, num_classes):               # the other positions keep what memory held
    return torch.empty(len(labels), num_classes, device=labels.device).scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_ones_on_default_device(labels, num_classes):   # on a GPU: src on the CPU, the rest on the GPU
    out = labels.new_zeros(len(labels), num_classes, dtype=torch.float32)
    return out.scatter_add_(1, labels.unsqueeze(1), torch.ones(len(labels), 1))


def one_hot_with_f_one_hot(labels, num_classes):
    return F.one_hot(labels, num_classes).float()


def one_hot_eye_rows(labels, num_classes):
    return torch.eye(num_classes, device=labels.device)[labels]


def one_hot_comparison(labels, num_classes):
    return (labels.unsqueeze(1) == torch.arange(num_classes, device=labels.device)).float()


def one_hot_range_checked_then_moved(labels, num_classes):
    # The range check needs the values (on meta it cannot run), so the check falls back to its run with the
    # default device set to meta: there too, building on the default device and moving at the end is refused.
    assert labels.max() < num_classes
    return torch.zeros(len(labels), num_classes).scatter_(1, labels.unsqueeze(1), 1.0).to(labels.device)


def one_hot_ones_like_labels(labels, num_classes):         # PyTorch refuses: int64 ones into a float tensor
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1), torch.ones_like(labels).unsqueeze(1))


def one_hot_output_requires_grad(labels, num_classes):      # autograd refuses in-place writes into a leaf
    out = torch.zeros(len(labels), num_classes, device=labels.device, requires_grad=True)
    return out.scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_scatter_result_dropped(labels, num_classes):   # scatter (no underscore) returns a new tensor
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    out.scatter(1, labels.unsqueeze(1), 1.0)
    return out


def one_hot_one_based(labels, num_classes):                 # treats the labels as counted from 1
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1) - 1, 1.0)


def one_hot_into_expanded_zeros(labels, num_classes):       # one row of zeros, expanded: every row one memory
    out = torch.zeros(1, num_classes, device=labels.device).expand(len(labels), -1)
    return out.scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_writes_the_labels(labels, num_classes):         # writes each label's value, not a 1
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1), labels.unsqueeze(1).float())


def one_hot_nan_written(labels, num_classes):               # NaN from the answer's own values, not from memory
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1), 1.0) / out.sum(1, keepdim=True).sub(1)


def one_hot_zeros_transposed(labels, num_classes):  # (C, N) zeros: PyTorch refuses; the check cannot name why
    out = torch.zeros(num_classes, len(labels), device=labels.device)
    return out.scatter_(1, labels.unsqueeze(1), 1.0)


ONE_HOT_WRONG = [
    (one_hot_wrong_dim, "scatter along dim=1"),
    (one_hot_from_max_label, "use num_classes for the width"),
    (one_hot_integer, "return a float tensor"),
    (one_hot_unsqueeze_in_place, "do not modify labels in place"),
    (one_hot_index_not_unsqueezed, "labels.unsqueeze(1)"),
    (one_hot_index_as_one_row, "only row 0 was written, with a 1 for every label"),
    (one_hot_index_moved_with_to_out, ".to(out) would also convert them"),
    (one_hot_default_device, "create every new tensor on labels.device, as torch.zeros(N, num_classes, "
                             "device=labels.device) does"),
    (one_hot_from_empty, "start from torch.zeros: your function called empty()"),
    (one_hot_nan_written, "the result holds NaN; row i must hold a single 1"),
    (one_hot_ones_on_default_device, "Expected all tensors to be on the same device"),
    (one_hot_with_f_one_hot, "build it with scatter_"),
    (one_hot_eye_rows, "build it with scatter_"),
    (one_hot_comparison, "build it with scatter_"),
    (one_hot_range_checked_then_moved, "scatter_() got tensors on labels.device and on the default device"),
    (one_hot_ones_like_labels, "the values written must have the output's dtype"),
    (one_hot_output_requires_grad, "the output was made with requires_grad=True"),
    (one_hot_scatter_result_dropped, "called scatter() (no trailing underscore), which returns a new tensor"),
    (one_hot_one_based, "an index held -1: the labels are zero-based already"),
    (one_hot_into_expanded_zeros, "the tensor written into is an expanded view"),
    (one_hot_writes_the_labels, "out[0, 2] is 2 where 1 is expected. The check does not recognize the cause"),
    (one_hot_zeros_transposed, "Likely cause: unknown: the check does not recognize this error"),
]


def one_hot_following_the_device_hint(labels, num_classes):   # exactly what the device hint suggests
    return torch.zeros(len(labels), num_classes, device=labels.device).scatter_(1, labels.unsqueeze(1), 1.0)


def test_the_device_hint_suggests_a_float_one_hot():
    # labels.new_zeros(...) and torch.zeros_like(labels) are int64, like the labels: following a hint that named
    # them failed the float requirement. The hint names what the task accepts, and that passes.
    hint = outcome(check_one_hot, one_hot_default_device)[1]
    assert "labels.new_zeros" not in hint and "zeros_like(labels)" not in hint, hint
    assert "torch.zeros(N, num_classes, device=labels.device)" in hint
    assert_accepted(check_one_hot, one_hot_following_the_device_hint)


@pytest.mark.parametrize(("answer", "hint"), ONE_HOT_WRONG, ids=[a.__name__ for a, _ in ONE_HOT_WRONG])
def test_one_hot_rejects(answer, hint):
    assert_rejected(check_one_hot, answer, hint)


def test_one_hot_wrong_dim_runs_silently():
    # The check's data lets the wrong dim run, so the learner sees the hint about dim, not a crash.
    labels = torch.tensor([2, 0, 3, 1, 3, 0, 2])
    assert one_hot_wrong_dim(labels, 4).shape == (7, 4)


def one_hot_new_zeros(labels, num_classes):
    return labels.new_zeros((labels.numel(), num_classes), dtype=torch.float32).scatter_(1, labels[:, None], 1.0)


def one_hot_out_of_place_value(labels, num_classes):
    zeros = torch.zeros(labels.shape[0], num_classes, device=labels.device)
    return zeros.scatter(1, labels.view(-1, 1), value=1.0)


def one_hot_scatter_add(labels, num_classes):
    n = labels.shape[0]
    ones = torch.ones(n, 1, device=labels.device)
    return torch.zeros(n, num_classes, device=labels.device).scatter_add_(1, labels.reshape(n, 1), ones)


def one_hot_float64(labels, num_classes):
    out = torch.zeros(len(labels), num_classes, dtype=torch.float64, device=labels.device)
    return out.scatter_(-1, labels.unsqueeze(-1), 1)


def one_hot_range_checked(labels, num_classes):  # checks its input first, as the chapter advises, on the device
    if (labels >= num_classes).any():
        raise ValueError("a label is out of range")
    return torch.zeros(len(labels), num_classes, device=labels.device).scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_expanded_then_cloned(labels, num_classes):      # right: clone() gives the rows their own memory
    out = torch.zeros(1, num_classes, device=labels.device).expand(len(labels), -1).clone()
    return out.scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_scatter_result_kept(labels, num_classes):       # right: the out-of-place result is returned
    out = torch.zeros(len(labels), num_classes, device=labels.device)
    return out.scatter(1, labels.unsqueeze(1), torch.ones(len(labels), 1, device=labels.device))


@pytest.mark.parametrize(
    "answer",
    [one_hot_new_zeros, one_hot_out_of_place_value, one_hot_scatter_add, one_hot_float64, one_hot_range_checked,
     one_hot_expanded_then_cloned, one_hot_scatter_result_kept],
)
def test_one_hot_accepts(answer):
    assert_accepted(check_one_hot, answer)


# --- Exercise 2 · select each label's score ------------------------------------------------------------


def select_scores_wrong_dim(scores, labels):
    return scores.gather(1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_squeeze_all(scores, labels):
    return scores.gather(2, labels.unsqueeze(-1)).squeeze()


def select_scores_detached(scores, labels):
    return scores.detach().gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_items(scores, labels):
    rows = [[scores[b, n, labels[b, n]].item() for n in range(labels.shape[1])] for b in range(labels.shape[0])]
    return torch.tensor(rows, device=scores.device)


def select_scores_index_to_scores(scores, labels):           # .to(scores) makes the index float
    return scores.gather(-1, labels.to(scores).unsqueeze(-1)).squeeze(-1)


def select_scores_all_labels(scores, labels):                # scores[:, :, labels] pairs every row with every label
    return scores[:, :, labels]


def select_scores_unsqueeze_wrong_place(scores, labels):
    return scores.gather(2, labels.unsqueeze(1)).squeeze(1)


def select_scores_unsqueeze_in_place(scores, labels):
    labels.unsqueeze_(-1)
    return scores.gather(-1, labels).squeeze(-1)


def select_scores_best_class(scores, labels):
    return scores.max(dim=-1).values


def select_scores_loop_on_default_device(scores, labels):
    out = torch.zeros(labels.shape)
    for b in range(labels.shape[0]):
        for n in range(labels.shape[1]):
            out[b, n] = scores[b, n, labels[b, n]]
    return out


def select_scores_eye_rows(scores, labels):  # CPU identity rows picked with the labels: CPU data, GPU index
    return (scores * torch.eye(scores.shape[-1])[labels].to(scores)).sum(-1)


def select_scores_argmax(scores, labels):  # the best class's index, not the labelled class's score
    return scores.argmax(-1)


def select_scores_labels_returned(scores, labels):  # an integer result that argmax did not make
    return labels.clone()


def select_scores_one_hot_from_labels(scores, labels):  # as wide as the largest label present, not C
    return (scores * F.one_hot(labels)).sum(-1)


def select_scores_output_requires_grad(scores, labels):     # autograd refuses in-place writes into a leaf
    out = torch.zeros(labels.shape, device=scores.device, requires_grad=True)
    for b in range(labels.shape[0]):
        for n in range(labels.shape[1]):
            out[b, n] = scores[b, n, labels[b, n]]
    return out


def select_scores_shifted_in_place(scores, labels):          # edits the caller's scores
    scores -= scores.max(-1, keepdim=True).values
    return scores.gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_probabilities(scores, labels):           # softmax first: probabilities, not scores
    return scores.softmax(-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_log_probabilities(scores, labels):       # log_softmax first: log-probabilities, not scores
    return F.log_softmax(scores, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_one_based_indexing(scores, labels):      # labels - 1: label 0 reads the last class (-1)
    b = torch.arange(scores.shape[0], device=scores.device).unsqueeze(1)
    n = torch.arange(scores.shape[1], device=scores.device).unsqueeze(0)
    return scores[b, n, labels - 1]


def select_scores_one_based_gather(scores, labels):        # gather refuses the -1 that label 0 becomes
    return scores.gather(-1, (labels - 1).unsqueeze(-1)).squeeze(-1)


def select_scores_centred(scores, labels):                 # something else: the check cannot name it
    picked = scores.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - scores.mean(-1)


def select_scores_detached_for_one_sequence(scores, labels):  # differentiable only when B > 1
    picked = scores.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked.detach() if scores.shape[0] == 1 else picked


SELECT_WRONG = [
    (select_scores_wrong_dim, "gather along dim=2 (or -1)"),
    (select_scores_squeeze_all, "squeeze only the last dim"),
    (select_scores_detached, "keep the result differentiable"),
    (select_scores_items, "keep the result differentiable"),
    (select_scores_index_to_scores, "labels.to(scores) would turn them into floats"),
    (select_scores_all_labels, "give shape (2, 5)"),
    (select_scores_unsqueeze_wrong_place, "gather along dim=2 (or -1)"),
    (select_scores_unsqueeze_in_place, "do not modify labels in place"),
    (select_scores_best_class, "out[b, n] is the largest score at position (b, n), a max over the classes"),
    (select_scores_loop_on_default_device, "create every new tensor on scores.device, as scores.new_zeros(B, N)"),
    (select_scores_eye_rows, "a tensor on the default device (the CPU) was indexed with a tensor on scores.device"),
    (select_scores_argmax, "got torch.int64. argmax gives the index of the best class"),
    (select_scores_labels_returned, "got torch.int64: gather along dim=2 (or -1)"),
    (select_scores_one_hot_from_labels, "F.one_hot(labels) is only labels.max() + 1 wide"),
    (select_scores_output_requires_grad, "the output was made with requires_grad=True"),
    (select_scores_shifted_in_place, "do not modify scores in place"),
    (select_scores_probabilities, "holds softmax(scores)[b, n, labels[b, n]], a probability"),
    (select_scores_log_probabilities, "holds log_softmax(scores)[b, n, labels[b, n]], a log-probability"),
    (select_scores_one_based_indexing, "out[b, n] is scores[b, n, labels[b, n] - 1]"),
    (select_scores_one_based_gather, "an index held -1: the labels are zero-based already"),
    (select_scores_centred, "out[0, 0] is -0.3253 where -0.204 is expected. The check does not recognize the cause"),
    (select_scores_detached_for_one_sequence, "keep the result differentiable for every batch"),
]


@pytest.mark.parametrize(("answer", "hint"), SELECT_WRONG, ids=[a.__name__ for a, _ in SELECT_WRONG])
def test_select_scores_rejects(answer, hint):
    assert_rejected(check_select_scores, answer, hint)


def select_scores_take_along_dim(scores, labels):
    return torch.take_along_dim(scores, labels[..., None], dim=-1)[..., 0]


def select_scores_advanced_indexing(scores, labels):
    b = torch.arange(scores.shape[0], device=scores.device).unsqueeze(1)
    n = torch.arange(scores.shape[1], device=scores.device).unsqueeze(0)
    return scores[b, n, labels]


def select_scores_one_hot_product(scores, labels):
    return (scores * F.one_hot(labels, scores.shape[-1])).sum(-1)


def select_scores_flat_gather(scores, labels):
    c = scores.shape[-1]
    return scores.reshape(-1, c).gather(1, labels.reshape(-1, 1)).reshape(labels.shape)


def select_scores_in_float64(scores, labels):  # right values; the task fixes no dtype
    return (scores * F.one_hot(labels, scores.shape[-1]).double()).sum(-1)


def select_scores_loop_into_new_zeros(scores, labels):  # writing scores into a plain new tensor keeps the gradient
    out = scores.new_zeros(labels.shape)
    for b in range(labels.shape[0]):
        for n in range(labels.shape[1]):
            out[b, n] = scores[b, n, labels[b, n]]
    return out


def select_scores_cpu_rows(scores, labels):                # right: CPU index tensors for data on the device
    rows = torch.arange(scores.shape[0]).unsqueeze(1)
    return scores[rows, torch.arange(scores.shape[1]), labels]


def select_scores_cpu_rows_range_checked(scores, labels):  # right: CPU row numbers, moved by CUDA's indexing
    if labels.min() < 0 or labels.max() >= scores.shape[-1]:
        raise IndexError("a label is out of range")
    rows = torch.arange(scores.shape[0]).unsqueeze(1)
    positions = torch.arange(scores.shape[1])
    return scores[rows, positions, labels]


@pytest.mark.parametrize(
    "answer",
    [select_scores_take_along_dim, select_scores_advanced_indexing, select_scores_one_hot_product,
     select_scores_flat_gather, select_scores_in_float64, select_scores_loop_into_new_zeros,
     select_scores_cpu_rows, select_scores_cpu_rows_range_checked],
)
def test_select_scores_accepts(answer):
    assert_accepted(check_select_scores, answer)


# --- Exercise 3 · segment mean -------------------------------------------------------------------------


def segment_mean_wrong_broadcast(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1)     # divides the columns


def segment_mean_include_self(values, ids, num_segments):
    index = ids.unsqueeze(1).expand_as(values)
    return values.new_zeros(num_segments, values.shape[1]).scatter_reduce(0, index, values, "mean")


def segment_mean_one_count_too_many(values, ids, num_segments):   # + 1 by hand: no scatter_reduce involved
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / (torch.bincount(ids, minlength=num_segments) + 1).unsqueeze(1)


def segment_mean_ids_written_as_values(values, ids, num_segments):  # int64 ids added, not ones_like(ids)
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = values.new_zeros(num_segments).index_add_(0, ids, ids)
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_nan_when_empty(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).unsqueeze(1)


def segment_mean_from_max_id(values, ids, num_segments):
    s = int(ids.max()) + 1
    sums = values.new_zeros(s, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=s).clamp(min=1).unsqueeze(1)


def segment_sum(values, ids, num_segments):
    return values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)


def segment_mean_scatter_overwrites(values, ids, num_segments):
    index = ids.unsqueeze(1).expand_as(values)
    sums = values.new_zeros(num_segments, values.shape[1]).scatter_(0, index, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_floor_division(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums // torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_equal_sized_segments(values, ids, num_segments):     # assumes N divides evenly
    return values.reshape(num_segments, -1, values.shape[1]).mean(1)


def segment_mean_default_device(values, ids, num_segments):
    sums = torch.zeros(num_segments, values.shape[1], dtype=values.dtype).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_default_dtype(values, ids, num_segments):
    sums = torch.zeros(num_segments, values.shape[1], device=values.device).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_ids_in_place(values, ids, num_segments):
    index = ids.unsqueeze_(1).expand_as(values)
    return values.new_zeros(num_segments, values.shape[1]).scatter_reduce(0, index, values, "mean", include_self=False)


def segment_mean_python_lists(values, ids, num_segments):
    rows = []
    for s in range(num_segments):
        members = values[ids == s]
        rows.append(members.mean(0).tolist() if len(members) else [0.0] * values.shape[1])
    return torch.tensor(rows, dtype=values.dtype, device=values.device)


def segment_mean_counts_on_default_device(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = torch.zeros(num_segments, dtype=values.dtype).index_add_(0, ids, torch.ones(len(ids), dtype=values.dtype))
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_from_empty(values, ids, num_segments):    # the empty segment keeps what memory held
    index = ids.unsqueeze(1).expand_as(values)
    out = values.new_empty(num_segments, values.shape[1])
    return out.scatter_reduce(0, index, values, "mean", include_self=False)


def segment_mean_on_cpu(values, ids, num_segments):        # right values, but on the CPU on a GPU machine
    v, i = values.cpu(), ids.cpu()
    sums = v.new_zeros(num_segments, v.shape[1]).index_add_(0, i, v)
    return sums / torch.bincount(i, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_empty_rows_on_default_device(values, ids, num_segments):   # torch.stack of two devices
    rows = []
    for s in range(num_segments):
        members = values[ids == s]
        rows.append(members.mean(0) if len(members) else torch.zeros(values.shape[1], dtype=values.dtype))
    return torch.stack(rows)


def segment_mean_eye_rows(values, ids, num_segments):  # CPU identity rows picked with GPU ids
    member = torch.eye(num_segments)[ids].to(values)       # (N, S)
    return (member.T @ values) / member.sum(0).clamp(min=1).unsqueeze(1)


def segment_mean_bincount_no_minlength(values, ids, num_segments):  # counts stop at the largest id present
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids).clamp(min=1).unsqueeze(1)


def segment_mean_rows_of_values(values, ids, num_segments):  # as many rows as values has, at most
    out = torch.zeros_like(values[:num_segments])
    index = ids.unsqueeze(1).expand_as(values)
    return out.scatter_reduce(0, index, values, "mean", include_self=False)


def segment_mean_float32_counts(values, ids, num_segments):  # counts made from float32 ones
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = values.new_zeros(num_segments).index_add_(0, ids, torch.ones(len(ids), device=values.device))
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_int64_ones_scatter_add(values, ids, num_segments):  # PyTorch refuses: int64 ones, float counts
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = values.new_zeros(num_segments).scatter_add_(0, ids, torch.ones_like(ids))
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_int64_ones_index_add(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = values.new_zeros(num_segments).index_add_(0, ids, torch.ones_like(ids))
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_output_requires_grad(values, ids, num_segments):  # autograd refuses in-place writes into a leaf
    out = values.new_zeros(num_segments, values.shape[1], requires_grad=True)
    out.index_add_(0, ids, values)
    return out / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_values_requires_grad(values, ids, num_segments):  # changes the caller's tensor
    values.requires_grad_()
    sums = values.new_zeros(num_segments, values.shape[1]).index_add(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_sum_dropped(values, ids, num_segments):    # index_add (no underscore): sums stay zero
    sums = values.new_zeros(num_segments, values.shape[1])
    sums.index_add(0, ids, values)
    counts = torch.bincount(ids, minlength=num_segments).clamp(min=1)
    return sums / counts.unsqueeze(1)


def segment_mean_one_based(values, ids, num_segments):      # ids counted from 1
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids - 1, values)
    counts = torch.bincount(ids, minlength=num_segments).clamp(min=1)
    return sums / counts.unsqueeze(1)


def segment_mean_into_expanded_zeros(values, ids, num_segments):
    sums = values.new_zeros(1, values.shape[1]).expand(num_segments, -1)
    sums.index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_counts_plus_one(values, ids, num_segments):   # something else: the check cannot name it
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / (torch.bincount(ids, minlength=num_segments) + 2).unsqueeze(1)


def segment_mean_detached_beyond_rows(values, ids, num_segments):  # differentiable only when S <= N
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    means = sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)
    return means.detach() if num_segments > len(values) else means


SEGMENT_WRONG = [
    (segment_mean_wrong_broadcast, "counts.unsqueeze(1) makes them divide the rows"),
    (segment_mean_include_self, "scatter_reduce(..., 'mean') counts the initial zeros of the output"),
    (segment_mean_one_count_too_many, "divided by one member too many: divide each segment's sum by its number"),
    (segment_mean_nan_when_empty, "its sum is 0 and its count 0, and 0 / 0 is NaN"),
    (segment_mean_from_max_id, "not ids.max() + 1"),
    (segment_sum, "each row holds its segment's sum"),
    (segment_mean_scatter_overwrites, "repeated ids must add up"),
    (segment_mean_floor_division, "divide with /, not //"),
    (segment_mean_equal_sized_segments, "need not be contiguous nor of equal size"),
    (segment_mean_default_device, "create every new tensor on values.device, as values.new_zeros(num_segments, D)"),
    (segment_mean_default_dtype, "values' dtype"),
    (segment_mean_ids_in_place, "do not modify segment_ids in place"),
    (segment_mean_python_lists, "keep the result differentiable"),
    (segment_mean_counts_on_default_device, "create every new tensor on values.device"),
    (segment_mean_from_empty, "your function called new_empty(), whose new memory holds whatever was there"),
    (segment_mean_on_cpu, "keep the work on values.device"),
    (segment_mean_empty_rows_on_default_device, "create every new tensor on values.device"),
    (segment_mean_eye_rows, "indexed with a tensor on values.device"),
    (segment_mean_bincount_no_minlength, "minlength=num_segments"),
    (segment_mean_rows_of_values, "(there may be more segments than rows); got (5, 2)"),
    (segment_mean_float32_counts, "anything added into it needs values' dtype too"),
    (segment_mean_int64_ones_scatter_add, "the values added must have the output's dtype"),
    (segment_mean_ids_written_as_values, "scatter_add_ and index_add_ refused values of another dtype"),
    (segment_mean_int64_ones_index_add, "the values added must have the output's dtype"),
    (segment_mean_output_requires_grad, "the output was made with requires_grad=True"),
    (segment_mean_values_requires_grad, "do not call values.requires_grad_()"),
    (segment_mean_sum_dropped, "your function called index_add() (no trailing underscore), which returns a new tensor"),
    (segment_mean_one_based, "an index held -1: the segment ids are zero-based already"),
    (segment_mean_into_expanded_zeros, "the tensor written into is an expanded view"),
    (segment_mean_counts_plus_one, "out[0, 0] is 1 where 1.667 is expected. The check does not recognize the cause"),
    (segment_mean_detached_beyond_rows, "differentiable with respect to values for every number of segments"),
]


@pytest.mark.parametrize(("answer", "hint"), SEGMENT_WRONG, ids=[a.__name__ for a, _ in SEGMENT_WRONG])
def test_segment_mean_rejects(answer, hint):
    assert_rejected(check_segment_mean, answer, hint)


def test_segment_mean_data_has_uneven_segments_and_fractional_means():
    # What the floor-division, equal-size and overwrite entries rely on.
    from utils.exercises.ch06 import SEGMENT_IDS, SEGMENT_VALUES, _segment_mean_reference

    assert len(SEGMENT_IDS) % 4 != 0 and torch.bincount(SEGMENT_IDS, minlength=4).tolist() == [3, 1, 3, 0]
    means = _segment_mean_reference(SEGMENT_VALUES, SEGMENT_IDS, 4)
    assert not torch.equal(means, means.floor())
    for s in (0, 2):
        members = SEGMENT_VALUES[SEGMENT_IDS == s]
        assert not any(torch.allclose(row, members.sum(0)) for row in members)


def segment_mean_index_add_bincount(values, ids, num_segments):
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = torch.bincount(ids, minlength=num_segments).clamp(min=1)
    return sums / counts.unsqueeze(1).to(values.dtype)


def segment_mean_two_scatter_adds(values, ids, num_segments):
    index = ids[:, None].expand(-1, values.shape[1])
    sums = values.new_zeros((num_segments, values.shape[1])).scatter_add(0, index, values)
    counts = values.new_zeros(num_segments).scatter_add(0, ids, torch.ones_like(ids, dtype=values.dtype))
    return sums / counts.clamp(min=1)[:, None]


def segment_mean_one_hot_matmul(values, ids, num_segments):
    member = F.one_hot(ids, num_segments).T.to(values.dtype)            # (S, N)
    return member @ values / member.sum(1, keepdim=True).clamp(min=1)


def segment_mean_index_reduce(values, ids, num_segments):
    out = values.new_zeros(num_segments, values.shape[1])
    return out.index_reduce_(0, ids, values, "mean", include_self=False)


def segment_mean_moved_to_device(values, ids, num_segments):     # made on the CPU, then moved: fine on a GPU
    sums = torch.zeros(num_segments, values.shape[1], dtype=values.dtype).to(values.device)
    counts = torch.zeros(num_segments, dtype=values.dtype).to(values.device)
    sums.index_add_(0, ids, values)
    counts.index_add_(0, ids, torch.ones(len(ids), dtype=values.dtype).to(values.device))
    return sums / counts.clamp(min=1).unsqueeze(1)


def segment_mean_moved_to_device_bincount(values, ids, num_segments):  # bincount has no meta kernel
    sums = torch.zeros(num_segments, values.shape[1], dtype=values.dtype).to(values.device)
    sums = sums.index_add(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_masks(values, ids, num_segments):                # boolean masks have no meta kernel either
    rows = [values[ids == s].mean(0) if (ids == s).any() else values.new_zeros(values.shape[1])
            for s in range(num_segments)]
    return torch.stack(rows)


def segment_mean_counts_at_least_a_number(values, ids, num_segments):  # a 0-dim CPU tensor: fine on a GPU
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = torch.maximum(torch.bincount(ids, minlength=num_segments), torch.tensor(1))
    return sums / counts.unsqueeze(1)


def segment_mean_expanded_then_cloned(values, ids, num_segments):   # right
    sums = values.new_zeros(1, values.shape[1]).expand(num_segments, -1).clone().index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_masked_fill_number(values, ids, num_segments):  # masked_fill takes a 0-dim CPU value on a GPU
    sums = values.new_zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    counts = values.new_zeros(num_segments).index_add_(0, ids, values.new_ones(len(ids)))
    means = sums / counts.unsqueeze(1)
    return means.masked_fill(counts.unsqueeze(1) == 0, torch.tensor(0.0))


@pytest.mark.parametrize(
    "answer",
    [segment_mean_index_add_bincount, segment_mean_two_scatter_adds, segment_mean_one_hot_matmul,
     segment_mean_index_reduce, segment_mean_moved_to_device, segment_mean_moved_to_device_bincount,
     segment_mean_masks, segment_mean_counts_at_least_a_number, segment_mean_expanded_then_cloned,
     segment_mean_masked_fill_number],
)
def test_segment_mean_accepts(answer):
    assert_accepted(check_segment_mean, answer)


# --- Exercise 4 · count tokens per row -------------------------------------------------------------------


def count_tokens_plus_equals(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    rows = torch.arange(tokens.shape[0], device=tokens.device).unsqueeze(1)
    out[rows, tokens] += 1
    return out


def count_tokens_scatter(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    return out.scatter_(1, tokens, 1)


def count_tokens_index_put_no_accumulate(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    rows = torch.arange(tokens.shape[0], device=tokens.device).unsqueeze(1).expand_as(tokens)
    return out.index_put_((rows, tokens), torch.ones_like(tokens))


def count_tokens_wrong_dim(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    return out.scatter_add_(0, tokens, torch.ones_like(tokens))


def count_tokens_float(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, device=tokens.device)
    return out.scatter_add_(1, tokens, torch.ones(tokens.shape, device=tokens.device))


def count_tokens_float_ones(tokens, vocab_size):            # PyTorch refuses: src and self dtypes differ
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    return out.scatter_add_(1, tokens, torch.ones(tokens.shape, device=tokens.device))


def count_tokens_from_max(tokens, vocab_size):
    return F.one_hot(tokens).sum(1)


def count_tokens_whole_batch(tokens, vocab_size):
    return torch.bincount(tokens.flatten(), minlength=vocab_size)


def count_tokens_default_device(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long)
    return out.scatter_add_(1, tokens, torch.ones_like(tokens))


def count_tokens_from_empty(tokens, vocab_size):            # adds to whatever memory held
    return tokens.new_empty(tokens.shape[0], vocab_size).scatter_add_(1, tokens, torch.ones_like(tokens))


def count_tokens_minus_one_for_absent(tokens, vocab_size):   # out of range without new memory: -1 marks "absent"
    out = tokens.new_zeros(tokens.shape[0], vocab_size).scatter_add_(1, tokens, torch.ones_like(tokens))
    return out.masked_fill(out == 0, -1)


def count_tokens_one_hot_on_cpu(tokens, vocab_size):        # right counts, on the CPU on a GPU machine
    return F.one_hot(tokens.cpu(), vocab_size).sum(1)


def count_tokens_numpy(tokens, vocab_size):
    rows = tokens.numpy()
    out = np.zeros((rows.shape[0], vocab_size), dtype=np.int64)
    np.add.at(out, (np.arange(rows.shape[0])[:, None], rows), 1)
    return torch.from_numpy(out)


def count_tokens_bincount_on_cpu(tokens, vocab_size):       # bincount has no meta kernel: the fallback sees .cpu()
    b = tokens.shape[0]
    shifted = tokens + torch.arange(b, device=tokens.device).unsqueeze(1) * vocab_size
    return torch.bincount(shifted.flatten(), minlength=b * vocab_size).view(b, vocab_size).cpu()


def count_tokens_ones_on_default_device(tokens, vocab_size):   # on a GPU: src on the CPU, the rest on the GPU
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    return out.scatter_add_(1, tokens, torch.ones(tokens.shape, dtype=torch.long))


def count_tokens_offsets_on_default_device(tokens, vocab_size):
    b = tokens.shape[0]
    shifted = tokens + torch.arange(b).unsqueeze(1) * vocab_size
    return torch.bincount(shifted.flatten(), minlength=b * vocab_size).view(b, vocab_size)


def count_tokens_offsets_in_place(tokens, vocab_size):
    b = tokens.shape[0]
    tokens += torch.arange(b, device=tokens.device).unsqueeze(1) * vocab_size
    return torch.bincount(tokens.flatten(), minlength=b * vocab_size).view(b, vocab_size)


def count_tokens_eye_rows(tokens, vocab_size):  # CPU identity rows picked with GPU tokens, moved at the end
    return torch.eye(vocab_size)[tokens].sum(1).to(tokens)


def count_tokens_bincount_rows_no_minlength(tokens, vocab_size):  # rows of different lengths
    return torch.stack([torch.bincount(row) for row in tokens])


def count_tokens_range_checked_then_moved(tokens, vocab_size):  # as one_hot_range_checked_then_moved
    assert tokens.max() < vocab_size, "token out of range"
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long)
    return out.scatter_add_(1, tokens, torch.ones_like(tokens)).to(tokens.device)


def count_tokens_scatter_add_dropped(tokens, vocab_size):   # scatter_add (no underscore): out stays zero
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    out.scatter_add(1, tokens, torch.ones_like(tokens))
    return out


def count_tokens_one_based(tokens, vocab_size):
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    return out.scatter_add_(1, tokens - 1, torch.ones_like(tokens))


def count_tokens_one_based_indexing(tokens, vocab_size):    # tokens - 1: token 0 counts in the last column
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)
    return out.index_put_((rows, tokens - 1), torch.ones_like(tokens), accumulate=True)


def count_tokens_into_expanded_zeros(tokens, vocab_size):   # PyTorch refuses to scatter into an expanded view
    out = tokens.new_zeros(1, vocab_size).expand(tokens.shape[0], -1)
    return out.scatter_add_(1, tokens, torch.ones_like(tokens))


def count_tokens_index_put_into_expanded(tokens, vocab_size):   # runs (a deprecation warning): rows share memory
    out = tokens.new_zeros(1, vocab_size).expand(tokens.shape[0], -1)
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)
    return out.index_put_((rows, tokens), torch.ones_like(tokens), accumulate=True)


def count_tokens_doubled(tokens, vocab_size):               # something else: the check cannot name it
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    return out.scatter_add_(1, tokens, torch.full_like(tokens, 2))


def count_tokens_index_put_tokens_only(tokens, vocab_size):  # one index tensor for a 2-D output
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    return out.index_put_((tokens,), torch.ones_like(tokens), accumulate=True)


COUNT_WRONG = [
    (count_tokens_plus_equals, "counted once: an indexed assignment such as out[rows, tokens] += 1 writes each"),
    (count_tokens_scatter, "counted once: scatter_ writes each position once"),
    (count_tokens_index_put_no_accumulate, "counted once: index_put_ without accumulate=True writes each"),
    (count_tokens_wrong_dim, "not dim 0"),
    (count_tokens_float, "return int64"),
    (count_tokens_float_ones, "torch.ones_like(tokens)"),
    (count_tokens_from_max, "got (6, 4), as wide as tokens.max() + 1"),
    (count_tokens_whole_batch, "each row keeps its own counts"),
    (count_tokens_default_device, "create every new tensor on tokens.device, as tokens.new_zeros(B, vocab_size)"),
    (count_tokens_offsets_in_place, "do not modify tokens in place"),
    (count_tokens_from_empty, "your function called new_empty(), whose new memory holds whatever was there"),
    (count_tokens_minus_one_for_absent, "the counts must lie between 0 and the number of tokens, 24; got values "
                                        "from -1 to 4"),
    (count_tokens_one_hot_on_cpu, "keep the work on tokens.device"),
    (count_tokens_numpy, "keep the work on tokens.device"),
    (count_tokens_bincount_on_cpu, "keep the work on tokens.device"),
    (count_tokens_ones_on_default_device, "Expected all tensors to be on the same device"),
    (count_tokens_offsets_on_default_device, "create every new tensor on tokens.device"),
    (count_tokens_eye_rows, "indexed with a tensor on tokens.device"),
    (count_tokens_bincount_rows_no_minlength, "minlength=vocab_size"),
    (count_tokens_range_checked_then_moved, "scatter_add_() got tensors on tokens.device and on the default device"),
    (count_tokens_scatter_add_dropped, "called scatter_add() (no trailing underscore), which returns a new tensor"),
    (count_tokens_one_based, "an index held -1: the tokens are zero-based already"),
    (count_tokens_one_based_indexing, "out[b, v] counts token v + 1, and the last column counts token 0"),
    (count_tokens_into_expanded_zeros, "the tensor written into is an expanded view"),
    (count_tokens_index_put_into_expanded, "the result is an expanded view (stride 0 along dim 0)"),
    (count_tokens_doubled, "out[0, 1] is 2 where 1 is expected. The check does not recognize the cause"),
    (count_tokens_index_put_tokens_only, "index_put_ takes one index tensor per dimension of the output"),
]


@pytest.mark.parametrize(("answer", "hint"), COUNT_WRONG, ids=[a.__name__ for a, _ in COUNT_WRONG])
def test_count_tokens_rejects(answer, hint):
    assert_rejected(check_count_tokens, answer, hint)


def count_tokens_index_put_accumulate(tokens, vocab_size):
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)
    return out.index_put_((rows, tokens), torch.ones_like(tokens), accumulate=True)


def count_tokens_one_hot_sum(tokens, vocab_size):
    return F.one_hot(tokens, vocab_size).sum(dim=1)


def count_tokens_bincount_offsets(tokens, vocab_size):
    b = tokens.shape[0]
    shifted = tokens + torch.arange(b, device=tokens.device).unsqueeze(1) * vocab_size
    return torch.bincount(shifted.flatten(), minlength=b * vocab_size).view(b, vocab_size)


def count_tokens_scatter_reduce_sum(tokens, vocab_size):
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=tokens.dtype, device=tokens.device)
    return out.scatter_reduce(1, tokens, torch.ones_like(tokens), "sum")


def count_tokens_rows_on_default_device(tokens, vocab_size):  # CUDA moves index tensors to the data's device
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long, device=tokens.device)
    rows = torch.arange(tokens.shape[0]).unsqueeze(1).expand_as(tokens)
    return out.index_put_((rows, tokens), torch.ones_like(tokens), accumulate=True)


def count_tokens_moved_to_device(tokens, vocab_size):        # made on the CPU, then moved: fine on a GPU
    out = torch.zeros(tokens.shape[0], vocab_size, dtype=torch.long).to(tokens.device)
    return out.scatter_add_(1, tokens, torch.ones_like(tokens))


def count_tokens_index_put_number(tokens, vocab_size):       # a 0-dim CPU value is a number on any device
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    rows = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(tokens)
    return out.index_put_((rows, tokens), torch.tensor(1), accumulate=True)


def count_tokens_python_lists(tokens, vocab_size):           # slow, but the result is on tokens.device
    rows = tokens.tolist()
    return torch.tensor([[row.count(v) for v in range(vocab_size)] for row in rows], device=tokens.device)


def count_tokens_range_checked_cpu_rows(tokens, vocab_size):   # right: range check (fallback) + CPU row index
    if tokens.max() >= vocab_size:
        raise IndexError("a token is out of range")
    out = tokens.new_zeros(tokens.shape[0], vocab_size)
    rows = torch.arange(tokens.shape[0]).unsqueeze(1).expand_as(tokens)
    return out.index_put_((rows, tokens), torch.ones_like(tokens), accumulate=True)


@pytest.mark.parametrize(
    "answer",
    [count_tokens_index_put_accumulate, count_tokens_one_hot_sum, count_tokens_bincount_offsets,
     count_tokens_scatter_reduce_sum, count_tokens_rows_on_default_device, count_tokens_moved_to_device,
     count_tokens_index_put_number, count_tokens_python_lists, count_tokens_range_checked_cpu_rows],
)
def test_count_tokens_accepts(answer):
    assert_accepted(check_count_tokens, answer)


# --- every check ------------------------------------------------------------------------------------------

CHECKS = [check_one_hot, check_select_scores, check_segment_mean, check_count_tokens]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_stub_is_not_attempted(check, capsys):
    def stub(*args):
        raise NotImplementedError(STUB_MESSAGE)

    assert outcome(check, stub) == ("not attempted", "")
    check(stub)
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_other_errors_become_hints_not_not_attempted(check):
    def unfinished(*args):
        raise NotImplementedError                       # not the stub's message: the learner's own

    def broken(*args):
        return torch.ones(2, 3) @ torch.ones(2, 3)      # PyTorch refuses the shapes

    for answer in (unfinished, broken):
        verdict, hint = outcome(check, answer)
        assert verdict == "failed" and "raised" in hint and "Likely cause" in hint


@pytest.mark.parametrize(
    ("check", "answer"),
    [(check_one_hot, one_hot_from_empty), (check_segment_mean, segment_mean_from_empty),
     (check_count_tokens, count_tokens_from_empty)],
    ids=lambda a: a.__name__,
)
def test_answers_built_on_uninitialized_memory_fail_every_time(check, answer):
    # Without the deterministic fill they passed a few runs in a hundred, when the memory happened to hold 0.
    assert {outcome(check, answer)[0] for _ in range(20)} == {"failed"}


@pytest.mark.parametrize(("enabled", "warn_only"), [(False, False), (True, False), (True, True)])
def test_checks_print_nothing_and_restore_the_deterministic_setting(enabled, warn_only, capsys):
    import warnings

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for check, answer in [(check_segment_mean, segment_mean_index_reduce),
                                  (check_count_tokens, count_tokens_bincount_offsets)]:
                assert outcome(check, answer) == ("passed", "")
        assert torch.are_deterministic_algorithms_enabled() == enabled
        assert torch.is_deterministic_algorithms_warn_only_enabled() == warn_only
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    assert caught == [] and capsys.readouterr() == ("", "")


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_returning_something_else_than_a_tensor_is_a_hint(check):
    assert_rejected(check, lambda *args: [[0.0]], "return a tensor, got list")
