"""ACO-guided peer selection for push-pull gossip (Janecek & Gansterer,
"ACO-inspired acceleration of gossip averaging", GECCO 2016).
RECONSTRUCTION: only the abstract was available (docs/specifications.md section 22);
the rule below is ours, built from what the abstract states (pheromone on
edges, a heuristic from locally kept values, evaporation, no extra messages,
"local" and "global" knowledge variants).

Every node i keeps, per neighbour j, a pheromone ``tau_ij`` (start 1) and the
value ``xhat_ij`` it last received from j. Round t::

    eta_ij = ||x_i - xhat_ij||  (local knowledge; a never-contacted j gets the largest eta of i's others, or 1)
           = 1 / deg_j          (global knowledge: prefer weakly connected neighbours)
    every node i proposes c_i = j with probability ~ tau_ij^a * eta_ij^b
    pairs = greedy matching of the proposals in a random priority order (as randomized gossip)
    each pair (i, j): gap = ||x_i - x_j||;  x_i, x_j <- (x_i + x_j)/2;  xhat_ij = x_j(before), xhat_ji = x_i(before)
    every node: tau <- (1 - rho) tau on all its edges;  tau_ij += gap on the edge it used
                tau <- max(tau, tau_min * max of its tau)      # MAX-MIN bound (Stuetzle & Hoos 2000)

Without the lower bound the pheromone of unused edges decays to nothing, each
node locks onto one partner, some edges never fire again and the average
stalls (seen on a ring of 32 with global knowledge: stuck near 1e-3); the
MAX-MIN ant system's bound, taken relative to the node's largest pheromone so
it does not depend on the scale of the values, keeps every edge in play.

The exchange is the same push-pull as randomized gossip (one message of d
floats each way, nothing extra); only the choice of partner differs, so the
mean is kept exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import AveragingMethod, greedy_matching

__all__ = ["ACOGossip"]


class ACOGossip(AveragingMethod):
    """Push-pull gossip with pheromone-guided partners.

    Args:
        knowledge: ``local`` (value gaps) or ``global`` (neighbour degrees).
        a, b: exponents of pheromone and heuristic; rho: evaporation in (0, 1];
        tau_min: lower bound of a pheromone relative to the node's largest, in [0, 1].

    Raises:
        ValueError: unknown knowledge, rho outside (0, 1], negative a or b.
    """
    name = "aco"
    paper = "Janecek, Gansterer, ACO-inspired acceleration of gossip averaging, GECCO 2016 (reconstruction)"
    needs_undirected = True

    @dataclass
    class Options:
        rho: float = field(default=0.1, metadata={"help": "pheromone evaporation per round, in (0, 1]"})
        a: float = field(default=1.0, metadata={"help": "exponent of the pheromone, >= 0"})
        b: float = field(default=1.0, metadata={"help": "exponent of the heuristic, >= 0"})
        tau_min: float = field(default=0.05, metadata={
            "help": "lower bound of a pheromone relative to the node's largest, in [0, 1]"})

        def validate(self):
            rho, a, b, tau_min = self.rho, self.a, self.b, self.tau_min
            if not 0.0 < rho <= 1.0 or a < 0 or b < 0 or not 0.0 <= tau_min <= 1.0:
                raise ValueError(f"ACO needs 0 < rho <= 1, a, b >= 0 and 0 <= tau_min <= 1, got rho={rho}, a={a}, "
                                 f"b={b}, tau_min={tau_min}")

    def __init__(self, graph, seed: int = 0, knowledge: str = "local", **options):
        super().__init__(graph, seed, **options)
        if knowledge not in ("local", "global"):  # not an option: the table's aco-local / aco-global rows fix it
            raise ValueError(f"ACO knowledge must be local or global, got {knowledge!r}")
        o = self.options
        self.knowledge, self.a, self.b, self.rho, self.tau_min = knowledge, o.a, o.b, o.rho, o.tau_min
        self.name = f"aco-{knowledge}"
        self.indptr, self.nbrs = graph.csr_out()
        self.deg = np.diff(self.indptr)

    def start(self, engine, x0):
        super().start(engine, x0)
        ids = self.ids
        # the edges of the nodes held, as positions in the CSR arrays, and their owner's row
        self.pos = np.concatenate([np.arange(self.indptr[i], self.indptr[i + 1]) for i in ids])
        self.owner = np.repeat(np.arange(len(ids)), self.deg[ids])
        self.seg = np.concatenate([[0], np.cumsum(self.deg[ids])])  # segment of row k: seg[k]:seg[k+1]
        self.key = ids[self.owner] * self.n + self.nbrs[self.pos]  # ascending: find edge (i, j) by search
        self.tau = np.ones(len(self.pos))
        self.xhat = np.zeros((len(self.pos), x0.shape[1]))
        self.seen = np.zeros(len(self.pos), bool)

    def heuristic(self) -> np.ndarray:
        if self.knowledge == "global":
            return 1.0 / self.deg[self.nbrs[self.pos]]
        gap = np.linalg.norm(self.x[self.owner] - self.xhat, axis=1)
        seen_max = np.zeros(len(self.ids))
        np.maximum.at(seen_max, self.owner, np.where(self.seen, gap, 0.0))
        fill = np.where(seen_max > 0, seen_max, 1.0)[self.owner]
        return np.where(self.seen, gap, fill)

    def choose(self, u: np.ndarray) -> np.ndarray:
        """Each held node's neighbour, drawn with probability ~ tau^a eta^b (u: uniforms).
        The weights are laid out one row per node, so each node's running sum is
        the same arithmetic on both engines (same choices, bit for bit)."""
        w = self.tau ** self.a * self.heuristic() ** self.b
        deg = self.deg[self.ids]
        col = np.arange(len(w)) - self.seg[:-1][self.owner]
        table = np.zeros((len(self.ids), int(deg.max())))
        table[self.owner, col] = w
        cum = np.cumsum(table, axis=1)
        total = cum[:, -1]
        bad = ~(total > 1e-300) | ~np.isfinite(total)  # nothing to go on: choose uniformly
        k = np.where(bad, (u * deg).astype(np.int64), (cum <= (u * total)[:, None]).sum(axis=1))
        k = np.minimum(k, deg - 1)
        return self.nbrs[self.pos[self.seg[:-1] + k]]

    def step(self, t: int) -> None:
        u, priority = self.rng.random(self.n), self.rng.permutation(self.n)
        mine = self.choose(u[self.ids])
        partner = greedy_matching(self.E.allgather(mine), priority)
        y = self.E.exchange(partner, self.x)
        p = partner[self.ids]
        rows = np.flatnonzero(p >= 0)
        used = np.searchsorted(self.key, self.ids[rows] * self.n + p[rows])
        gap = np.linalg.norm(self.x[rows] - y[rows], axis=1)
        self.xhat[used], self.seen[used] = y[rows], True
        self.tau *= 1.0 - self.rho  # evaporation on every edge
        self.tau[used] += gap  # reinforcement by the value gap before averaging
        top = np.maximum.reduceat(self.tau, self.seg[:-1])
        np.maximum(self.tau, self.tau_min * top[self.owner], out=self.tau)  # no edge drops out
        self.x = (self.x + y) / 2
