"""Chapter 07's checks accept the reference answers and reject the plausible wrong ones."""

import pytest
import torch

from utils import ExerciseFailed
from utils.exercises.ch07 import check_one_hot, check_segment_mean, check_select_scores

# --- Exercise 1 · one-hot ----------------------------------------------------------------------------


def one_hot(labels, num_classes):
    return torch.zeros(len(labels), num_classes).scatter_(1, labels.unsqueeze(1), 1.0)


def one_hot_wrong_dim(labels, num_classes):
    return torch.zeros(len(labels), num_classes).scatter_(0, labels.unsqueeze(1), 1.0)


def one_hot_from_max_label(labels, num_classes):
    return one_hot(labels, int(labels.max()) + 1)


def one_hot_integer(labels, num_classes):
    return torch.zeros(len(labels), num_classes, dtype=torch.long).scatter_(1, labels.unsqueeze(1), 1)


def one_hot_in_place_on_labels(labels, num_classes):
    out = one_hot(labels, num_classes)
    labels.zero_()
    return out


def one_hot_unsqueezed_wrong(labels, num_classes):     # index with one dimension too few: PyTorch refuses
    return torch.zeros(len(labels), num_classes).scatter_(1, labels, 1.0)


def test_one_hot_accepts_reference(capsys):
    check_one_hot(one_hot)
    assert "passed" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong",
    [one_hot_wrong_dim, one_hot_from_max_label, one_hot_integer, one_hot_in_place_on_labels, one_hot_unsqueezed_wrong],
)
def test_one_hot_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_one_hot(wrong)


def test_one_hot_wrong_dim_runs_silently_and_gets_the_dim_hint():
    # The check's data must let the wrong dim run, so the learner sees the hint about dim, not a crash.
    labels = torch.tensor([2, 0, 3, 1, 3, 0, 2])
    assert one_hot_wrong_dim(labels, 4).shape == (7, 4)
    with pytest.raises(ExerciseFailed, match="dim=1"):
        check_one_hot(one_hot_wrong_dim)


def test_a_crash_becomes_a_failed_check():
    with pytest.raises(ExerciseFailed, match="raised RuntimeError"):
        check_one_hot(one_hot_unsqueezed_wrong)


# --- Exercise 2 · select each label's score ------------------------------------------------------------


def select_scores(scores, labels):
    return scores.gather(2, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_wrong_dim(scores, labels):
    return scores.gather(1, labels.unsqueeze(-1)).squeeze(-1)


def select_scores_squeeze_all(scores, labels):
    return scores.gather(2, labels.unsqueeze(-1)).squeeze()


def select_scores_detached(scores, labels):
    return select_scores(scores.detach(), labels)


def select_scores_advanced_indexing(scores, labels):
    b = torch.arange(scores.shape[0]).unsqueeze(1)
    n = torch.arange(scores.shape[1]).unsqueeze(0)
    return scores[b, n, labels]


def test_select_scores_accepts_reference_and_advanced_indexing(capsys):
    check_select_scores(select_scores)
    check_select_scores(select_scores_advanced_indexing)
    assert capsys.readouterr().out.count("passed") == 2


@pytest.mark.parametrize("wrong", [select_scores_wrong_dim, select_scores_squeeze_all, select_scores_detached])
def test_select_scores_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_select_scores(wrong)


def test_select_scores_wrong_dim_gets_the_dim_hint():
    with pytest.raises(ExerciseFailed, match="dim=2"):
        check_select_scores(select_scores_wrong_dim)


# --- Exercise 3 · segment mean -------------------------------------------------------------------------


def segment_mean(values, ids, num_segments):
    index = ids.unsqueeze(1).expand_as(values)
    out = torch.zeros(num_segments, values.shape[1], dtype=values.dtype)
    return out.scatter_reduce(0, index, values, "mean", include_self=False)


def segment_mean_index_add(values, ids, num_segments):
    sums = torch.zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1).unsqueeze(1)


def segment_mean_wrong_dim(values, ids, num_segments):
    sums = torch.zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).clamp(min=1)     # divides the columns


def segment_mean_include_self(values, ids, num_segments):
    index = ids.unsqueeze(1).expand_as(values)
    return torch.zeros(num_segments, values.shape[1]).scatter_reduce(0, index, values, "mean")


def segment_mean_nan_when_empty(values, ids, num_segments):
    sums = torch.zeros(num_segments, values.shape[1]).index_add_(0, ids, values)
    return sums / torch.bincount(ids, minlength=num_segments).unsqueeze(1)


def segment_mean_from_max_id(values, ids, num_segments):
    return segment_mean(values, ids, int(ids.max()) + 1)


def segment_sum(values, ids, num_segments):
    return torch.zeros(num_segments, values.shape[1]).index_add_(0, ids, values)


def test_segment_mean_accepts_references(capsys):
    check_segment_mean(segment_mean)
    check_segment_mean(segment_mean_index_add)
    assert capsys.readouterr().out.count("passed") == 2


@pytest.mark.parametrize(
    "wrong",
    [segment_mean_wrong_dim, segment_mean_include_self, segment_mean_nan_when_empty, segment_mean_from_max_id,
     segment_sum],
)
def test_segment_mean_rejects(wrong):
    with pytest.raises(ExerciseFailed):
        check_segment_mean(wrong)


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [(segment_mean_wrong_dim, "dim 0"), (segment_mean_include_self, "include_self=False"),
     (segment_mean_nan_when_empty, "NaN")],
)
def test_segment_mean_hints_name_the_mistake(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check_segment_mean(wrong)


@pytest.mark.parametrize("check", [check_one_hot, check_select_scores, check_segment_mean])
def test_stubs_are_not_attempted(check, capsys):
    def stub(*args):
        raise NotImplementedError

    check(stub)
    assert "not attempted yet" in capsys.readouterr().out
