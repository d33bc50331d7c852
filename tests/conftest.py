"""Shared test helpers, and how the suite shares the cores.

The README's test command runs one pytest-xdist worker per core (setup.cfg's
``addopts``). Each worker then computes with one Numba and one BLAS thread
(set here, before NumPy and Numba load), as the subprocesses the tests start
do (:func:`subprocess_env`): two workers of two threads each on two cores
would wait for each other's descheduled threads. Tests marked ``mpi`` (those
that launch ``mpiexec``; virtual ranks are not) share the cores through a lock
(:func:`cores_for_ranks`, :func:`mpi_jobs_share_the_cores`).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402  (after the thread counts)
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


#: the file whose lock the xdist workers share (:func:`cores_for_ranks`); set per session
_MPI_LOCK: Path | None = None


@contextlib.contextmanager
def cores_for_ranks(ranks: int):
    """Hold the workers' shared MPI lock while ``ranks`` MPI processes run: a
    job of more than two ranks alone, a two-rank one beside other two-rank ones
    and the tests that launch no ranks. Two ``mpiexec`` jobs of 4 or 8 ranks at
    once would put up to 16 busy-polling ranks on 2 cores and slow each other
    into timeouts. Without xdist (one test at a time) it does nothing."""
    if _MPI_LOCK is None or os.environ.get("PYTEST_XDIST_WORKER") is None:
        yield
        return
    with open(_MPI_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if ranks > 2 else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def mpi_jobs_share_the_cores(request, tmp_path_factory):
    """Under pytest-xdist (the README's test command runs one worker per core),
    a test marked ``mpi`` holds :func:`cores_for_ranks` for its whole run (N
    ranks for ``mpi(ranks=N)``, 2 for a plain ``mpi``); meanwhile the other
    workers go on with tests that launch no ranks. A test marked
    ``mpi(ranks=N, lock="in test")`` takes it itself, around its ``mpiexec``
    only, so that what it runs in this process (virtual ranks: threads that
    share one core under the GIL) does not keep the other core idle."""
    global _MPI_LOCK
    _MPI_LOCK = tmp_path_factory.getbasetemp().parent / "mpi-tests.lock"  # one per-session root above workers'
    marker = request.node.get_closest_marker("mpi")
    if marker is None or marker.kwargs.get("lock") == "in test":
        yield
        return
    with cores_for_ranks(marker.kwargs.get("ranks", 2)):
        yield


@pytest.fixture(autouse=True)
def signal_handlers_are_put_back(request):
    """A test (or the minips code it runs in this process) that leaves SIGINT,
    SIGTERM or SIGUSR1 handled otherwise than it found them would change what
    the next tests in this worker see (one suite run found SIGINT ignored in a
    later test of tests/test_virtual.py): the handlers are put back after each
    test, with a warning naming the test, so the summary shows where."""
    import signal
    import warnings
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
    before = {s: signal.getsignal(s) for s in sigs}
    yield
    import threading
    if threading.current_thread() is not threading.main_thread():  # pragma: no cover - pytest runs tests in it
        return
    for s in sigs:
        now = signal.getsignal(s)
        if now is not before[s]:
            signal.signal(s, before[s])
            warnings.warn(f"{request.node.nodeid} left {signal.Signals(s).name} handled by {now!r} "
                          f"(was {before[s]!r}): put back", stacklevel=2)


def pytest_ignore_collect(collection_path, config):
    """The notebook tests (marker ``notebooks``, the notebooks extra) are
    collected only when ``-m`` names them (as .ci/run does): the default run's
    ``-m "not notebooks"`` would deselect them anyway, and without the extra
    their module could not be imported."""
    if collection_path.name == "test_tutorial_notebooks.py":
        wanted = (config.option.markexpr or "").replace("not notebooks", "")
        return "notebooks" not in wanted or None
    return None


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` first, in their file order: the xdist scheduler
    hands tests out in this order, so the long ones start early and the end of
    the run is short tests that fill both cores (longest first)."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="module")
def one_numba_thread():
    """Runs compared bit for bit use one Numba thread: left to itself each run
    picks its count from the machine's load, and a parallel reduction's last
    bits depend on the count (a resume reuses its checkpoint's count; see
    tests/test_run_folder.py::test_a_resume_reuses_the_checkpoints_thread_count).
    A module asks for it with ``pytestmark = pytest.mark.usefixtures("one_numba_thread")``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NUMBA_NUM_THREADS", "1")
        yield


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def figures(monkeypatch):
    """Capture each figure minips.plots saves (minips.plots.style.save) (still written, not closed) by
    file name, so a test can read its axes, titles and legends."""
    from minips.plots import style
    got = {}

    def keep(fig, path):
        fig.savefig(path, dpi=120, bbox_inches="tight")
        got[str(path).rsplit("/", 1)[-1]] = fig
    monkeypatch.setattr(style, "save", keep)
    yield got
    import matplotlib.pyplot as plt
    plt.close("all")


def subprocess_env(extra=None):
    """Environment for subprocesses: no inherited MPI launcher variables, and one
    Numba/BLAS thread (the tests check correctness; on a loaded 2-core machine
    parallel loops whose threads get descheduled make runs 10x slower)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    e.setdefault("NUMBA_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    e.update(extra or {})
    return e


def mpiexec_args(n: int) -> list[str]:
    """``mpiexec -n n`` (the one on PATH) with the flags its launcher needs to
    start ranks from a test: Open MPI's ``--allow-run-as-root`` (as root) and
    ``--oversubscribe`` (more ranks than cores); none for MPICH or Intel MPI
    (:meth:`minips.distributed.comm.mpi.Launcher.job_args`)."""
    from minips.bench.launch import mpiexec_command
    import shutil
    found = shutil.which("mpiexec")
    if found is None:  # pragma: no cover - the mpi extra installs it
        pytest.fail("mpiexec not found: pip install -e '.[mpi,test]'", pytrace=False)
    return mpiexec_command(found, n)


def stop_signal():
    """The signal that stops a job of the ``mpiexec`` on PATH with every rank's
    checkpoint: SIGTERM under Hydra (MPICH, Intel MPI), SIGUSR1 under Open MPI
    (whose mpiexec kills the ranks on SIGTERM)."""
    import shutil
    import signal
    from minips.distributed.comm.mpi import mpiexec_launcher
    return signal.Signals[mpiexec_launcher(shutil.which("mpiexec")).stop_signal]


def launcher_lines(text: str) -> list[str]:
    """The non-blank lines of a job's output, less the launcher's own closing
    report of an abort, which no rank can silence: Open MPI's mpiexec prints
    "prterun has exited due to process rank R ... calling "abort"" between
    two lines of dashes (and a NUL) after any rank's ``MPI_Abort``. Every
    other line stays (the "MPI_ABORT was invoked" banner of Open MPI's
    library, which minips avoids, included)."""
    lines = [ln for ln in text.replace("\x00", "").splitlines() if ln.strip()]
    dashes = [i for i, ln in enumerate(lines) if set(ln.strip()) == {"-"}]
    drop = set()
    for a, b in zip(dashes, dashes[1:]):
        block = " ".join(lines[a + 1:b])
        if "has exited due to process rank" in block and '"abort"' in block:
            drop.update(range(a, b + 1))
    return [ln for i, ln in enumerate(lines) if i not in drop]


def load_script(name: str):
    """The module of ``scripts/NAME.py``, loaded from its file (scripts/ is not a package). It is
    registered in ``sys.modules`` under NAME first: a dataclass defined in it looks its module up."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_cli(args, timeout=120, env=None, cwd=None, process=False):
    """``python -m minips ARGS``, returning what ``subprocess.run`` would
    (``returncode``, ``stdout``, ``stderr``).

    By default the command runs in this process: :func:`minips.cli.main` with
    ``ARGS`` from the repository root, its output captured, the environment,
    the working directory and the signal handlers restored afterwards. That is
    the command's own code path (the same one-line errors and exit status; an
    exception that escapes ``main`` gives status 1 and its traceback in
    ``stderr``, as Python would; warnings are printed to ``stderr`` under a new
    interpreter's filters, not recorded by pytest, so a test sees a NumPy
    RuntimeWarning where a user would), without the 1.3-2 s of CPU a new
    process spends importing NumPy and Numba. ``process=True`` (or ``env`` or ``cwd``)
    starts a real ``python -m minips`` instead: for what only a process shows
    (its start-up, the environment it reads at import, signals, exit codes of
    the interpreter itself).
    """
    if process or env is not None or cwd is not None:
        e = subprocess_env(env)
        return subprocess.run([sys.executable, "-m", "minips", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, env=e, cwd=cwd or ROOT)
    import io
    import signal
    import traceback
    import warnings
    from types import SimpleNamespace

    from minips.cli import main
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.resetwarnings()  # a new interpreter's filters: each warning once per place, printed
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                code = main([str(a) for a in args])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:  # noqa: BLE001 - what the interpreter would print and exit 1 with
                err.write(traceback.format_exc())
                code = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for s, h in saved_signals.items():
            signal.signal(s, h)
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def run_ranks(n, script, *argv, timeout=120, mpi=False):
    """Run the test worker ``script`` (a path) with ``argv`` on n ranks and
    return what a ``subprocess.run`` would (``returncode``, ``stdout``, ``stderr``).

    By default the ranks are virtual (threads of this process,
    :mod:`minips.distributed.comm.virtual`): the worker's ``__main__`` block
    runs in every rank's thread, as ``mpiexec`` would run it in every process,
    without the seconds each process spends starting. Tests of an algorithm's
    rule use this; ``mpi=True`` launches ``mpiexec -n n`` (the communication
    layer, progress modes, signals, hangs, and virtual == MPI). n = 0: one
    plain process (in process: one virtual rank). An error on a virtual rank
    gives returncode != 0 and its message (or traceback) in ``stderr``. What
    the worker changes in this process's modules is not undone, except the
    algorithm registry (restored: tests/toy_launch.py adds to it).
    """
    import contextlib
    import io
    import runpy
    import traceback
    from types import SimpleNamespace

    if mpi:
        cmd = [sys.executable, str(script), *argv]
        if n:
            cmd = [*mpiexec_args(n), *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=ROOT)
    from minips.distributed.algorithms import ALGORITHMS
    from minips.distributed.comm import virtual
    saved_argv, saved_path, saved_registry = sys.argv[:], sys.path[:], dict(ALGORITHMS)
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(Path(script).parent))  # as for a script: its folder first
    out, err, code = io.StringIO(), io.StringIO(), 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            virtual.run(max(n, 1), runpy.run_path, str(script), run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001 - reported as a failed job, as mpiexec would
        code = 1
        err.write(traceback.format_exc())
    finally:  # what a worker changed in this process (tests/toy_launch.py extends the registry) is undone
        sys.argv = saved_argv
        sys.path[:] = saved_path
        ALGORITHMS.clear()
        ALGORITHMS.update(saved_registry)
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def cli_on_ranks(n, args, timeout=120, mpi=False):
    """``python -m minips ARGS`` (train, compare) on n ranks, returning what
    ``subprocess.run`` would: by default ``--virtual-ranks n`` in this process
    (n = 0: one virtual rank, which trains as one plain process does), with
    ``mpi=True`` under ``mpiexec -n n`` (n = 0: one plain process)."""
    import contextlib
    import io
    from types import SimpleNamespace

    args = [str(a) for a in args]
    if mpi:
        cmd = [sys.executable, "-m", "minips", *args]
        if n:
            cmd = [*mpiexec_args(n), *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=ROOT)
    from minips.cli import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*args, "--virtual-ranks", str(max(n, 1))])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


