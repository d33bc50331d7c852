"""GossipGraD: every step each rank averages its gradient with ONE partner,
and the partner rotates so that after ceil(log2 P) steps every rank's
gradient has reached every other rank indirectly.

Paper: J. Daily, A. Vishnu, C. Siegel, T. Warfel, V. Amatya, "GossipGraD:
Scalable Deep Learning using Gossip Communication based Asynchronous Gradient
Descent", arXiv:1803.05880 (PNNL, 2018). The exchange rule follows
docs/specifications.md section 8 (confirmed there against the torchdistx
re-implementation, ``torchdistx/gossip_grad.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .gossip_common import GossipMethod

__all__ = ["GossipGraD", "gossipgrad_partners", "rotation_length"]

PATTERNS = ("dissemination", "hypercube")


def rotation_length(P: int) -> int:
    """L = ceil(log2 P) (at least 1): the steps of one rotation, after which the
    permutation is reshuffled."""
    return max(1, math.ceil(math.log2(P))) if P > 1 else 1


def gossipgrad_partners(t: int, P: int, seed: int, pattern: str = "dissemination"):
    """Who every rank sends to and receives from at step ``t`` (pure NumPy; the
    same on every rank, so no communication decides it).

    ``perm`` is a permutation of the ranks drawn from ``(seed, t // L)``;
    rank i sits at position ``r`` of it, ``k = t mod L``:
    dissemination: send to ``perm[(r + 2^k) mod P]``, receive from ``perm[(r - 2^k) mod P]``;
    hypercube: send to and receive from ``perm[r XOR 2^k]`` (P a power of two).

    Returns:
        (dest, src): int arrays of length P; rank i sends to dest[i] and receives
        from src[i]. ``dest`` and ``src`` are permutations with src[dest[i]] == i.
    """
    L = rotation_length(P)
    perm = np.random.default_rng([seed, t // L]).permutation(P)
    pos = np.empty(P, np.int64)
    pos[perm] = np.arange(P)
    off = 2 ** (t % L)
    if pattern == "hypercube":
        dest = src = perm[pos ^ off]
    else:
        dest, src = perm[(pos + off) % P], perm[(pos - off) % P]
    return dest.astype(np.int64), src.astype(np.int64)


class GossipGraD(GossipMethod):
    """GossipGraD: the gradient averaged with one rotating partner per step.

    Pseudo-code (docs/specifications.md section 8; rank i, step t = 0, 1, ...)::

        L = ceil(log2 P)
        if t mod L == 0: perm = random permutation of the ranks (seed, t // L)   # same on all ranks
        r = position of i in perm;  k = t mod L
        g_i = gradient of rank i's mini-batch at w_i
        Sendrecv: send g_i to perm[(r + 2^k) mod P], receive h from perm[(r - 2^k) mod P]
        g_i = (g_i + h) / 2
        w_i = opt_i(w_i, g_i)                        # own momentum buffer

    The per-step gradient mixing ``(I + Pi_t)/2`` is doubly stochastic: the mean
    over ranks of the applied gradients equals the mean of the computed ones.
    The weights are never averaged, so the replicas drift apart (the Trainer
    logs the consensus distance). With P = 2 the partner is always the other
    rank and the step is synchronous SGD exactly; with P = 1 it is plain SGD.

    Non-power-of-two P: L = ceil(log2 P) and the offsets 1, 2, ..., 2^(L-1)
    are taken mod P (dissemination needs no power of two; Hensgen, Finkel &
    Manber's dissemination barrier reaches every rank in ceil(log2 P) rounds
    in the same way). ``pattern=hypercube`` (send to and receive from the same
    partner ``perm[r XOR 2^k]``) needs a power of two.

    Options (spec ``gossipgrad:pattern=dissemination:seed=2403``):
        pattern: ``dissemination`` (default; send to r + 2^k, receive from
            r - 2^k along the permutation) or ``hypercube`` (mutual pairs).
        seed: seed of the permutations (the same on all ranks; torchdistx uses 2403).

    Not implemented (from the paper): the layer-wise overlap of the exchange
    with back-propagation (the exchange here is one blocking Sendrecv after
    backward), and the asynchronous sample shuffle between partners (each
    rank keeps its shard; see docs/distributed.md, GossipGraD).

    Logged per step (trace.csv): ``send_to``, ``recv_from`` (this rank's
    partners), ``rotation_k`` (= t mod L). The exchange is timed as ``mix``.
    """

    name = "gossipgrad"  # one Sendrecv of the gradient per step, not an allreduce
    paper = ("J. Daily, A. Vishnu, C. Siegel, T. Warfel, V. Amatya, GossipGraD: Scalable Deep Learning using "
             "Gossip Communication based Asynchronous Gradient Descent, arXiv:1803.05880, 2018")
    POSITIONAL = ("pattern",)

    @dataclass
    class Options:
        pattern: str = field(default="dissemination", metadata={
            "choices": PATTERNS,
            "help": "partner rule along the shuffled permutation: dissemination (send to r+2^k, receive from "
                    "r-2^k) or hypercube (exchange with r XOR 2^k; P a power of two)"})
        seed: int = field(default=2403, metadata={"help": "seed of the rank permutation, reshuffled every "
                                                          "ceil(log2 P) steps (the same on all ranks)"})

        def validate(self):
            if self.pattern not in PATTERNS:
                raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {self.pattern!r}")
            if self.seed < 0:
                raise ValueError(f"seed must be >= 0 (it seeds the partner permutation), got {self.seed}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + (alpha + n beta)``: one Sendrecv of the gradient
        (full duplex), independent of P; nothing overlaps (phi unused)."""
        if P <= 1:
            return profile.compute
        return profile.compute + net.message_time(profile.grad_bytes)

    @classmethod
    def default_label(cls, options) -> str:
        return cls.name if options.pattern == "dissemination" else f"{cls.name}:{options.pattern}"

    def setup(self) -> None:
        P = self.comm.size
        if self.options.pattern == "hypercube" and P & (P - 1):
            raise ValueError(f"gossipgrad pattern=hypercube needs a power-of-two number of ranks, got {P}; "
                             "use pattern=dissemination (any P) or run on 2, 4, 8, ... ranks")
        self.L = rotation_length(P)
        self._recv = np.empty_like(self.flat.weights)

    def step(self) -> None:
        t, P, i = self.step_count, self.comm.size, self.comm.rank
        g = self.flat.grads[self.flat.current]
        if P > 1:
            dest, src = gossipgrad_partners(t, P, self.options.seed, self.options.pattern)
            with self.timer.phase("mix"):
                h = self.comm.sendrecv(g, int(dest[i]), int(src[i]), recv=self._recv)  # d floats each way
                g += h          # g_i = (g_i + h) / 2: the pairwise average
                g *= np.float32(0.5)
            self.log = {"send_to": int(dest[i]), "recv_from": int(src[i]), "rotation_k": t % self.L}
        self.apply_update(g)    # w_i = opt_i(w_i, g_i)
        self.end_step()

    def mixing_matrix(self, t: int) -> np.ndarray:
        """The step-t gradient mixing ``(I + Pi_t)/2`` as a P x P matrix (for the report and tests)."""
        return gossipgrad_mixing(t, self.comm.size, self.options.seed, self.options.pattern)

    def report(self) -> dict:
        W = self.mixing_matrix(0)
        from ..topology import spectral_gap
        return {"topology": {"topology": f"gossipgrad-{self.options.pattern}", "P": self.comm.size,
                             "max_degree": 1 if self.comm.size > 1 else 0, "mean_degree": float(self.comm.size > 1),
                             "spectral_gap": spectral_gap(W), "directed": self.options.pattern != "hypercube",
                             "period": self.L, "mixes": "gradients"}}


def gossipgrad_mixing(t: int, P: int, seed: int, pattern: str = "dissemination") -> np.ndarray:
    """``W_t = (I + Pi_t)/2`` with ``W_t[i, src[i]] += 1/2`` (rank i mixes in the
    gradient of the rank it receives from); doubly stochastic."""
    W = np.eye(P) / 2
    if P == 1:
        return np.ones((1, 1))
    _, src = gossipgrad_partners(t, P, seed, pattern)
    W[np.arange(P), src] += 0.5
    return W
