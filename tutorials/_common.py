"""Helpers shared by the tutorials (they are not part of minips).

Long because one job: the chores every step shares, in one place a student can skip.

You do not need to read this file to follow the tutorials; it only handles
the chores that every step shares:

- **Fast mode.** ``MINIPS_TUTORIAL_FAST=1`` shrinks data sets, epochs and
  step counts so that a step runs in seconds (the tests use it). Numbers and
  figures in fast mode are not meaningful; read the normal-mode ones.
- **Exercises.** Each exercise cell holds a placeholder that raises
  ``NotImplementedError``. The next cell calls :func:`exercise`, which runs the
  exercise's check (in ``tutorials/checks.py``) on your answer and says whether
  it is right. If you have not done the exercise yet, it stops and tells you
  so, unless ``MINIPS_TUTORIAL_SOLUTIONS=1`` (on by default in fast mode): then
  it uses the reference solution from ``tutorials/solutions/`` so the rest of
  the step can run.
- **Figures.** With ``MINIPS_CHECK_FIGURES=1`` (the tests set it), :func:`show`
  refuses a figure whose texts overlap or run off it (``minips.plots.layout_problems``).
- **Outputs.** Every step writes its runs and figures under
  ``runs/tutorials/<step>/`` in the repository (``MINIPS_TUTORIAL_OUT``
  changes the root); an MPI step run on another number of ranks than it is
  meant for (a notebook: one process) writes under
  ``runs/tutorials/<step>/1-process/`` (or ``<P>-ranks/``) instead, so it
  never overwrites the real run's. :func:`show` saves a figure as a PNG and,
  inside Jupyter, also displays it.
- **MPI.** :func:`mpi_setup` returns the communicator and makes an error on
  any rank end the whole job (instead of leaving the other ranks waiting
  forever); :func:`say` prints on rank 0 only; :func:`mpiexec` runs a command
  on N processes from a one-process step; :func:`run_on_ranks`, in a
  notebook, runs the notebook itself (as last saved, the student's answers
  included) on N ranks through ``tutorials/_run_notebook.py``.
- **Notebooks.** In Jupyter an exercise that stops the step shows its
  message alone, not a traceback through this file.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _flag(name: str, default: bool = False) -> bool:
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.lower() not in ("0", "false", "no", "off")


#: True when MINIPS_TUTORIAL_FAST=1: small data, few steps (for tests).
FAST = _flag("MINIPS_TUTORIAL_FAST")


def solutions_on() -> bool:
    """Whether unsolved exercises fall back to the reference solutions
    (``MINIPS_TUTORIAL_SOLUTIONS``), read at every check: setting it in a
    running notebook kernel (``os.environ[...] = "1"`` or ``%env``) takes
    effect when the cell is run again."""
    return _flag("MINIPS_TUTORIAL_SOLUTIONS", default=FAST)


#: MINIPS_TUTORIAL_SOLUTIONS when this module was imported (exercise() reads it anew: solutions_on())
SOLUTIONS = solutions_on()
#: True inside Jupyter (an IPython kernel), False when run as a script.
IN_NOTEBOOK = "ipykernel" in sys.modules

if not IN_NOTEBOOK:
    import matplotlib

    matplotlib.use("Agg")  # scripts write PNG files; no screen needed

_THREAD_VARS = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_threadpool_limit = None
_CHILD_ENV: dict = {}  # extra environment of the commands the steps start


def _one_thread_on_a_busy_machine() -> None:
    """On a machine whose cores are already busy, use one Numba/BLAS thread per process.

    A parallel kernel waits for its slowest thread; when other programs occupy the cores,
    a descheduled thread makes every kernel wait for the scheduler, and a step can take
    10-100x longer (step 2 measures it; docs/kernels.md, "Threads"). Nothing is changed
    if you set any of the thread variables yourself, or under mpiexec with a rank per core.
    """
    global _threadpool_limit
    if any(os.environ.get(v) for v in _THREAD_VARS) or not hasattr(os, "getloadavg"):
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    ranks_here = int(os.environ.get("MPI_LOCALNRANKS") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or 1)
    load = os.getloadavg()[0]
    if cores // ranks_here <= 1 or load < cores:
        return
    numba_loaded = "numba" in sys.modules
    for v in _THREAD_VARS:
        # For this process (minips reads it) and the commands it starts. Not NUMBA_NUM_THREADS once
        # Numba is imported: Numba re-reads it at every compile and refuses a value other than the
        # one it started its threads with ("Cannot set NUMBA_NUM_THREADS to a different value ...").
        if not (numba_loaded and v == "NUMBA_NUM_THREADS"):
            os.environ[v] = "1"
    _CHILD_ENV.update({v: "1" for v in _THREAD_VARS})  # commands started by mpiexec()/minips_cli()
    if numba_loaded:
        sys.modules["numba"].set_num_threads(1)  # the same effect, at run time
    try:
        from threadpoolctl import threadpool_limits
        _threadpool_limit = threadpool_limits(1)
    except ImportError:
        pass
    print(f"[tutorials] this machine looks busy (load average {load:.1f} on {cores} cores): using one "
          "Numba/BLAS thread per process, which is much faster here (step 2 shows why). "
          "Set NUMBA_NUM_THREADS yourself to choose.", flush=True)


_one_thread_on_a_busy_machine()


def pick(normal, fast):
    """``normal`` in normal mode, ``fast`` in fast mode (MINIPS_TUTORIAL_FAST=1)."""
    return fast if FAST else normal


# --- MPI -------------------------------------------------------------------------------
_comm = None


def mpi_setup(network=None, progress: str = "poll"):
    """The world communicator (:func:`minips.distributed.comm.get_comm`).

    Under ``mpiexec``, an uncaught exception on any rank prints its traceback
    and aborts every rank, so a failing check never leaves the others hanging.
    """
    global _comm
    from minips.distributed.comm import abort_on_exception, get_comm

    _comm = get_comm(network, progress)
    if _comm.size > 1 and not IN_NOTEBOOK:
        def hook(etype, value, tb):
            if issubclass(etype, (ExerciseNotDone, ExerciseWrong)):  # every rank stops at the same exercise
                if _comm.rank == 0 and issubclass(etype, ExerciseNotDone):  # ExerciseWrong printed already
                    print(f"\n{value}", file=sys.stderr, flush=True)
                if _all_ranks_arrive(timeout=20.0):
                    return           # a normal exit with status 1: the output is not cut off
                _comm.abort("stopped at an exercise that is not done yet or not right", code=1)
            sys.__excepthook__(etype, value, tb)
            if not issubclass(etype, (KeyboardInterrupt, SystemExit)):
                abort_on_exception(_comm, value)
        sys.excepthook = hook
    return _comm


def _all_ranks_arrive(timeout: float) -> bool:
    """True when every rank reaches this point within ``timeout`` seconds (a
    nonblocking barrier, polled), so they can all exit normally; False means
    some rank is elsewhere and the job must be aborted instead."""
    req = _comm.mpi.Ibarrier()
    t_end = time.monotonic() + timeout
    while not req.Test():
        if time.monotonic() > t_end:
            return False
        time.sleep(0.01)
    return True


def _exercise_stop_hook(etype, value, tb):
    """A script stopped at an unsolved exercise: say so, without a traceback."""
    if issubclass(etype, ExerciseNotDone):
        print(f"\n{value}", file=sys.stderr, flush=True)
        return
    if issubclass(etype, ExerciseWrong):  # printed by exercise() already; exit status 1
        return
    sys.__excepthook__(etype, value, tb)


if not IN_NOTEBOOK:
    sys.excepthook = _exercise_stop_hook


def rank() -> int:
    return _comm.rank if _comm is not None else 0


def say(*args, **kwargs) -> None:
    """``print`` on rank 0 only (every rank runs the same script)."""
    if rank() == 0:
        print(*args, **kwargs, flush=True)


#: (step file name, ranks it is meant for, ranks it runs on), set by require_ranks (an MPI step)
_mpi_step = None


def _ranks_folder(size: int, meant: int) -> str:
    """The output subfolder of an MPI step run on ``size`` ranks instead of ``meant`` ("" when equal)."""
    if size == meant:
        return ""
    return "1-process" if size == 1 else f"{size}-ranks"


def require_ranks(comm, n: int, script: str) -> None:
    """Record that this step is meant for ``n`` ranks (:func:`out_dir` then keeps
    a run on another number apart; :func:`run_on_ranks` uses ``n``), and explain
    how to launch ``script`` if it runs on fewer."""
    global _mpi_step
    _mpi_step = (Path(script).stem, n, comm.size)
    if comm.size >= n:
        return
    sub = _ranks_folder(comm.size, n)
    say(f"NOTE: this step is an MPI program and is running on {comm.size} process(es); "
        f"it is meant for {n}.\n      Run it as:  mpiexec -n {n} python {_rel(HERE / script)}"
        + (f"\n      (in this notebook: the last cell, run_on_ranks({n}), runs the notebook as you last saved it "
           f"on {n} ranks)" if IN_NOTEBOOK else "")
        + "\n      On one process every collective is trivial, but the step still runs; its figures go to "
        f"{_rel(_out_root() / script[:2] / sub)}/, apart from those of the {n}-rank run.")


def mpiexec(n: int, args: list, timeout: float = 900, quiet: bool = False, env: dict | None = None) -> str:
    """Run ``mpiexec -n n python ARGS...`` from the repository root and return its output.

    ``args`` are the arguments after ``python`` (e.g. ``["-m", "minips", "train", ...]``).
    The command is printed first so you can copy it into a terminal.

    With ``MINIPS_TUTORIAL_VIRTUAL_RANKS=1`` (the test suite sets it; nothing else does), a
    ``-m minips train`` or ``compare`` command runs instead in this process on ``n`` virtual
    ranks (``--virtual-ranks n``: threads of this process, the same run bit for bit as under
    mpiexec at the 2 and 4 ranks the steps use, tests/test_virtual_equals_mpi.py; see
    :func:`_run_here`), which spares the tests a Python start-up per rank. Any other command,
    and every run of a step outside the tests, uses mpiexec.

    Raises:
        RuntimeError: the command failed (its output is in the message).
    """
    cmd = ["mpiexec", "-n", str(n), sys.executable, *map(str, args)]
    shown = ["mpiexec", "-n", str(n), "python", *map(_shown, args)]
    print("$ " + " ".join(shlex.quote(c) for c in shown), flush=True)
    t0 = time.perf_counter()
    if _flag("MINIPS_TUTORIAL_VIRTUAL_RANKS") and [str(a) for a in args[:3]] in (["-m", "minips", "train"],
                                                                                 ["-m", "minips", "compare"]):
        print(f"(run on {n} virtual ranks in this process: MINIPS_TUTORIAL_VIRTUAL_RANKS=1)", flush=True)
        returncode, out = _run_here([*args[2:], "--virtual-ranks", n], env)
    else:
        e = dict(os.environ)
        for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"):
            e.pop(var, None)  # a fresh job, not a child of ours
        e.update(_CHILD_ENV)
        e.update(env or {})
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=e)
        returncode, out = p.returncode, p.stdout + p.stderr
    if returncode != 0:
        raise RuntimeError(f"the command failed with exit status {returncode}:\n{out}")
    if not quiet:
        print(out.rstrip())
    print(f"(took {time.perf_counter() - t0:.1f} s)", flush=True)
    return out


def _shown(a) -> str:
    """An argument as a student would type it: paths relative to the repository root."""
    return _rel(a) if isinstance(a, Path) else str(a)


def minips_cli(args: list, timeout: float = 900, quiet: bool = False, env: dict | None = None) -> str:
    """Run ``python -m minips ARGS...`` in one process (printed first, like :func:`mpiexec`),
    with extra environment variables ``env`` (shown before the command); in the tests
    (``MINIPS_TUTORIAL_VIRTUAL_RANKS=1``) in this process (:func:`_run_here`)."""
    shown = [*(f"{k}={v}" for k, v in (env or {}).items()), "python", "-m", "minips", *map(_shown, args)]
    print("$ " + " ".join(shlex.quote(c) for c in shown), flush=True)
    t0 = time.perf_counter()
    if _flag("MINIPS_TUTORIAL_VIRTUAL_RANKS"):
        returncode, out = _run_here(args, env)
    else:
        e = dict(os.environ)
        e["MINIPS_MPI"] = "0"
        e.update(_CHILD_ENV)
        e.update(env or {})
        p = subprocess.run([sys.executable, "-m", "minips", *map(str, args)], cwd=ROOT, capture_output=True,
                           text=True, timeout=timeout, env=e)
        returncode, out = p.returncode, p.stdout + p.stderr
    if returncode != 0:
        raise RuntimeError(f"the command failed with exit status {returncode}:\n{out}")
    if not quiet:
        print(out.rstrip())
    print(f"(took {time.perf_counter() - t0:.1f} s)", flush=True)
    return out


def _run_here(args: list, env: dict | None) -> tuple[int, str]:
    """Run ``python -m minips ARGS...`` in this process, not as a new one: the tests only
    (``MINIPS_TUTORIAL_VIRTUAL_RANKS=1``), where a command's own Python start-up (about 1 s
    of CPU importing NumPy and Numba and loading the kernels this process has loaded
    already) is most of what it costs. The same ``minips.cli.main`` runs, with MPI off
    (``MINIPS_MPI=0``, as :func:`minips_cli` sets for its process) and ``env`` set while it
    runs; its output is captured as the subprocess's would be (and written to stderr before an
    exception that escapes the command). No time limit, unlike the subprocess's ``timeout``.
    Returns (exit status, output)."""
    import contextlib
    import io

    from minips.cli import main
    if int(os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 1) > 1:
        raise RuntimeError("MINIPS_TUTORIAL_VIRTUAL_RANKS runs commands in the step's process: "
                           "not from a step that runs on several ranks")
    extra = {"MINIPS_MPI": "0", **_CHILD_ENV, **{k: str(v) for k, v in (env or {}).items()}}
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:  # argparse's refusals
                code = e.code if isinstance(e.code, int) else (1 if e.code else 0)
            except BaseException:  # the command's own output first, then the exception
                sys.__stderr__.write(buf.getvalue())
                raise
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return int(code or 0), buf.getvalue()


def _notebook_file(step: str) -> Path:
    """The file of the notebook this kernel runs: the one Jupyter names (``JPY_SESSION_NAME``,
    relative to the folder it was started in), else ``<step>.ipynb`` (made by ``jupytext --to
    ipynb``) or ``<step>.py`` (opened as a notebook through jupytext), whichever was saved
    last, in the kernel's folder and then in ``tutorials/``.

    Raises:
        FileNotFoundError: none of them exists.
    """
    cands = []
    session = os.environ.get("JPY_SESSION_NAME")
    if session:
        cands += [Path(session), Path.cwd() / Path(session).name]
    for d in (Path.cwd(), HERE):
        pair = [c for c in (d / f"{step}.ipynb", d / f"{step}.py") if c.is_file()]
        cands.append(max(pair, key=lambda c: c.stat().st_mtime) if pair else d / f"{step}.ipynb")
    for c in cands:
        if c.suffix in (".ipynb", ".py") and c.is_file():
            return c.resolve()
    raise FileNotFoundError(f"run_on_ranks: found no notebook of {step} (looked for "
                            f"{', '.join(str(c) for c in cands)}); save the notebook first")


def run_on_ranks(n: int | None = None) -> None:
    """In Jupyter: run this step's notebook as last saved, your answers included, under
    ``mpiexec -n n`` (``n``: the ranks the step is meant for), showing its output as it
    comes and then the figures it saved. Outside Jupyter (a script, under mpiexec or not)
    it does nothing and returns None. The run writes its figures and runs where the
    script would (``runs/tutorials/<step>/``), apart from the one-process notebook's.

    Save the notebook first: the file is what runs (the kernel cannot see unsaved edits).

    Raises:
        RanksRunFailed: the run stopped (an exercise not done or not right, an error: the
            message is in the output shown above).
        FileNotFoundError: no saved notebook of this step was found.
    """
    if not IN_NOTEBOOK:
        return None
    if _mpi_step is None:
        raise RuntimeError("run_on_ranks: this is not an MPI step (require_ranks was not called)")
    step, meant, _ = _mpi_step
    n = n or meant
    src = _notebook_file(step)
    saved = time.strftime("%H:%M:%S", time.localtime(src.stat().st_mtime))
    print(f"Running {_rel(src)} as saved at {saved} on {n} ranks (save the notebook first to run your latest "
          "edits):", flush=True)
    runner = HERE / "_run_notebook.py"
    print("$ " + " ".join(shlex.quote(c) for c in ["mpiexec", "-n", str(n), "python", _rel(runner), _rel(src)]),
          flush=True)
    e = dict(os.environ)
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "MPI_LOCALNRANKS", "HYDRA_CONTROL_FD"):
        e.pop(var, None)
    e.update(_CHILD_ENV)
    t0 = time.perf_counter()
    p = subprocess.Popen(["mpiexec", "-n", str(n), sys.executable, str(runner), str(src)], cwd=Path.cwd(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
    figures = []
    try:
        for line in p.stdout:
            print(line, end="", flush=True)
            m = re.match(r"\[figure saved: (.+)\]$", line.strip())
            if m:
                figures.append(Path(m.group(1)))
        rc = p.wait()
    except KeyboardInterrupt:   # the notebook's stop button: end the job too
        p.terminate()
        p.wait()
        raise
    print(f"(took {time.perf_counter() - t0:.1f} s)", flush=True)
    for f in figures:
        show_png(f)
    if rc != 0:
        raise RanksRunFailed(f"the run on {n} ranks stopped (exit status {rc}); its output is above")


# --- outputs and figures -------------------------------------------------------------------
def _out_root() -> Path:
    return Path(os.environ.get("MINIPS_TUTORIAL_OUT") or ROOT / "runs" / "tutorials")


def out_dir(step: str) -> Path:
    """``runs/tutorials/<step>`` (created), or ``$MINIPS_TUTORIAL_OUT/<step>``; for an
    MPI step run on another number of ranks than it is meant for (see
    :func:`require_ranks`), its subfolder ``1-process`` (or ``<P>-ranks``), so a
    one-process notebook run never overwrites the figures and runs of the real one."""
    d = _out_root() / step
    if _mpi_step is not None and _ranks_folder(_mpi_step[2], _mpi_step[1]):
        d = d / _ranks_folder(_mpi_step[2], _mpi_step[1])
    if rank() == 0:
        d.mkdir(parents=True, exist_ok=True)
    return d


def show(fig, path) -> Path:
    """Save ``fig`` as a PNG at ``path``; display it too when running in Jupyter."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    if _flag("MINIPS_CHECK_FIGURES"):  # the tests: no overlapping or cut-off text, no repeated legend entry
        from minips.plots import layout_problems
        problems = layout_problems(fig)
        if problems:
            raise AssertionError(f"figure {path.name}: " + "; ".join(problems))
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    if IN_NOTEBOOK:
        from IPython.display import display
        display(fig)
    plt.close(fig)
    print(f"[figure saved: {_rel(path)}]", flush=True)
    return path


