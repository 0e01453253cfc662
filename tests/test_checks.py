"""The exercise-check mechanism every chapter uses: verdicts, hints for learners' errors, rejection()."""

import pytest
import torch
from torch import nn

from utils import ExerciseFailed, exercise, expect, learner_code, outcome, rejection
from utils.checks import STUB_MESSAGE


@exercise("Ex · positive")
def check_positive(fn):
    with learner_code("calling your function with 2", "it must take one number and return one"):
        value = fn(2)
    expect(value > 0, "return a positive number")


@exercise("Ex · a block")
def check_block(cls):
    with learner_code("building your block"):
        block = cls()
    with learner_code("calling your block on a (1, 2) input"):
        block(torch.ones(1, 2))


def stub(x):
    raise NotImplementedError(STUB_MESSAGE)


def test_pass_prints_and_returns_none(capsys):
    assert check_positive(lambda x: x) is None
    assert capsys.readouterr().out == "✓ Ex · positive: passed.\n"
    assert outcome(check_positive, lambda x: x) == ("passed", "")


def test_only_the_stub_is_not_attempted(capsys):
    check_positive(stub)
    assert capsys.readouterr().out.startswith("… Ex · positive: not attempted yet")
    assert outcome(check_positive, stub) == ("not attempted", "")


def test_a_learners_own_not_implemented_error_is_a_hint():
    def half_done(x):
        raise NotImplementedError("negative numbers")

    verdict, hint = outcome(check_positive, half_done)
    assert verdict == "failed"
    assert "calling your function with 2 raised NotImplementedError: negative numbers" in hint


def test_failure_names_exercise_and_hint():
    with pytest.raises(ExerciseFailed, match=r"Ex · positive: not yet\. return a positive number"):
        check_positive(lambda x: -x)


def test_a_failed_expect_inside_learner_code_keeps_its_hint():
    @exercise("Ex · inside")
    def check_inside(fn):
        with learner_code("calling your function with 2", "it must take one number and return one"):
            expect(fn(2) > 0, "return a positive number")

    assert outcome(check_inside, lambda x: -x) == ("failed", "Ex · inside: not yet. return a positive number")


def test_errors_in_an_answer_become_hints_that_quote_them():
    verdict, hint = outcome(check_positive, lambda x: 1 / 0)
    assert verdict == "failed"
    assert hint == (
        "Ex · positive: not yet. calling your function with 2 raised ZeroDivisionError: division by zero. "
        "Likely cause: it must take one number and return one."
    )
    with pytest.raises(ExerciseFailed):  # what the learner sees: a hint, not a ZeroDivisionError
        check_positive(lambda x: 1 / 0)


def test_an_error_outside_learner_code_still_becomes_a_hint():
    @exercise("Ex · bare")
    def check_bare(fn):
        fn()

    verdict, hint = outcome(check_bare, lambda: [][1])
    assert verdict == "failed" and "your answer raised IndexError" in hint


def test_calling_a_module_list_is_explained():
    class CallsTheList(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2)])

        def forward(self, x):
            return self.layers(x)

    verdict, hint = outcome(check_block, CallsTheList)
    assert verdict == "failed", "PyTorch's NotImplementedError is not the stub's"
    assert "an nn.ModuleList was called like a module" in hint and "loop over it" in hint


def test_a_misspelt_forward_is_explained():
    class Misspelt(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def foward(self, x):
            return self.layer(x)

    verdict, hint = outcome(check_block, Misspelt)
    assert verdict == "failed"
    assert "the module Misspelt has no forward method: check the spelling" in hint


def test_rejection_returns_the_hint_and_refuses_accepted_or_unattempted_answers():
    assert "return a positive number" in rejection(check_positive, lambda x: -x)
    with pytest.raises(AssertionError, match="accepted a wrong answer"):
        rejection(check_positive, lambda x: x)
    with pytest.raises(AssertionError, match="not attempted"):
        rejection(check_positive, stub)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="hint"):
        expect(True, "")
    with pytest.raises(TypeError, match="title"):
        exercise("")
    with pytest.raises(TypeError, match="what"):
        with learner_code(""):
            pass
    with pytest.raises(TypeError, match="check must be a function decorated with @exercise"):
        outcome(print)
    assert issubclass(ExerciseFailed, AssertionError)


