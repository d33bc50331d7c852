"""What every averaging method shares: the state it keeps per node, the
engine it runs on, the seeded stream of shared random choices, and a
conflict-free pairing of nodes for the pairwise methods.

An averaging method is a class with

- ``start(engine, x0)``: ``x0`` holds the initial values of the nodes
  ``engine.ids`` (float64, (len(ids), d));
- ``step(t)``: one round ``t = 0, 1, ...``;
- ``estimate()``: each held node's current estimate of the target (its value;
  push-sum: numerator / weight), (len(ids), d);
- ``target(t)`` and ``alive(t)``: what the estimates should converge to after
  round t (the mean of the values, or push-sum's sum or count) and which
  nodes take part (push-sum's join/leave; everyone otherwise);
- ``prediction()``: the per-round contraction factor the spectrum predicts
  (e.g. ``|lambda_2(W)|``) and how it was obtained, or None.

Its options are the fields of a nested ``Options`` dataclass (as for the
algorithms, predictors and compressors, :mod:`minips.options`): the lab's
flags of the same names reach it, and ``make_method`` refuses the others.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..distributed.topology import Topology

__all__ = ["AveragingMethod", "greedy_matching", "choose_uniform"]


class AveragingMethod:
    """Base class. Subclasses set ``name``, ``paper`` and implement ``step``.

    Args:
        graph: the communication graph (:class:`~minips.distributed.topology.Topology`).
        seed: seed of the choices every node must agree on (same on every rank).
        **options: the fields of ``Options``, checked by ``Options.validate()``
            and kept as ``self.options``.

    Raises:
        TypeError: an option the method does not have (``make_method`` names it
            as a flag instead); ValueError: an undirected method on a directed
            or time-varying graph, or ``validate()``'s one-line message.
    """
    name = ""
    paper = ""
    needs_undirected = False  # pairwise and shift-register methods need W = W^T

    @dataclass
    class Options:
        """No options. A method with options declares its own ``Options``: one
        field per option (named as its ``gossip-lab`` flag, ``order_seed`` for
        ``--order-seed``) with its type, default and ``metadata={"help": ...}``,
        and, if a value can be out of range, a ``validate()`` raising ValueError."""

        def validate(self) -> None:
            pass

    def __init__(self, graph: Topology, seed: int = 0, **options):
        if self.needs_undirected and (graph.directed or graph.period):
            raise ValueError(f"--method {self.name} needs an undirected static graph, got --topology {graph.name}; "
                             "use ring, torus, exponential, complete, random-geometric or tree")
        self.graph, self.n = graph, graph.n
        self.rng = np.random.default_rng(seed)
        self.options = self.Options(**options)  # an unknown keyword: TypeError, as for any function
        if hasattr(self.options, "validate"):
            self.options.validate()

    def start(self, engine, x0: np.ndarray) -> None:
        self.E = engine
        self.ids = engine.ids
        self.x0 = x0.copy()
        self.x = x0.copy()

    def step(self, t: int) -> None:  # pragma: no cover - every method defines it
        raise NotImplementedError

    def estimate(self) -> np.ndarray:
        return self.x

    def target(self, x0_all: np.ndarray, t: int) -> np.ndarray:
        """The mean of all initial values, (d,) (x0_all: every node's, (n, d))."""
        return x0_all.mean(axis=0)

    def alive(self, t: int) -> np.ndarray:
        return np.ones(self.n, bool)

    def prediction(self) -> tuple[float | None, str]:
        return None, "no spectral prediction for this method"


def greedy_matching(proposal: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """Pair nodes from one proposal each: node i proposes to ``proposal[i]``
    (-1: none); proposals are taken in increasing ``priority`` (distinct
    ints) and accepted when both ends are still free, as n pairwise exchanges
    run one after another would be, dropping those that meet a busy node.

    Computed without a Python loop over nodes: repeatedly accept every
    proposal that has the smallest priority among all proposals touching
    either of its ends (a local minimum); this gives exactly the sequential
    greedy result (Blelloch, Fineman, Shun, SPAA 2012), in O(log n) passes
    for random priorities.

    Returns:
        int64 (n,): the partner of each node, -1 if unmatched (mutual).
    """
    n = len(proposal)
    partner = np.full(n, -1, np.int64)
    live = np.flatnonzero((proposal >= 0) & (proposal != np.arange(n)))
    while len(live):
        a, b, p = live, proposal[live], priority[live]
        best = np.full(n, np.iinfo(np.int64).max)
        np.minimum.at(best, a, p)
        np.minimum.at(best, b, p)
        win = (p == best[a]) & (p == best[b])
        partner[a[win]], partner[b[win]] = b[win], a[win]
        live = live[(partner[a] < 0) & (partner[b] < 0)]
    return partner


def choose_uniform(indptr: np.ndarray, nbrs: np.ndarray, ids: np.ndarray, u: np.ndarray) -> np.ndarray:
    """For each node i in ``ids``, the neighbour ``nbrs[indptr[i] + floor(u_i deg_i)]``
    (uniform over its neighbours; u in [0, 1))."""
    deg = indptr[ids + 1] - indptr[ids]
    return nbrs[indptr[ids] + np.minimum((u * deg).astype(np.int64), deg - 1)]
