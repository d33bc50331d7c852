"""QPRSGD: quantized parallel restarted SGD without a central server. K local
steps, then the ranks combine quantized model deltas, by ring allreduce or by
gossip, and all restart from the result (**reconstruction**).

F. Wu, S. He, Y. Yang, H. Wang, Z. Qu, S. Guo, W. Zhuang, "On the Convergence
of Quantized Parallel Restarted SGD for Central Server Free Distributed
Training", arXiv:2004.09125 (2020). Read: the abstract only (several local SGD
steps between synchronizations, quantization, two server-free modes: ring
all-reduce and gossip; error bounds that depend on the mode and the
topology). The rules below are docs/specifications.md section 19's reconstruction,
with the gossip mode written with public copies (CHOCO-SGD's device) so
that every holder of a rank's copy applies the same quantized messages.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from ..topology import check_same_on_all_ranks
from .compressed_common import PublicCopies, averaging_time, codec_seconds, compressor_field, payload_bytes
from .gossip_common import (Mixer, build_topology, exchange_degree, gossip_time, radius_field, seed_field,
                            topology_field)
from .gossip_common import validate_topology
from .pqasgd import PQASGD

__all__ = ["QPRSGD"]

MODES = ("allreduce", "gossip")
STATIC = ("ring", "torus", "exponential", "complete", "random-geometric", "directed-ring")


class QPRSGD(PQASGD):
    """QPRSGD (reconstruction): K local steps, a quantized delta averaged by
    ring allreduce or gossip, every rank restarts from the result.

    Pseudo-code (rank i; round n = K local steps; ``Q`` the quantizer)::

        K local steps:  w_i = opt_i(w_i, g_i)                # own momentum buffer
        mode=allreduce (all ranks hold the same restart point s, s = w_0 at first):
            q_i = Q(w_i - s)
            s = s + (1/P) sum_j decompress(q_j)               # Allreduce / Allgatherv
            w_i = s                                           # restart
        mode=gossip (W the topology's mixing matrix; x_hat_j = w_0 at first):
            q_i = Q(w_i - x_hat_i)                            # x_hat_i: rank i's public copy
            x_hat_j += decompress(q_j) for j = i and i's in-neighbours
                                                              # one neighbour exchange of q
            w_i = sum_j W_ij x_hat_j                          # restart from the mix of the copies

    Every holder of ``x_hat_j`` (rank j and its out-neighbours) applies the
    same ``q_j``, so the copies agree exactly; only ``sum_j W_ij x_hat_j``
    is stored (:class:`~.compressed_common.PublicCopies`). With the identity
    compressor the allreduce mode is local SGD with period K and the gossip
    mode is local SGD whose average is one gossip step ``w_i = sum_j W_ij w_j``
    (to float32 rounding); K = 1 in allreduce mode is synchronous SGD. The
    allreduce mode is the same update as pqasgd (:mod:`.pqasgd`); the two
    papers differ in their analysis and defaults, not in this loop.

    Options (spec ``qprsgd:period=8:mode=gossip:topology=ring:compressor=qsgd-quant:s=4``):
        period: K >= 1 local steps per round (default 8).
        mode: ``allreduce`` (default) or ``gossip``.
        compressor: default ``qsgd-quant`` with s = 4 (4 bits per entry,
            bucket 512) in allreduce mode, s = 32 (7 bits) in gossip mode,
            which needs a contractive compressor (``E||Q(v) - v||^2 <
            ||v||^2``; with s = 4 the gossip mode diverged on the mini set);
            its options as more ``key=value``.
        error_feedback: add what Q dropped to the next delta (default false).
        topology, seed, radius: the gossip mode's static graph (default ring).

    Logged per step: ``period``, ``wire_bytes`` (this rank's payload on the
    steps that end a round, else 0). Phases: compress, wait, decompress, average.

    Raises:
        ValueError: period < 1, an unknown mode, compressor or option, a
            time-varying topology (the public copies need fixed neighbours).
    """

    name = "qprsgd"
    paper = ("F. Wu, S. He, Y. Yang, H. Wang, Z. Qu, S. Guo, W. Zhuang, On the Convergence of Quantized Parallel "
             "Restarted SGD for Central Server Free Distributed Training, arXiv:2004.09125 (2020); "
             "reconstruction, see docs/specifications.md section 19")
    POSITIONAL = ("period",)

    @dataclass
    class Options(PQASGD.Options):
        period: int = field(default=8, metadata={"help": "K: local steps per round", "unit": "steps"})
        compressor: str = compressor_field("qsgd-quant")
        mode: str = field(default="allreduce", metadata={
            "choices": MODES, "help": "allreduce: all ranks restart from one average; gossip: from a mix "
                                      "of the neighbours' public copies"})
        topology: str = topology_field(choices=STATIC, help="gossip mode: the static communication graph")
        seed: int = seed_field()
        radius: float = radius_field()

        @property
        def COMPRESSOR_DEFAULTS(self) -> dict:
            """QSGD s = 4 (4 bits) for the allreduce mode; s = 32 (7 bits) for
            the gossip mode, whose copies need a contractive compressor (s = 4
            on buckets of 512 is not one: it diverged, see the docs)."""
            return {"qsgd-quant": {"s": 32 if self.mode == "gossip" else 4}}

        def validate(self):
            super().validate()
            validate_topology(self)

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + (C + X) / K``; X and C as pqasgd's in allreduce
        mode; in gossip mode X = one neighbour exchange of the payload,
        ``degree (alpha + n beta)``, and C = compress once, decompress
        degree + 1 payloads."""
        d = int(profile.grad_bytes // 4)
        if options.mode == "allreduce":
            return profile.compute + averaging_time(options, d, P, net) / options.period
        deg = exchange_degree(options.topology, P, options.seed, options.radius)
        x = gossip_time(options, payload_bytes(options, d), P, net)
        return profile.compute + (codec_seconds(options, d, deg + 1) + x) / options.period

    @classmethod
    def default_label(cls, options) -> str:
        return super().default_label(options) + (f":gossip-{options.topology}" if options.mode == "gossip" else "")

    def setup(self) -> None:
        super().setup()
        self.copies = None
        if self.options.mode == "gossip":
            self.topology = build_topology(self.options, self.comm.size)
            check_same_on_all_ranks(self.topology, self.comm)
            graph = Mixer(self.comm, self.topology).graph
            self.copies = PublicCopies(self.comm, graph, self.topology.W[self.comm.rank, self.comm.rank],
                                       self.flat.weights)

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.copies is not None and self.step_count == 0:
            # x_hat_j = w_0 (the broadcast model), or 0 (as the paper) if the ranks start apart
            self.copies.reset(self.flat.weights if broadcast else 0.0 * self.flat.weights)

    def step(self) -> None:
        if self.copies is None:                            # allreduce mode: pqasgd's loop
            super().step()
            return
        self.apply_update(self.flat.grads[0])              # w_i = opt_i(w_i, g_i)
        self.log = {"period": self.options.period, "wire_bytes": 0}
        if (self.step_count + 1) % self.options.period == 0:
            with self.timer.phase("compress"):
                q = self.memory.compress(self.compressor, self.flat.weights - self.copies.x_hat, self.step_count)
            self.copies.send(self.compressor, q, self.timer)   # x_hat_j += dec(q_j), j = i and in-neighbours
            with self.timer.phase("average"):
                self.flat.weights[...] = self.copies.s     # restart at sum_j W_ij x_hat_j
            self.log["wire_bytes"] = self.compressor.nbytes(q)
        self.end_step()

    def report(self) -> dict:
        out = super().report()
        return {**out, "topology": self.topology.describe()} if self.copies is not None else out

    def state_dict(self) -> dict:
        state = super().state_dict()
        return {**state, "copies": self.copies.state_dict()} if self.copies is not None else state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.copies is not None:
            self.copies.load_state_dict(state["copies"])
