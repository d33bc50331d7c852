"""Top-k (or random-k) SGD with error feedback: every step each rank sends a
sparsified gradient and keeps what it dropped for the next step.

S. U. Stich, J.-B. Cordonnier, M. Jaggi, "Sparsified SGD with Memory",
NeurIPS 2018 (arXiv:1809.07599; docs/specifications.md section 14). Their Algorithm 1, with P
workers exchanging the compressed vectors (rank i, step t)::

    v_i = m_i + g_i                   # memory plus the new gradient
    c_i = top_k(v_i)   (or rand_k)    # k values + k indices
    m_i = v_i - c_i                   # what was not sent stays here
    G = (1/P) sum_j c_j               # Allgather of (values, indices): supports differ
    w = opt(w, G)                     # the same G on every rank: replicas stay identical

The paper keeps the memory in units of ``eta g`` with plain SGD; here it is in
gradient units and the optimizer (momentum, schedule) applies the averaged
sparse gradient, as GRACE and PowerSGD do: with a constant learning rate and
no momentum the two are the same. With k = d, or the identity compressor, it
is synchronous SGD (tests: bitwise at 2 ranks).

:class:`CompressedSGD` is the rule for any compressor of
:mod:`minips.distributed.compression` (QSGD subclasses it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


from ..compression import exchange, make_memory
from .base import Algorithm
from .compressed_common import (build_compressor, compressor_field, compressor_kwargs, compressor_options_field,
                                compressor_spec, exchange_time, validate_compressor)

__all__ = ["CompressedSGD", "TopKSGD"]


def compression_seconds(options, d: int, P: int) -> float:
    """Modelled compute seconds of one step's compression: compress once, and
    decompress one payload (summable compressors: the summed one) or P of
    them (allgather), from the compressor's measured per-entry costs
    (:meth:`~minips.distributed.compression.Compressor.seconds`)."""
    from ..compression import make_compressor
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    return c.seconds(d, decodes=1 if c.summable else P)


class CompressedSGD(Algorithm):
    """Synchronous SGD on the mean of compressed gradients, error feedback optional.

    Options (spec ``NAME:compressor=C:key=value...``):
        compressor: any compressor; its options as more ``key=value``.
        error_feedback: keep ``v - decompress(C(v))`` and add it to the next gradient.

    Logged per step: ``wire_bytes`` (this rank's payload). Phases: compress,
    wait, decompress.
    """

    name = "compressed-sgd"
    family = "compression"
    per_rank_state = True  # each rank's error-feedback memory

    @dataclass
    class Options:
        compressor: str = compressor_field("topk")
        error_feedback: bool = field(default=True, metadata={
            "help": "keep what the compressor dropped and add it to the next gradient"})
        compressor_options: dict = compressor_options_field()
        EXTRA: ClassVar[str] = "compressor_options"
        COMPRESSOR_DEFAULTS: ClassVar[dict] = {"topk": {"ratio": 0.01}, "randomk": {"ratio": 0.01, "scale": False}}

        def validate(self):
            validate_compressor(self)

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + compression + X``: nothing overlaps; X is one
        allreduce of the payload (summable compressor) or a ring allgatherv
        of P payloads; compression = compress + decompress (measured per entry)."""
        d = int(profile.grad_bytes // 4)
        return profile.compute + compression_seconds(options, d, P) + exchange_time(options, d, P, net)

    @classmethod
    def default_label(cls, options) -> str:
        ef = "" if options.error_feedback == cls.Options.error_feedback else f":error-feedback={options.error_feedback}"
        return f"{cls.name}:{compressor_spec(options)}{ef}"

    def setup(self) -> None:
        d = self.flat.weights.size
        self.compressor = build_compressor(self.options, self.comm.rank, d)
        self.memory = make_memory(self.options.error_feedback, d)

    def step(self) -> None:
        with self.timer.phase("compress"):
            c = self.memory.compress(self.compressor, self.flat.grads[0], self.step_count)  # v = m + g; m = v - C(v)
        G = exchange(self.comm, self.compressor, c, self.timer)  # (1/P) sum_j decompress(c_j)
        self.log = {"wire_bytes": self.compressor.nbytes(c)}
        self.apply_update(G)
        self.end_step()

    def report(self) -> dict:
        return {"compressor": self.compressor.describe(), "error_feedback": self.memory.enabled}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.memory.load_state_dict(state.get("memory", {}))


class TopKSGD(CompressedSGD):
    """Top-k SGD with memory (Stich et al. 2018): k largest entries of m + g, the rest kept.

    Options: ``compressor`` topk (default, ``ratio=0.01``) or randomk
    (unscaled rand_k, the paper's unbiased-support variant), ``k`` or
    ``ratio``, ``error_feedback`` (default true).
    """

    name = "topk-sgd"
    paper = "S. U. Stich, J.-B. Cordonnier, M. Jaggi, Sparsified SGD with Memory, NeurIPS 2018 (arXiv:1809.07599)"
    POSITIONAL = ("compressor",)


