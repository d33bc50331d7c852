"""What a tutorial prints when an answer is wrong: once (not once per rank),
with plain numbers (not ``np.float64(...)``), and with paths a user can type
where they run the step."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tutorials"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common  # noqa: E402
import checks  # noqa: E402
import tutorial_wrong_answers as wrong  # noqa: E402


class _TwoRanks:
    """rank ``rank`` of 2, whose allgather returns what both ranks hold (the same failure)."""
    size = 2

    def __init__(self, rank, failures):
        self.rank, self.failures = rank, failures

    def allgather(self, mine):
        return self.failures


def _wrong_answer_message(exercise_id):
    ex = checks.EXERCISES[exercise_id]
    bad = wrong.WRONG[exercise_id]()[0]
    with pytest.raises(AssertionError) as e:
        if ex.mpi:  # the check itself on rank 0 of a job of 2 simulated in this process
            checks._SimulatedJob(2).run(lambda comm: ex.check(bad, comm=comm), [(), ()])
        else:
            ex.check(bad)
    return str(e.value)


def test_a_wrong_answer_is_printed_once_under_mpi(monkeypatch, capsys):
    """Both ranks fail the (collective) check with the same message: rank 0 prints it once,
    rank 1 prints nothing, both stop with ExerciseWrong."""
    msg = "mean over 2 ranks: got 1.0, expected 0.5"

    def failing_check(answer, comm):
        raise AssertionError(msg)
    ex = checks.Exercise("04_mpi_basics", "allreduce_mean", failing_check, mpi=True)
    for rank in (0, 1):
        monkeypatch.setattr(_common, "rank", lambda r=rank: r)
        with pytest.raises(_common.ExerciseWrong):
            _common._check_once("4.1", ex, None, {"comm": _TwoRanks(rank, [msg, msg])})
    err = capsys.readouterr().err
    assert err.count("Exercise 4.1 is not right yet") == 1 and err.count(msg) == 1
    # only rank 1 fails: rank 0 still prints it, naming the rank
    for rank in (0, 1):
        monkeypatch.setattr(_common, "rank", lambda r=rank: r)
        with pytest.raises(_common.ExerciseWrong):
            _common._check_once("4.1", ex, None, {"comm": _TwoRanks(rank, [None, msg])})
    assert capsys.readouterr().err.count("(rank 1) " + msg) == 1


def test_numbers_in_messages_are_plain():
    msg = _wrong_answer_message("1.1")
    assert "np.float64" not in msg and "array(" not in msg
    assert checks._plain(np.float64(0.5)) == 0.5 and repr(checks._plain(np.float32(2))) == "2.0"
    assert checks._plain([np.int64(3), np.float64(1.5)]) == [3, 1.5]


def test_paths_are_relative_to_where_the_user_runs(monkeypatch, tmp_path):
    f = ROOT / "tutorials" / "solutions" / "01_tensors_and_autograd.py"
    monkeypatch.chdir(ROOT)
    assert _common._rel(f) == "tutorials/solutions/01_tensors_and_autograd.py"
    monkeypatch.chdir(ROOT / "tutorials")
    assert _common._rel(f) == "solutions/01_tensors_and_autograd.py"
    monkeypatch.chdir(tmp_path)  # elsewhere: absolute, so it can be typed as it is
    assert _common._rel(f) == str(f)
