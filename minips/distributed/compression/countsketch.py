"""Count-Sketch (Charikar, Chen & Farach-Colton 2002) as used by Sketched-SGD
(Ivkin et al., NeurIPS 2019) and gs-SGD (Dai et al. 2021): a ``rows x cols``
float32 table, ``S[r, h_r(j)] += s_r(j) v_j`` with hashes ``h_r`` and signs
``s_r`` drawn from a seed shared by all ranks, so sketches are linear and
sum: one Allreduce of ``4 rows cols`` bytes carries the sketch of the sum.
:meth:`CountSketch.decompress` estimates every entry as the median over rows of
``s_r(j) S[r, h_r(j)]`` (kernels: :mod:`minips.kernels.compress`); an entry
whose magnitude is large against the rest of the vector's l2 norm (a heavy
hitter) is recovered to about ``||v||_2 / sqrt(cols)``.

Options: ``rows`` (5), ``cols`` or ``ratio`` (table size as a fraction of d,
default 0.05, i.e. ``cols = ceil(ratio d / rows)``), ``seed`` (0).
Hashes are drawn once per d (int32 + float32 per row and entry: 8 rows d bytes
of memory).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...kernels import compress as kernels
from .base import Compressor, Payload, check_ratio, check_vector


class CountSketch(Compressor):
    """payload = (table float32 (rows * cols,),), summable."""

    name = "countsketch"
    summable = True
    compress_ns, decompress_ns = 4.1, 58.0  # CPU ns/entry, docs/bench/compression/compress-time.json

    @dataclass
    class Options:
        rows: int = field(default=5, metadata={"help": "hash rows (the median is over rows)"})
        cols: int | None = field(default=None, metadata={"help": "columns of the table (default: from ratio)",
                                                         "example": 1000})
        ratio: float = field(default=0.05, metadata={"help": "table size rows x cols as a fraction of d, in (0, 1]"})
        seed: int = field(default=0, metadata={"help": "seed of the hashes, the same on every rank"})

        def validate(self):
            if self.rows < 1:
                raise ValueError("countsketch: rows must be an integer >= 1 (hash rows; 5 is usual), "
                                 f"got {self.rows!r}")
            if self.cols is not None and self.cols < 2:
                raise ValueError(f"countsketch: cols={self.cols!r} makes the sketch too small (every entry collides); "
                                 "give cols >= 2, a few times the heavy hitters you want to find")
            check_ratio("countsketch", self.ratio)

    def __init__(self, **options):
        super().__init__(**options)
        self._hashes: dict = {}

    def options(self):
        c = {"cols": self.cols} if self.cols is not None else {"ratio": self.ratio}
        return {"rows": self.rows, **c, "seed": self.seed}

    def columns(self, d: int) -> int:
        """Columns of the table for a d-vector."""
        if self.cols is not None:
            return int(self.cols)
        return max(2, math.ceil(self.ratio * d / self.rows))

    def hashes(self, d: int):
        """(buckets int32 (rows, d), signs float32 (rows, d)), the same on every rank."""
        if d not in self._hashes:
            rng = np.random.default_rng([self.seed, d, 0xC5])
            cols = self.columns(d)
            buckets = rng.integers(0, cols, size=(self.rows, d), dtype=np.int32)
            signs = (2 * rng.integers(0, 2, size=(self.rows, d), dtype=np.int8) - 1).astype(np.float32)
            self._hashes = {d: (buckets, signs)}  # one size at a time
        return self._hashes[d]

    def compress(self, v, step=0):
        v = check_vector(v)
        buckets, signs = self.hashes(v.size)
        return Payload((kernels.countsketch_accumulate(v, buckets, signs, self.columns(v.size)).ravel(),),
                       v.size, step)

    def table(self, payload) -> np.ndarray:
        """The payload as its (rows, cols) table."""
        return payload.arrays[0].reshape(self.rows, self.columns(payload.size))

    def decompress(self, payload):
        buckets, signs = self.hashes(payload.size)
        return kernels.countsketch_query(self.table(payload), buckets, signs)

    def estimate(self, payload, idx: np.ndarray) -> np.ndarray:
        """Estimates of the entries ``idx`` only (float32 (len(idx),))."""
        buckets, signs = self.hashes(payload.size)
        return kernels.countsketch_query(self.table(payload), np.ascontiguousarray(buckets[:, idx]),
                                         np.ascontiguousarray(signs[:, idx]))

    def payload_bytes(self, d):
        return 4 * self.rows * self.columns(d)

    def layout(self, nbytes, d):
        return [(np.float32, self.rows * self.columns(d))]
