"""How many Numba threads each process uses.

On an HPC node several MPI ranks share the cores; if every rank started one
thread per core, the node would run ranks x cores threads and each would wait
for the others (oversubscription). So each rank takes
``cores_on_node // ranks_on_node`` threads (at least 1), unless the user set
``NUMBA_NUM_THREADS`` (then that wins). BLAS threads (OpenBLAS, MKL) are
limited the same way through their environment variables, which must be set
before NumPy loads its BLAS: see :func:`set_blas_env`.

On a busy node (other processes computing on the same cores) a parallel
loop ends only when its slowest thread ends, and a thread that lost its core
comes back a scheduler time slice later, at every one of the thousands of
parallel loops of a training step. Measured on 2 cores: 2 threads per rank
were 14-36x slower than 1. Two defences:

- idle threads sleep instead of spinning: :func:`set_passive_wait` sets
  ``OMP_WAIT_POLICY=PASSIVE`` and ``KMP_BLOCKTIME=0`` (GNU and Intel OpenMP,
  Numba's ``omp`` layer) unless the user set them; it runs when
  ``minips.kernels`` is imported, before Numba starts its thread pool;
- :func:`configure_threads` counts the *other* runnable processes
  (``/proc/loadavg``, sampled a few times) and, when they leave fewer free
  cores than the threads asked for, uses only the free cores (at least 1),
  printing the reason. ``NUMBA_NUM_THREADS`` still wins.
"""
from __future__ import annotations

import os

import sys
import time

__all__ = ["cores_on_node", "threads_per_rank", "configure_threads", "set_threads", "set_blas_env",
           "set_passive_wait", "other_runnable", "threads_for_load"]

_BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cores_on_node() -> int:
    """Cores this process may run on (respects taskset/cgroups affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def threads_per_rank(ranks_on_node: int = 1, cores: int | None = None) -> int:
    """``cores // ranks_on_node`` (at least 1), or ``NUMBA_NUM_THREADS`` if set.

    Args:
        ranks_on_node: MPI ranks sharing this node (from a shared-memory split).
        cores: cores on the node; default :func:`cores_on_node`.

    Raises:
        ValueError: ``ranks_on_node < 1`` or NUMBA_NUM_THREADS is not a positive integer.
    """
    if ranks_on_node < 1:
        raise ValueError(f"ranks_on_node must be >= 1, got {ranks_on_node}")
    env = os.environ.get("NUMBA_NUM_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"NUMBA_NUM_THREADS={env!r} is not an integer") from None
        if n < 1:
            raise ValueError(f"NUMBA_NUM_THREADS must be >= 1, got {n}")
        return n
    cores = cores_on_node() if cores is None else cores
    return max(1, cores // ranks_on_node)


def set_passive_wait() -> None:
    """Idle OpenMP threads sleep at once instead of spinning (unless the user chose).
    Must run before the OpenMP runtime is loaded (it reads these at load time)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("KMP_BLOCKTIME", "0")


def other_runnable(mine: int = 1, samples: int = 5, interval: float = 0.02) -> float:
    """Runnable processes/threads on this machine other than ``mine`` (this
    job's own running ranks), the median of ``samples`` reads of the 4th field
    of ``/proc/loadavg``; 0.0 where it cannot be read (not Linux)."""
    vals = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                vals.append(int(f.read().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            return 0.0
        if i + 1 < samples:
            time.sleep(interval)
    vals.sort()
    return float(max(0, vals[len(vals) // 2] - mine))


def threads_for_load(wanted: int, ranks_on_node: int, cores: int, others: float) -> tuple[int, str | None]:
    """Threads per rank when ``others`` runnable processes share ``cores`` with
    ``ranks_on_node`` ranks: ``wanted`` if they all fit, else the free cores per
    rank (at least 1). Returns (threads, reason or None)."""
    free = cores - others
    if wanted <= 1 or ranks_on_node * wanted <= free:
        return wanted, None
    n = max(1, int(free) // ranks_on_node)
    if n >= wanted:
        return wanted, None
    return n, (f"{n} Numba thread(s) per rank instead of {wanted}: {others:.0f} other runnable process(es) on "
               f"{cores} cores leave {max(free, 0):.0f} free for {ranks_on_node} rank(s) (threads that lose "
               "their core stall every parallel loop); set NUMBA_NUM_THREADS to choose")


def set_blas_env(n: int) -> None:
    """Ask BLAS for ``n`` threads, unless the user chose. Takes effect only if
    called before NumPy is first imported (BLAS reads it at load time)."""
    for var in _BLAS_VARS:
        os.environ.setdefault(var, str(n))


def set_threads(n: int, blas: bool = True) -> int:
    """Use ``n`` threads in Numba (capped at its pool size, at least 1; Numba's
    count is per calling thread) and, with ``blas``, through threadpoolctl when
    it is installed, in BLAS (for the whole process); returns the count used."""
    import numba

    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    if blas:
        try:
            from threadpoolctl import threadpool_limits
            threadpool_limits(n)
        except ImportError:
            pass
    return n


def configure_threads(ranks_on_node: int = 1) -> int:
    """Set Numba's thread count for this process once; returns it.

    Also limits BLAS threads through threadpoolctl when it is installed
    (BLAS is already loaded by the time MPI tells us the ranks per node).
    Unless ``NUMBA_NUM_THREADS`` is set, fewer threads are used when other
    processes keep cores busy (:func:`threads_for_load`; the reason is printed
    to stderr).
    """
    import numba

    n = threads_per_rank(ranks_on_node)
    n = min(n, numba.config.NUMBA_NUM_THREADS)  # cannot exceed the pool size
    if n > 1 and not os.environ.get("NUMBA_NUM_THREADS"):
        n, reason = threads_for_load(n, ranks_on_node, cores_on_node(), other_runnable(mine=ranks_on_node))
        if reason:
            print(f"minips: {reason}", file=sys.stderr, flush=True)
    return set_threads(n)