def test_a_check_that_draws_random_numbers_leaves_the_notebooks_numbers_alone():
    import torch

    from utils.checks import keeps_global_rng

    @keeps_global_rng
    def draws(n):
        return torch.rand(n)

    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert draws(5).shape == (5,) and draws.__name__ == "draws"
    assert torch.equal(torch.rand(3), expected), "the check moved the global generator"


def test_an_exercises_own_causes_come_before_the_shared_ones_and_the_hint():
    """Chapter 06's outputs made with requires_grad=True hit the message the shared causes explain for parameters."""

    @exercise("Ex · own causes")
    def check_filled(fn):
        with learner_code("calling your function", "the general hint",
                          {"a leaf Variable": "the output was made with requires_grad=True", "never": "unused"}):
            fn()

    def fills_a_leaf():
        torch.zeros(3, requires_grad=True).fill_(1.0)

    def fails_otherwise():
        raise ValueError("something else")

    verdict, hint = outcome(check_filled, fills_a_leaf)
    assert verdict == "failed" and hint.endswith("Likely cause: the output was made with requires_grad=True."), hint
    assert "a parameter was edited in place" in outcome(check_positive, lambda x: fills_a_leaf())[1]  # shared one
    assert outcome(check_filled, fails_otherwise)[1].endswith("Likely cause: the general hint."), hint


def test_a_failing_check_names_its_own_file_and_line():
    """A learner who opens the check finds the property that failed: the message names the line of the
    failed expect (or of the learner_code block whose call raised), not a line of utils/checks.py."""
    import inspect

    lines, first = inspect.getsourcelines(check_positive)
    expect_line = first + next(i for i, line in enumerate(lines) if "expect(" in line)
    with pytest.raises(ExerciseFailed) as failed:
        check_positive(lambda x: -x)
    where = f"tests/test_checks.py, line {expect_line}"
    assert failed.value.where == where
    assert str(failed.value).endswith(f"(The check that failed: {where}.)")

    lines, first = inspect.getsourcelines(check_block)
    call_line = first + next(i for i, line in enumerate(lines) if "calling your block" in line)
    with pytest.raises(ExerciseFailed) as failed:
        check_block(lambda: torch.nn.Linear(3, 1))  # the call raises: wrong input size
    assert failed.value.where == f"tests/test_checks.py, line {call_line}"
    # the hints the catalogues assert are unchanged: no line numbers in them
    assert outcome(check_positive, lambda x: -x) == ("failed", "Ex · positive: not yet. return a positive number")


def test_a_failed_check_shows_its_verdict_without_frames():
    """In a notebook a failed check shows the verdict, the hint and the check's line (IPython's
    ``_render_traceback_``), not a traceback whose last frame is in utils/checks.py."""
    import inspect

    lines, first = inspect.getsourcelines(check_positive)
    expect_line = first + next(i for i, line in enumerate(lines) if "expect(" in line)
    with pytest.raises(ExerciseFailed) as failed:
        check_positive(lambda x: -x)
    assert failed.value._render_traceback_() == [
        "Ex · positive: not yet. return a positive number",
        f"(The check that failed: tests/test_checks.py, line {expect_line}.)",
    ]
    with pytest.raises(ExerciseFailed) as failed:  # an expect called on its own: its line is added
        expect(False, "the hint")
    shown = failed.value._render_traceback_()
    assert shown[0] == "the hint" and shown[1].startswith("(The check that failed: tests/test_checks.py, line "), shown
    assert ExerciseFailed("no line")._render_traceback_() == ["no line"]


