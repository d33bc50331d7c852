"""The communication layer's interface, :class:`Comm`, shared by its two back-ends.

:class:`Comm` wraps a world communicator with what the algorithms need. The
communicator is an ``mpi4py`` one (:mod:`.mpi`, the only module that imports
mpi4py: ranks are processes started by ``mpiexec``) or a
:class:`~minips.distributed.comm.virtual.VirtualComm` (:mod:`.virtual`: ranks
are threads of one process) that answers the same mpi4py calls. Everything
below (checks, byte accounting, buffer locking, network emulation, progress)
is this module's, so both back-ends behave alike by construction:

- ``rank``, ``size``, and ``local_rank``/``local_size`` (ranks on this node,
  from ``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``) to size thread pools;
- ``allreduce(buf)`` (blocking, in place, sum) and ``iallreduce(buf)``
  (nonblocking, in place) on contiguous float32 buffers, returning a
  :class:`Request`;
- ``bcast``, ``barrier``, ``allgather`` of small Python objects;
- primitives for the algorithms beyond averaging, each blocking and
  nonblocking (``i...`` returns a :class:`Request`, result in ``req.result``):
  ``allgatherv``/``iallgatherv`` (1-D arrays of any dtype and per-rank length),
  ``neighbor_allgather``/``ineighbor_allgather`` on a static directed
  :class:`NeighborGraph` (``graph(sources, destinations)``),
  ``sendrecv``/``iexchange`` with a peer that may change every call,
  ``bcast``/``ibcast`` and ``allreduce_scalar``/``iallreduce_scalar``
  (the table in docs/distributed.md, "Communication primitives");
- ``bytes_sent`` and ``stats``: what this rank sent, as the models count it;
- ``progress()``: test every pending request, so a nonblocking collective
  advances (MPICH progresses communication only inside MPI calls unless an
  asynchronous progress thread is enabled);
- ``abort(message)``: end the whole job, never leave the other ranks hanging.

A job started without ``mpiexec`` (no PMI/PMIx/Open MPI variables in the
environment) or without mpi4py installed gets a one-rank communicator with the
same interface, so a student can run everything before meeting MPI.
With ``--virtual-ranks P`` (:func:`minips.distributed.comm.virtual.run`) the
same code runs as P threads, each with its own Comm.

While a request is pending, the arrays it reads and writes are made read-only
(``ndarray.flags.writeable = False``): code that writes a gradient in flight
fails loudly instead of silently corrupting the average.

Network emulation (:class:`NetworkModel`): each allreduce can be charged the
time an alpha-beta model of an interconnect would take for a ring allreduce,
``2 (P-1) alpha + 2 (P-1)/P * n * beta``, and every other primitive its own
model (ring allgatherv, neighbour exchange, one message, binomial broadcast;
:mod:`minips.distributed.costmodel`); a request completes no earlier than
post time + that time, and the waiting rank sleeps (does not spin), as with an
offloading NIC. Scalar reductions are not charged: they carry metrics and
timings, which an emulated delay would distort. Requests share the emulated link one after another (a request
posted while another is on the wire starts when it finishes). Results produced
this way are labelled *emulated*. Under virtual ranks nothing sleeps (their
measured times are not cluster times anyway): the network only names the
model that projected step times use (:attr:`Comm.delays` is False).
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time

import numpy as np

from .. import costmodel
from ..costmodel import NetworkModel, parse_network
from . import mpi as mpi_backend

__all__ = ["PROGRESS_MODES", "Comm", "JobAborted", "NeighborGraph", "Request"]

PROGRESS_MODES = ("none", "poll", "thread")
_P2P_TAG = 0x6D70  # the tag of sendrecv/iexchange messages; MPI keeps them in order per (peer, tag)


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

    def __init__(self, comm, mpi_req, buf, locked, ready_time, tag=None, on_done=None):
        self.comm, self.buf = comm, buf
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
        self.comm._unlock(self._locked)
        self.result = self._on_done() if self._on_done is not None else self.buf
        self.done = True
        self.complete_time = time.perf_counter()
        self.comm._pending.discard(self)

    def _mpi_test(self) -> bool:
        if not self._mpi_done:
            if self._event is not None:
                self._mpi_done = self._event.is_set()
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
            else:
                self.comm.MPI.Request.Waitall(self._reqs)
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


def _as_bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a flat uint8 view (no copy). The
    array primitives move bytes (``MPI_BYTE``): nothing is reduced, so any
    dtype works, float16 and bool included, without an MPI datatype for it."""
    return a.reshape(-1).view(np.uint8)


