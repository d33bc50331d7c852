"""The tutorial steps as notebooks: converted with jupytext and run by a Jupyter kernel (nbclient).

These tests are slow (a kernel per notebook, every step in fast mode, the MPI steps
a second time on 2 ranks) and need the ``notebooks`` extra (``pip install -e
".[notebooks]"``: JupyterLab, jupytext, nbclient, ipykernel). They are marked
``notebooks``, which the default ``python -m pytest`` run deselects (setup.cfg);
run them with

    python -m pytest -q -m notebooks tests/test_tutorial_notebooks.py

- ``test_step_runs_as_a_notebook``: every step runs to the end as a notebook
  (fast mode, reference solutions), every exercise's check passes, and an MPI
  step's last cell runs it again on 2 ranks; the one-process run's figures go to
  ``<step>/1-process/``, the 2-rank run's to ``<step>/``.
- ``test_mpi_cell_runs_what_the_student_wrote``: with step 5's exercises answered
  in the notebook (and no reference solutions), the 2-rank run passes them too:
  it ran the notebook, not the unedited script.
- ``test_stopped_exercise_shows_its_message_alone``: an unsolved exercise, and a
  wrong answer, end the notebook's run with the exercise's message as the error,
  without a traceback.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUT = ROOT / "tutorials"
sys.path.insert(0, str(TUT))

import checks  # noqa: E402  (tutorials/checks.py)

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(1200)]   # a step of 9-10 minutes on a busy machine

try:  # collected only when asked for (-m notebooks: tests/conftest.py pytest_ignore_collect)
    import jupytext
    import nbclient
except ImportError as e:
    pytest.fail(f"the notebook tests need the notebooks extra ({e.name} is missing): pip install -e '.[notebooks]'",
                pytrace=False)

STEPS = sorted(p.stem for p in TUT.glob("[0-9][0-9]_*.py"))
MPI_STEPS = {"04_mpi_basics", "05_sync_sgd", "06_overlap_buckets", "07_pseudo_sync", "09_video_captioning"}


@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    """The environment the kernel (and what it launches) inherits: fast mode, outputs in tmp_path."""
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD", "MINIPS_MPI",
                "JPY_SESSION_NAME", "MINIPS_TUTORIAL_VIRTUAL_RANKS"):  # commands under mpiexec, as a student runs them
        monkeypatch.delenv(var, raising=False)
    for var, v in {"MINIPS_TUTORIAL_FAST": "1", "MINIPS_TUTORIAL_OUT": str(tmp_path / "out"),
                   "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "MINIPS_CHECK_FIGURES": "1", "PYTHONPATH": str(TUT)}.items():
        monkeypatch.setenv(var, v)
    return tmp_path


def _execute(nb, cwd: Path, timeout: int = 600):
    """Run every cell of ``nb`` in a fresh kernel started in ``cwd``; returns the
    CellExecutionError that stopped it, or None."""
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        return e
    return None


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif o.get("output_type") == "error":
            out.append("\n".join(o["traceback"]))
        elif "data" in o and "text/plain" in o["data"]:
            out.append(o["data"]["text/plain"])
    return "".join(out)


def _last_code_cell(nb):
    return [c for c in nb.cells if c.cell_type == "code"][-1]


@pytest.mark.parametrize("step", STEPS)
def test_step_runs_as_a_notebook(step, kernel_env):
    nb = jupytext.read(TUT / f"{step}.py")
    err = _execute(nb, TUT)
    everything = "".join(_text(c) for c in nb.cells if c.cell_type == "code")
    assert err is None, f"{step} failed as a notebook: {str(err)[-4000:]}"
    ids = [i for i, ex in checks.EXERCISES.items() if ex.step == step]
    for i in ids:
        assert f"Exercise {i}: the reference solution passes the check." in everything, (step, i)
    out = kernel_env / "out" / step[:2]
    if step in MPI_STEPS:
        last = _text(_last_code_cell(nb))
        assert "on 2 ranks" in last and "$ mpiexec -n 2 python" in last, last[-2000:]
        for i in ids:   # the 2-rank run checked every exercise again
            assert f"Exercise {i}: the reference solution passes the check." in last, (step, i, last[-3000:])
        one = {p.name for p in (out / "1-process").glob("*.png")}
        two = {p.name for p in out.glob("*.png")}
        assert one and two, f"figures: 1-process {sorted(one)}, 2 ranks {sorted(two)}"
    else:
        assert not (out / "1-process").exists()


def _answer_in_notebook(nb, name: str, solution_file: Path) -> None:
    """Replace the placeholder cell that defines ``name`` with the reference answer's
    source, as a student types it into the notebook."""
    src = solution_file.read_text()
    node = next(n for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
    answer = ast.get_source_segment(src, node)
    cells = [c for c in nb.cells if c.cell_type == "code" and re.search(rf"^(def|class) {name}\b", c.source, re.M)
             and "raise NotImplementedError" in c.source]
    assert len(cells) == 1, f"one placeholder cell for {name}, found {len(cells)}"
    cells[0].source = answer


def test_mpi_cell_runs_what_the_student_wrote(kernel_env, monkeypatch):
    """Step 5 answered in the notebook (not in the .py), saved as .ipynb, no reference
    solutions: the one-process run and the 2-rank run both check the student's answers."""
    monkeypatch.setenv("MINIPS_TUTORIAL_SOLUTIONS", "0")
    step = "05_sync_sgd"
    nb = jupytext.read(TUT / f"{step}.py")
    for ex in (e for e in checks.EXERCISES.values() if e.step == step):
        _answer_in_notebook(nb, ex.name, TUT / "solutions" / f"{step}.py")
    where = kernel_env / "student"
    where.mkdir()
    jupytext.write(nb, where / f"{step}.ipynb")        # what `jupytext --to ipynb` gives, then edited
    err = _execute(nb, where)
    assert err is None, str(err)[-4000:]
    last = _text(_last_code_cell(nb))
    assert f"Running {step}.ipynb as saved at" in last, last[:500]
    everything = "".join(_text(c) for c in nb.cells if c.cell_type == "code")
    for i in ("5.1", "5.2"):
        assert f"Exercise {i}: correct." in last, last[-3000:]                      # on 2 ranks
        assert f"Exercise {i}: correct." in everything.replace(last, ""), i         # in the kernel
    assert "not done yet" not in last and "reference solution" not in last, last[-3000:]


