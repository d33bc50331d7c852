"""What gradient-tracking, gt-pga, dng and hetero-gossip share: the topology
options, the gossip step ``x_i <- sum_j W_ij x_j`` over a :class:`Topology`,
and its cost.

- :class:`GossipOptions`: the options every gossip method has (``topology``,
  and ``seed``/``radius`` for random-geometric); subclass it (a dataclass) to add
  a method's own.
- :class:`Mixer`: built in ``setup()`` from ``comm.size`` (collective: every rank
  builds the same graph, checked); :meth:`Mixer.mix` is one neighbour exchange
  (``comm.neighbor_allgather`` on a static graph, ``comm.sendrecv`` with the
  step's single peer on the time-varying one-peer exponential graph).
- :func:`exchange_time`: its cost, ``degree x (alpha + n beta)``, independent of P.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from ..topology import TOPOLOGIES, check_same_on_all_ranks, make_topology

__all__ = ["GossipOptions", "Mixer", "build_topology", "exchange_time"]


@dataclass
class GossipOptions:
    """Options common to gossip methods (a base for a method's ``Options``)."""
    topology: str = field(default="ring", metadata={
        "help": "communication graph (python -m minips topology NAME -n P draws it)",
        "choices": tuple(TOPOLOGIES)})
    seed: int = field(default=0, metadata={"help": "random-geometric: seed of the points (same on every rank)"})
    radius: float = field(default=0.0, metadata={
        "help": "random-geometric: link radius in the unit square (0 = 1.5 sqrt(ln P / P))"})

    def validate(self):
        if self.radius < 0:
            raise ValueError(f"radius must be >= 0 (0 = the default 1.5 sqrt(ln P / P)), got {self.radius}")


def build_topology(options, P: int):
    """The topology the options name on P ranks (ValueError with the option
    named: unknown name, not connected, P not a power of two)."""
    extra = {"seed": options.seed, **({"radius": options.radius} if options.radius else {})} \
        if options.topology == "random-geometric" else {}
    try:
        return make_topology(options.topology, P, **extra)
    except ValueError as e:
        raise ValueError(f"topology={options.topology}: {e}") from None


@lru_cache(maxsize=64)
def _max_degree(name: str, P: int, seed: int, radius: float) -> tuple[int, bool]:
    """(largest in- or out-degree over ranks, time-varying?) of a topology."""
    opts = GossipOptions(name, seed, radius)
    top = build_topology(opts, P)
    A = (top.W > 0) & ~np.eye(P, dtype=bool)
    return int(max(A.sum(0).max(), A.sum(1).max())), bool(top.period)


def exchange_time(options, P: int, nbytes: float, net) -> float:
    """Seconds of one gossip step of ``nbytes`` per rank: ``degree (alpha + n beta)``
    (the largest degree; the one-peer exponential graph: one message)."""
    if P <= 1:
        return 0.0
    degree, varying = _max_degree(options.topology, P, options.seed, options.radius)
    return net.message_time(nbytes) if varying else net.neighbor_time(nbytes, degree)


class Mixer:
    """The gossip step of one rank: ``mix(x, t)_i = sum_j W_ij(t) x_j``.

    Args:
        comm: the communicator (its size is P).
        options: a :class:`GossipOptions`.

    Raises:
        ValueError: (on every rank) a bad topology for this P, or ranks that
            built different graphs.
    """

    def __init__(self, comm, options):
        self.comm, P, r = comm, comm.size, comm.rank
        self.topology = build_topology(options, P)
        check_same_on_all_ranks(self.topology, comm)
        self.varying = bool(self.topology.period)
        self.graph = None
        if P > 1 and not self.varying:  # a static graph: one MPI distributed-graph communicator
            src = self.topology.in_neighbors(r)
            self.graph = comm.graph(src, self.topology.out_neighbors(r), weights=self.topology.W[r, src])

    def describe(self) -> dict:
        """The topology's kind, P, degrees and spectral gap (for summary.json)."""
        return self.topology.describe()

    def mix(self, x: np.ndarray, t: int) -> np.ndarray:
        """``sum_j W_ij(t) x_j`` for this rank i (a new float32 array of x's shape;
        one neighbour exchange of x)."""
        comm, r = self.comm, self.comm.rank
        if comm.size == 1:
            return x.copy()
        if self.varying:  # one peer this step: receive from i - off, send to i + off
            top = self.topology.at(t)
            src, dst = top.in_neighbors(r)[0], top.out_neighbors(r)[0]
            rows, weights = comm.sendrecv(x, dst, src)[None], top.W[r, [src]]
            self_weight = top.W[r, r]
        else:
            rows, weights = comm.neighbor_allgather(self.graph, x), self.graph.weights
            self_weight = self.topology.W[r, r]
        out = x * np.float32(self_weight)
        for w, row in zip(weights, rows):
            out += np.float32(w) * row
        return out
