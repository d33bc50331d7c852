"""Launching ``mpiexec`` from a plain process: the one place that finds the
launcher and prepares the environment of the job it starts.

``bench scaling``, ``bench train`` and ``bench study`` each run as one plain
process that launches ``mpiexec -n P python -m minips ...`` for every point
they measure; they share these helpers so that they find the same ``mpiexec``
and give their jobs the same environment. The launcher behind it (MPICH's or
Intel MPI's Hydra, Open MPI's PRRTE) spells its flags for binding, root and
oversubscription; :mod:`minips.distributed.comm.mpi` knows them.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

__all__ = ["MPIEXEC_MISSING", "MpiexecNotFound", "find_mpiexec", "require_mpiexec", "launch_env", "THREAD_VARIABLES",
           "launcher", "mpiexec_command", "bind_args", "binds_to_cores", "flag_args", "load_avg"]

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


def launcher(mpiexec: str | None = None):
    """The :class:`~minips.distributed.comm.mpi.Launcher` behind ``mpiexec``
    (default: :func:`find_mpiexec`'s; Hydra of MPICH when there is none)."""
    from ..distributed.comm.mpi import LAUNCHERS, mpiexec_launcher
    mpiexec = mpiexec or find_mpiexec()
    return mpiexec_launcher(mpiexec) if mpiexec else LAUNCHERS["mpich"]


def mpiexec_command(mpiexec: str, P: int) -> list[str]:
    """``[mpiexec, -n, P]`` and the flags its launcher needs to start P ranks
    from a program (Open MPI's: ``--allow-run-as-root`` as root,
    ``--oversubscribe``; see :meth:`~minips.distributed.comm.mpi.Launcher.job_args`)."""
    return [mpiexec, "-n", str(P), *launcher(mpiexec).job_args()]


def bind_args(P: int, threads: int, cores: int, bind: bool = True, mpiexec: str | None = None) -> list[str]:
    """The binding flags of ``mpiexec -n P`` (``mpiexec``: default
    :func:`find_mpiexec`'s; its launcher spells them) for ranks of ``threads``
    threads each on a node of ``cores`` cores: one core a rank for one thread,
    T cores a rank for T threads (MPICH: ``-bind-to core`` / ``-bind-to
    core:T``; Open MPI: ``--bind-to core`` / ``--map-by slot:PE=T --bind-to
    core``; Intel MPI: ``I_MPI_PIN_DOMAIN``), and no binding when ``bind`` is
    off or the ranks' threads do not fit on the cores (binding would then
    stack ranks on shared cores): no flag for MPICH, the flag that turns the
    default binding off for Open MPI and Intel MPI (:func:`binds_to_cores`
    says which). See :meth:`~minips.distributed.comm.mpi.Launcher.bind_args`.

    A rank of T threads bound to one core runs its threads on that core alone:
    Numba's and the BLAS's spinning workers then take turns on it, 10-20x
    slower than one thread (issue 30, ``docs/bench/kernels-final/``).
    """
    return launcher(mpiexec).bind_args(P, threads, cores, bind)


def binds_to_cores(P: int, threads: int, cores: int, bind: bool = True) -> bool:
    """Whether :func:`bind_args` binds the ranks (``bind`` on and the ranks' threads fit on the cores)."""
    from ..distributed.comm.mpi import cores_fit
    return cores_fit(P, threads, cores, bind)


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