def show_png(path) -> None:
    """Display an existing PNG in Jupyter; print its path otherwise."""
    if IN_NOTEBOOK:
        from IPython.display import Image, display
        display(Image(filename=str(path)))
    print(f"[figure: {_rel(Path(path))}]", flush=True)


def _rel(p: Path) -> str:
    """``p`` as the user can type it where they run the step: relative to the
    current directory when it is below it, else absolute."""
    p = Path(p).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


# --- exercises ---------------------------------------------------------------------------------
class ExerciseNotDone(NotImplementedError):
    """An exercise still holds its placeholder."""


class ExerciseWrong(AssertionError):
    """An answer failed its check; the message has been printed once (by rank 0)."""


class RanksRunFailed(RuntimeError):
    """The run of a notebook on several ranks (:func:`run_on_ranks`) stopped; its output is shown above."""


def _message_alone(shell, etype, value, tb, tb_offset=None):
    """IPython's handler of the exceptions that stop a step on purpose (an exercise not done
    or not right, a failed run on ranks): it shows their message, which says what to do,
    without the traceback through _common.py above it. The cell still ends in error, so
    "Run All" stops there, as a script does."""
    shell._showtraceback(etype, value, [str(value)])


def _install_notebook_handler() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "_showtraceback"):
        shell.set_custom_exc((ExerciseNotDone, ExerciseWrong, RanksRunFailed), _message_alone)


