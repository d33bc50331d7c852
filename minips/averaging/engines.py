"""Two engines with one interface: where the nodes of an averaging method live.

- :class:`VectorisedCluster`: all ``n`` nodes in one process; a node's value is
  row i of an ``(n, d)`` float64 array and every operation is vectorised NumPy
  over all nodes (10,000 nodes on a laptop).
- :class:`MPICluster`: one node per MPI rank (``mpiexec -n P``); the arrays
  have one row, this rank's, and every operation is a message of
  :mod:`minips.distributed.comm` (neighbour exchange, sendrecv, iexchange).

A method is written once against this interface, for the rows ``engine.ids``
it holds (all nodes, or one). Randomness that several nodes must agree on
(who proposes to whom, priorities) is drawn by every engine from the same
seeded stream for all n nodes and sliced with ``ids``, so both engines make
the same choices for the same seed.

Counters (per engine, summed over ranks by :meth:`total`): ``messages``
(value messages of d floats, or d + 1 for push-sum, sent by the nodes held)
and ``control_ints`` (integers of the lab's conflict-resolution allgather).
"""
from __future__ import annotations

import numpy as np

from ..distributed.topology import Topology

__all__ = ["VectorisedCluster", "MPICluster"]


class VectorisedCluster:
    """All ``n`` nodes in this process.

    Attributes:
        n: nodes; ids: ``arange(n)`` (the rows held); messages, control_ints: counters.
    """
    kind = "vectorised"

    def __init__(self, n: int):
        self.n = n
        self.ids = np.arange(n)
        self.messages = 0
        self.control_ints = 0

    def mix(self, g: Topology, x: np.ndarray) -> np.ndarray:
        """``(W x)_i = W_ii x_i + sum_j W_ij x_j`` for every node; x: (n, d) float64."""
        self.messages += g.num_edges
        y = g.self_weight[:, None] * x
        for k in range(x.shape[1]):  # bincount sums the in-edges of each node
            y[:, k] += np.bincount(g.dst, weights=g.weight * x[g.src, k], minlength=self.n)
        return y

    def push(self, g: Topology, share: np.ndarray, alive=None) -> np.ndarray:
        """What each node receives when every node sends ``share[i]`` to each
        of its out-neighbours in ``g`` (edges touching a node with
        ``alive == False`` carry nothing): (n, d)."""
        keep = slice(None) if alive is None else alive[g.src] & alive[g.dst]
        src, dst = g.src[keep], g.dst[keep]
        self.messages += len(src)
        out = np.zeros_like(share)
        for k in range(share.shape[1]):
            out[:, k] = np.bincount(dst, weights=share[src, k], minlength=self.n)
        return out

    def exchange(self, partner: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Pairwise exchange: ``partner`` is a global (n,) int array, -1 for
        an idle node, mutual otherwise. Returns the partner's row (own row if idle)."""
        matched = partner >= 0
        self.messages += int(matched.sum())
        y = x.copy()
        y[matched] = x[partner[matched]]
        return y

    def allgather(self, local: np.ndarray) -> np.ndarray:
        """The global (n,) array from the rows held (here: all of them).
        Counted as the ``n - 1`` integers each node would receive."""
        self.control_ints += self.n * (self.n - 1)
        return np.asarray(local)

    def gather(self, rows: np.ndarray) -> np.ndarray | None:
        """Instrumentation (not counted): every node's rows, (n, ...)."""
        return rows

    def total(self, count: int) -> int:
        return count

    @property
    def bytes_sent(self) -> int:
        return 0


class MPICluster:
    """One node per MPI rank of ``comm`` (a :class:`minips.distributed.comm.Comm`).

    Raises:
        ValueError: fewer than 2 ranks, or ``n`` != number of ranks.
    """
    kind = "mpi"

    def __init__(self, comm, n: int):
        if comm.size < 2:
            raise ValueError("the MPI engine needs at least 2 ranks (one node per rank); run mpiexec -n P with "
                             "P >= 2, or without mpiexec for the vectorised cluster")
        if n != comm.size:
            raise ValueError(f"under mpiexec the lab runs one node per rank: -n must equal the number of ranks "
                             f"({comm.size}), got -n {n}")
        self.comm, self.n = comm, n
        self.ids = np.array([comm.rank])
        self.messages = 0
        self.control_ints = 0
        self._graphs = {}

    def _neighbor_graph(self, g: Topology):
        """``comm.graph`` of a static graph, built once (a collective)."""
        key = id(g)
        if key not in self._graphs:
            r = self.comm.rank
            into = g.dst == r
            src, w = g.src[into], g.weight[into]
            order = np.argsort(src)
            ng = self.comm.graph(src[order], np.sort(g.dst[g.src == r]), w[order])
            self._graphs[key] = (ng, g)  # keep g alive so its id stays unique
        return self._graphs[key][0]

    def _one_peer(self, g: Topology):
        """(to, from) of a graph where each node has one out- and one in-neighbour."""
        r = self.comm.rank
        to, frm = g.dst[g.src == r], g.src[g.dst == r]
        if len(to) != 1 or len(frm) != 1:
            raise ValueError(f"the MPI engine runs a time-varying graph only when each node has one peer per "
                             f"round; {g.name} gives rank {r} {len(to)} out- and {len(frm)} in-neighbours")
        return int(to[0]), int(frm[0])

    def _gather_in(self, g: Topology, row: np.ndarray):
        """(rows received from the in-neighbours, their weights) and counts the messages sent."""
        if g.period:
            to, frm = self._one_peer(g)
            got = self.comm.sendrecv(row, dest=to, source=frm)
            self.messages += 1
            return got[None], g.weight[g.dst == self.comm.rank]
        ng = self._neighbor_graph(g)
        rows = self.comm.neighbor_allgather(ng, row)
        self.messages += ng.out_degree
        return rows, ng.weights

    def mix(self, g: Topology, x: np.ndarray) -> np.ndarray:
        rows, w = self._gather_in(g, np.ascontiguousarray(x[0]))
        return (g.self_weight[self.comm.rank] * x[0] + w @ rows)[None]

    def push(self, g: Topology, share: np.ndarray, alive=None) -> np.ndarray:
        if alive is not None:
            raise ValueError("nodes joining or leaving are simulated on the vectorised cluster only; "
                             "run without mpiexec (drop --join/--leave under mpiexec)")
        rows, _ = self._gather_in(g, np.ascontiguousarray(share[0]))
        return rows.sum(axis=0)[None]

    def exchange(self, partner: np.ndarray, x: np.ndarray) -> np.ndarray:
        p = int(partner[self.comm.rank])
        if p < 0:
            return x.copy()
        self.messages += 1
        req = self.comm.iexchange(np.ascontiguousarray(x[0]), p)
        req.wait()
        return req.result[None]

    def allgather(self, local: np.ndarray) -> np.ndarray:
        self.control_ints += self.n - 1
        return np.concatenate(self.comm.allgather(np.asarray(local)))

    def gather(self, rows: np.ndarray) -> np.ndarray | None:
        """Every rank's rows stacked on rank 0 (None elsewhere); not counted."""
        got = self.comm.gather_obj(rows)
        return None if got is None else np.concatenate(got)

    def total(self, count: int) -> int:
        return int(self.comm.allreduce_scalar(float(count)))

    @property
    def bytes_sent(self) -> int:
        return self.comm.bytes_sent
