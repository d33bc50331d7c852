"""What the gossip methods of this package share: the topology options, the
mixing step ``x_i <- sum_j W_ij x_j`` on a static graph (neighbour allgather,
blocking or posted) or a time-varying one (one sendrecv with the step's peer),
and the cost of one mixing step for the cost models.

Mixing is computed in float32 as ``sum_j W_ij x_j`` over j in ascending rank
order (this rank's own term in its place), so on the complete graph every rank
computes the same sum in the same order and the ranks stay bitwise identical.
"""
from __future__ import annotations

import functools
from dataclasses import field

import numpy as np

from ..topology import TOPOLOGIES, check_same_on_all_ranks, make_topology
from .base import Algorithm

__all__ = ["GossipAlgorithm", "Mixer", "gossip_time", "topology_field", "exchange_degree"]


def topology_field(default: str = "ring"):
    """The ``topology`` option every gossip method has (a new Field each call)."""
    return field(default=default, metadata={"choices": tuple(TOPOLOGIES),
                                            "help": "communication graph (python -m minips topology NAME -n P)"})


def topology_options(options) -> dict:
    """Keyword options of :func:`make_topology` (random-geometric's seed/radius)."""
    if options.topology != "random-geometric":
        return {}
    return {"seed": options.seed, **({"radius": options.radius} if options.radius > 0 else {})}


def validate_topology(options) -> None:
    if options.topology not in TOPOLOGIES:
        raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, got {options.topology!r}")
    if options.radius < 0:
        raise ValueError(f"radius must be >= 0 (0 = the default 1.5 sqrt(ln P / P)), got {options.radius}")


@functools.lru_cache(maxsize=256)
def exchange_degree(name: str, P: int, seed: int = 0, radius: float = 0.0) -> int:
    """Messages per mixing step on the busiest rank: the largest
    ``max(remote in-degree, remote out-degree)`` over ranks (what the emulated
    neighbour exchange charges); 1 for the one-peer exponential graph (one
    sendrecv), 0 for P = 1."""
    if P == 1:
        return 0
    opts = {"seed": seed, **({"radius": radius} if radius > 0 else {})} if name == "random-geometric" else {}
    W = make_topology(name, P, **opts).W
    edges = (W > 0) & ~np.eye(P, dtype=bool)
    return int(max(edges.sum(axis=0).max(), edges.sum(axis=1).max()))


def gossip_time(options, nbytes: float, P: int, net) -> float:
    """Seconds of one mixing step of ``nbytes`` per rank: ``degree (alpha + n beta)``
    on a static graph (``net.neighbor_time``), ``alpha + n beta`` for the
    one-peer exponential graph (``net.message_time``), 0 for P = 1.
    Independent of P except through the degree."""
    if P == 1:
        return 0.0
    if options.topology == "one-peer-exponential":
        return net.message_time(nbytes)
    deg = exchange_degree(options.topology, P, options.seed, options.radius)
    return net.neighbor_time(nbytes, deg)


class _Posted:
    """A mixing step in flight: the request (None for a time-varying graph,
    whose exchange is done at completion), the copy sent, the step's graph."""
    __slots__ = ("buf", "mixed", "req", "top")

    def __init__(self, req, buf, top):
        self.req, self.buf, self.top, self.mixed = req, buf, top, None


class Mixer:
    """``x_i <- sum_j W_ij x_j`` for this rank of ``comm`` on ``topology``.

    Static graphs use one ``comm.graph`` (in-neighbours = sources, with their
    weights) and ``neighbor_allgather``; time-varying graphs (``topology.period
    > 0``, the one-peer exponential graph) use ``topology.at(t)`` and one
    ``sendrecv`` to the step's out-neighbour from its in-neighbour.
    """

    def __init__(self, comm, topology):
        self.comm, self.top = comm, topology
        self.rank, self.P = comm.rank, comm.size
        self.graph = None
        if self.P > 1 and not topology.period:
            src = topology.in_neighbors(self.rank)
            self.graph = comm.graph(src, topology.out_neighbors(self.rank), topology.W[self.rank, src])

    def _combine(self, x, top, sources, rows) -> np.ndarray:
        """``sum_j W_ij x_j`` in float32, j ascending (own term ``x``)."""
        terms = sorted([(self.rank, x), *zip(sources, rows)], key=lambda jr: jr[0])
        out = np.zeros_like(x)
        for j, v in terms:
            out += np.float32(top.W[self.rank, j]) * v
        return out

    def mix(self, x: np.ndarray, t: int) -> None:
        """Blocking: ``x`` <- its mix at step ``t``, in place."""
        if self.P > 1:
            x[...] = self.complete(self.post(x, t, blocking=True))

    def post(self, x: np.ndarray, t: int, blocking: bool = False) -> _Posted:
        """Start mixing a copy of ``x`` (nonblocking on a static graph; a
        time-varying graph's sendrecv runs at :meth:`complete`)."""
        top = self.top.at(t)
        buf = x.copy()  # read-only while in flight; x stays free
        if self.P == 1:
            return _Posted(None, buf, top)
        if self.graph is None:
            return _Posted(None, buf, top)
        if blocking:
            p = _Posted(None, buf, top)
            p.mixed = self._combine(buf, top, self.graph.sources, self.comm.neighbor_allgather(self.graph, buf))
            return p
        return _Posted(self.comm.ineighbor_allgather(self.graph, buf, tag=("mix", t)), buf, top)

    def complete(self, p: _Posted) -> np.ndarray:
        """Wait for ``p`` (or do its sendrecv) and return the mixed vector (kept in ``p.mixed``)."""
        if p.mixed is not None:
            return p.mixed
        if self.P == 1:
            p.mixed = p.buf
        elif p.req is not None:
            p.req.wait()
            p.mixed = self._combine(p.buf, p.top, self.graph.sources, p.req.result)
        else:  # time-varying: one peer this step
            dest, src = p.top.out_neighbors(self.rank), p.top.in_neighbors(self.rank)
            got = self.comm.sendrecv(p.buf, dest[0], src[0])
            p.mixed = self._combine(p.buf, p.top, src, [got])
        p.req = None
        return p.mixed


class GossipAlgorithm(Algorithm):
    """Base of this package's gossip methods: builds the topology in
    :meth:`setup`, checks it is the same on all ranks, and reports it."""

    family = "gossip"
    gradient_allreduce_per_step = False  # gossip never allreduces the gradient

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # ranks mix with neighbours only: their weights differ

    def setup(self) -> None:
        self.topology = make_topology(self.options.topology, self.comm.size, **topology_options(self.options))
        check_same_on_all_ranks(self.topology, self.comm)
        self.mixer = Mixer(self.comm, self.topology)
        self.mix_rounds = 0  # gossip steps done: a time-varying graph advances per round, not per step

    def gossip(self) -> None:
        """One blocking mixing step of the weights (phase ``mix``) with the
        graph of round ``mix_rounds``."""
        with self.timer.phase("mix"):
            self.mixer.mix(self.flat.weights, self.mix_rounds)
        self.mix_rounds += 1

    def state_dict(self) -> dict:
        return {**super().state_dict(), "mix_rounds": self.mix_rounds}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.mix_rounds = int(state.get("mix_rounds", 0))

    def report(self) -> dict:
        return {"topology": self.topology.describe()}
