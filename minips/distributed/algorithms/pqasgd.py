"""PQASGD: periodic quantized averaging. Local steps, and every p steps the
ranks average their compressed model deltas from a common anchor.

P. Jiang, G. Agrawal, "A Linear Speedup Analysis of Distributed Deep Learning
with Sparse and Quantized Communication", NeurIPS 2018. Read: the abstract
and a garbled algorithm listing that confirms PQASGD's loop (local update;
every p iterations compute, quantize, average, update); the quantizer's exact
form is not confirmed (docs/specifications.md section 17): here any compressor of
:mod:`minips.distributed.compression`, by default the unbiased QSGD quantizer
at b = 2 bits (s = 1), the paper's headline setting as docs/specifications.md section 17 recalls it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..compression import exchange, make_memory
from .base import Algorithm
from .compressed_common import (averaging_time, build_compressor, compressor_field, compressor_options_field,
                                compressor_spec, validate_compressor)

__all__ = ["PQASGD"]


class PQASGD(Algorithm):
    """PQASGD: local SGD whose periodic average is of compressed model deltas.

    Pseudo-code (Jiang & Agrawal 2018, PQASGD; rank i, step t = 0, 1, ...;
    ``Q`` the compressor, ``a`` the anchor, identical on every rank)::

        a = w_0                                   # after the broadcast
        w_i = opt_i(w_i, g_i)                     # local step, own momentum buffer
        if (t + 1) mod p == 0:
            q_i = Q(w_i - a)                      # [error feedback: Q(m_i + w_i - a)]
            a = a + (1/P) sum_j decompress(q_j)   # Allreduce (summable Q) or Allgatherv
            w_i = a                               # every rank restarts from the new anchor

    With the identity compressor ``a + mean_j (w_j - a) = mean_j w_j``: local
    SGD with period p (to float32 rounding), and with p = 1 synchronous SGD.
    With an unbiased Q the anchor moves by an unbiased estimate of the mean
    model delta; only the compressed delta goes on the wire, once every p steps.

    Options (spec ``pqasgd:period=2:compressor=qsgd-quant:s=1``):
        period: p >= 1 local steps between averages (default 2).
        compressor: a compressor of :mod:`minips.distributed.compression`
            (default ``qsgd-quant`` with s = 1, i.e. 2 bits per entry, bucket
            512); its options as more ``key=value`` (``s``, ``bucket``,
            ``ratio``, ``k``, ...).
        error_feedback: keep what Q dropped and add it to the next delta
            (default false, as the paper).

    Logged per step: ``period`` and ``wire_bytes`` (this rank's payload,
    0 on steps without an average). Phases: compress, wait, decompress, average.

    Raises:
        ValueError: period < 1, unknown compressor or option (at parse time),
            options that do not fit the model (e.g. k > d, at build).
    """

    name = "pqasgd"
    family = "compression"
    gradient_allreduce_per_step = False
    paper = ("P. Jiang, G. Agrawal, A Linear Speedup Analysis of Distributed Deep Learning with Sparse and Quantized "
             "Communication, NeurIPS 2018 (quantizer: reconstruction, docs/specifications.md section 17)")
    POSITIONAL = ("period",)

    @dataclass
    class Options:
        period: int = field(default=2, metadata={"help": "p: local steps between averages", "unit": "steps"})
        compressor: str = compressor_field("qsgd-quant")
        error_feedback: bool = field(default=False, metadata={
            "help": "add what the compressor dropped to the next delta (error feedback)"})
        compressor_options: dict = compressor_options_field()
        EXTRA: ClassVar[str] = "compressor_options"
        COMPRESSOR_DEFAULTS: ClassVar[dict] = {"qsgd-quant": {"s": 1}}

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (local steps between averages; 1 = every step), "
                                 f"got {self.period}")
            validate_compressor(self)

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # between averages each rank holds its own weights

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + (C + X) / p``: compute every step; every p steps one
        blocking exchange X of the compressed delta (allreduce of the payload
        if the compressor is summable, else a ring allgatherv of P payloads)
        and its compression C (compress once, decompress 1 or P payloads, from
        the compressor's measured per-entry costs)."""
        return profile.compute + averaging_time(options, int(profile.grad_bytes // 4), P, net) / options.period

    @classmethod
    def default_label(cls, options) -> str:
        return f"{cls.name}:period={options.period}:{compressor_spec(options)}"

    def setup(self) -> None:
        d = self.flat.weights.size
        self.compressor = build_compressor(self.options, self.comm.rank, d)
        self.memory = make_memory(self.options.error_feedback, d)
        self.anchor = self.flat.weights.copy()       # a (set again at start())

    def start(self, broadcast: bool = True) -> None:
        super().start(broadcast)
        if self.step_count == 0:
            self.anchor[...] = self.flat.weights      # a = w_0, the same on every rank

    def step(self) -> None:
        self.apply_update(self.flat.grads[0])         # w_i = opt_i(w_i, g_i): a local step
        self.log = {"period": self.options.period, "wire_bytes": 0}
        if (self.step_count + 1) % self.options.period == 0:
            self.log["wire_bytes"] = self.average_delta(self.anchor)
            self.flat.weights[...] = self.anchor      # w_i = a
        self.end_step()

    def average_delta(self, anchor: np.ndarray) -> int:
        """``anchor += (1/P) sum_j decompress(Q(w_j - anchor))`` (collective);
        returns the bytes of this rank's payload."""
        with self.timer.phase("compress"):
            q = self.memory.compress(self.compressor, self.flat.weights - anchor, self.step_count)
        mean = exchange(self.comm, self.compressor, q, self.timer)
        with self.timer.phase("average"):
            anchor += mean
        return self.compressor.nbytes(q)

    def report(self) -> dict:
        return {"compressor": self.compressor.describe()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "anchor": self.anchor.copy(), "memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.anchor[...] = np.asarray(state["anchor"], np.float32)
        self.memory.load_state_dict(state["memory"])
