"""Random-k sparsification with a seed shared by all ranks: every rank keeps
the same k random coordinates at a step (drawn from ``(seed, step)``), so the
payloads (k float32 values, 4k bytes, no indices) sum elementwise: one
Allreduce carries them.

With ``scale=true`` (default) the kept values are multiplied by d/k, so
``E[C(v)] = v`` (unbiased; variance ``(d/k - 1) ||v||^2``). Error feedback
wants the unscaled ``rand_k`` (a contraction, ``E||v - C(v)||^2 = (1 - k/d)
||v||^2``; Stich et al., NeurIPS 2018): ``scale=false``.

Options: ``k`` or ``ratio`` (default 0.01), ``seed`` (0), ``scale`` (true).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Compressor, Payload, check_k, check_ratio, check_vector, resolve_k


class RandomK(Compressor):
    """payload = (values float32 (k,),) at indices drawn from (seed, step)."""

    name = "randomk"
    summable = True
    compress_ns, decompress_ns = 0.39, 0.46  # CPU ns/entry, docs/bench/compression/compress-time.json

    @dataclass
    class Options:
        k: int | None = field(default=None, metadata={"help": "entries kept (default: from ratio)"})
        ratio: float = field(default=0.01, metadata={"help": "fraction of the d entries kept, in (0, 1]"})
        seed: int = field(default=0, metadata={"help": "seed of the coordinates drawn, the same on every rank"})
        scale: bool = field(default=True, metadata={"help": "multiply the kept entries by d/k (unbiased); "
                                                            "false for error feedback"})

        def validate(self):
            check_k("randomk", self.k)
            check_ratio("randomk", self.ratio)

    def __init__(self, **options):
        super().__init__(**options)
        self.unbiased = self.scale

    def options(self):
        kk = {"k": self.k} if self.k is not None else {"ratio": self.ratio}
        return {**kk, "seed": self.seed, "scale": self.scale}

    def error_feedback_problem(self):
        if self.scale:
            return ("scale=true multiplies the kept entries by d/k, so the residual v - C(v) is larger than v and "
                    "error feedback's memory grows without bound; use scale=false with error feedback, or "
                    "error-feedback=false")
        return None

    def indices(self, d: int, step: int) -> np.ndarray:
        """The k coordinates of step ``step`` (int64, ascending), the same on every rank."""
        k = resolve_k(self.name, self.k, self.ratio, d)
        rng = np.random.default_rng([self.seed, int(step), 0x7A4D])
        return np.sort(rng.choice(d, size=k, replace=False))

    def compress(self, v, step=0):
        v = check_vector(v)
        idx = self.indices(v.size, step)
        values = v[idx]
        if self.scale:
            values *= np.float32(v.size / idx.size)
        return Payload((values,), v.size, step)

    def decompress(self, payload):
        out = np.zeros(payload.size, np.float32)
        out[self.indices(payload.size, payload.step)] = payload.arrays[0]
        return out

    def payload_bytes(self, d):
        return 4 * resolve_k(self.name, self.k, self.ratio, d)

    def layout(self, nbytes, d):
        return [(np.float32, nbytes // 4)]
