"""Hierarchical allreduce: shared memory inside a node, one message per node across.

With R ranks on each of N nodes, a flat ring allreduce over P = N R ranks makes
``2 (P-1)`` steps, each on the slowest (inter-node) link. The hierarchical
form (the scheme Horovod, BlueFog and Bagua offer as "hierarchical allreduce")
does the reduction in three stages:

1. **node reduction**, in an MPI-3 shared-memory window
   (``MPI_Win_allocate_shared`` on the node's communicator): every rank copies
   its buffer into its own row of the window; after a node barrier, local rank
   j sums column slice j of every row (rows in local-rank order, so the node's
   reduction runs on all R cores at once and its order is fixed) into the
   result row;
2. **inter-node allreduce** of the result row among one leader per node
   (local rank 0; ``MPI_Iallreduce`` on the leaders' communicator), after a
   second node barrier;
3. **broadcast** through the window: a third node barrier, then every rank
   copies the result row into its buffer.

Every rank of a node copies the same bytes and every leader holds the same
bits after the leaders' allreduce (MPICH's algorithms give every rank the same
result), so the hierarchical sum is bitwise the same on every rank: replicas
stay identical. It differs from the flat sum by float32 rounding only (another
summation order).

Nonblocking: :class:`HierarchicalOp` is a small state machine whose every MPI
call is nonblocking (``Ibarrier``, ``Iallreduce``); :meth:`HierarchicalAllreduce.advance`
moves it on whenever the rank tests a request (``comm.progress()`` between
layers, ``--progress poll``), so the node reduction and the leaders'
allreduce proceed while the rank computes. The operations of a rank run one
after another, in posting order (a FIFO): since every rank posts its
allreduces in the same order (MPI's rule for collectives), every rank works
on the same operation, and one window and one pair of communicators serve
them all. An operation copies its buffer in when it reaches the head of the
queue (the buffer is read-only in flight, so it still holds the values it was
posted with).

The window is allocated (collectively, over the node) on the first allreduce
and grown when a larger buffer comes; :class:`~minips.distributed.comm.Comm`
first completes every operation in flight, so no rank can be blocked in the
allocation while another waits for it in a barrier.

Virtual ranks (:mod:`.virtual`) answer the same calls: their ``Win.Allocate_shared``
hands the ranks of an emulated node one NumPy buffer, and ``Ibarrier`` is a
virtual collective; the code below does not know which back-end it runs on.

Failure: a rank that raises ends the job (``MPI_Abort`` under mpiexec, the
world's abort under virtual ranks); the others, waiting in a node barrier,
are ended with it instead of waiting for ever (``tests/test_hierarchical.py``).
"""
from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np

__all__ = ["HierarchicalAllreduce", "HierarchicalOp", "node_slice"]


def node_slice(n: int, local_rank: int, local_size: int) -> tuple[int, int]:
    """``(lo, hi)``: the entries of an ``n``-float buffer that local rank
    ``local_rank`` of ``local_size`` reduces (contiguous slices that cover
    ``0..n-1``, sizes differing by at most one)."""
    return local_rank * n // local_size, (local_rank + 1) * n // local_size


class HierarchicalOp:
    """One hierarchical allreduce in flight: the buffer, its state and the MPI
    request of its current stage.

    States: ``queued`` (waiting for the operations posted before it) ->
    ``gather`` (copied into the window, node barrier 1 pending) -> ``reduced``
    (its slice summed, node barrier 2 pending) -> ``inter`` (leaders only:
    the leaders' Iallreduce, then the emulated network time) -> ``bcast``
    (node barrier 3 pending) -> ``done`` (the sum copied into the buffer).

    It offers ``Test()`` and ``Wait()`` like an MPI request, so
    :class:`~minips.distributed.comm.Request` and the progress thread drive it
    as they drive one.
    """

    def __init__(self, engine: HierarchicalAllreduce, out: np.ndarray, inter_seconds: float):
        self.engine = engine
        self.out = out              # a writable 1-D float32 view of the caller's buffer
        self.n = out.size
        self.inter_seconds = inter_seconds
        self.state = "queued"
        self.req = None             # the MPI request of the current stage
        self.inter_ready = 0.0      # emulation: when the leaders' allreduce leaves the modelled link

    @property
    def done(self) -> bool:
        return self.state == "done"

    def Test(self) -> bool:
        return self.engine.test(self)

    def Wait(self) -> None:
        self.engine.wait(self)


