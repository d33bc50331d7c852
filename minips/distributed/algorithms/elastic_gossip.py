"""Elastic Gossip: EASGD's elastic pull with the centre variable replaced by a
random peer, applied at both ends of every pair.

Paper: S. Pramod, "Elastic Gossip: Distributing Neural Network Training Using
Gossip-like Protocols", MSc thesis, arXiv:1812.02407, 2018. The rule follows
docs/specifications.md section 9, read there from the author's code
(github.com/sidps/dist_training: ``src/common/pairwise.py``, ``elastic_gossip.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gossip_common import GossipMethod

__all__ = ["ElasticGossip", "elastic_choice", "elastic_partners"]


def elastic_choice(t: int, rank: int, P: int, p: float, seed: int) -> int:
    """Rank ``rank``'s pick at step t: a uniformly random other rank with
    probability p, else -1. Seeded by (seed, t, rank), so a resumed run draws
    the same picks without saving an RNG state."""
    if P < 2:
        return -1
    rng = np.random.default_rng([seed, t, rank])
    if rng.random() >= p:
        return -1
    j = int(rng.integers(P - 1))
    return j + (j >= rank)  # skip itself


def elastic_partners(choices, rank: int) -> list[int]:
    """``S_i = {c_i} U {j : c_j = i}``, ascending: the own pick and the requesters."""
    s = {int(j) for j, c in enumerate(choices) if int(c) == rank}
    if choices[rank] >= 0:
        s.add(int(choices[rank]))
    return sorted(s)


class ElasticGossip(GossipMethod):
    """Elastic Gossip: pairwise elastic averaging with probability p and moving rate alpha.

    Pseudo-code (docs/specifications.md section 9, the author's code; rank i, step t)::

        S_i = {}
        if t mod tau == 0:
            c_i = a uniformly random rank != i with probability p, else none
            C   = Allgather(c_i)                              # P ints
            S_i = {c_i} U {j : C[j] == i}                     # own pick + requesters
        for s in S_i: Sendrecv(w_i -> s, w_s <- s)            # d floats each, pre-step weights
        e_i = alpha * sum_{s in S_i} (w_i - w_s)
        w_i = opt_i(w_i, g_i)                                 # own momentum buffer
        w_i = w_i - e_i

    Both ends of a pair move (who initiated does not matter), so
    ``sum_i e_i = 0``: the elastic step preserves the mean of the weights, and
    the mean moves only by the optimizer steps. With alpha = 0.5 and a single
    pair both move to the midpoint. The exchanges of one step are posted
    together (``iexchange``, mutual pairs) and waited for as a group, so
    a rank in several pairs cannot deadlock.

    Options (spec ``elastic-gossip:p=0.125:alpha=0.5:period=1:seed=0``):
        p: probability that a rank initiates an exchange at a communication
            step (default 1.0; the paper's experiments lower it to 1/8 ... 1/512).
        alpha: the moving rate, 0 < alpha <= 0.5 (default 0.5; above 1/2 a
            pair would overshoot the midpoint).
        period: tau, steps between communication steps (default 1).
        seed: seeds the picks, from (seed, step, rank) (the author's code uses
            each worker's own RNG; seeding per step makes a resume bitwise).

    Logged per step (trace.csv): ``communicated`` (1 if this rank exchanged
    weights this step, else 0), ``partners`` (|S_i|), ``pick`` (c_i, -1 = none). The request allgather
    and the exchanges are timed as ``mix``.
    """

    name = "elastic-gossip"
    paper = ("S. Pramod, Elastic Gossip: Distributing Neural Network Training Using Gossip-like Protocols, "
             "MSc thesis, arXiv:1812.02407, 2018")
    POSITIONAL = ("p",)

    @dataclass
    class Options:
        p: float = field(default=1.0, metadata={"help": "probability that a rank picks a random peer at a "
                                                        "communication step"})
        alpha: float = field(default=0.5, metadata={"help": "moving rate: w_i <- w_i - alpha (w_i - w_peer) "
                                                            "for every partner"})
        period: int = field(default=1, metadata={"help": "tau: steps between communication steps",
                                                 "unit": "steps"})
        seed: int = field(default=0, metadata={"help": "seed of the peer picks (with the step and the rank)"})

        def validate(self):
            if not 0.0 <= self.p <= 1.0:
                raise ValueError(f"p must be in [0, 1] (the probability to pick a peer), got {self.p}")
            if not 0.0 < self.alpha <= 0.5:
                raise ValueError(f"alpha must be in (0, 0.5] (0.5 = both move to the midpoint), got {self.alpha}")
            if self.period < 1:
                raise ValueError(f"period must be >= 1 step between communication steps, got {self.period}")
            if self.seed < 0:
                raise ValueError(f"seed must be >= 0, got {self.seed}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Every tau steps: one ring allgather of P 4-byte ints, then the pair
        exchanges; a rank expects p (own pick) + p (requesters) partners, each
        one full-duplex message of the weights, ``alpha + n beta``::

            T = compute + (allgatherv([4] * P) + 2 p (alpha + n beta)) / tau

        The allgather is the only P-dependent part (its latency term)."""
        if P <= 1:
            return profile.compute
        comm = net.allgatherv_time([4] * P) + 2 * options.p * net.message_time(profile.grad_bytes)
        return profile.compute + comm / options.period

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:p={options.p:g}"

    def setup(self) -> None:
        self._diff = np.empty_like(self.flat.weights)

    def report(self) -> dict:
        """Peers are drawn from all ranks (no fixed graph). A pair {i, j} meets
        with probability q = 1 - (1 - p/(P-1))^2, so the expected mixing matrix
        is ``I - alpha q L`` with L the complete graph's Laplacian (eigenvalues 0
        and P): its spectral gap is ``1 - |1 - alpha q P|``."""
        P, o = self.comm.size, self.options
        q = 1.0 - (1.0 - o.p / (P - 1)) ** 2 if P > 1 else 0.0
        gap = 1.0 - abs(1.0 - o.alpha * q * P) if P > 1 else 1.0
        return {"topology": {"topology": "random-pairs", "P": P, "mean_degree": 2 * o.p * (P > 1),
                             "spectral_gap": gap, "spectral_gap_of": "expected mixing matrix",
                             "directed": False, "period": o.period}}

    def step(self) -> None:
        t, P, i, o = self.step_count, self.comm.size, self.comm.rank, self.options
        w = self.flat.weights
        S, pick = [], -1
        if P > 1 and t % o.period == 0:
            with self.timer.phase("mix"):
                pick = elastic_choice(t, i, P, o.p, o.seed)
                c = np.array([pick], np.int32)
                C = np.concatenate(self.comm.allgatherv(c))               # the requests: P ints
                S = elastic_partners(C, i)                                # own pick + requesters
                sent = w.copy()                                           # pre-step weights, read-only in flight
                reqs = [self.comm.iexchange(sent, s, tag=(t, s)) for s in S]
                e = self._diff
                e.fill(0)
                for req in reqs:                                          # e_i = alpha sum_s (w_i - w_s)
                    req.wait()
                    e += w - req.result
                e *= np.float32(o.alpha)
        self.log = {"communicated": int(bool(S)), "partners": len(S), "pick": pick}
        self.apply_update(self.flat.grads[self.flat.current])            # w_i = opt_i(w_i, g_i)
        if S:
            w -= self._diff                                               # w_i = w_i - e_i
        self.end_step()