def _vector_problem(a) -> str | None:
    """Why ``a`` cannot be allgathered (None if it can)."""
    if not isinstance(a, np.ndarray):
        return f"expects a numpy array, got {type(a).__name__}; pass np.asarray(x)"
    if a.ndim != 1:
        return f"expects a 1-D array, got shape {a.shape}; pass array.ravel() and reshape after"
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return f"expects a numeric dtype, got {a.dtype}; convert it, e.g. array.astype(np.float32)"
    return None


def _rank_list(ranks, P: int, what: str) -> tuple:
    """``ranks`` as a tuple of ints in [0, P) without repeats (ValueError otherwise)."""
    try:
        out = tuple(int(r) for r in ranks)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a sequence of ranks (ints), got {ranks!r}") from None
    for r in out:
        if not 0 <= r < P:
            raise ValueError(f"{what} lists rank {r}, outside 0..{P - 1}; list ranks of this job only")
    if len(set(out)) != len(out):
        raise ValueError(f"{what} lists a rank twice ({list(out)}); list each neighbour once")
    return out


def _graph_mismatches(edges) -> list[str]:
    """Edges that the ranks disagree on. ``edges[i] = (sources_i, destinations_i)``;
    an edge i->j must be an out-edge on i and an in-edge on j."""
    bad = []
    for i, (src, dst) in enumerate(edges):
        bad += [f"rank {i} sends to {j} but rank {j} does not list {i} in its sources"
                for j in dst if i not in edges[j][0]]
        bad += [f"rank {i} receives from {j} but rank {j} does not list {i} in its destinations"
                for j in src if i not in edges[j][1]]
    return bad


class NeighborGraph:
    """A static directed graph for neighbour exchanges; build it with
    :meth:`Comm.graph`, with the same edges on every rank.

    Attributes:
        sources: in-neighbours of this rank (tuple of ranks); the rows of
            :meth:`Comm.neighbor_allgather` come in this order.
        destinations: out-neighbours (tuple of ranks).
        weights: float64 array of shape ``(in_degree,)``, one weight per source
            (e.g. ``W[rank, sources]`` of a mixing matrix), or None. MPI does not
            use them; they are kept here for the caller's weighted sums.
        in_degree, out_degree: ``len(sources)``, ``len(destinations)``.
        remote_in, remote_out: the same without a self-loop: what crosses the
            network (the byte counter and the emulated time use these).
        mpi: the ``MPI_Dist_graph_create_adjacent`` communicator, None on one rank.
    """

    def __init__(self, sources, destinations, weights, rank, mpi):
        self.sources, self.destinations, self.weights, self.mpi = sources, destinations, weights, mpi
        self.in_degree, self.out_degree = len(sources), len(destinations)
        self.remote_in = sum(1 for r in sources if r != rank)
        self.remote_out = sum(1 for r in destinations if r != rank)

    def free(self) -> None:
        """Release the MPI communicator (collective over all ranks; optional)."""
        if self.mpi is not None:
            self.mpi.Free()
            self.mpi = None

    def __repr__(self):
        return f"NeighborGraph(sources={list(self.sources)}, destinations={list(self.destinations)})"


_PRIMITIVES = ("allreduce", "allgatherv", "neighbor_allgather", "sendrecv", "exchange", "bcast",
               "allreduce_scalar")
