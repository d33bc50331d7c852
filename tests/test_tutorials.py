"""The tutorials run, and their exercise checks accept right answers and reject wrong ones.

- ``test_tutorial_runs``: every ``tutorials/NN_*.py`` runs as a script in fast
  mode (``MINIPS_TUTORIAL_FAST=1``: small data, few steps; unsolved exercises
  use the reference solutions, so every check cell runs and must pass), MPI
  steps under ``mpiexec -n 2``; the ``train`` and ``compare`` commands a step starts run on virtual
  ranks (MINIPS_TUTORIAL_VIRTUAL_RANKS=1, tutorials/_common.py). Fails if the script raises or any
  check fails.
- ``test_solution_passes_check``: each serial exercise's reference solution passes its check.
- ``test_check_rejects_wrong_answer``: each serial check raises AssertionError on a
  plausible wrong answer (tests/tutorial_wrong_answers.py).
- ``test_check_accepts_right_answers_written_differently``: each serial check accepts
  right answers that differ from the reference solution (tests/tutorial_right_answers.py).
- ``test_mpi_solutions_pass_and_wrong_answers_fail``: the same three for every MPI exercise, under
  ``mpiexec -n 2``, all in one launch (tests/tutorial_check_worker.py).
- ``test_placeholder_stops_with_a_message``: without solutions, an unsolved
  exercise stops the step with a message that says what to do.
- ``test_tutorials_are_notebooks``: each step is a jupytext percent file with
  markdown and code cells.

The tutorials run with one Numba/BLAS thread per process here: on a shared
test machine, parallel kernels whose threads wait for a descheduled peer can
be 10-100x slower (see tutorial 2), and the thread count does not change what
the tutorials compute.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUT = ROOT / "tutorials"
sys.path.insert(0, str(TUT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import checks  # noqa: E402  (tutorials/checks.py)
import tutorial_right_answers as right  # noqa: E402
import tutorial_wrong_answers as wrong  # noqa: E402

#: step file -> number of MPI processes it runs on
STEPS = {
    "01_tensors_and_autograd": 1,
    "02_layers_and_kernels": 1,
    "03_train_a_convnet": 1,
    "04_mpi_basics": 2,
    "05_sync_sgd": 2,
    "06_overlap_buckets": 2,
    "07_pseudo_sync": 2,
    "08_predictors": 1,
    "09_video_captioning": 2,
    "10_scaling_and_clusters": 1,
    "11_local_sgd": 1,
    "12_gossip": 1,
    "13_compression": 1,
}

def _env(tmp_path, **extra):
    e = dict(os.environ)
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD",
                "MINIPS_MPI"):
        e.pop(var, None)
    e.update({"MINIPS_TUTORIAL_FAST": "1", "MINIPS_TUTORIAL_OUT": str(tmp_path / "out"),
              "MINIPS_TUTORIAL_VIRTUAL_RANKS": "1",  # tutorials/_common.py, mpiexec()
              "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
              "MPLBACKEND": "Agg", "MINIPS_CHECK_FIGURES": "1"})
    e.update(extra)
    return e


def _run_step(step, nprocs, tmp_path, timeout=240, **env):
    cmd = [sys.executable, str(TUT / f"{step}.py")]
    if nprocs > 1:
        cmd = ["mpiexec", "-n", str(nprocs), *cmd]
    return subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path, **env), capture_output=True, text=True,
                          timeout=timeout)


def test_every_step_file_is_listed():
    files = sorted(p.stem for p in TUT.glob("[0-9][0-9]_*.py"))
    assert files == sorted(STEPS), "tests/test_tutorials.py::STEPS must list every tutorial step"


#: steps that start mpiexec themselves (besides those run under it); two-rank jobs share the cores (conftest.py).
#: Their ``train`` and ``compare`` commands run on virtual ranks here, in the step's own process, as do their
#: ``minips_cli`` commands (MINIPS_TUTORIAL_VIRTUAL_RANKS, set by _env: tutorials/_common.py's _run_here):
#: 08, 11, 12 and 13 start no mpiexec in this file, and 10 only for ``bench comm``. The notebook tests
#: (tests/test_tutorial_notebooks.py, in .ci/run) run every step's commands under mpiexec, as a student does.
LAUNCH_MPI = {"10_scaling_and_clusters"}


def _step_param(step):
    marks = [pytest.mark.slow]  # 4-23 s each on idle cores: started first
    if STEPS[step] > 1 or step in LAUNCH_MPI:
        marks.append(pytest.mark.mpi)
    return pytest.param(step, marks=marks)


@pytest.mark.parametrize("step", [_step_param(s) for s in sorted(STEPS)])
def test_tutorial_runs(step, tmp_path):
    p = _run_step(step, STEPS[step], tmp_path)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{step} failed (exit {p.returncode}):\n{out[-6000:]}"
    ids = [i for i, ex in checks.EXERCISES.items() if ex.step == step]
    for i in ids:  # run with MINIPS_TUTORIAL_SOLUTIONS: the reference answers are checked
        assert f"Exercise {i}: the reference solution passes the check." in out, \
            f"{step}: the check of exercise {i} did not report success"


def _solution(ex):
    import _common
    return getattr(_common.load_solutions(ex.step), ex.name)


SERIAL = sorted(i for i, ex in checks.EXERCISES.items() if not ex.mpi)
PARALLEL = sorted(i for i, ex in checks.EXERCISES.items() if ex.mpi)


def test_every_exercise_has_a_wrong_answer():
    assert sorted(wrong.WRONG) == sorted(checks.EXERCISES)


@pytest.mark.parametrize("exercise_id", SERIAL)
def test_solution_passes_check(exercise_id):
    ex = checks.EXERCISES[exercise_id]
    ex.check(_solution(ex))


def test_every_exercise_has_another_right_answer():
    assert sorted(right.RIGHT) == sorted(checks.EXERCISES)


@pytest.mark.parametrize("exercise_id", SERIAL)
def test_check_accepts_right_answers_written_differently(exercise_id):
    """A check must not demand one way of being right (another order of
    operations, NumPy idiom, container or scalar type)."""
    ex = checks.EXERCISES[exercise_id]
    for good in right.RIGHT[exercise_id]():
        ex.check(good)


@pytest.mark.parametrize("exercise_id", SERIAL)
def test_check_rejects_wrong_answer(exercise_id):
    ex = checks.EXERCISES[exercise_id]
    for bad in wrong.WRONG[exercise_id]():
        with pytest.raises(AssertionError):
            ex.check(bad)


@pytest.mark.mpi
def test_mpi_solutions_pass_and_wrong_answers_fail(tmp_path):
    """Every MPI exercise (PARALLEL) in one ``mpiexec -n 2`` launch (it replaced one launch per exercise):
    on both ranks its solution passes, its wrong answers are rejected, its other right answers accepted."""
    assert PARALLEL
    p = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(Path(__file__).parent / "tutorial_check_worker.py"),
                        *PARALLEL], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=240)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    for i in PARALLEL:
        for what in ("solution: passed", "wrong answers: rejected", "other right answers: accepted"):
            # ": 4.1: " cannot match 14.1; not anchored to lines: mpiexec may join the two ranks' lines
            assert out.count(f": {i}: {what}") == 2, (i, what, out[-4000:])


def test_the_tests_run_train_and_compare_on_virtual_ranks_and_the_rest_under_mpiexec(monkeypatch, capsys):
    """tutorials/_common.py's mpiexec() and minips_cli(): with MINIPS_TUTORIAL_VIRTUAL_RANKS=1 (this
    file's steps), a ``train`` or ``compare`` command runs in the step's own process with
    ``--virtual-ranks n``, and so does every minips_cli() command; any other mpiexec() command, and
    every command without the variable, as a new process (under ``mpiexec -n n``)."""
    import _common
    from types import SimpleNamespace
    started, here = [], []
    monkeypatch.setattr(_common.subprocess, "run",
                        lambda cmd, **kw: started.append(cmd) or SimpleNamespace(returncode=0, stdout="", stderr=""))
    monkeypatch.setattr(_common, "_run_here", lambda args, env: here.append((list(args), env)) or (0, ""))
    monkeypatch.setenv("MINIPS_TUTORIAL_VIRTUAL_RANKS", "1")
    _common.mpiexec(2, ["-m", "minips", "compare", "--algos", "sync"])
    _common.mpiexec(4, ["-m", "minips", "train", "--epochs", 1])
    _common.mpiexec(2, ["-m", "minips", "bench", "comm"])
    _common.minips_cli(["gossip-lab", "-n", 8], env={"NUMBA_NUM_THREADS": "1"})
    monkeypatch.setenv("MINIPS_TUTORIAL_VIRTUAL_RANKS", "0")
    _common.mpiexec(2, ["-m", "minips", "train"])
    _common.minips_cli(["topology", "ring"])
    assert here == [(["compare", "--algos", "sync", "--virtual-ranks", 2], None),
                    (["train", "--epochs", 1, "--virtual-ranks", 4], None),
                    (["gossip-lab", "-n", 8], {"NUMBA_NUM_THREADS": "1"})]
    assert started == [["mpiexec", "-n", "2", sys.executable, "-m", "minips", "bench", "comm"],
                       ["mpiexec", "-n", "2", sys.executable, "-m", "minips", "train"],
                       [sys.executable, "-m", "minips", "topology", "ring"]]
    shown = capsys.readouterr().out  # the student's command is what is printed, either way
    assert shown.count("$ mpiexec -n 2 python -m minips compare --algos sync") == 1
    assert shown.count("$ NUMBA_NUM_THREADS=1 python -m minips gossip-lab -n 8") == 1
    assert shown.count("virtual ranks in this process") == 2


def test_a_command_run_in_the_steps_process_gives_its_output_and_exit_status(monkeypatch, tmp_path):
    """_run_here(): the command's output is captured and returned, a refusal is its exit status
    (minips_cli then raises with the output, as for a failed subprocess), MPI is off while it runs,
    and the environment is as before afterwards."""
    import _common
    monkeypatch.setenv("MINIPS_TUTORIAL_VIRTUAL_RANKS", "1")
    monkeypatch.delenv("MINIPS_MPI", raising=False)
    monkeypatch.setenv("MINIPS_TEST_PROBE", "before")
    seen = {}
    import minips.cli
    real = minips.cli.main

    def spy(argv):
        seen.update(mpi=os.environ.get("MINIPS_MPI"), probe=os.environ.get("MINIPS_TEST_PROBE"))
        return real(argv)
    monkeypatch.setattr(minips.cli, "main", spy)
    out = _common.minips_cli(["topology", "ring", "-n", 6], env={"MINIPS_TEST_PROBE": "during"})
    assert "spectral gap" in out and seen == {"mpi": "0", "probe": "during"}
    assert "MINIPS_MPI" not in os.environ and os.environ["MINIPS_TEST_PROBE"] == "before"
    code, text = _common._run_here(["topology", "nope", "-n", 6], None)
    assert code == 2 and "invalid choice" in text
    with pytest.raises(RuntimeError, match="exit status 2"):
        _common.minips_cli(["topology", "nope"])


def test_placeholder_stops_with_a_message(tmp_path):
    p = _run_step("01_tensors_and_autograd", 1, tmp_path, MINIPS_TUTORIAL_SOLUTIONS="0")
    assert p.returncode != 0
    assert "Exercise 1.1 is not done yet" in p.stderr and "MINIPS_TUTORIAL_SOLUTIONS=1" in p.stderr
    assert "Traceback" not in p.stderr


def test_placeholder_under_mpi_stops_every_rank_with_one_message(tmp_path):
    p = _run_step("05_sync_sgd", 2, tmp_path, MINIPS_TUTORIAL_SOLUTIONS="0")
    assert p.returncode != 0
    assert p.stderr.count("Exercise 5.1 is not done yet") == 1, p.stderr[-3000:]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("step", sorted(STEPS))
def test_tutorials_are_notebooks(step):
    import jupytext  # in the test extra

    nb = jupytext.read(TUT / f"{step}.py")
    kinds = [c.cell_type for c in nb.cells]
    assert kinds[0] == "markdown" and kinds.count("markdown") >= 5 and kinds.count("code") >= 5
    assert nb.cells[0].source.startswith(f"# Step {int(step[:2])}:")


def _cli_calls_that_write_a_run(step):
    """The ``mpiexec(...)`` / ``minips_cli(...)`` calls of a step whose argument
    list names ``train`` or ``compare`` and an ``--out``: (line, list of the
    list's string constants)."""
    import ast
    calls = []
    for node in ast.walk(ast.parse((TUT / f"{step}.py").read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("mpiexec", "minips_cli"):
            for arg in node.args:
                if isinstance(arg, ast.List):
                    words = [e.value for e in arg.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                    if {"train", "compare"} & set(words) and "--out" in words:
                        calls.append((node.lineno, words))
    return calls


def test_a_step_can_be_run_again():
    """A student runs a step again after solving an exercise: every run it writes
    through the CLI must replace the previous one (train and compare refuse an
    --out that holds a run), not stop the step with a RuntimeError."""
    found = 0
    for step in STEPS:
        for line, words in _cli_calls_that_write_a_run(step):
            found += 1
            assert "--overwrite" in words or "--resume" in words, \
                f"tutorials/{step}.py line {line}: add --overwrite (a second run of the step would fail)"
    assert found >= 5  # steps 8, 10, 11, 12 and 13 write runs through the CLI


def test_simulated_job_runs_the_same_answer_and_reports_mismatched_collectives():
    """The checks' simulated job (tutorials/checks.py): every rank runs the answer,
    allreduce sums what each rank passed (so dividing first is right), and ranks
    that call different collectives fail with a message at once, not a hang."""
    import time

    import numpy as np

    def divide_first(comm, x):
        y = x / comm.size
        comm.allreduce(y)
        return y
    xs = [np.full(3, r + 1.0, np.float32) for r in range(4)]
    outs = checks._SimulatedJob(4).run(divide_first, [(x,) for x in xs])
    assert all(np.allclose(o, 2.5) for o in outs)

    def only_rank0(comm, x):
        if comm.rank == 0:
            comm.allreduce(x)
        return x

    def other_collective(comm, x):
        return comm.allgather(x) if comm.rank else comm.allreduce(x)

    def other_shape(comm, x):
        comm.allreduce(x[:2].copy() if comm.rank else x.copy())
    for bad, words in ((only_rank0, "returned after 0 collective(s)"), (other_collective, "same collectives"),
                       (other_shape, "same shape")):
        t0 = time.monotonic()
        with pytest.raises(AssertionError, match=words.replace("(", r"\(").replace(")", r"\)")):
            checks._SimulatedJob(3).run(bad, [(x.copy(),) for x in xs[:3]])
        assert time.monotonic() - t0 < 5, bad.__name__
