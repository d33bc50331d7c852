"""Requests of the communication layer: :class:`Request`, the progress thread and :class:`JobAborted`.

A nonblocking primitive of :class:`~minips.distributed.comm.Comm` returns a
:class:`Request`; it completes when MPI says so and, under network emulation,
no earlier than its modelled finish (the waiting rank sleeps the rest, it
does not spin). With ``--progress thread`` a :class:`ProgressThread` waits on
the MPI requests in the background, so a rank that computes does not have to
poll them. While a request is pending, the arrays it reads and writes are
read-only (:mod:`.buffers`); they are writable again once it completes.
"""
from __future__ import annotations

import queue
import threading
import time

__all__ = ["JobAborted", "ProgressThread", "Request"]


class JobAborted(BaseException):
    """Raised in a rank whose job another rank has aborted (:meth:`Comm.abort`).

    Only virtual ranks see it (:mod:`.virtual`): under ``mpiexec``,
    ``MPI_Abort`` ends every process at once. It derives from BaseException,
    as SystemExit does, so that no ``except Exception`` in the code a rank
    runs can swallow it; the rank then ends without a message of its own (the
    rank that aborted printed why)."""


class Request:
    """A pending nonblocking operation (or an already-complete one).

    Attributes:
        buf: the buffer MPI writes: for ``iallreduce`` the in-place float32
            buffer, which holds the SUM over ranks once done; for the other
            primitives their receive buffer.
        result: None until complete; then what the blocking twin returns
            (``iallreduce``: ``buf``; ``iallgatherv``: a list of arrays;
            ``ineighbor_allgather``/``iexchange``: the received array;
            ``ibcast``: ``buf``; ``iallreduce_scalar``: a Python number).
        post_time: ``time.perf_counter()`` when posted, seconds.
        ready_time: with network emulation, the earliest completion time.
        done: whether it has completed (and its arrays are writable again).
        complete_time: ``time.perf_counter()`` when it was seen complete (None before).
        wait_time: seconds spent blocked in :meth:`wait` (0 if it was already done).
        tag: free-form label (e.g. the step and bucket) for traces.

    Do not touch ``buf`` until :meth:`wait` or :meth:`test` says it is done.
    """

    def __init__(self, comm, mpi_req, buf, locked, ready_time, tag=None, on_done=None, op=None):
        self.comm, self.buf = comm, buf
        #: a hierarchical allreduce's state machine (:class:`.hierarchical.HierarchicalOp`), driven
        #: through its own Test/Wait; None for one or more plain MPI requests
        self._op = op
        if op is not None:
            mpi_req = [op]
        # one MPI request, or several that complete together (iexchange: Isend + Irecv)
        self._reqs = mpi_req if isinstance(mpi_req, list) else ([] if mpi_req is None else [mpi_req])
        self._locked = locked
        self._on_done = on_done
        self.result = None
        self.post_time = time.perf_counter()
        self.ready_time = ready_time if ready_time is not None else self.post_time
        self.done = False
        self.complete_time = None
        self.wait_time = 0.0
        self.tag = tag
        self._event = None  # set by the progress thread in "thread" mode
        self._mpi_done = not self._reqs

    def _finish(self):
        self.comm._locks.unlock(self._locked)
        self.result = self._on_done() if self._on_done is not None else self.buf
        self.done = True
        self.complete_time = time.perf_counter()
        self.comm._pending.discard(self)

    def _mpi_test(self) -> bool:
        if not self._mpi_done:
            if self._event is not None:
                self._mpi_done = self._event.is_set()
            elif self._op is not None:
                self._mpi_done = self._op.Test()
            else:
                self._mpi_done = self.comm.MPI.Request.Testall(self._reqs)
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
                with self.comm._idle():  # a virtual rank frees its compute slot meanwhile
                    self._event.wait()
                self.comm._check_aborted()
            elif self._op is not None:
                self._op.Wait()
            else:
                self.comm.MPI.Request.Waitall(self._reqs)
            self._mpi_done = True
        rest = self.ready_time - time.perf_counter()
        if rest > 0:
            time.sleep(rest)  # emulated wire time: sleep, do not spin
        self.wait_time += time.perf_counter() - t0
        self._finish()
        return self.wait_time


class ProgressThread:
    """Background thread that waits on posted requests one by one (progress
    mode ``thread``). mpi4py releases the GIL inside MPI calls, so compute in
    NumPy/Numba (which also release it) proceeds meanwhile."""

    def __init__(self):
        self.q = queue.Queue()
        self.t = threading.Thread(target=self._run, name="minips-progress", daemon=True)
        self.t.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            reqs, event = item
            try:
                for r in reqs:  # all of them complete before the event is set
                    r.Wait()
            except JobAborted:  # virtual ranks: the job ended; its waiters see that themselves
                pass
            event.set()

    def submit(self, mpi_reqs):
        ev = threading.Event()
        self.q.put((list(mpi_reqs), ev))
        return ev

    def stop(self):
        self.q.put(None)
        self.t.join(timeout=5)