_SCALAR_OPS = ("sum", "max", "min")


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
        if mpi_comm is None and mpi_backend.launched_by_mpi():
            mpi_comm = mpi_backend.world()
        if mpi_comm is not None:
            # a virtual communicator carries its own stand-in of the mpi4py.MPI module
            self.MPI = getattr(mpi_comm, "MPI", None) or mpi_backend.module()
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
        #: True when the ranks are threads of this process (:mod:`.virtual`)
        self.virtual = bool(getattr(self.MPI, "VIRTUAL", False))
        #: whether network emulation sleeps (False under virtual ranks: the network is only modelled)
        self.delays = not self.virtual
        #: virtual ranks: where a rank registers its signal handlers (the process's
        #: main thread receives the signals and relays them); None under MPI
        self.signals = getattr(mpi_comm, "signals", None)
        self.progress_mode = progress
        self._pending: set[Request] = set()
        self._link_free = 0.0  # emulated network: when the wire is free again
        self._thread = _ProgressThread() if (progress == "thread" and self.size > 1) else None
        self._locks: dict[int, list] = {}  # id(array) -> [array, requests holding it read-only]
        # Per primitive (blocking and nonblocking together): NAME_calls; NAME_bytes,
        # the payload this rank passed in; NAME_sent, the bytes it sent as modelled.
        self.stats = {f"{p}_{k}": 0 for p in _PRIMITIVES for k in ("calls", "bytes", "sent")}
        self.stats["progress_calls"] = 0

    # --- info -------------------------------------------------------------------
    @property
    def is_root(self) -> bool:
        """True on rank 0 (the rank that writes files)."""
        return self.rank == 0

    @property
    def emulated(self) -> bool:
        """True when allreduce times come from a network model, not the wire."""
        return self.network is not None

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has sent so far, as the models count them (int).

        Per call of ``n`` payload bytes: allreduce ``2 (P-1) n // P`` (ring);
        allgatherv ``sum(n_j) - n_{rank+1 mod P}`` (ring: every block but the
        successor's is forwarded); neighbour exchange ``remote_out * n``; one
        message ``n``; bcast ``children * n`` in the binomial tree (the root
        ``ceil(log2 P)`` children); scalar reductions as an 8-byte allreduce.
        Messages to oneself are local copies and count 0; so does everything on
        one rank. ``bcast_obj`` and ``allgather`` (pickled objects) are not
        counted. Formulas: :mod:`minips.distributed.costmodel`.
        """
        return sum(v for k, v in self.stats.items() if k.endswith("_sent"))

    def describe(self) -> str:
        """One line: ranks, nodes' ranks, MPI library (or VIRTUAL ranks), network
        (real, emulated, or under virtual ranks modelled only)."""
        lib = "no MPI (one process)"
        if self.MPI is not None:
            lib = " ".join(self.MPI.Get_library_version().splitlines()[0].split())
        net = f"EMULATED network {self.network}" if self.network else "real network"
        if self.virtual:
            net = (f"network {self.network} MODELLED for projected times (not emulated)" if self.network
                   else "no network (shared memory)")
        return (f"{self.size} rank(s), {self.local_size} on this node; {lib}; {net}; "
                f"progress={self.progress_mode}")

    # --- collectives -------------------------------------------------------------------
    def _modelled_seconds(self, nbytes: int) -> float:
        return self.network.allreduce_time(nbytes, self.size) if self.network else 0.0

    def _emulated_finish(self, nbytes: int, now: float) -> float:
        """When an allreduce of ``nbytes`` posted at ``now`` leaves the emulated
        link. The link carries one collective at a time (they share the same
        wire): a request starts when the previous one has finished."""
        return self._link_until(self._modelled_seconds(nbytes), now)

    def _link_until(self, seconds: float, now: float) -> float:
        """When an operation of ``seconds`` modelled time, posted at ``now``,
        leaves the emulated link (one operation on the wire at a time; an
        operation that moves nothing, e.g. a copy to oneself, does not queue)."""
        if not self.network or seconds <= 0 or not self.delays:
            return now
        start = max(now, self._link_free)
        self._link_free = start + seconds
        return self._link_free

    def _idle(self):
        """Context for a wait outside the communicator's own calls: a virtual
        rank gives its compute slot to another rank meanwhile."""
        idle = getattr(self.mpi, "idle", None)
        return idle() if idle is not None else contextlib.nullcontext()

    def _check_aborted(self) -> None:
        if getattr(self.mpi, "aborted", False):
            raise JobAborted()

    def _count(self, prim: str, nbytes: int, sent: int) -> None:
        self.stats[f"{prim}_calls"] += 1
        self.stats[f"{prim}_bytes"] += int(nbytes)
        self.stats[f"{prim}_sent"] += int(sent)

    def _lock(self, arrays) -> list:
        """Make ``arrays`` read-only while a request uses them; returns the ones
        this request holds. A count per array lets two requests share one (it is
        writable again when the last completes); an array that was read-only for
        another reason is left alone, and never made writable by us."""
        held = []
        for a in arrays:
            entry = self._locks.get(id(a))
            if entry is None:
                if not a.flags.writeable:
                    continue
                a.flags.writeable = False
                entry = self._locks[id(a)] = [a, 0]
            entry[1] += 1
            held.append(a)
        return held

    def _unlock(self, arrays) -> None:
        for a in arrays:  # in locking order: a buffer before the views into it
            entry = self._locks[id(a)]
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[id(a)]
                a.flags.writeable = True

    def _post(self, prim, mpi_reqs, buf, lock, seconds, nbytes, sent, tag=None, on_done=None) -> Request:
        """The common tail of every nonblocking primitive, called right after
        the MPI call (MPI needs writable buffers when posting): lock, emulated
        completion time, progress thread, pending set, counters."""
        req = Request(self, mpi_reqs, buf, self._lock(lock), None, tag, on_done)
        req.ready_time = self._link_until(seconds, req.post_time)
        if self._thread is not None and req._reqs:
            req._event = self._thread.submit(req._reqs)
        self._pending.add(req)
        self._count(prim, nbytes, sent)
        return req

    def _blocking(self, prim, seconds, nbytes, sent, call):
        """Run the blocking MPI ``call``; with emulation, return no earlier than
        its modelled finish (sleeping the rest). Counts it; returns its result."""
        finish = self._link_until(seconds, time.perf_counter())
        out = call()
        rest = finish - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        self._count(prim, nbytes, sent)
        return out

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
        self._count("allreduce", buf.nbytes, costmodel.ring_allreduce_bytes_sent(buf.nbytes, self.size))
        return time.perf_counter() - t0

    def iallreduce(self, buf: np.ndarray, lock=(), tag=None) -> Request:
        """Start summing ``buf`` over all ranks, in place; returns a :class:`Request`.

        ``buf`` and every array in ``lock`` (e.g. parameter-gradient views
        into it) are read-only until the request completes.

        Raises:
            TypeError, RuntimeError: as :meth:`allreduce`.
        """
        self._check(buf)
        mpi_req = None
        if self.size > 1:
            mpi_req = self.mpi.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return self._post("allreduce", mpi_req, buf, [buf, *lock], self._modelled_seconds(buf.nbytes),
                          buf.nbytes, costmodel.ring_allreduce_bytes_sent(buf.nbytes, self.size), tag)

    # --- allgatherv: 1-D arrays of any dtype and a different length per rank -------
    def _allgatherv_plan(self, array, name: str):
        """Exchange every rank's length and dtype (a small blocking ``Allgather``)
        and check them; returns the contiguous array, the receive buffer, the
        per-rank parts (views into it) and the per-rank block sizes in bytes.
        A bad array on any rank raises the same error on every rank, so no
        rank is left waiting in the collective."""
        problem = _vector_problem(array)
        a = None if problem else np.ascontiguousarray(array)
        mine = np.array([0, 0, 0, 1] if problem else [a.size, ord(a.dtype.char), a.itemsize, 0], np.int64)
        table = mine[None].copy()
        if self.size > 1:
            table = np.empty((self.size, 4), np.int64)
            self.mpi.Allgather(mine, table)
        bad = [r for r in range(self.size) if table[r, 3]]
        if bad:
            raise ValueError(f"{name} on rank {self.rank}: {problem}" if problem else
                             f"{name}: rank(s) {bad} passed an invalid array (see their error message)")
        kinds = {(int(c), int(s)) for _, c, s, _ in table}
        if len(kinds) > 1:
            per_rank = ", ".join(f"rank {r}: {np.dtype(chr(table[r, 1]))}" for r in range(self.size))
            raise TypeError(f"{name}: ranks pass different dtypes ({per_rank}); "
                            "convert to one dtype on every rank, e.g. array.astype(np.float32)")
        counts = table[:, 0]
        out = np.empty(int(counts.sum()), a.dtype)
        parts = np.split(out, np.cumsum(counts)[:-1])
        return a, out, parts, [int(c) * a.itemsize for c in counts]

    def _allgatherv_recv(self, out, blocks):
        displs = np.concatenate([[0], np.cumsum(blocks)[:-1]]).astype(int).tolist()
        return [_as_bytes(out), blocks, displs, self.MPI.BYTE]

    def _allgatherv_model(self, blocks):
        seconds = self.network.allgatherv_time(blocks) if self.network else 0.0
        return seconds, costmodel.ring_allgatherv_bytes_sent(blocks, self.rank)

    def allgatherv(self, array: np.ndarray) -> list:
        """Gather a 1-D array from every rank, on every rank (``MPI_Allgatherv``).

        Args:
            array: 1-D, any numeric (or bool) dtype, any length including 0;
                the length may differ between ranks, the dtype may not.

        Returns:
            A list of P 1-D arrays in rank order (views into one new buffer);
            entry ``r`` is rank r's array. One rank: ``[array.copy()]``.

        Counts ``sum(n_j) - n_{rank+1 mod P}`` bytes sent (ring forwarding; see
        :attr:`bytes_sent`); emulated time ``(P-1)(alpha + max_j n_j beta)``.
        The lengths are exchanged first (a blocking ``MPI_Allgather`` of 4 ints).

        Raises:
            ValueError: some rank's array is not a 1-D numeric numpy array (on
                every rank, naming the rank).
            TypeError: the ranks' dtypes differ (on every rank, listing them).
        """
        a, out, parts, blocks = self._allgatherv_plan(array, "allgatherv")
        seconds, sent = self._allgatherv_model(blocks)

        def call():
            if self.size > 1:
                self.mpi.Allgatherv([_as_bytes(a), self.MPI.BYTE], self._allgatherv_recv(out, blocks))
            else:
                out[...] = a
        self._blocking("allgatherv", seconds, a.nbytes, sent, call)
        return parts

    def iallgatherv(self, array: np.ndarray, tag=None) -> Request:
        """Nonblocking :meth:`allgatherv` (``MPI_Iallgatherv``); returns a
        :class:`Request` whose ``result`` is the list of P arrays once complete.
        ``array`` is read-only until then. The length exchange before it blocks.

        Raises:
            ValueError, TypeError: as :meth:`allgatherv`.
        """
        a, out, parts, blocks = self._allgatherv_plan(array, "iallgatherv")
        seconds, sent = self._allgatherv_model(blocks)
        mpi_req = None
        if self.size > 1:
            mpi_req = self.mpi.Iallgatherv([_as_bytes(a), self.MPI.BYTE], self._allgatherv_recv(out, blocks))
        else:
            out[...] = a
        return self._post("allgatherv", mpi_req, out, [array], seconds, a.nbytes, sent, tag,
                          on_done=lambda: parts)

    # --- neighbour exchange on a static graph ----------------------------------------
    def graph(self, sources, destinations, weights=None) -> NeighborGraph:
        """Build a static directed graph for neighbour exchanges
        (``MPI_Dist_graph_create_adjacent``, no reordering). Collective: every
        rank calls it, with its own in- and out-neighbours of ONE graph.

        Args:
            sources: ranks this rank receives from (in-neighbours), each once;
                may include this rank (a self-loop). Their order is the order
                of the rows of :meth:`neighbor_allgather`.
            destinations: ranks this rank sends to (out-neighbours), each once.
            weights: optional floats, one per source (e.g. ``W[rank, sources]``
                of a mixing matrix), kept as ``graph.weights`` (float64).

        Returns:
            A :class:`NeighborGraph`.

        Raises:
            ValueError: on every rank, if some rank passed ranks outside
                0..P-1, a repeated rank or a wrong number of weights, or if the
                ranks disagree on the graph (an edge i->j must be in i's
                destinations and in j's sources): the message names the ranks.
        """
        try:
            src = _rank_list(sources, self.size, "sources")
            dst = _rank_list(destinations, self.size, "destinations")
            w = None
            if weights is not None:
                w = np.asarray(weights, np.float64).reshape(-1)
                if w.shape != (len(src),):
                    raise ValueError(f"weights has {w.size} entries for {len(src)} sources; "
                                     "give one weight per source, in the same order")
            problem = None
        except (TypeError, ValueError) as e:
            src, dst, w, problem = (), (), None, str(e)
        everyone = self.allgather((problem, src, dst))  # small: two lists of ranks per rank
        bad = [f"rank {r}: {p}" for r, (p, _, _) in enumerate(everyone) if p]
        if bad:
            raise ValueError("graph: " + "; ".join(bad))
        mismatch = _graph_mismatches([(s, d) for _, s, d in everyone])
        if mismatch:
            more = f" (and {len(mismatch) - 1} more)" if len(mismatch) > 1 else ""
            raise ValueError(f"graph: the graph differs between ranks: {mismatch[0]}{more}; pass the same graph "
                             "on every rank (rank i: sources = its in-neighbours, destinations = its out-neighbours)")
        mpi = None
        if self.size > 1:
            mpi = self.mpi.Create_dist_graph_adjacent(list(src), list(dst), reorder=False)
        return NeighborGraph(src, dst, w, self.rank, mpi)

    def _neighbor_plan(self, graph, array, name: str):
        if not isinstance(graph, NeighborGraph):
            raise TypeError(f"{name} needs a NeighborGraph from comm.graph(sources, destinations), "
                            f"got {type(graph).__name__}")
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name} expects a numpy array, got {type(array).__name__}; pass np.asarray(x)")
        a = np.ascontiguousarray(array)
        out = np.empty((graph.in_degree, *a.shape), a.dtype)
        degree = max(graph.remote_in, graph.remote_out)
        seconds = self.network.neighbor_time(a.nbytes, degree) if self.network else 0.0
        return a, out, seconds, graph.remote_out * a.nbytes

    def _neighbor_bufs(self, a, out):
        n = a.nbytes  # bytes per neighbour, in both directions
        return [_as_bytes(a), n, self.MPI.BYTE], [_as_bytes(out), n, self.MPI.BYTE]

    def neighbor_allgather(self, graph: NeighborGraph, array: np.ndarray) -> np.ndarray:
        """Send ``array`` to every out-neighbour and receive one from every
        in-neighbour (``MPI_Neighbor_allgather``).

        Args:
            graph: from :meth:`graph`.
            array: any shape and dtype; every rank must pass the same shape and
                dtype (not checked: a mismatch is an MPI error or garbage).

        Returns:
            New array of shape ``(graph.in_degree, *array.shape)``, same dtype;
            row k came from ``graph.sources[k]``. So ``sum_k weights[k] row_k``
            is ``sum_j W_ij x_j``. On one rank (a self-loop) the rows are copies.

        Counts ``remote_out * n`` bytes sent; emulated time
        ``max(remote_in, remote_out) (alpha + n beta)``.

        Raises:
            TypeError: ``graph`` is not a NeighborGraph or ``array`` not an ndarray.
        """
        a, out, seconds, sent = self._neighbor_plan(graph, array, "neighbor_allgather")

        def call():
            if graph.mpi is not None:
                graph.mpi.Neighbor_allgather(*self._neighbor_bufs(a, out))
            else:
                out[...] = a  # one rank: every source is this rank
        self._blocking("neighbor_allgather", seconds, a.nbytes, sent, call)
        return out

    def ineighbor_allgather(self, graph: NeighborGraph, array: np.ndarray, tag=None) -> Request:
        """Nonblocking :meth:`neighbor_allgather` (``MPI_Ineighbor_allgather``);
        the :class:`Request`'s ``result`` is the ``(in_degree, *array.shape)``
        array once complete. ``array`` is read-only until then.

        Raises:
            TypeError: as :meth:`neighbor_allgather`.
        """
        a, out, seconds, sent = self._neighbor_plan(graph, array, "ineighbor_allgather")
        mpi_req = None
        if graph.mpi is not None:
            mpi_req = graph.mpi.Ineighbor_allgather(*self._neighbor_bufs(a, out))
        else:
            out[...] = a
        return self._post("neighbor_allgather", mpi_req, out, [array], seconds, a.nbytes, sent, tag)

    # --- point to point, with a peer that may change every call --------------------
    def _peer(self, r, what: str) -> int:
        try:
            r = int(r)
        except (TypeError, ValueError):
            raise TypeError(f"{what} must be a rank (int), got {r!r}") from None
        if not 0 <= r < self.size:
            raise ValueError(f"{what} = {r} is not a rank of this job (0..{self.size - 1})")
        return r

    def _message_model(self, nbytes: int, remote: bool):
        if not remote:
            return 0.0, 0  # a message to oneself is a local copy
        return (self.network.message_time(nbytes) if self.network else 0.0), nbytes

    def sendrecv(self, send: np.ndarray, dest: int, source: int, recv: np.ndarray | None = None) -> np.ndarray:
        """Send ``send`` to ``dest`` and receive from ``source`` at once
        (``MPI_Sendrecv``; safe in rings and shifts, where plain sends could
        deadlock). The message from ``source`` must have exactly the size of
        ``recv`` (by default: the shape and dtype of ``send``), so all ranks
        taking part exchange arrays of one shape and dtype.

        Args:
            send: numpy array, any shape and dtype.
            dest, source: ranks; either may be this rank (a local copy).
            recv: optional C-contiguous, writable array of ``send``'s shape and
                dtype to receive into.

        Returns:
            ``recv`` (a new array if not given) holding ``source``'s message.

        Counts ``send.nbytes`` bytes sent unless ``dest`` is this rank;
        emulated time ``alpha + n beta`` (0 if both peers are this rank).

        Raises:
            TypeError: ``send``/``recv`` not arrays, or ``recv`` of another
                shape/dtype; ValueError: a rank outside 0..P-1, ``recv``
                read-only, or the message received has another size.
        """
        a, recv = self._p2p_bufs(send, recv, "sendrecv")
        dest, source = self._peer(dest, "dest"), self._peer(source, "source")
        seconds, _ = self._message_model(a.nbytes, dest != self.rank or source != self.rank)
        _, sent = self._message_model(a.nbytes, dest != self.rank)  # only what leaves this rank counts

        def call():
            if self.size == 1:
                recv[...] = a
                return
            status = self.MPI.Status()
            self.mpi.Sendrecv([_as_bytes(a), self.MPI.BYTE], dest, _P2P_TAG,
                              [_as_bytes(recv), self.MPI.BYTE], source, _P2P_TAG, status)
            got = status.Get_count(self.MPI.BYTE)
            if got != recv.nbytes:
                raise ValueError(f"sendrecv: rank {source} sent {got} bytes, expected {recv.nbytes}; "
                                 "send arrays of one shape and dtype on every rank")
        self._blocking("sendrecv", seconds, a.nbytes, sent, call)
        return recv

    def _p2p_bufs(self, send, recv, name: str):
        if not isinstance(send, np.ndarray):
            raise TypeError(f"{name} expects a numpy array, got {type(send).__name__}; pass np.asarray(x)")
        a = np.ascontiguousarray(send)
        if recv is None:
            return a, np.empty_like(a)
        if not isinstance(recv, np.ndarray) or recv.shape != a.shape or recv.dtype != a.dtype \
                or not recv.flags.c_contiguous:
            raise TypeError(f"{name}: recv must be a C-contiguous array of the shape {a.shape} and dtype "
                            f"{a.dtype} of send; pass recv=None to get a new one")
        if not recv.flags.writeable:
            raise ValueError(f"{name}: recv is read-only (still in flight?); wait for its request first")
        return a, recv

    def iexchange(self, send: np.ndarray, peer: int, tag=None) -> Request:
        """Send ``send`` to ``peer`` and receive ``peer``'s array (``MPI_Isend`` +
        ``MPI_Irecv``, one :class:`Request` that completes when both have).
        The peer may change every call (hypercube or rotating-ring partners),
        but the pairing must be mutual: ``peer`` calls ``iexchange(.., rank)``
        with an array of the same shape and dtype (not checked: a larger one is
        an MPI error, a smaller one leaves the tail unwritten). Messages between
        the same pair arrive in the order posted.

        Returns:
            A Request; ``result`` is the received array (shape and dtype of
            ``send``) once complete. ``send`` is read-only until then.
            ``peer == rank`` (e.g. on one rank) returns a copy of ``send``.

        Counts ``send.nbytes`` bytes sent unless ``peer`` is this rank; emulated
        time ``alpha + n beta`` (full duplex: both directions at once).

        Raises:
            TypeError, ValueError: ``send`` is not an array; ``peer`` outside 0..P-1.
        """
        a, recv = self._p2p_bufs(send, None, "iexchange")
        peer = self._peer(peer, "peer")
        seconds, sent = self._message_model(a.nbytes, peer != self.rank)
        reqs = None
        if self.size > 1:
            reqs = [self.mpi.Irecv([_as_bytes(recv), self.MPI.BYTE], peer, _P2P_TAG),
                    self.mpi.Isend([_as_bytes(a), self.MPI.BYTE], peer, _P2P_TAG)]
        else:
            recv[...] = a
        return self._post("exchange", reqs, recv, [send], seconds, a.nbytes, sent, tag)

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

    def _bcast_model(self, nbytes: int, root: int):
        seconds = self.network.bcast_time(nbytes, self.size) if self.network else 0.0
        return seconds, costmodel.binomial_bcast_bytes_sent(nbytes, self.size, self.rank, root)

    def bcast(self, buf: np.ndarray, root: int = 0) -> None:
        """Broadcast ``buf`` (contiguous numeric array) from ``root``, in place.

        Counts ``children * buf.nbytes`` bytes sent (binomial tree, see
        :attr:`bytes_sent`); emulated time ``ceil(log2 P)(alpha + n beta)``.
        """
        seconds, sent = self._bcast_model(buf.nbytes, root)
        self._blocking("bcast", seconds, buf.nbytes, sent,
                       lambda: self.mpi.Bcast(buf, root=root) if self.size > 1 else None)

    def ibcast(self, buf: np.ndarray, root: int = 0, tag=None) -> Request:
        """Nonblocking :meth:`bcast` (``MPI_Ibcast``), in place: ``buf`` (any
        shape and dtype, C-contiguous, same size on every rank) holds root's
        data once the :class:`Request` completes (``result`` is ``buf``); it is
        read-only until then, on the root too.

        Raises:
            TypeError: ``buf`` not a C-contiguous array; ValueError: root
                outside 0..P-1; RuntimeError: ``buf`` read-only (in flight).
        """
        if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
            raise TypeError("ibcast needs a C-contiguous numpy array; pass np.ascontiguousarray(x) and use that")
        if not buf.flags.writeable:
            raise RuntimeError("ibcast on a read-only buffer: it is probably still in flight; wait for it first")
        root = self._peer(root, "root")
        seconds, sent = self._bcast_model(buf.nbytes, root)
        mpi_req = self.mpi.Ibcast([_as_bytes(buf), self.MPI.BYTE], root=root) if self.size > 1 else None
        return self._post("bcast", mpi_req, buf, [buf], seconds, buf.nbytes, sent, tag)

    def bcast_obj(self, obj, root: int = 0):
        """Broadcast a small picklable object from ``root``; returns it on every rank."""
        return self.mpi.bcast(obj, root=root) if self.size > 1 else obj

    def allgather(self, obj) -> list:
        """Gather a small picklable object from every rank, on every rank."""
        return self.mpi.allgather(obj) if self.size > 1 else [obj]

    def gather_obj(self, obj, root: int = 0) -> list | None:
        """Gather a picklable object from every rank on ``root`` only: the list
        in rank order there, None elsewhere (e.g. every rank's state for the
        one rank that writes a checkpoint)."""
        if self.size == 1:
            return [obj]
        return self.mpi.gather(obj, root=root)

    def _scalar_op(self, op: str):
        if op not in _SCALAR_OPS:
            raise ValueError(f"unknown reduction {op!r}; choose one of {', '.join(_SCALAR_OPS)}")
        return {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}[op] if self.MPI else None

    def allreduce_scalar(self, x: float, op: str = "sum") -> float:
        """Reduce one Python number over ranks (``sum``, ``max`` or ``min``).

        Counted as an 8-byte allreduce; not charged emulated time (it carries
        metrics and timings, which a modelled delay would distort).

        Raises:
            ValueError: unknown ``op``.
        """
        mpi_op = self._scalar_op(op)
        self._count("allreduce_scalar", 8, costmodel.ring_allreduce_bytes_sent(8, self.size))
        if self.size == 1:
            return x
        return self.mpi.allreduce(x, op=mpi_op)

    def iallreduce_scalar(self, x: float, op: str = "sum", tag=None) -> Request:
        """Nonblocking :meth:`allreduce_scalar` (``MPI_Iallreduce`` of one
        float64); the :class:`Request`'s ``result`` is the reduced value as a
        Python float (integers are exact up to 2**53).

        Raises:
            ValueError: unknown ``op``.
        """
        mpi_op = self._scalar_op(op)
        buf = np.array([x], np.float64)
        mpi_req = self.mpi.Iallreduce(self.MPI.IN_PLACE, buf, op=mpi_op) if self.size > 1 else None
        return self._post("allreduce_scalar", mpi_req, buf, [], 0.0, 8,
                          costmodel.ring_allreduce_bytes_sent(8, self.size), tag, on_done=lambda: float(buf[0]))

    def barrier(self) -> None:
        """Block until every rank has called it (no-op on one rank)."""
        if self.size > 1:
            self.mpi.Barrier()

    def abort(self, message: str, code: int = 1, prefix: bool = True) -> None:
        """Print ``message`` (prefixed with the rank unless ``prefix`` is False)
        to stderr and end the whole job with ``MPI_Abort``, so no rank waits
        forever on a dead peer.

        Under MPI the message must reach the terminal before the abort: the
        process manager kills every rank and may end before it forwards what is
        still in a rank's output pipe (seen as a failed job with no output at
        all when the launcher was slow to be scheduled), so this waits until
        the pipe is read (:func:`.mpi.drain_output`), then silences MPICH's own
        abort line (the message has said it all) and aborts. Under virtual
        ranks the process lives on: the other ranks raise :class:`JobAborted`
        at their next call (a rank waiting in one at once) and this one raises
        SystemExit; when the job is already ending (another rank aborted
        first), nothing is printed."""
        claim = getattr(self.mpi, "claim_abort", None)  # virtual ranks: the first to abort speaks
        if self.size > 1 and claim is not None and not claim(code):
            raise JobAborted()
        sys.stderr.write(f"[minips rank {self.rank}] {message}\n" if prefix else f"{message}\n")
        sys.stderr.flush()
        if claim is None:
            mpi_backend.drain_output()
        if self.size > 1:
            if claim is None:  # not under virtual ranks: fd 2 is the whole process's
                mpi_backend.silence_stderr()
            self.mpi.Abort(code)
        raise SystemExit(code)

    def reconfigure(self, network=None, progress: str = "poll") -> None:
        """Change the network model and the progress mode (between runs: no
        request may be pending when the progress mode changes).

        Raises:
            ValueError: unknown progress mode or network.
        """
        if progress not in PROGRESS_MODES:
            raise ValueError(f"unknown progress mode {progress!r}; choose one of {', '.join(PROGRESS_MODES)}")
        self.network = parse_network(network) if network else None
        if progress != self.progress_mode:
            self.close()
            self.progress_mode = progress
            self._thread = _ProgressThread() if (progress == "thread" and self.size > 1) else None

    def close(self) -> None:
        """Stop the progress thread (pending requests must be waited first)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
