"""Running a virtual job: :func:`run` starts one thread per rank, relays signals, joins them and ends the job.

Each rank's thread gets its own :class:`~minips.distributed.comm.Comm` on a
:class:`~.communicator.VirtualComm`; a rank that raises aborts the world, and
:func:`run` raises the first rank's exception in the calling thread.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

from ..core import Comm
from ..mpi import STOP_SIGNALS
from ..request import JobAborted
from .communicator import VirtualComm
from .world import World

__all__ = ["MAX_RANKS", "run"]

#: the largest number of virtual ranks accepted (one thread each)
MAX_RANKS = 1024


def _exit_code(e: BaseException) -> int:
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) and e.code else (0 if e.code in (None, 0) else 1)
    if isinstance(e, KeyboardInterrupt):
        return 130
    return 1


@contextmanager
def _one_blas_thread():
    """BLAS limited to one thread for the whole process while the ranks run."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency of the package
        yield
        return
    with threadpool_limits(1):
        yield


@contextmanager
def _relay_signals(world: World):
    """In the main thread: SIGINT, SIGTERM and SIGUSR1 go to the ranks' handlers; with
    none registered, or at a second signal, they abort the job."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []

    def handler(signum, frame):
        if not seen and world.signals.deliver(signum, frame):
            seen.append(signum)
            return
        if world.abort(None, 128 + signum):  # the first abort says why (a later signal ends the wait for the ranks)
            sys.stderr.write(f"[minips] {signal.Signals(signum).name}: ending every virtual rank\n")
            sys.stderr.flush()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _join(ended, world: World, grace_s: float = 30.0) -> None:
    """Wait until every rank has ended (``ended``: one Event per rank, set when
    its thread leaves); after an abort, give the computing ones ``grace_s``
    seconds to reach their next call (the threads are daemons: one that never
    returns does not keep the process alive). Events, not ``Thread.join``: a
    join interrupted by Ctrl-C can leave ``is_alive()`` wrong."""
    deadline = None
    for e in ended:
        while not e.wait(0.1):
            if world.aborted is not None:
                deadline = deadline or time.monotonic() + grace_s
                if time.monotonic() > deadline:
                    return


def run(size: int, fn, *args, cores: int | None = None, ranks_per_node: int | None = None,
        network=None, progress: str = "poll", allreduce: str = "auto", **kwargs) -> list:
    """Run ``fn(*args, **kwargs)`` on ``size`` virtual ranks (threads of this
    process); returns the list of the ranks' return values, by rank.

    In each rank's thread, :func:`minips.distributed.comm.get_comm` returns
    that rank's own :class:`Comm` (``network`` and ``progress`` as given), the
    random generator of :mod:`minips.random` is the rank's own, the
    environment switches are a copy taken now, Numba runs one thread and BLAS
    one thread; data sets are loaded once and shared read-only
    (:func:`minips.data.shared.shared_data`).

    Args:
        size: ranks P, 1..:data:`MAX_RANKS`.
        fn: the function every rank runs (the same code as under ``mpiexec``).
        cores: ranks computing at once (default: the cores this process may use).
        ranks_per_node: ranks per emulated node (``Comm.local_size``, and the
            node layout of each rank's Comm, as ``--ranks-per-node``); default P.
        network, progress, allreduce: as for :class:`Comm`.

    Raises:
        ValueError: ``size`` out of range, or this process was started by mpiexec,
            or it is already a virtual rank.
        the first failing rank's exception (with a note naming the rank), or
        SystemExit / KeyboardInterrupt when the job was aborted or interrupted.
    """
    from ....data.shared import shared_data
    from ....kernels.threads import cores_on_node
    from .. import set_rank_world, in_virtual_rank
    from ..mpi import launched_by_mpi
    from .... import environ

    if not isinstance(size, int) or not 1 <= size <= MAX_RANKS:
        raise ValueError(f"virtual ranks must be an integer in 1..{MAX_RANKS}, got {size!r}")
    if launched_by_mpi():
        raise ValueError("--virtual-ranks runs every rank as a thread of one process: start it without mpiexec "
                         "(or drop --virtual-ranks to run one rank per MPI process)")
    if in_virtual_rank():
        raise ValueError("already on a virtual rank: virtual jobs do not nest")
    world = World(size, min(cores or cores_on_node(), size), ranks_per_node)
    results: list = [None] * size
    failures: list = []  # (rank, exception) in the order they happened
    ended = [threading.Event() for _ in range(size)]
    env = dict(os.environ)

    def body(rank: int) -> None:
        comm = None
        try:
            import numba
            numba.set_num_threads(1)  # per thread
            environ.begin_rank(env)
            world.take_slot()
            comm = Comm(VirtualComm(world, world.root, rank), network=network, progress=progress,
                        allreduce=allreduce, ranks_per_node=ranks_per_node)
            set_rank_world(comm)
            results[rank] = fn(*args, **kwargs)
            world.rank_done(rank)
        except JobAborted:
            pass
        except SystemExit as e:
            if e.code not in (None, 0):  # sys.exit(0): the rank ended normally, as a process would
                with world.lock:
                    failures.append((rank, e))
                world.abort(rank, _exit_code(e))
            else:
                world.rank_done(rank)
        except BaseException as e:  # noqa: BLE001 - ends the job, reported by run()
            with world.lock:
                failures.append((rank, e))
            world.abort(rank, _exit_code(e))
        finally:
            if comm is not None:
                comm.close()
            set_rank_world(None)
            environ.end_rank()
            world.give_slot()
            ended[rank].set()

    threads = [threading.Thread(target=body, args=(r,), name=f"minips-rank-{r}", daemon=True) for r in range(size)]
    with _one_blas_thread(), shared_data(), _relay_signals(world):
        try:
            for t in threads:
                t.start()
            _join(ended, world)
        except BaseException:
            world.abort(None, 130)
            _join(ended, world, grace_s=10.0)
            raise
    if failures:
        rank, exc = failures[0]
        if not isinstance(exc, SystemExit):
            exc.add_note(f"(raised on virtual rank {rank} of {size}; the other ranks were ended)")
        raise exc
    if world.aborted is not None:
        raise SystemExit(world.aborted[1])
    return results