#: Commands that compile every Numba kernel the tests use into Numba's cache
#: (``cache=True``: ``__pycache__`` beside each source), in two processes, one
#: a core: the convolutions and pools; the MLP with the predictors'
#: loops and the compressors, then the captioner's LSTM. On a fresh clone the
#: cache is empty, and each process a test starts (up to 8 mpiexec ranks at
#: once) would otherwise compile the kernels it calls itself: 10-17 s of CPU
#: each for a ConvNet or an MLP run with pseudo-sync.
WARM_KERNELS = (
    [["train", "--model", "convnet", "--epochs", "1", "--max-steps", "2", "--batch-size", "16"]],
    [["compare", "--model", "mlp", "--epochs", "1", "--max-steps", "2", "--batch-size", "16", "--virtual-ranks", "2",
      "--no-figures",
      "--algos", "sync,pseudo-sync:predictor=local,pseudo-sync:predictor=adaptive,"
                 "pseudo-sync:predictor=adaptive-local,pseudo-sync:predictor=spike,qsgd,topk-sgd,powersgd,gs-sgd,"
                 "choco-sgd,dng,pqasgd"],
     ["train", "--model", "captioner", "--data", "moving-fmnist-captions", "--epochs", "1", "--max-steps", "2",
      "--batch-size", "8"]],
)


