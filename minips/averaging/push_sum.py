"""Push-sum (Kempe, Dobra & Gehrke, "Gossip-based computation of aggregate
information", FOCS 2003), on directed and time-varying graphs. The paper
titled "Gossip-Based Averaging, Estimation and Optimization" was not found;
docs/specifications.md section 10 reads it as push-sum (RECONSTRUCTION of the identity;
the rule itself is Kempe et al.'s).

Every node keeps a numerator x_i (d floats) and a weight w_i; its estimate is
``x_i / w_i``. Round t, on the graph of round t (out-degree k_i among live nodes)::

    every node i: share_i = (x_i, w_i) / (k_i + 1)
                  keep share_i, send share_i to each out-neighbour      # k_i messages of d + 1 floats
                  (x_i, w_i) = share_i + sum of the shares received

The mixing matrix is column stochastic, so ``sum_i x_i`` and ``sum_i w_i`` are
kept and every estimate converges to ``sum x / sum w`` -- no doubly
stochastic W needed, which is why push-sum works on directed graphs.
Starting values choose what is estimated:

- average: ``x_i = v_i, w_i = 1``           -> mean of the v_i
- sum:     ``x_i = v_i, w_i = [i == 0]``    -> sum of the v_i
- count:   ``x_i = 1,   w_i = [i == 0]``    -> number of nodes

Churn (vectorised cluster, static graphs): node ``n - 1`` **joins** at round
``join`` with its starting pair; node ``n // 2`` **leaves** at round ``leave``
and first hands ``(x, w)`` minus its own starting pair to its first live
out-neighbour, so the mass left is exactly that of the remaining nodes and
the estimates move to their mean (sum, count). A node leaving without that
correction would leave its diffused mass behind (ours; Kempe et al. do not
treat churn).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import AveragingMethod
from ..distributed.topology import Topology, components
from .plain import period_rate

__all__ = ["PushSum", "push_graph", "ESTIMATES"]

ESTIMATES = ("average", "sum", "count")


def push_graph(g: Topology) -> Topology:
    """The column-stochastic push matrix of ``g``: node i keeps and sends
    ``1 / (k_i + 1)`` (k_i its out-degree). Time-varying graphs already have it."""
    if g.period:
        return g
    k = g.out_degree()
    share = 1.0 / (k + 1.0)
    regular = g.fourier_shape is not None and np.all(k == k[0])
    return Topology(g.name, g.n, g.src, g.dst, share[g.src], share, directed=g.directed,
                    fourier_shape=g.fourier_shape if regular else None)


def _strongly_connected(g: Topology, alive: np.ndarray) -> bool:
    """Whether the ``alive`` nodes (bool, shape (n,)) reach each other, forwards and back, along
    the edges between alive nodes."""
    keep = alive[g.src] & alive[g.dst]
    component = components(g.n, g.src[keep], g.dst[keep], "strong")
    return bool((component[alive] == component[alive][0]).all())


class PushSum(AveragingMethod):
    """Push-sum averaging with sum and count estimates and optional churn.

    Args:
        estimate: ``average``, ``sum`` or ``count``.
        join, leave: round at which node n-1 joins / node n//2 leaves (None: never).

    Raises:
        ValueError: unknown estimate; churn on a time-varying graph; a leave
            that disconnects the graph; join not before leave's node, etc.
    """
    name = "push-sum"
    paper = "Kempe, Dobra, Gehrke, Gossip-based computation of aggregate information, FOCS 2003"

    @dataclass
    class Options:
        estimate: str = field(default="average", metadata={"help": "what to estimate", "choices": ESTIMATES})
        join: int | None = field(default=None, metadata={"help": "node n-1 joins at this round (None: never)"})
        leave: int | None = field(default=None, metadata={"help": "node n/2 leaves at this round (None: never)"})

        def validate(self):
            if self.estimate not in ESTIMATES:
                raise ValueError(f"--estimate must be one of {', '.join(ESTIMATES)}, got {self.estimate!r}")
            for flag, r in (("--join", self.join), ("--leave", self.leave)):
                if r is not None and r < 1:
                    raise ValueError(f"{flag} {r}: give a round >= 1")

    def __init__(self, graph, seed: int = 0, **options):
        super().__init__(graph, seed, **options)
        estimate, join, leave = self.options.estimate, self.options.join, self.options.leave
        self.kind, self.join, self.leave = estimate, join, leave
        self.P = push_graph(graph)
        self.joiner, self.leaver = graph.n - 1, graph.n // 2
        if (join is not None or leave is not None) and graph.period:
            raise ValueError("--join/--leave need a static graph (e.g. exponential, torus, complete); "
                             f"{graph.name} is time-varying")
        if leave is not None:
            alive = self.alive(leave + 1) | (np.arange(self.n) == self.joiner)
            if not _strongly_connected(graph, alive):
                raise ValueError(f"--leave: without node {self.leaver} the {graph.name} graph is no longer strongly "
                                 "connected, so push-sum cannot reach everyone; use exponential, torus or complete")

    def alive(self, t: int) -> np.ndarray:
        """Who takes part after t rounds (the joiner from round ``join`` on, the leaver up to round ``leave``)."""
        a = np.ones(self.n, bool)
        if self.join is not None and t <= self.join:
            a[self.joiner] = False
        if self.leave is not None and t > self.leave:
            a[self.leaver] = False
        return a

    def initial(self, v: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Starting (x, w) rows, (len(ids), d + 1), for the values v of the nodes ids."""
        x = np.ones_like(v) if self.kind == "count" else v
        w = np.ones(len(ids)) if self.kind == "average" else (ids == 0).astype(float)
        return np.concatenate([x, w[:, None]], axis=1)

    def start(self, engine, x0):
        super().start(engine, x0)
        self.z0 = self.initial(x0, self.ids)
        self.z = self.z0 * self.alive(0)[self.ids, None]

    def step(self, t: int) -> None:
        ids, churn = self.ids, self.join is not None or self.leave is not None
        if self.join == t:  # the new node starts with its own pair
            self.z[ids == self.joiner] = self.z0[ids == self.joiner]
        if self.leave == t:  # hand over everything except the own starting pair, then go
            k = np.flatnonzero(ids == self.leaver)
            heir = np.asarray(self.graph.out_neighbors(self.leaver), np.int64)
            heir = heir[self.alive(t)[heir]][0]
            self.z[ids == heir] += self.z[k] - self.z0[k]
            self.z[k] = 0.0
        alive = self.alive(t + 1)
        g = self.P.at(t)
        if churn:  # shares over the live out-neighbours only
            k_live = np.bincount(g.src[alive[g.src] & alive[g.dst]], minlength=self.n)
            share = self.z / (k_live[ids] + 1.0)[:, None]
        else:
            share = self.z * g.self_weight[ids, None]  # = z / (k_i + 1)
        share *= alive[ids, None]
        self.z = share + self.E.push(g, share, alive if churn else None)

    def estimate(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.z[:, :-1] / self.z[:, -1:]

    def target(self, x0_all: np.ndarray, t: int) -> np.ndarray:
        a = self.alive(t)
        if self.kind == "average":
            return x0_all[a].mean(axis=0)
        if self.kind == "sum":
            return x0_all[a].sum(axis=0)
        return np.full(x0_all.shape[1], float(a.sum()))

    def prediction(self):
        if self.join is not None or self.leave is not None:
            return None, "no prediction with churn"
        return period_rate(self.P)
