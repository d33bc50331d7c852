"""Gaussian averaging (reconstruction): the paper "Efficient Distributed
Stochastic Gradient Descent Through Gaussian Averaging" could not be found,
so its rule is unknown (docs/specifications.md section 16). Two of the section's
readings, selectable with ``reading=``; neither is "the paper's method".

``reading=projection`` (default; reading B): synchronous SGD on a Gaussian
random projection of the gradient, shared seed, so the projections sum::

    y_i = R_t g_i                 # R_t: N(0,1), drawn from (seed, t), the same on every rank;
                                  #   block-diagonal with one m_b x block matrix per block
    y = ALLREDUCE(y_i)            # m floats instead of d
    G = R_t^T y / (m_b P)         # unbiased: E[R^T R] = m_b I
    w = opt(w, G)                 # replicas stay identical

Chosen as the default because the title promises *efficient* distributed SGD
(a communication saving, which reading A does not give: it sends more than
plain averaging) and "averaging" of Gaussian sketches is what reading B
does; it is also what the issue's building blocks list (a Gaussian random
projection with a shared seed). Error feedback is optional (off by default:
the estimate is unbiased, and R^T R / m is no contraction at small m).

``reading=kernel`` (reading A): local SGD whose periodic average weights
each rank's model by a Gaussian kernel of its distance to the mean::

    every step:        w_i = opt(w_i, g_i)
    every H steps:     mu = avg(w);  dist_i = ||w_i - mu||^2
                       a_i = exp(-(dist_i - min_j dist_j) / (2 sigma^2))   # shifted: no underflow
                       w_i = sum_j a_j w_j / sum_j a_j                     # one Allreduce of d + 1
    sigma -> infinity: plain model averaging (local SGD with period H).

Options: ``reading`` (projection | kernel); projection: ``ratio`` (m_b / block,
0.05), ``block`` (256), ``seed`` (0), ``error_feedback`` (false); kernel:
``period`` (H, 8), ``sigma`` (1.0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..compression import exchange, make_compressor, make_memory
from .base import Algorithm

__all__ = ["GaussianAveraging"]


class GaussianAveraging(Algorithm):
    """Gaussian averaging (reconstruction): random-projection SGD or kernel-weighted averaging.

    docs/specifications.md section 16 says what was chosen and why.
    """

    name = "gaussian-avg"
    family = "compression"
    paper = ("Efficient Distributed Stochastic Gradient Descent Through Gaussian Averaging (paper not found; "
             "reconstruction of docs/specifications.md section 16, reading B or A)")
    POSITIONAL = ("reading",)

    @dataclass
    class Options:
        reading: str = field(default="projection", metadata={
            "help": "which reconstruction: projection (B, default) or kernel (A)",
            "choices": ("projection", "kernel")})
        ratio: float = field(default=0.05, metadata={"help": "projection: m_b / block (fraction of floats sent)"})
        block: int = field(default=256, metadata={"help": "projection: entries per projected block"})
        seed: int = field(default=0, metadata={"help": "projection: seed of R_t (shared by all ranks)"})
        error_feedback: bool = field(default=False, metadata={"help": "projection: keep what R^T R / m missed"})
        period: int = field(default=8, metadata={"help": "kernel: H, local steps between averages", "unit": "steps"})
        sigma: float = field(default=1.0, metadata={"help": "kernel: width of the Gaussian kernel (weight distance)"})

        def validate(self):
            if not 0 < self.ratio <= 1:
                raise ValueError(f"ratio must be in (0, 1] (floats sent per float of the gradient), got {self.ratio}")
            if self.block < 1:
                raise ValueError(f"block must be >= 1 (entries per projected block), got {self.block}")
            if self.period < 1:
                raise ValueError(f"period must be >= 1 (local steps between averages), got {self.period}")
            if not self.sigma > 0:
                raise ValueError(f"sigma must be > 0 (kernel width; large = plain averaging), got {self.sigma}")

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return options.reading == "projection"

    @classmethod
    def _projector(cls, options):
        return make_compressor("gaussian", ratio=options.ratio, block=options.block, seed=options.seed)

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """projection: ``compute + projection + A(4 m)`` (projection: compress
        and decompress at the compressor's per-entry costs); kernel:
        ``compute + (A(4 d) + A(8) + A(4 (d + 1))) / H`` (the mean, the
        scalar minimum of the distances, then the weighted sum and its
        normaliser)."""
        d = int(profile.grad_bytes // 4)
        if options.reading == "kernel":
            meet = net.allreduce_time(4 * d, P) + net.allreduce_time(8, P) + net.allreduce_time(4 * (d + 1), P)
            return profile.compute + meet / options.period
        c = cls._projector(options)
        return profile.compute + c.seconds(d) + net.allreduce_time(c.payload_bytes(d), P)

    @classmethod
    def default_label(cls, options) -> str:
        if options.reading == "kernel":
            return f"{cls.name}:kernel:period={options.period}:sigma={options.sigma}"
        return f"{cls.name}:ratio={options.ratio}"

    def setup(self) -> None:
        d = self.flat.weights.size
        self.projector = self._projector(self.options)
        self.memory = make_memory(self.options.error_feedback, d)
        self.per_rank_state = self.options.error_feedback and self.options.reading == "projection"
        self.buf = np.zeros(d + 1, np.float32)

    def step(self) -> None:
        if self.options.reading == "kernel":
            return self._kernel_step()
        with self.timer.phase("compress"):
            y = self.memory.compress(self.projector, self.flat.grads[0], self.step_count)   # y_i = R_t g_i
        G = exchange(self.comm, self.projector, y, self.timer)          # R_t^T (sum_i y_i) / (m_b P)
        self.log = {"wire_bytes": self.projector.nbytes(y)}
        self.apply_update(G)
        self.end_step()

    def _kernel_step(self) -> None:
        self.apply_update(self.flat.grads[0])                           # local step
        self.log = {"wire_bytes": 0}
        if (self.step_count + 1) % self.options.period == 0:
            w = self.flat.weights
            with self.timer.phase("average"):
                mu = self.average_weights()                              # Allreduce(d)
                dist = float(np.sum((w.astype(np.float64) - mu) ** 2))
                shift = self.comm.allreduce_scalar(dist, op="min")
                a = math.exp(-(dist - shift) / (2 * self.options.sigma ** 2))
                self.buf[:-1] = w * np.float32(a)
                self.buf[-1] = a
                self.comm.allreduce(self.buf)                            # sum_j a_j w_j and sum_j a_j
                w[...] = self.buf[:-1] / self.buf[-1]
            self.log = {"wire_bytes": 2 * w.nbytes + 4, "kernel_weight": a}
        self.end_step()

    def report(self) -> dict:
        return {"reading": self.options.reading}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.memory.load_state_dict(state.get("memory", {}))
