"""How many Numba threads each process uses.

On an HPC node several MPI ranks share the cores; if every rank started one
thread per core, the node would run ranks x cores threads and each would wait
for the others (oversubscription). So each rank takes
``cores_on_node // ranks_on_node`` threads (at least 1), unless the user set
``NUMBA_NUM_THREADS`` (then that wins). BLAS threads (OpenBLAS, MKL) are
limited the same way through their environment variables, which must be set
before NumPy loads its BLAS: see :func:`set_blas_env`.
"""
from __future__ import annotations

import os

__all__ = ["cores_on_node", "threads_per_rank", "configure_threads", "set_blas_env"]

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


def set_blas_env(n: int) -> None:
    """Ask BLAS for ``n`` threads, unless the user chose. Takes effect only if
    called before NumPy is first imported (BLAS reads it at load time)."""
    for var in _BLAS_VARS:
        os.environ.setdefault(var, str(n))


def configure_threads(ranks_on_node: int = 1) -> int:
    """Set Numba's thread count for this process once; returns it.

    Also limits BLAS threads through threadpoolctl when it is installed
    (BLAS is already loaded by the time MPI tells us the ranks per node).
    """
    import numba

    n = threads_per_rank(ranks_on_node)
    n = min(n, numba.config.NUMBA_NUM_THREADS)  # cannot exceed the pool size
    numba.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
    except ImportError:
        pass
    return n
