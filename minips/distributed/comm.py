"""The communication layer: the only module of minips that imports mpi4py.

:class:`Comm` wraps a world communicator with what the algorithms need:

- ``rank``, ``size``, and ``local_rank``/``local_size`` (ranks on this node,
  from ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``) to size thread pools;
- ``allreduce(buf)`` (blocking, in place, sum) and ``iallreduce(buf)``
  (nonblocking, in place) on contiguous float32 buffers, returning a
  :class:`Request`;
- ``bcast``, ``barrier``, ``allgather`` of small Python objects;
- ``progress()``: test every pending request, so a nonblocking collective
  advances (MPICH progresses communication only inside MPI calls unless an
  asynchronous progress thread is enabled);
- ``abort(message)``: end the whole job, never leave the other ranks hanging.

A job started without ``mpiexec`` (no PMI/PMIx/Open MPI variables in the
environment) or without mpi4py installed gets a one-rank communicator with the
same interface, so a student can run everything before meeting MPI.

While a request is pending, the arrays it reads and writes are made read-only
(``ndarray.flags.writeable = False``): code that writes a gradient in flight
fails loudly instead of silently corrupting the average.

Network emulation (:class:`NetworkModel`): each allreduce can be charged the
time an alpha-beta model of an interconnect would take for a ring allreduce,
``2 (P-1) alpha + 2 (P-1)/P * n * beta``; a request completes no earlier than
post time + that time, and the waiting rank sleeps (does not spin), as with an
offloading NIC. Requests share the emulated link one after another (a request
posted while another is on the wire starts when it finishes). Results produced
this way are labelled *emulated*.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback

import numpy as np

from .costmodel import NetworkModel, parse_network

__all__ = ["Comm", "Request", "get_comm", "launched_by_mpi", "run_or_abort", "PROGRESS_MODES"]

PROGRESS_MODES = ("none", "poll", "thread")
_LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                  "HYDRA_CONTROL_FD")


def launched_by_mpi() -> bool:
    """True when a process manager (mpiexec, srun with PMI/PMIx) started us,
    or when ``MINIPS_MPI=1`` asks for MPI explicitly."""
    if os.environ.get("MINIPS_MPI") == "1":
        return True
    if os.environ.get("MINIPS_MPI") == "0":
        return False
    if any(v in os.environ for v in _LAUNCHER_VARS):
        return True
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ


class Request:
    """A pending nonblocking allreduce (or an already-complete one).

    Attributes:
        buf: the in-place buffer (float32, 1-D); holds the SUM over ranks once done.
        post_time: ``time.perf_counter()`` when posted, seconds.
        ready_time: with network emulation, the earliest completion time.
        done: whether it has completed (and its arrays are writable again).
        complete_time: ``time.perf_counter()`` when it was seen complete (None before).
        wait_time: seconds spent blocked in :meth:`wait` (0 if it was already done).
        tag: free-form label (e.g. the step and bucket) for traces.

    Do not touch ``buf`` until :meth:`wait` or :meth:`test` says it is done.
    """

    def __init__(self, comm, mpi_req, buf, locked, ready_time, tag=None):
        self.comm, self._req, self.buf = comm, mpi_req, buf
        self._locked = locked
        self.post_time = time.perf_counter()
        self.ready_time = ready_time if ready_time is not None else self.post_time
        self.done = False
        self.complete_time = None
        self.wait_time = 0.0
        self.tag = tag
        self._event = None  # set by the progress thread in "thread" mode
        self._mpi_done = mpi_req is None

    def _finish(self):
        for a in self._locked:
            a.flags.writeable = True
        self.done = True
        self.complete_time = time.perf_counter()
        self.comm._pending.discard(self)

    def _mpi_test(self) -> bool:
        if not self._mpi_done:
            if self._event is not None:
                self._mpi_done = self._event.is_set()
            else:
                self._mpi_done = self._req.Test()
        return self._mpi_done

    def test(self) -> bool:
        """Progress the request; True (and buffers unlocked) if it completed."""
        if self.done:
            return True
        if self._mpi_test() and time.perf_counter() >= self.ready_time:
            self._finish()
        return self.done

    def wait(self) -> float:
        """Block until complete; returns the seconds spent blocked."""
        if self.done:
            return 0.0
        t0 = time.perf_counter()
        if not self._mpi_done:
            if self._event is not None:
                self._event.wait()
            else:
                self._req.Wait()
            self._mpi_done = True
        rest = self.ready_time - time.perf_counter()
        if rest > 0:
            time.sleep(rest)  # emulated wire time: sleep, do not spin
        self.wait_time += time.perf_counter() - t0
        self._finish()
        return self.wait_time


class _ProgressThread:
    """Background thread that waits on posted requests one by one (progress
    mode ``thread``). mpi4py releases the GIL inside MPI calls, so compute in
    NumPy/Numba (which also release it) proceeds meanwhile."""

    def __init__(self):
        import queue
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._run, name="minips-progress", daemon=True)
        self.t.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            req, event = item
            req.Wait()
            event.set()

    def submit(self, mpi_req):
        ev = threading.Event()
        self.q.put((mpi_req, ev))
        return ev

    def stop(self):
        self.q.put(None)
        self.t.join(timeout=5)


class Comm:
    """A world communicator for data-parallel training.

    Args:
        mpi_comm: an ``mpi4py.MPI.Comm``; default ``COMM_WORLD`` when launched
            by MPI (see :func:`launched_by_mpi`), else a one-rank communicator.
        network: an emulated interconnect (a :class:`NetworkModel`, a name such
            as ``"1gbe"``, or ``"alpha=..,beta=.."``), or None for the real one.
        progress: ``"none"``, ``"poll"`` or ``"thread"`` (see docs/distributed.md).

    Raises:
        ValueError: unknown progress mode or network.
    """

    def __init__(self, mpi_comm=None, network=None, progress: str = "poll"):
        if progress not in PROGRESS_MODES:
            raise ValueError(f"unknown progress mode {progress!r}; choose one of {', '.join(PROGRESS_MODES)}")
        self.MPI = None
        if mpi_comm is None and launched_by_mpi():
            try:
                from mpi4py import MPI
            except ImportError:
                raise RuntimeError("launched by mpiexec but mpi4py is not installed: "
                                   "pip install -e '.[mpi]'") from None
            mpi_comm = MPI.COMM_WORLD
        if mpi_comm is not None:
            from mpi4py import MPI
            self.MPI = MPI
        self.mpi = mpi_comm
        self.rank = mpi_comm.Get_rank() if mpi_comm is not None else 0
        self.size = mpi_comm.Get_size() if mpi_comm is not None else 1
        if mpi_comm is not None and self.size > 1:
            node = mpi_comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
            self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
            node.Free()
        else:
            self.local_rank, self.local_size = 0, 1
        self.network: NetworkModel | None = parse_network(network) if network else None
        self.progress_mode = progress
        self._pending: set[Request] = set()
        self._link_free = 0.0  # emulated network: when the wire is free again
        self._thread = _ProgressThread() if (progress == "thread" and self.size > 1) else None
        self.stats = {"allreduce_calls": 0, "allreduce_bytes": 0, "progress_calls": 0}

    # --- info -------------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        """True on rank 0 (the rank that writes files)."""
        return self.rank == 0

    @property
    def emulated(self) -> bool:
        """True when allreduce times come from a network model, not the wire."""
        return self.network is not None

    def describe(self) -> str:
        """One line: ranks, nodes' ranks, MPI library, network (real or emulated)."""
        lib = "no MPI (one process)"
        if self.MPI is not None:
            lib = self.MPI.Get_library_version().splitlines()[0].strip()
        net = f"EMULATED network {self.network}" if self.network else "real network"
        return (f"{self.size} rank(s), {self.local_size} on this node; {lib}; {net}; "
                f"progress={self.progress_mode}")

    # --- collectives -------------------------------------------------------------------
    def _modelled_seconds(self, nbytes: int) -> float:
        return self.network.allreduce_time(nbytes, self.size) if self.network else 0.0

    def _emulated_finish(self, nbytes: int, now: float) -> float:
        """When an allreduce of ``nbytes`` posted at ``now`` leaves the emulated
        link. The link carries one collective at a time (they share the same
        wire): a request starts when the previous one has finished."""
        if not self.network:
            return now
        start = max(now, self._link_free)
        self._link_free = start + self._modelled_seconds(nbytes)
        return self._link_free

    def _check(self, buf):
        if not isinstance(buf, np.ndarray) or buf.dtype != np.float32 or not buf.flags.c_contiguous:
            raise TypeError("allreduce buffers must be contiguous float32 numpy arrays "
                            f"(got {type(buf).__name__} {getattr(buf, 'dtype', '')}); use minips.distributed.flat")
        if not buf.flags.writeable:
            raise RuntimeError("allreduce on a read-only buffer: it is probably still in flight "
                               "in an earlier request; wait for that request first")

    def allreduce(self, buf: np.ndarray) -> float:
        """Sum ``buf`` over all ranks, in place, blocking. Returns seconds spent.

        Raises:
            TypeError: ``buf`` is not a contiguous float32 array.
            RuntimeError: ``buf`` is read-only (still in flight).
        """
        self._check(buf)
        t0 = time.perf_counter()
        finish = self._emulated_finish(buf.nbytes, t0)
        if self.size > 1:
            self.mpi.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        rest = finish - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        self.stats["allreduce_calls"] += 1
        self.stats["allreduce_bytes"] += buf.nbytes
        return time.perf_counter() - t0

    def iallreduce(self, buf: np.ndarray, lock=(), tag=None) -> Request:
        """Start summing ``buf`` over all ranks, in place; returns a :class:`Request`.

        ``buf`` and every array in ``lock`` (e.g. parameter-gradient views
        into it) are read-only until the request completes.

        Raises:
            TypeError, RuntimeError: as :meth:`allreduce`.
        """
        self._check(buf)
        ready = self._emulated_finish(buf.nbytes, time.perf_counter())
        mpi_req = None
        if self.size > 1:
            mpi_req = self.mpi.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        locked = [buf, *lock]
        for a in locked:
            a.flags.writeable = False
        req = Request(self, mpi_req, buf, locked, ready, tag)
        if self._thread is not None and mpi_req is not None:
            req._event = self._thread.submit(mpi_req)
        self._pending.add(req)
        self.stats["allreduce_calls"] += 1
        self.stats["allreduce_bytes"] += buf.nbytes
        return req

    def progress(self) -> int:
        """Test every pending request (lets MPI advance them); returns how many remain.
        Cheap when nothing is pending."""
        if not self._pending:
            return 0
        self.stats["progress_calls"] += 1
        for r in list(self._pending):
            r.test()
        return len(self._pending)

    def pending(self) -> int:
        """Number of requests posted and not yet completed."""
        return len(self._pending)

    def wait_all(self) -> float:
        """Wait for every pending request; returns seconds blocked."""
        return sum(r.wait() for r in list(self._pending))

    def bcast(self, buf: np.ndarray, root: int = 0) -> None:
        """Broadcast ``buf`` (contiguous numeric array) from ``root``, in place."""
        if self.size > 1:
            self.mpi.Bcast(buf, root=root)

    def bcast_obj(self, obj, root: int = 0):
        """Broadcast a small picklable object from ``root``; returns it on every rank."""
        return self.mpi.bcast(obj, root=root) if self.size > 1 else obj

    def allgather(self, obj) -> list:
        """Gather a small picklable object from every rank, on every rank."""
        return self.mpi.allgather(obj) if self.size > 1 else [obj]

    def allreduce_scalar(self, x: float, op: str = "sum") -> float:
        """Reduce one Python number over ranks (``sum``, ``max`` or ``min``)."""
        if self.size == 1:
            return x
        ops = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}
        return self.mpi.allreduce(x, op=ops[op])

    def barrier(self) -> None:
        """Block until every rank has called it (no-op on one rank)."""
        if self.size > 1:
            self.mpi.Barrier()

    def abort(self, message: str, code: int = 1) -> None:
        """Print ``message`` (prefixed with the rank) to stderr and end the whole
        job with ``MPI_Abort``, so no rank waits forever on a dead peer."""
        sys.stderr.write(f"[minips rank {self.rank}] {message}\n")
        sys.stderr.flush()
        if self.size > 1:
            self.mpi.Abort(code)
        raise SystemExit(code)

    def close(self) -> None:
        """Stop the progress thread (pending requests must be waited first)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None


_world: Comm | None = None


def get_comm(network=None, progress: str = "poll") -> Comm:
    """The process's world :class:`Comm`, created on first use with these options
    (later calls with other options reconfigure network and progress)."""
    global _world
    if _world is None:
        _world = Comm(network=network, progress=progress)
    else:
        _world.network = parse_network(network) if network else None
        if progress != _world.progress_mode:
            if progress not in PROGRESS_MODES:
                raise ValueError(f"unknown progress mode {progress!r}; choose one of {', '.join(PROGRESS_MODES)}")
            _world.close()
            _world.progress_mode = progress
            _world._thread = _ProgressThread() if (progress == "thread" and _world.size > 1) else None
    return _world


def run_or_abort(fn, *args, **kwargs):
    """Call ``fn``; if it raises on any rank of a multi-rank job, print the error
    and abort the whole job (``MPI_Abort``) instead of letting the other ranks
    wait forever in their next collective. Returns ``fn``'s result."""
    try:
        return fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001
        comm = _world
        if comm is not None and comm.size > 1 and not isinstance(e, (SystemExit, KeyboardInterrupt)):
            abort_on_exception(comm, e)
        raise


def abort_on_exception(comm: Comm, exc: BaseException) -> None:
    """Report ``exc`` with its traceback and abort the job (see :meth:`Comm.abort`)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    comm.abort(f"error, aborting all ranks:\n{tb}")