class HierarchicalAllreduce:
    """The node and leader communicators, the shared window and the queue of
    operations of one rank.

    Args:
        comm: the :class:`~minips.distributed.comm.Comm` (its ``mpi``
            communicator, ``MPI`` module, ``node_of`` layout and network
            emulation are used).

    Raises:
        ValueError: on every rank, when an emulated node (``--ranks-per-node``)
            holds ranks that do not share memory (ranks of different machines).
    """

    def __init__(self, comm):
        MPI, world = comm.MPI, comm.mpi
        self.comm, self.MPI = comm, MPI
        self.layout = tuple(comm.node_of)
        me = comm.rank
        node = world.Split(self.layout[me], me)
        # The window needs memory every rank of the node can load from: check that the node is
        # inside one machine (an emulated node spanning two machines cannot share a window).
        real = node.Split_type(MPI.COMM_TYPE_SHARED, key=node.Get_rank())
        shares = real.Get_size() == node.Get_size()
        real.Free()
        bad = [r for r, ok in enumerate(world.allgather(shares)) if not ok]
        if bad:
            node.Free()
            raise ValueError(f"--ranks-per-node {comm.ranks_per_node}: ranks {bad} are on a node whose ranks do not "
                             "all share memory (they run on different machines); give a number of ranks per node "
                             "that divides the ranks each machine runs, or drop --ranks-per-node")
        self.node = node
        self.local_rank, self.local_size = node.Get_rank(), node.Get_size()
        leaders = world.Split(0 if self.local_rank == 0 else MPI.UNDEFINED, me)
        self.leaders = None if leaders == MPI.COMM_NULL else leaders
        self.nodes = len(set(self.layout))
        self.win = None
        self.shared = None          # (local_size + 1, capacity) float32: one row per rank, then the result
        self.capacity = 0
        self.queue: deque = deque()
        self.lock = threading.Lock()

    # --- window ----------------------------------------------------------------------------
    def ensure_capacity(self, n: int) -> None:
        """Make the window hold ``n`` floats per row (collective over the node;
        call it only with no operation in flight, at the same point on every rank)."""
        if self.win is not None and n <= self.capacity:
            return
        cap = max(int(n), 2 * self.capacity, 1)
        self.free_window()
        rows = self.local_size + 1
        size = rows * cap * 4 if self.local_rank == 0 else 0  # one contiguous block, owned by local rank 0
        self.win = self.MPI.Win.Allocate_shared(size, 4, comm=self.node)
        buf, _ = self.win.Shared_query(0)
        self.shared = np.ndarray((rows, cap), np.float32, buffer=buf)
        self.capacity = cap

    def free_window(self) -> None:
        if self.win is not None:
            self.shared = None
            self.win.Free()
            self.win, self.capacity = None, 0

    def free(self) -> None:
        """Release the window and the communicators (collective over the node)."""
        self.free_window()
        for c in (self.leaders, self.node):
            if c is not None:
                c.Free()
        self.leaders = self.node = None

    # --- operations ------------------------------------------------------------------------
    def post(self, out: np.ndarray, inter_seconds: float, drive: bool) -> HierarchicalOp:
        """Queue an allreduce of ``out`` (a writable 1-D float32 view of at most
        ``capacity`` floats); with ``drive``, start it now if nothing is ahead."""
        op = HierarchicalOp(self, out, inter_seconds)
        with self.lock:
            self.queue.append(op)
            if drive:
                self._advance()
        return op

    def test(self, op: HierarchicalOp) -> bool:
        """Move the queue on as far as it goes without blocking; True if ``op`` is done."""
        if not op.done:
            with self.lock:
                self._advance()
        return op.done

    def wait(self, op: HierarchicalOp) -> None:
        """Drive the queue (the operations ahead of ``op`` first) until ``op`` is done,
        blocking in the current stage's MPI request."""
        while True:
            with self.lock:
                self._advance()
                if op.done:
                    return
                head = self.queue[0]
                req, ready = head.req, head.inter_ready
            if req is not None:
                req.Wait()
            else:  # the leaders' allreduce has arrived; the emulated link is still busy
                time.sleep(max(0.0, ready - time.perf_counter()))

    def _advance(self) -> None:
        """Under the lock: run the head operation's stages as far as they can go."""
        while self.queue:
            op = self.queue[0]
            while not op.done and self._stage(op):
                pass
            if not op.done:
                return
            self.queue.popleft()

    def _stage(self, op: HierarchicalOp) -> bool:
        """One stage of the head operation; False when it must wait."""
        MPI, n = self.MPI, op.n
        if op.req is not None:
            if not op.req.Test():
                return False
            op.req = None
        if op.state == "queued":
            self.shared[self.local_rank, :n] = op.out          # my contribution, into my row
            op.req, op.state = self.node.Ibarrier(), "gather"
        elif op.state == "gather":                            # every row is in: sum my slice, rows in order
            lo, hi = node_slice(n, self.local_rank, self.local_size)
            acc = self.shared[-1, lo:hi]
            np.copyto(acc, self.shared[0, lo:hi])
            for j in range(1, self.local_size):
                np.add(acc, self.shared[j, lo:hi], out=acc)
            op.req, op.state = self.node.Ibarrier(), "reduced"
        elif op.state == "reduced":                           # the node's sum is complete
            if self.leaders is not None and self.nodes > 1:
                op.req = self.leaders.Iallreduce(MPI.IN_PLACE, self.shared[-1, :n], op=MPI.SUM)
                op.inter_ready = self.comm._link_until(op.inter_seconds, time.perf_counter())
                op.state = "inter"
            else:
                op.req, op.state = self.node.Ibarrier(), "bcast"
        elif op.state == "inter":                             # leaders: the sum over nodes is in the result row
            if time.perf_counter() < op.inter_ready:
                return False
            op.req, op.state = self.node.Ibarrier(), "bcast"
        elif op.state == "bcast":                             # the leader has written the result row
            op.out[...] = self.shared[-1, :n]
            op.state = "done"
        return True
