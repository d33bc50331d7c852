"""Randomized pairwise gossip (Boyd, Ghosh, Prabhakar & Shah, "Randomized
gossip algorithms", IEEE Trans. Inf. Theory 52(6), 2006).

Boyd et al. wake one node per clock tick; it picks a neighbour j with
probability P_ij (here uniform, 1/deg_i) and both set ``x <- (x_i + x_j)/2``.
The lab runs the ticks of one **round** together: every node proposes one
uniformly random neighbour, and the n proposals are carried out in a random
order, a proposal that meets a node already busy this round being dropped
(:func:`~minips.averaging.base.greedy_matching`, the same result as running
them one after another). Pseudo-code of round t::

    every node i: c_i = uniform neighbour,   priority = random permutation of the nodes
    pairs = greedy matching of the proposals (i, c_i) in priority order
    every matched pair (i, j): x_i, x_j <- (x_i + x_j) / 2     # one exchange of d floats each way

The mean is kept exactly by every pair. Boyd et al.'s bound:
``E ||x(t) - mean||^2 <= lambda_2(E[W])^t ||x(0) - mean||^2`` (a pair-averaging
matrix is a projection, ``W^T W = W``); :meth:`prediction` estimates
``E[W] = I - 1/2 sum_e p_e (e_i - e_j)(e_i - e_j)^T`` from 200 sampled rounds.
Cost per round: one message of d floats per matched node, and (in this lab)
an allgather of the n proposals so every rank computes the same pairs.
"""
from __future__ import annotations

import numpy as np

from .base import AveragingMethod, choose_uniform, greedy_matching
from ..distributed.topology import DENSE_LIMIT

__all__ = ["RandomizedGossip", "expected_pair_matrix_rate"]


def expected_pair_matrix_rate(n: int, sample_round, rounds: int = 200) -> float | None:
    """``sqrt(lambda_2(E[W]))`` with edge frequencies from ``rounds`` calls of
    ``sample_round() -> partner (n,)``; None for n > DENSE_LIMIT."""
    if n > DENSE_LIMIT:
        return None
    L = np.zeros((n, n))
    for _ in range(rounds):
        p = sample_round()
        i = np.flatnonzero(p > np.arange(n))  # each pair once (i < partner)
        j = p[i]
        np.add.at(L, (i, i), 1.0)
        np.add.at(L, (j, j), 1.0)
        np.add.at(L, (i, j), -1.0)
        np.add.at(L, (j, i), -1.0)
    EW = np.eye(n) - L / (2 * rounds)
    ev = np.sort(np.linalg.eigvalsh(EW))[::-1]
    return float(np.sqrt(max(ev[1], 0.0)))


class RandomizedGossip(AveragingMethod):
    """Random pairs along edges, one round = n proposals without conflicts."""
    name = "pairwise"
    paper = "Boyd, Ghosh, Prabhakar, Shah, Randomized gossip algorithms, IEEE TIT 2006"
    needs_undirected = True

    def __init__(self, graph, seed: int = 0):
        super().__init__(graph, seed)
        self.indptr, self.nbrs = graph.csr_out()
        self.seed = seed

    def proposals(self, rng) -> tuple[np.ndarray, np.ndarray]:
        """This round's shared draws: (uniforms for the neighbour choice, priorities)."""
        return rng.random(self.n), rng.permutation(self.n)

    def step(self, t: int) -> None:
        u, priority = self.proposals(self.rng)
        mine = choose_uniform(self.indptr, self.nbrs, self.ids, u[self.ids])
        partner = greedy_matching(self.E.allgather(mine), priority)
        y = self.E.exchange(partner, self.x)  # the partner's value (own if idle)
        self.x = (self.x + y) / 2  # idle nodes: (x + x)/2 = x exactly

    def prediction(self):
        rng = np.random.default_rng(self.seed + 10_007)
        all_ids = np.arange(self.n)

        def sample():
            u, pr = self.proposals(rng)
            return greedy_matching(choose_uniform(self.indptr, self.nbrs, all_ids, u), pr)
        r = expected_pair_matrix_rate(self.n, sample)
        if r is None:
            return None, f"E[W] not computed (n > {DENSE_LIMIT})"
        return r, "sqrt(lambda_2(E[W])), E[W] from 200 sampled rounds (Boyd et al. bound, mean square)"
