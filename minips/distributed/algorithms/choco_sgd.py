"""CHOCO-SGD: decentralized SGD with compressed gossip, through public copies
of the neighbours' models and a consensus step size gamma.

A. Koloskova, S. U. Stich, M. Jaggi, "Decentralized Stochastic Optimization
and Gossip Algorithms with Compressed Communication", ICML 2019
(arXiv:1902.00340), Algorithm 2; deep-learning version: A. Koloskova, T. Lin,
S. U. Stich, M. Jaggi, "Decentralized Deep Learning with Arbitrary
Communication Compression", ICLR 2020 (arXiv:1907.09356); code
github.com/epfml/ChocoSGD.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .compressed_common import (PublicCopies, build_compressor, codec_seconds, compressor_field,
                                compressor_options_field, compressor_spec, payload_bytes, validate_compressor)
from .gossip_common import (GossipAlgorithm, exchange_degree, gossip_time, radius_field, seed_field, topology_field,
                            validate_topology)

__all__ = ["ChocoSGD"]

STATIC = ("ring", "torus", "exponential", "complete", "random-geometric", "directed-ring")


class ChocoSGD(GossipAlgorithm):
    """CHOCO-SGD: a local step, then gossip of the compressed change of each
    rank's public copy.

    Pseudo-code (Koloskova et al. 2019, Algorithm 2 with the local optimizer
    ``opt_i``; rank i, step t; W the topology's mixing matrix; ``C`` the
    compressor; ``x_hat_j`` the public copies, equal to w_0 at the start)::

        w_half = opt_i(w_i, g_i)                       # local step, own momentum buffer
        q_i = C(w_half - x_hat_i)                      # compressed change of the public copy
        x_hat_j += decompress(q_j) for j = i and i's in-neighbours
                                                       # one neighbour exchange of q
        w_i = w_half + gamma sum_j W_ij (x_hat_j - x_hat_i)   # consensus step

    Every holder of ``x_hat_j`` applies the same ``q_j``, so the copies agree
    exactly; rank i keeps only ``x_hat_i`` and ``s_i = sum_j W_ij x_hat_j``
    (:class:`~.compressed_common.PublicCopies`), and the consensus step is
    ``w_i += gamma (s_i - x_hat_i)``.

    With the identity compressor the copies are the models (``x_hat_j =
    w_half_j``), and with gamma = 1 the step is ``w_i = sum_j W_ij w_half_j``:
    D-PSGD in its adapt-then-combine form (to float32 rounding). For a doubly
    stochastic W (every graph offered here), ``sum_i sum_j W_ij (x_hat_j -
    x_hat_i) = 0``: the consensus step keeps the mean of the models over
    ranks, for any compressor. The paper starts the copies at 0; they start at
    w_0 here, which every rank knows after the broadcast (the same as the
    paper after one exact first message).

    The convergence theory needs a contractive compressor,
    ``E||C(v) - v||^2 <= (1 - delta) ||v||^2`` for some delta > 0: top-k,
    sign with scale, random-k without rescaling (``scale=false``), QSGD with
    many levels. The unbiased QSGD with few levels is not one (its variance
    can exceed ``||v||^2``; the paper rescales it by ``1/(1 + min(d/s^2,
    sqrt(d)/s))``): in a run of 10 pure consensus steps (4 ranks, complete
    graph, d = 20, gamma = 0.8) s = 2 grew the weights from about 4 to 230,
    while s = 16 converges (tests/test_choco_sgd.py).

    Options (spec ``choco-sgd:topology=ring:gamma=0.5:compressor=sign``):
        gamma: the consensus step size in (0, 1] (default 0.5; small for
            aggressive compressors, the paper tunes it).
        compressor: default ``sign`` (scaled sign, 1 bit per entry); its
            options as more ``key=value`` (e.g. ``compressor=topk:ratio=0.01``).
        topology, seed, radius: the static graph (default ring).

    Logged per step: ``wire_bytes`` (this rank's payload, each neighbour
    gets it). Phases: update, compress, wait, decompress, mix.

    Raises:
        ValueError: gamma outside (0, 1], unknown compressor or option, a
            time-varying topology (the public copies need fixed neighbours).
    """

    name = "choco-sgd"
    family = "compression"
    paper = ("A. Koloskova, S. U. Stich, M. Jaggi, Decentralized Stochastic Optimization and Gossip Algorithms with "
             "Compressed Communication, ICML 2019 (arXiv:1902.00340); A. Koloskova, T. Lin, S. U. Stich, M. Jaggi, "
             "Decentralized Deep Learning with Arbitrary Communication Compression, ICLR 2020 (arXiv:1907.09356)")
    POSITIONAL = ("topology",)

    @dataclass
    class Options:
        topology: str = topology_field(choices=STATIC)
        gamma: float = field(default=0.5, metadata={"help": "consensus step size in (0, 1]"})
        compressor: str = compressor_field("sign")
        seed: int = seed_field()
        radius: float = radius_field()
        compressor_options: dict = compressor_options_field()
        EXTRA: ClassVar[str] = "compressor_options"

        def validate(self):
            validate_topology(self)
            if not 0.0 < self.gamma <= 1.0:
                raise ValueError(f"gamma must be in (0, 1] (the consensus step size; 1 with the identity "
                                 f"compressor is D-PSGD), got {self.gamma}")
            validate_compressor(self)

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + C + N``: one blocking neighbour exchange of the
        payload (it needs this step's local update), ``N = degree (alpha + n
        beta)``, and its compression C (compress once, decompress degree + 1
        payloads, from the compressor's measured per-entry costs)."""
        d = int(profile.grad_bytes // 4)
        deg = exchange_degree(options.topology, P, options.seed, options.radius)
        return profile.compute + codec_seconds(options, d, deg + 1) + gossip_time(options, payload_bytes(options, d),
                                                                                  P, net)

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:{options.topology}:gamma={options.gamma:g}:{compressor_spec(options)}"

    def setup(self) -> None:
        self.compressor = build_compressor(self.options, self.comm.rank, self.flat.weights.size)  # k > d fails here
        super().setup()                                   # topology, checked on all ranks, and its graph
        r = self.comm.rank
        self.copies = PublicCopies(self.comm, self.mixer.graph, self.topology.W[r, r], self.flat.weights)

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.step_count == 0:  # x_hat_j = w_0 (the broadcast model), or 0 (as the paper) if ranks start apart
            self.copies.reset(self.flat.weights if broadcast else 0.0 * self.flat.weights)

    def step(self) -> None:
        w = self.flat.weights
        self.apply_update(self.flat.grads[0])             # w_half = opt_i(w_i, g_i)
        with self.timer.phase("compress"):
            q = self.compressor.compress(w - self.copies.x_hat, self.step_count)   # q_i = C(w_half - x_hat_i)
        self.copies.send(self.compressor, q, self.timer)  # x_hat_j += dec(q_j), j = i and in-neighbours
        with self.timer.phase("mix"):
            w += self.options.gamma * (self.copies.s - self.copies.x_hat)  # gamma sum_j W_ij (x_hat_j - x_hat_i)
        self.log = {"wire_bytes": self.compressor.nbytes(q)}
        self.end_step()

    def report(self) -> dict:
        return {**super().report(), "compressor": self.compressor.describe()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "copies": self.copies.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.copies.load_state_dict(state["copies"])