def test_stopped_exercise_shows_its_message_alone(kernel_env, monkeypatch):
    monkeypatch.setenv("MINIPS_TUTORIAL_SOLUTIONS", "0")
    step = "01_tensors_and_autograd"
    # 1. not done: the error is the message, alone
    nb = jupytext.read(TUT / f"{step}.py")
    assert _execute(nb, TUT) is not None
    errors = [(c, o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert len(errors) == 1
    cell, err = errors[0]
    assert err["ename"] == "ExerciseNotDone" and 'exercise("1.1"' in cell.source
    assert err["traceback"] == [err["evalue"]], err["traceback"]
    assert err["evalue"].startswith("Exercise 1.1 is not done yet") and "MINIPS_TUTORIAL_SOLUTIONS" in err["evalue"]
    # 2. a wrong answer: the check's message, alone and once
    nb = jupytext.read(TUT / f"{step}.py")
    cell = next(c for c in nb.cells if c.cell_type == "code" and "class Softplus" in c.source)
    placeholder = "# YOUR CODE HERE: return dL/da (same shape as a)\n        raise NotImplementedError"
    cell.source = cell.source.replace(placeholder, "return g / (1 + np.exp(self.a))")
    assert "raise NotImplementedError" not in cell.source
    assert _execute(nb, TUT) is not None
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for o in outs if o.get("output_type") == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ExerciseWrong", errors
    assert errors[0]["traceback"] == [errors[0]["evalue"]]
    assert errors[0]["evalue"].startswith("Exercise 1.1 is not right yet: ")
    assert not any("is not right yet" in o.get("text", "") for o in outs if o.get("output_type") == "stream")