if IN_NOTEBOOK:
    _install_notebook_handler()


def _check_once(exercise_id, ex, answer, context) -> None:
    """Run the check; a failure is printed once, not once per rank: under MPI
    the ranks compare their outcomes (the checks are collective, so every rank
    gets here) and rank 0 prints each distinct message, then every rank stops."""
    try:
        ex.check(answer, **context)
        failure = None
    except AssertionError as e:
        failure = str(e)
    comm = context.get("comm")
    failures = comm.allgather(failure) if comm is not None and comm.size > 1 else [failure]
    if not any(f is not None for f in failures):
        return
    lines, seen = [], set()
    for r, f in enumerate(failures):
        if f is not None and f not in seen:
            seen.add(f)
            lines.append(f if len(failures) == 1 or len(set(failures)) == 1 else f"(rank {r}) {f}")
    msg = f"Exercise {exercise_id} is not right yet: " + "\n".join(lines)
    if rank() == 0 and not IN_NOTEBOOK:  # in Jupyter the error shows it (_message_alone)
        print(f"\n{msg}", file=sys.stderr, flush=True)
    raise ExerciseWrong(msg)


def solution(exercise_id: str):
    """The reference answer to an exercise, from ``tutorials/solutions/<step>.py``."""
    import checks

    ex = checks.EXERCISES[exercise_id]
    return getattr(load_solutions(ex.step), ex.name)


