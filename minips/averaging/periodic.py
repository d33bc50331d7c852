"""Periodic gossiping along a fixed edge schedule (Yu, Anderson, Mou, Liu,
He & Morse, "Distributed averaging using periodic gossiping", IEEE TAC 2017).
Specification: docs/specifications.md section 21.

Fix an order ``(e_1, ..., e_m)`` of the m edges of a connected graph; each
edge fires once per period and its two ends average. Consecutive edges that
share no node commute, so the lab groups them into matchings and fires one
matching per round (unmatched nodes idle)::

    schedule = split (e_1, ..., e_m) into runs of pairwise-disjoint edges
    round t:   for (i, j) in schedule[t mod len(schedule)]:  x_i, x_j <- (x_i + x_j) / 2

After K periods the error is about ``|lambda_2(Phi)|^K`` with the period matrix
``Phi = W_{e_m} ... W_{e_1}``. Yu et al.: on a **tree** every edge order gives
the same ``|lambda_2(Phi)|`` (:func:`period_lambda2` over many orders shows
it; on a ring the orders differ). Deterministic, no random numbers.
Cost: at most one exchange of d floats per node per round.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import AveragingMethod
from ..distributed.topology import DENSE_LIMIT, second_eigenvalue_modulus

__all__ = ["PeriodicGossip", "edge_order", "matchings", "period_lambda2"]


def edge_order(graph, order_seed: int | None) -> np.ndarray:
    """The m undirected edges, (m, 2), in a seeded random order, or (``order_seed``
    None) grouped by a greedy edge colouring: every edge, in sorted order, takes
    the smallest colour free at both its ends; the order lists colour 0's edges,
    then colour 1's, ... (a ring of even n: 2 matchings per period)."""
    e = graph.undirected_edges()
    if order_seed is not None:
        return e[np.random.default_rng(order_seed).permutation(len(e))]
    used = [set() for _ in range(graph.n)]
    colour = np.empty(len(e), np.int64)
    for k, (i, j) in enumerate(e):
        c = 0
        while c in used[i] or c in used[j]:
            c += 1
        colour[k] = c
        used[i].add(c)
        used[j].add(c)
    return e[np.argsort(colour, kind="stable")]


def matchings(edges: np.ndarray, n: int) -> list[np.ndarray]:
    """Split an edge order into consecutive runs of disjoint edges; each run
    as a partner array (n,) (-1 idle). The product of the runs' matrices is
    the product of the edges' matrices in the given order."""
    out, partner = [], np.full(n, -1, np.int64)
    for i, j in edges:
        if partner[i] >= 0 or partner[j] >= 0:  # edge meets the current run: start the next one
            out.append(partner)
            partner = np.full(n, -1, np.int64)
        partner[i], partner[j] = j, i
    out.append(partner)
    return out


def period_lambda2(edges: np.ndarray, n: int) -> float:
    """``|lambda_2(Phi)|`` of ``Phi = W_{e_m} ... W_{e_1}``, each
    ``W_e = I - (e_i - e_j)(e_i - e_j)^T / 2`` (dense; n <= DENSE_LIMIT)."""
    Phi = np.eye(n)
    for i, j in edges:  # left-multiplying by W_e averages rows i and j
        Phi[[i, j]] = (Phi[i] + Phi[j]) / 2
    return second_eigenvalue_modulus(Phi)


class PeriodicGossip(AveragingMethod):
    """Pairwise averages along a fixed periodic edge schedule.

    Args:
        order_seed: None = edges grouped by a greedy edge colouring; an int = a random order from that seed.
    """
    name = "periodic"
    paper = "Yu, Anderson, Mou, Liu, He, Morse, Distributed averaging using periodic gossiping, IEEE TAC 2017"
    needs_undirected = True

    @dataclass
    class Options:
        order_seed: int | None = field(default=None, metadata={
            "help": "random edge order from this seed (default: grouped by an edge colouring)"})

    def __init__(self, graph, seed: int = 0, **options):
        super().__init__(graph, seed, **options)
        self.edges = edge_order(graph, self.options.order_seed)
        self.schedule = matchings(self.edges, self.n)

    def step(self, t: int) -> None:
        partner = self.schedule[t % len(self.schedule)]
        y = self.E.exchange(partner, self.x)
        self.x = (self.x + y) / 2

    def prediction(self):
        if self.n > DENSE_LIMIT:
            return None, f"Phi not computed (n > {DENSE_LIMIT})"
        steps = len(self.schedule)
        l2 = period_lambda2(self.edges, self.n)
        how = f"|lambda_2(Phi)|^(1/{steps}) with |lambda_2(Phi)| = {l2:.4g} per period of {steps} rounds"
        return l2 ** (1.0 / steps), how