def test_in_a_kernel_a_failed_check_is_a_verdict_and_run_all_stops_there(tmp_path):
    """A real kernel, as Jupyter runs a notebook (nbclient): the error output of a failed check holds the verdict
    and the check's line and no frame, and the cells after it do not run."""
    import os
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('from utils import exercise, expect\n\n'
                                  '@exercise("Ex · probe")\n'
                                  'def check_two(x):\n'
                                  '    expect(x == 2, "x must be 2")\n'),
        nbformat.v4.new_code_cell("check_two(3)"),
        nbformat.v4.new_code_cell("print('after the check')"),
    ])
    with tempfile.TemporaryDirectory(prefix="kernel-") as sockets:  # a short path: a socket's is at most 104 bytes
        km = KernelManager(kernel_name="python3", transport="ipc", ip=os.path.join(sockets, "k"))  # no TCP ports
        client = NotebookClient(nb, km=km, timeout=60, resources={"metadata": {"path": str(tmp_path)}})
        with pytest.raises(CellExecutionError):
            client.execute()
    (error,) = nb.cells[1].outputs
    assert error.output_type == "error" and error.ename == "ExerciseFailed", error
    assert error.traceback[0] == "Ex · probe: not yet. x must be 2", error.traceback
    assert len(error.traceback) == 2 and error.traceback[1].startswith("(The check that failed: "), error.traceback
    assert error.traceback[1].endswith(", line 5.)"), error.traceback  # the expect's line in the check's cell
    assert not any("Traceback" in line or "checks.py" in line for line in error.traceback), error.traceback
    assert nb.cells[2].outputs == [] and nb.cells[2].execution_count is None  # Run All stopped at the check


def test_same_device_refuses_what_cuda_refuses_and_lets_through_what_it_accepts():
    """Meta inputs stand in for GPU inputs and the CPU for the default device (chapters 06 and 07)."""
    from utils.exercises.cuda_rules import same_device

    data = torch.zeros(3, 2, device="meta")
    index = torch.tensor([[0, 1], [2, 0]])
    with same_device("x"):
        assert (data * torch.tensor(2.0)).is_meta  # a CPU number: CUDA accepts it
        assert data[torch.tensor([2, 0])].shape == (2, 2)  # a CPU index for data elsewhere: CUDA moves it
        assert torch.ones(2).to(data.device).is_meta  # conversions move data on purpose
        with pytest.raises(ExerciseFailed, match=r"scatter_add_\(\) got tensors on x.device and on the default"):
            data.scatter_add_(0, index.to("meta"), torch.ones(2, 2))  # the meta kernel alone would run it
        with pytest.raises(ExerciseFailed, match="indexed with a tensor on x.device"):
            torch.zeros(3)[torch.tensor([0], device="meta")]  # CPU data, index elsewhere: CUDA refuses
    with same_device("x", hint="the chapter's own advice"), pytest.raises(ExerciseFailed) as refused:
        data + torch.ones(3, 2)
    assert str(refused.value).endswith(": the chapter's own advice")
    with same_device("x"), pytest.raises(ExerciseFailed) as refused:
        data + torch.ones(3, 2)
    assert "x.new_zeros(...)" in str(refused.value)
    assert (data + torch.ones(3, 2, device="meta")).is_meta  # outside the block: nothing is checked
    with pytest.raises(TypeError):
        same_device("")


def test_the_stand_ins_move_index_tensors_to_the_data_as_cuda_does():
    """CUDA moves a CPU index tensor to the data in advanced indexing (ATen's make_info), and a 0-dim CPU value
    in index_put_; gather and scatter take no index on another device. The stand-ins do the same."""
    from utils.exercises.cuda_rules import default_device_elsewhere, same_device

    data = torch.zeros(3, 4, device="meta")
    with same_device("x"):
        assert data[torch.tensor([0, 2]), torch.tensor([1, 1])].is_meta          # CPU indices, meta data
        data[torch.tensor([0, 2])] = torch.tensor(1.0)                             # a CPU number written
        data.index_put_((torch.tensor([0, 2]),), torch.ones(4, device="meta"), accumulate=True)
        with pytest.raises(ExerciseFailed, match="gather"):
            data.gather(1, torch.tensor([[0], [1], [2]]))                          # CUDA refuses a CPU index here
        # CUDA reads a 0-dim CPU value of masked_fill as a number; the meta kernel alone refuses it
        assert data.masked_fill(data > 0, torch.tensor(0.0)).is_meta
    cpu = torch.arange(12.0).reshape(3, 4)
    for mode in (lambda: default_device_elsewhere("meta"), lambda: same_device("x", host="meta")):
        with default_device_elsewhere("meta"), mode():
            index = torch.arange(2)                                                # lands on meta, the "host"
            assert index.is_meta
            # torch alone would read the meta index as if it held numbers (whatever its memory held); here it
            # is moved to the data, as on CUDA, and meta has no values to move
            with pytest.raises(NotImplementedError, match="copy out of meta"):
                cpu[index]
            assert torch.equal(cpu[0] * torch.tensor(2.0), cpu[0] * 2)              # a number stays on the CPU