def load_solutions(step: str):
    """Import ``tutorials/solutions/<step>.py`` (file names start with digits,
    so ``import`` cannot name them)."""
    path = HERE / "solutions" / f"{step}.py"
    mod_name = f"solutions_{step}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


def exercise(exercise_id: str, answer, **context):
    """Check your answer to exercise ``exercise_id``; returns the answer to use next.

    Prints "correct" when the check passes. Raises ``AssertionError`` (with
    what is wrong) when it fails, and :class:`ExerciseNotDone` while the
    placeholder is still there, unless MINIPS_TUTORIAL_SOLUTIONS=1 (then the
    reference solution is checked and returned instead).
    """
    import checks

    ex = checks.EXERCISES[exercise_id]
    try:
        _check_once(exercise_id, ex, answer, context)
    except NotImplementedError:
        sol_file = _rel(HERE / "solutions" / f"{ex.step}.py")
        if not solutions_on():
            step = _rel(HERE / (ex.step + ".py"))
            where = ("the cell above; then run both cells again" if IN_NOTEBOOK else
                     f"{step}; then run the step again")
            how = ("run `import os; os.environ[\"MINIPS_TUTORIAL_SOLUTIONS\"] = \"1\"` (or "
                   "`%env MINIPS_TUTORIAL_SOLUTIONS=1`) in a cell of this notebook, then run this cell again"
                   if IN_NOTEBOOK else f"run the step as `MINIPS_TUTORIAL_SOLUTIONS=1 python {step}`")
            raise ExerciseNotDone(
                f"Exercise {exercise_id} is not done yet: replace the `raise NotImplementedError` in "
                f"`{ex.name}` with your code ({where}).\n"
                f"To go on without it, set MINIPS_TUTORIAL_SOLUTIONS=1: {how} (the reference answer in "
                f"{sol_file} is then used).") from None
        say(f"Exercise {exercise_id}: not done yet; using the reference solution ({sol_file}).")
        answer = solution(exercise_id)
        ex.check(answer, **context)
        say(f"Exercise {exercise_id}: the reference solution passes the check.")
        return answer
    say(f"Exercise {exercise_id}: correct. {ex.praise}".rstrip())
    return answer
