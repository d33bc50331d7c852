"""Gaussian random projection with a seed shared by all ranks
(reconstruction of reading B of docs/specifications.md section 16; the sketch of
Johnson & Lindenstrauss / Achlioptas): ``y = R v`` with ``R`` of i.i.d.
N(0, 1) entries, decoded as ``R^T y / m``. Since ``E[R^T R] = m I`` the
decoded vector is unbiased; its variance grows like ``d/m``. Linear in v,
so the ranks' projections sum: one Allreduce of m floats.

A dense m x d matrix is out of reach for a model (m d = 10^10 for d = 400k,
m = 0.05 d), so v is cut into blocks of ``block`` entries (zero-padded at the
end) and every block is projected by the same ``m_b x block`` matrix
``R_t`` (``m_b = ceil(ratio block)``), drawn afresh each step from
``(seed, step)``: each block's estimate is unbiased, blocks of one step share
R_t. Payload ``4 ceil(d/block) m_b`` bytes.

Options: ``ratio`` (m_b / block, default 0.05), ``block`` (256), ``seed`` (0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .base import Compressor, Payload, check_ratio, check_vector


class GaussianProjection(Compressor):
    """payload = (y float32 (ceil(d/block) * m_b,),), summable."""

    name = "gaussian"
    summable = True
    compress_ns, decompress_ns = 0.81, 0.51  # CPU ns/entry, docs/bench/compression/compress-time.json
    unbiased = True

    @dataclass
    class Options:
        ratio: float = field(default=0.05, metadata={"help": "floats sent per entry (m_b / block), in (0, 1]"})
        block: int = field(default=256, metadata={"help": "entries per projected block"})
        seed: int = field(default=0, metadata={"help": "seed of the projection (with the step), same on every rank"})

        def validate(self):
            check_ratio("gaussian", self.ratio)
            if self.block < 1:
                raise ValueError(f"gaussian: block must be an integer >= 1 (entries per projected block), "
                                 f"got {self.block!r}")

    def __init__(self, **options):
        super().__init__(**options)
        self.m = max(1, math.ceil(self.ratio * self.block))

    def options(self):
        return {"ratio": self.ratio, "block": self.block, "seed": self.seed}

    def matrix(self, step: int) -> np.ndarray:
        """R_t: float32 (m_b, block), the same on every rank."""
        rng = np.random.default_rng([self.seed, int(step), 0x6A55])
        return rng.standard_normal((self.m, self.block), dtype=np.float32)

    def _blocks(self, d):
        return (d + self.block - 1) // self.block

    def compress(self, v, step=0):
        v = check_vector(v)
        nb = self._blocks(v.size)
        x = np.zeros(nb * self.block, np.float32)
        x[:v.size] = v
        y = x.reshape(nb, self.block) @ self.matrix(step).T
        return Payload((np.ascontiguousarray(y, np.float32).ravel(),), v.size, step)

    def decompress(self, payload):
        nb = self._blocks(payload.size)
        y = payload.arrays[0].reshape(nb, self.m)
        x = (y @ self.matrix(payload.step)) * np.float32(1.0 / self.m)
        return np.ascontiguousarray(x.ravel()[:payload.size], np.float32)

    def payload_bytes(self, d):
        return 4 * self._blocks(d) * self.m

    def layout(self, nbytes, d):
        return [(np.float32, self._blocks(d) * self.m)]
