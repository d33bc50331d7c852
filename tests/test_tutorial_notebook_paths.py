"""The tutorials' notebook path, cheaply (the full notebook runs are in
tests/test_tutorial_notebooks.py, marked ``notebooks``):

- a one-process run of an MPI step writes its figures apart from the real run's;
- ``tutorials/_run_notebook.py`` runs what a saved notebook holds (edits and all,
  magics commented out) on several ranks, and ``run_on_ranks`` does nothing in a script;
- in Jupyter, an exercise that stops the step shows its message alone;
- the checks' simulated communicator answers the calls step 4 teaches
  (``iallreduce`` and its request, ``comm.mpi.Allreduce(MPI.IN_PLACE, ...)``) as MPI does.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TUT = ROOT / "tutorials"
sys.path.insert(0, str(TUT))

import _common  # noqa: E402
import checks  # noqa: E402


class _Comm:
    def __init__(self, size):
        self.size, self.rank = size, 0


def test_a_one_process_run_of_an_mpi_step_writes_apart(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MINIPS_TUTORIAL_OUT", str(tmp_path))
    monkeypatch.setattr(_common, "_mpi_step", None)
    assert _common.out_dir("04") == tmp_path / "04"                 # a one-process step
    _common.require_ranks(_Comm(1), 2, "04_mpi_basics.py")
    assert _common.out_dir("04") == tmp_path / "04" / "1-process"   # the notebook's run
    assert f"its figures go to {tmp_path / '04' / '1-process'}/" in capsys.readouterr().out
    _common.require_ranks(_Comm(2), 2, "04_mpi_basics.py")
    assert _common.out_dir("04") == tmp_path / "04"                 # the real run
    _common.require_ranks(_Comm(4), 2, "04_mpi_basics.py")
    assert _common.out_dir("04") == tmp_path / "04" / "4-ranks"


def test_run_on_ranks_does_nothing_in_a_script(monkeypatch):
    monkeypatch.setattr(_common, "_mpi_step", ("05_sync_sgd", 2, 2))
    assert not _common.IN_NOTEBOOK and _common.run_on_ranks(2) is None


@pytest.mark.mpi
def test_run_notebook_runs_what_the_saved_notebook_holds(tmp_path):
    """A notebook edited and saved elsewhere runs on 2 ranks as it is: its own
    code (not a step file), its magics as comments, _common importable."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a probe"),
                nbformat.v4.new_code_cell("from _common import mpi_setup, require_ranks, say\n"
                                          "comm = mpi_setup()\nrequire_ranks(comm, 2, '99_probe.py')"),
                nbformat.v4.new_code_cell("%env SOME_VAR=1\n!echo a shell command\n"
                                          "def answer():\n    return 6 * 7   # the student's edit"),
                nbformat.v4.new_code_cell("total = comm.allreduce_scalar(answer())\n"
                                          "say(f'ranks {comm.size}, sum of answers {total}')")]
    path = tmp_path / "99_probe.ipynb"
    nbformat.write(nb, path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI_LOCAL"))}
    env["MINIPS_TUTORIAL_OUT"] = str(tmp_path / "out")
    p = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(TUT / "_run_notebook.py"), str(path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("ranks 2, sum of answers 84") == 1, p.stdout + p.stderr
    assert "a shell command" not in p.stdout


def test_a_stopped_exercise_shows_its_message_alone_in_jupyter():
    """The handler _common installs in IPython shows the message as the whole traceback."""
    shown = []

    class Shell:
        def _showtraceback(self, etype, value, stb):
            shown.append((etype, stb))
    err = _common.ExerciseNotDone("Exercise 1.1 is not done yet: replace the `raise NotImplementedError` ...")
    _common._message_alone(Shell(), type(err), err, None)
    assert shown == [(_common.ExerciseNotDone, [str(err)])]


def test_simulated_comm_answers_what_step_4_teaches():
    """iallreduce: the buffer is read-only and unsummed until wait(); a request never completed
    fails the check. (comm.mpi.Allreduce, which needs mpi4py in the process, is checked under
    mpiexec: tests/tutorial_right_answers.py's 4.1 and 5.1 answers run on simulated jobs there.)"""
    xs = [np.full(3, r + 1.0, np.float32) for r in range(3)]

    def nonblocking(comm, x):
        y = x.copy()
        req = comm.iallreduce(y)
        with pytest.raises(ValueError):
            y[0] = 0.0                     # in flight: read-only, as minips makes it
        before = y.copy()
        req.wait()
        return before, y

    for before, y in checks._SimulatedJob(3).run(nonblocking, [(x,) for x in xs]):
        assert np.all(y == 6.0) and before[0] != 6.0 and y.flags.writeable

    def polls(comm, x):
        y = x.copy()
        req = comm.iallreduce(y)
        while comm.progress():
            pass
        return req.done, y
    for done, y in checks._SimulatedJob(3).run(polls, [(x,) for x in xs]):
        assert done and np.all(y == 6.0)

    def never_waits(comm, x):
        comm.iallreduce(x)
        return x
    with pytest.raises(AssertionError, match="still in flight"):
        checks._SimulatedJob(3).run(never_waits, [(x.copy(),) for x in xs])
