"""Launching ``mpiexec`` from a plain process: the one place that finds the
launcher and prepares the environment of the job it starts.

``bench scaling``, ``bench train`` and ``bench study`` each run as one plain
process that launches ``mpiexec -n P python -m minips ...`` for every point
they measure; they share these helpers so that they find the same ``mpiexec``
and give their jobs the same environment.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["MPIEXEC_MISSING", "MpiexecNotFound", "find_mpiexec", "require_mpiexec", "launch_env", "THREAD_VARIABLES",
           "bind_args", "flag_args", "load_avg"]

#: the one-line fix printed when no ``mpiexec`` is found
MPIEXEC_MISSING = ("mpiexec not found on PATH: install the mpi extra (pip install -e '.[mpi]') "
                   "or load your site's MPI module")

#: the variables that set how many threads Numba and the BLAS libraries start in each rank
THREAD_VARIABLES = ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


class MpiexecNotFound(ValueError):
    """No ``mpiexec`` next to this Python nor on PATH (the message is :data:`MPIEXEC_MISSING`)."""


def find_mpiexec() -> str | None:
    """The ``mpiexec`` next to this Python (the mpich wheel in a venv), else the
    one on PATH, else None."""
    sibling = Path(sys.executable).parent / "mpiexec"
    return str(sibling) if sibling.exists() else shutil.which("mpiexec")


def require_mpiexec() -> str:
    """:func:`find_mpiexec`, or an error naming the fix.

    Raises:
        MpiexecNotFound: no ``mpiexec`` found (message :data:`MPIEXEC_MISSING`).
    """
    found = find_mpiexec()
    if not found:
        raise MpiexecNotFound(MPIEXEC_MISSING)
    return found


def launch_env(threads: int | None = None) -> dict:
    """This process's environment for an ``mpiexec`` it launches: without the
    variables of an MPI job this process may itself run in (``PMI_*``,
    ``HYDRA_*``, ``MPI_LOCAL*``: a launcher that inherits them believes it is
    a rank of that job), and with ``threads`` Numba/BLAS threads per rank
    (:data:`THREAD_VARIABLES`) when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI_LOCAL"))}
    if threads is not None:
        env.update({v: str(threads) for v in THREAD_VARIABLES})
    return env


def bind_args(P: int, threads: int, cores: int, bind: bool = True) -> list[str]:
    """The binding flags of ``mpiexec -n P`` (MPICH's Hydra) for ranks of
    ``threads`` threads each on a node of ``cores`` cores: ``-bind-to core``
    (one core a rank) for one thread, ``-bind-to core:T`` (T cores a rank) for
    T threads, and nothing when ``bind`` is off or the ranks' threads do not
    fit on the cores (binding would then stack ranks on shared cores).

    A rank of T threads bound to one core runs its threads on that core alone:
    Numba's and the BLAS's spinning workers then take turns on it, 10-20x
    slower than one thread (issue 30, ``docs/bench/kernels-final/``).
    """
    if not bind or threads < 1 or P * threads > cores:
        return []
    return ["-bind-to", "core" if threads == 1 else f"core:{threads}"]


def flag_args(flags: dict) -> list[str]:
    """Command-line flags of a launched ``minips train`` from ``{option: value}``:
    ``bucket_mb=4`` -> ``--bucket-mb 4``; a bool option ``True`` -> ``--name``,
    ``False`` -> ``--no-name`` (train's on/off flags)."""
    args = []
    for k, v in flags.items():
        name = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            args.append(name if v else "--no-" + name[2:])
        else:
            args += [name, str(v)]
    return args


def load_avg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded to 0.01, recorded around a
    launched job; None where the OS has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