#: a decorator, or a dict of njit options, with cache=True (not a docstring's mention)
CACHED_KERNEL = re.compile(r"^\s*(@|\w+ = dict\().*cache=True", re.M)


def numba_cache_is_warm() -> bool:
    """Whether every source file with cached Numba kernels has an index file
    (``*.nbi``) in its ``__pycache__`` at least as new as itself. A guess that
    saves the warm-up's seconds when the cache is filled; Numba itself checks
    each entry against its source and recompiles what is stale."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return False
    sources = [f for folder in (ROOT / "kernels", ROOT / "minips") for f in folder.rglob("*.py")
               if "__pycache__" not in f.parts and CACHED_KERNEL.search(f.read_text(errors="replace"))]
    for src in sources:
        index = list((src.parent / "__pycache__").glob(f"{src.stem}.*.nbi"))
        if not index or max(i.stat().st_mtime for i in index) < src.stat().st_mtime:
            return False
    return True


@contextlib.contextmanager
def warming_numba_cache():
    """Start :data:`WARM_KERNELS` (each list in one process, the lists side by
    side) with one thread each, outputs in a temporary folder; yield while they
    run (the caller does other work meanwhile), then wait for them. A command
    that fails only costs its kernels' warm-up: the tests that use them then
    compile them and report the failure themselves."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="minips-warm-") as tmp:
        env = subprocess_env({"NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
        script = ("import sys\nfrom minips.cli import main\n"
                  "for i, args in enumerate(eval(sys.argv[1])):\n"
                  "    main([*args, '--quiet', '--out', f'{sys.argv[2]}/{i}'])\n")
        procs = [subprocess.Popen([sys.executable, "-c", script, repr(cmds), f"{tmp}/{n}"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for n, cmds in enumerate(WARM_KERNELS)]
        try:
            yield
        except BaseException:  # Ctrl-C or an error meanwhile: stop the warm-up instead of waiting for it
            for proc in procs:
                proc.kill()
                proc.wait()
            raise
        for proc in procs:
            try:
                proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def pytest_configure(config):
    """Once per test session, before any worker starts: compile the project's
    Python files to bytecode (``__pycache__``) and its Numba kernels into
    Numba's cache (:func:`warming_numba_cache`, unless the cache looks warm;
    the bytecode is compiled while the kernels are, the warm-up's longer
    process leaving a core free). Where PYTHONDONTWRITEBYTECODE is set, as on
    some CI machines, every ``python -m minips`` and ``mpiexec`` rank a test
    starts would otherwise compile minips from source again (about 0.3 s of
    CPU per process); reading ``.pyc`` files is allowed either way."""
    if os.environ.get("PYTEST_XDIST_WORKER") or config.option.collectonly:
        return
    import compileall
    warm = os.environ.get("NUMBA_DISABLE_JIT") != "1" and not numba_cache_is_warm()  # nothing to cache without JIT
    with warming_numba_cache() if warm else contextlib.nullcontext():
        for folder in ("minips", "kernels", "tests", "tutorials"):
            compileall.compile_dir(str(ROOT / folder), quiet=2, workers=1)
        write_rewritten_test_modules(config)


def write_rewritten_test_modules(config) -> None:
    """Cache pytest's assert-rewritten code of every test module (``__pycache__/*-pytest-*.pyc``)
    once, here, so that each xdist worker reads it instead of rewriting all of them itself
    (about 4 of the 6 CPU seconds a worker spends collecting). pytest reads such a cache even
    where PYTHONDONTWRITEBYTECODE is set, but then never writes it. Uses pytest's own rewriting
    functions, which are not public: if they move, nothing is cached and the workers rewrite
    the modules as they would without this."""
    try:
        from _pytest.assertion.rewrite import (PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc,
                                               assertstate_key, get_cache_dir)
        state = config.stash[assertstate_key]
    except (ImportError, KeyError):
        return
    for fn in sorted((ROOT / "tests").glob("test_*.py")) + [ROOT / "tests" / "conftest.py"]:
        try:
            pyc = get_cache_dir(fn) / (fn.name[:-3] + PYC_TAIL)
            if _read_pyc(fn, pyc, state.trace) is None:
                pyc.parent.mkdir(parents=True, exist_ok=True)
                source_hash, code = _rewrite_test(fn, config)
                _write_pyc(state, code, source_hash, pyc)
        except (OSError, SyntaxError, TypeError, ValueError):
            # a read-only tree, a module that does not compile (its worker reports that as a
            # collection error), pytest's internals changed: that module is not cached, nothing else
            continue
