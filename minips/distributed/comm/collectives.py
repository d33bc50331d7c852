"""The collectives of Comm: allreduce (flat or hierarchical), allgatherv, broadcast, scalar and object reductions.

Each comes blocking and nonblocking (``i...`` returns a
:class:`~minips.distributed.comm.Request`, its result in ``req.result``):
``allreduce``/``iallreduce`` sum contiguous float32 buffers in place (the
hierarchical path hands them to :mod:`.hierarchical`);
``allgatherv``/``iallgatherv`` gather 1-D arrays of any dtype and per-rank
length; ``bcast``/``ibcast`` broadcast an array in place;
``allreduce_scalar``/``iallreduce_scalar`` reduce one Python number; and
``bcast_obj``, ``allgather``, ``gather_obj``, ``barrier`` move small Python
objects. What each costs and sends: :mod:`.meter`.
"""
from __future__ import annotations

import time

import numpy as np

from .. import costmodel
from .buffers import as_bytes
from .request import Request

__all__ = ["SCALAR_OPS", "Collectives"]

#: the reductions of ``allreduce_scalar``
SCALAR_OPS = ("sum", "max", "min")


def _vector_problem(a) -> str | None:
    """Why ``a`` cannot be allgathered (None if it can)."""
    if not isinstance(a, np.ndarray):
        return f"expects a numpy array, got {type(a).__name__}; pass np.asarray(x)"
    if a.ndim != 1:
        return f"expects a 1-D array, got shape {a.shape}; pass array.ravel() and reshape after"
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return f"expects a numeric dtype, got {a.dtype}; convert it, e.g. array.astype(np.float32)"
    return None


class Collectives:
    """Mixin of :class:`~minips.distributed.comm.Comm`: its collectives.

    It uses the Comm's ``mpi``, ``MPI``, ``rank``, ``size``, the request tail
    ``_post`` and rank check ``_peer`` (:mod:`.core`), and the meter
    (:mod:`.meter`).
    """

    # --- allreduce: contiguous float32 buffers, summed in place -----------------------
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
        if self.hierarchical:
            self._hierarchical_post(buf, (), None).wait()
            return time.perf_counter() - t0
        finish = self._emulated_finish(buf.nbytes, t0)
        if self.size > 1:
            self.mpi.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        rest = finish - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        self._count("allreduce", buf.nbytes, self._flat_sent(buf.nbytes))
        return time.perf_counter() - t0

    def iallreduce(self, buf: np.ndarray, lock=(), tag=None) -> Request:
        """Start summing ``buf`` over all ranks, in place; returns a :class:`Request`.

        ``buf`` and every array in ``lock`` (e.g. parameter-gradient views
        into it) are read-only until the request completes.

        Raises:
            TypeError, RuntimeError: as :meth:`allreduce`.
        """
        self._check(buf)
        if self.hierarchical:
            return self._hierarchical_post(buf, lock, tag)
        mpi_req = None
        if self.size > 1:
            mpi_req = self.mpi.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        return self._post("allreduce", mpi_req, buf, [buf, *lock], self._modelled_seconds(buf.nbytes),
                          buf.nbytes, self._flat_sent(buf.nbytes), tag)

    # --- the hierarchical path (docs/distributed.md, "Hierarchical allreduce") ----------
    def _hierarchical_post(self, buf: np.ndarray, lock, tag) -> Request:
        """Post ``buf`` (checked) to the hierarchical allreduce
        (:mod:`.hierarchical`): node reduction in a shared window, the leaders'
        allreduce across nodes, broadcast through the window.

        Emulated time: only the leaders' allreduce, ``T_ring(n, N)`` over the N
        nodes (the rest is real shared memory). Bytes: ``n`` into the node's
        window (intra-node; 0 on a node of one rank) and, on a node's leader,
        ``2 (N-1) n / N`` to the other nodes."""
        out = buf.reshape(-1)  # a view taken while writable: the op writes the sum through it
        engine = self._hierarchical_engine(buf.size)
        inter = self.network.allreduce_time(buf.nbytes, engine.nodes) if (self.network and self.delays) else 0.0
        op = engine.post(out, inter, drive=self._thread is None)
        intra_sent = buf.nbytes if engine.local_size > 1 else 0
        inter_sent = costmodel.ring_allreduce_bytes_sent(buf.nbytes, engine.nodes) if engine.leaders is not None else 0
        self._count_allreduce_split(intra_sent, False)
        self._count_allreduce_split(inter_sent, True)
        return self._post("allreduce", None, buf, [buf, *lock], 0.0, buf.nbytes, intra_sent + inter_sent, tag, op=op)

    def _hierarchical_engine(self, n: int):
        """The :class:`.hierarchical.HierarchicalAllreduce` for the current node
        layout, with a window of at least ``n`` floats per row. Building it or
        growing the window is collective: every operation in flight is completed
        first, so no rank blocks in it while another waits for it in a barrier
        (every rank does this at the same call: the same layout and sizes)."""
        from .hierarchical import HierarchicalAllreduce

        eng = self._hier
        if eng is not None and eng.layout == tuple(self.node_of) and eng.win is not None and n <= eng.capacity:
            return eng
        self._drain_hierarchical()
        if eng is not None and eng.layout != tuple(self.node_of):
            eng.free()
            eng = self._hier = None
        if eng is None:
            eng = self._hier = HierarchicalAllreduce(self)
        eng.ensure_capacity(n)
        return eng

    def _drain_hierarchical(self) -> None:
        """Wait for every hierarchical allreduce in flight, oldest first."""
        for r in sorted((r for r in self._pending if r._op is not None), key=lambda r: r.post_time):
            r.wait()

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
        return [as_bytes(out), blocks, displs, self.MPI.BYTE]

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
                self.mpi.Allgatherv([as_bytes(a), self.MPI.BYTE], self._allgatherv_recv(out, blocks))
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
            mpi_req = self.mpi.Iallgatherv([as_bytes(a), self.MPI.BYTE], self._allgatherv_recv(out, blocks))
        else:
            out[...] = a
        return self._post("allgatherv", mpi_req, out, [array], seconds, a.nbytes, sent, tag,
                          on_done=lambda: parts)

    # --- broadcast of an array, in place ------------------------------------------------
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
        mpi_req = self.mpi.Ibcast([as_bytes(buf), self.MPI.BYTE], root=root) if self.size > 1 else None
        return self._post("bcast", mpi_req, buf, [buf], seconds, buf.nbytes, sent, tag)

    # --- one Python number, reduced -------------------------------------------------------
    def _scalar_op(self, op: str):
        if op not in SCALAR_OPS:
            raise ValueError(f"unknown reduction {op!r}; choose one of {', '.join(SCALAR_OPS)}")
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

    # --- small pickled Python objects, and the barrier --------------------------------------
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

    def barrier(self) -> None:
        """Block until every rank has called it (no-op on one rank)."""
        if self.size > 1:
            self.mpi.Barrier()
