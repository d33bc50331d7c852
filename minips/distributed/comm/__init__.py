"""The communication layer: :class:`Comm`'s interface and its two back-ends.

- :mod:`.core`: :class:`Comm` (its state, node layout, request life cycle and
  abort), assembled from a mixin per family of primitives:
  :mod:`.collectives` (allreduce, allgatherv, broadcast, scalar and object
  reductions), :mod:`.neighbor` (:class:`NeighborGraph` and its exchanges),
  :mod:`.point_to_point` (sendrecv, iexchange) and :mod:`.meter` (network
  emulation and byte accounting);
- :mod:`.request`: :class:`Request`, the progress thread, :class:`JobAborted`;
- :mod:`.buffers`: the byte view MPI gets, and the read-only locks on buffers
  in flight;
- :mod:`.hierarchical`: the hierarchical allreduce (shared memory inside a
  node, one message per node across);
- :mod:`.mpi`: ranks are processes started by ``mpiexec`` (the only module
  of minips that imports mpi4py);
- :mod:`.virtual`: ranks are threads of one process (``--virtual-ranks P``),
  behind a communicator that answers the same mpi4py calls.

:func:`get_comm` returns the world of the caller: the process's (MPI, or one
rank without ``mpiexec``), or, in a thread that :func:`.virtual.run` started,
that virtual rank's own.
"""
from __future__ import annotations

import sys
import threading
import time
import traceback

from .core import ALLREDUCE_MODES, PROGRESS_MODES, Comm
from .neighbor import NeighborGraph
from .request import JobAborted, Request
from .mpi import launched_by_mpi, launcher_world, stop_hint

__all__ = ["ALLREDUCE_MODES", "PROGRESS_MODES", "Comm", "JobAborted", "NeighborGraph", "Request", "get_comm",
           "launched_by_mpi", "run_or_abort", "abort_on_exception", "world_size", "in_virtual_rank", "fail_before_mpi",
           "launcher_world", "mpi_started", "set_rank_world"]

_world: Comm | None = None      # the process's world (MPI, or one rank)
_rank_local = threading.local()  # .comm: a virtual rank's world (set by virtual.run in its thread)


def set_rank_world(comm: Comm | None) -> None:
    """Make ``comm`` the world of the calling thread (a virtual rank); None clears it.
    Only :func:`.virtual.run` calls it, around each virtual rank's thread."""
    _rank_local.comm = comm


def in_virtual_rank() -> bool:
    """True in a thread that runs a virtual rank (:func:`.virtual.run`)."""
    return getattr(_rank_local, "comm", None) is not None


def get_comm(network=None, progress: str = "poll", allreduce: str = "auto", ranks_per_node: int | None = None) -> Comm:
    """The caller's world :class:`Comm`: a virtual rank's own, else the
    process's, created on first use with these options (later calls with other
    options reconfigure network, progress, allreduce mode and ranks per node).

    Raises:
        ValueError: unknown progress mode, network or allreduce mode; ranks
            per node outside 1..P.
    """
    global _world
    comm = getattr(_rank_local, "comm", None)
    if comm is not None:
        comm.reconfigure(network, progress, allreduce, ranks_per_node)
        return comm
    if _world is None:
        _world = Comm(network=network, progress=progress, allreduce=allreduce, ranks_per_node=ranks_per_node)
    else:
        _world.reconfigure(network, progress, allreduce, ranks_per_node)
    return _world


def mpi_started() -> bool:
    """Whether the caller's world communicator exists: the process's was
    created (:func:`get_comm`), or the caller is a virtual rank (whose world
    exists before its code runs)."""
    return _world is not None or in_virtual_rank()


def world_size() -> int:
    """Ranks of the caller's world as far as it exists (1 before MPI started)."""
    comm = getattr(_rank_local, "comm", None) or _world
    return comm.size if comm is not None else 1


def run_or_abort(fn, *args, **kwargs):
    """Call ``fn``; if it raises on any rank of a multi-rank job, print the error
    and abort the whole job (``MPI_Abort``) instead of letting the other ranks
    wait forever in their next collective. Returns ``fn``'s result."""
    try:
        return fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001
        comm = getattr(_rank_local, "comm", None) or _world
        if comm is not None and comm.size > 1:
            abort_on_exception(comm, e)
        raise


def abort_on_exception(comm: Comm, exc: BaseException) -> None:
    """Report ``exc`` and abort the job (see :meth:`Comm.abort`).

    Any exception that ends one rank of a running multi-rank job must end them
    all, ``KeyboardInterrupt`` (SIGINT reaching one process before the stop
    protocol's handler is installed) and ``SystemExit``
    (``sys.exit`` on one rank) included: the other ranks would otherwise wait
    forever in their next collective. :class:`JobAborted` (this rank is
    ending because another aborted) is raised again as it is."""
    if isinstance(exc, JobAborted):
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        comm.abort("interrupted (SIGINT) on this rank; ending every rank (to stop a run and keep a "
                   f"checkpoint, {stop_hint()})", code=130)
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) and exc.code else 1
        comm.abort(f"this rank exited (sys.exit({exc.code!r})) while the others run; ending every rank", code=code)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    comm.abort(f"error, aborting all ranks:\n{tb}")


#: Seconds a rank other than 0 that failed before MPI started waits for rank 0
#: (which, given the same options, fails alike) to end the job before it
#: reports its own error (see :func:`fail_before_mpi`).
FAIL_BEFORE_MPI_GRACE_S = 5.0


def fail_before_mpi(message: str, code: int) -> int:
    """Report an error that a process caught before MPI started (a bad option,
    a Ctrl-C during its imports) once for the whole job, and end every rank.

    Without MPI, or on one rank: prints ``message`` to stderr and returns
    ``code``. Under a launcher with several ranks, a plain exit would print the
    message once per rank (every rank parses the same options) and, when only
    some ranks fail, leave the others waiting in ``MPI_Init``. So the rank
    starts MPI too (:func:`get_comm`: ``MPI_Init`` and the first barrier,
    which the healthy ranks reach on their way), then rank 0 prints the message
    and aborts the job; another rank first waits
    :data:`FAIL_BEFORE_MPI_GRACE_S` seconds for rank 0, which fails alike when
    the error comes from the options, and only then prints its own message
    (prefixed with its rank) and aborts. Does not return then. (Virtual ranks
    never get here: their world exists before their code runs, so their
    errors take :meth:`Comm.abort`'s path.)
    """
    rank, size = launcher_world()
    if launched_by_mpi() and size != 1:
        try:
            comm = get_comm()
        except BaseException:  # noqa: BLE001 - MPI cannot start (missing, or its own error): say it here
            comm = None
        if comm is not None and comm.size > 1:
            if comm.rank != 0:
                time.sleep(FAIL_BEFORE_MPI_GRACE_S)
            comm.abort(message, code, prefix=comm.rank != 0)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    return code
