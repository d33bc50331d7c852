"""Synchronous gossip with a mixing matrix W (Xiao & Boyd 2004; the
distributed-averaging iteration of Tsitsiklis 1984).

Pseudo-code (every node i, every round t)::

    x_i <- sum_j W_ij x_j          # j ranges over i and its in-neighbours

W doubly stochastic keeps the mean; ``||x(t) - mean|| <= |lambda_2(W)|^t ||x(0) - mean||``
for a symmetric W. Cost per round: one neighbour exchange (deg_i messages of d floats).
"""
from __future__ import annotations

import numpy as np

from .base import AveragingMethod
from ..distributed.topology import DENSE_LIMIT, second_eigenvalue_modulus

__all__ = ["SynchronousGossip", "period_rate"]


def period_rate(graph) -> tuple[float | None, str]:
    """Per-round contraction of a (possibly time-varying) graph: ``|lambda_2(W)|``,
    or for a time-varying one ``|lambda_2(W_{L-1} ... W_0)|^(1/L)``."""
    if not graph.period:
        l2 = graph.lambda2()
        return l2, ("|lambda_2(W)|" if l2 is not None
                    else f"|lambda_2| not computed (n > {DENSE_LIMIT}, not circulant)")
    if graph.n > DENSE_LIMIT:
        return None, f"|lambda_2| of the period product not computed (n > {DENSE_LIMIT})"
    Phi = np.eye(graph.n)
    for t in range(graph.period):
        Phi = graph.at(t).dense() @ Phi
    l2 = second_eigenvalue_modulus(Phi)
    l2 = 0.0 if l2 < 1e-12 else l2  # round-off of an exact average (one-peer exponential, n = 2^k)
    return l2 ** (1.0 / graph.period), f"|lambda_2(product of the {graph.period} W_t)|^(1/{graph.period})"


class SynchronousGossip(AveragingMethod):
    """Every node replaces its value by the W-weighted average of its in-neighbourhood."""
    name = "plain"
    paper = "Xiao & Boyd, Fast linear iterations for distributed averaging, 2004"

    def step(self, t: int) -> None:
        self.x = self.E.mix(self.graph.at(t), self.x)  # one neighbour exchange

    def prediction(self):
        return period_rate(self.graph)
