"""Neighbour collectives of Comm: the static directed graph (:class:`NeighborGraph`) and its exchanges.

``comm.graph(sources, destinations)`` builds the graph collectively (its
edges checked on every rank); ``neighbor_allgather``/``ineighbor_allgather``
send this rank's array to its out-neighbours and receive one from each
in-neighbour (``MPI_Neighbor_allgather`` on an
``MPI_Dist_graph_create_adjacent`` communicator). What they cost and send:
:mod:`.meter`.
"""
from __future__ import annotations

import numpy as np

from .buffers import as_bytes
from .request import Request

__all__ = ["NeighborCollectives", "NeighborGraph"]


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


class NeighborCollectives:
    """Mixin of :class:`~minips.distributed.comm.Comm`: the neighbour collectives.

    It uses the Comm's ``mpi``, ``MPI``, ``rank``, ``size``, ``allgather``
    (:mod:`.collectives`), the request tail ``_post`` (:mod:`.core`) and the
    meter (:mod:`.meter`).
    """

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
        seconds, sent = self._neighbor_model(a.nbytes, graph)
        return a, out, seconds, sent

    def _neighbor_bufs(self, a, out):
        n = a.nbytes  # bytes per neighbour, in both directions
        return [as_bytes(a), n, self.MPI.BYTE], [as_bytes(out), n, self.MPI.BYTE]

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
