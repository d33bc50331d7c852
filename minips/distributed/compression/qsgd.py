"""QSGD quantization (Alistarh, Grubic, Li, Tomioka & Vojnovic, "QSGD:
Communication-Efficient SGD via Gradient Quantization and Encoding",
NeurIPS 2017): per bucket of ``bucket`` entries with norm ``n = ||v||_2``,
each entry becomes ``n sign(v_j) l_j / s`` with the level ``l_j`` in 0..s
drawn by stochastic rounding of ``s |v_j| / n`` (kernel
:func:`minips.kernels.compress.qsgd_quantize`). Unbiased:
``E[Q_s(v)] = v``; variance at most ``min(d/s^2, sqrt(d)/s) ||v||^2``.

On the wire: one float32 norm per bucket and the signed levels packed at
``b = ceil(log2(2s + 1))`` bits each (fixed width; the paper Elias-codes them,
which is shorter for small s), ``4 ceil(d/bucket) + ceil(b d / 8)`` bytes.
Not summable (each bucket has its own norm on each rank): an Allgather.

The rounding's uniforms come from ``(seed, rank, step)``: independent across
ranks and steps, reproducible on resume. Options: ``s`` (levels, default 15,
i.e. 5 bits), ``bucket`` (512), ``seed`` (0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...kernels import compress as kernels
from .base import Compressor, Payload, check_vector

MAX_LEVELS = 2 ** 15 - 1


def pack_bits(values: np.ndarray, bits: int) -> np.ndarray:
    """Non-negative integers < 2^bits, ``bits`` each, little-endian within a value, into bytes."""
    planes = ((values.astype(np.uint32)[:, None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    return np.packbits(planes.ravel())


def unpack_bits(raw: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: int32 (count,)."""
    planes = np.unpackbits(raw, count=count * bits).reshape(count, bits).astype(np.int32)
    return planes @ (1 << np.arange(bits, dtype=np.int32))


class QSGD(Compressor):
    """payload = (norms float32 (ceil(d/bucket),), codes uint8 (ceil(b d/8),))."""

    name = "qsgd-quant"
    summable = False
    compress_ns, decompress_ns = 28.0, 8.0  # CPU ns/entry, docs/bench/compression/compress-time.json
    unbiased = True

    @dataclass
    class Options:
        s: int = field(default=15, metadata={"help": f"quantization levels in 1..{MAX_LEVELS} (1: ternary)"})
        bucket: int = field(default=512, metadata={"help": "entries per norm"})
        seed: int = field(default=0, metadata={"help": "seed of the stochastic rounding (with rank and step)"})

        def validate(self):
            if not 1 <= self.s <= MAX_LEVELS:
                raise ValueError(f"qsgd-quant: s must be an integer in 1..{MAX_LEVELS} (quantization levels; "
                                 f"s=1 is ternary), got {self.s!r}")
            if self.bucket < 1:
                raise ValueError("qsgd-quant: bucket must be an integer >= 1 (entries per norm; "
                                 f"the paper uses 512), got {self.bucket!r}")

    def __init__(self, **options):
        super().__init__(**options)
        self.bits = math.ceil(math.log2(2 * self.s + 1))
        self.rank = 0

    def options(self):
        return {"s": self.s, "bucket": self.bucket, "seed": self.seed}

    def uniforms(self, d: int, step: int) -> np.ndarray:
        return np.random.default_rng([self.seed, self.rank, int(step), 0x95D]).random(d)

    def compress(self, v, step=0):
        v = check_vector(v)
        norms, codes = kernels.qsgd_quantize(v, self.s, self.bucket, self.uniforms(v.size, step))
        return Payload((norms, pack_bits(codes.astype(np.int32) + self.s, self.bits)), v.size, step)

    def decompress(self, payload):
        norms, raw = payload.arrays
        codes = (unpack_bits(raw, self.bits, payload.size) - self.s).astype(np.int16)
        return kernels.qsgd_dequantize(norms, codes, self.s, self.bucket)

    def payload_bytes(self, d):
        return 4 * ((d + self.bucket - 1) // self.bucket) + (self.bits * d + 7) // 8

    def layout(self, nbytes, d):
        return [(np.float32, (d + self.bucket - 1) // self.bucket), (np.uint8, (self.bits * d + 7) // 8)]
