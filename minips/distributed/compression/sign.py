"""Sign with scale (scaled signSGD as in EF-SignSGD, Karimireddy, Rebjock,
Stich & Jaggi, ICML 2019): ``C(v) = (||v||_1 / d) sign(v)``, one bit per entry
packed 8 to a byte plus one float32 scale (``ceil(d/8) + 4`` bytes). Zero
entries count as +. Biased; not summable (each rank has its own scale).
"""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload, check_vector


class Sign(Compressor):
    """payload = (scale float32 (1,), bits uint8 (ceil(d/8),); bit 1 = '+')."""

    name = "sign"
    summable = False
    compress_ns, decompress_ns = 0.64, 0.4  # CPU ns/entry, docs/bench/compression/compress-time.json

    def compress(self, v, step=0):
        v = check_vector(v)
        scale = np.array([np.abs(v, dtype=np.float64).sum() / max(v.size, 1)], np.float32)
        return Payload((scale, np.packbits(v >= 0)), v.size, step)

    def decompress(self, payload):
        scale, bits = payload.arrays
        plus = np.unpackbits(bits, count=payload.size).astype(np.float32)
        return (2 * plus - 1) * scale[0]

    def payload_bytes(self, d):
        return 4 + (d + 7) // 8

    def layout(self, nbytes, d):
        return [(np.float32, 1), (np.uint8, (d + 7) // 8)]
