"""Half precision: each entry rounded to IEEE float16 (2d bytes).

Not summable here: ``Comm.allreduce`` sums float32 only, and float16 sums of
many ranks lose digits, so ranks allgather the float16 arrays and sum them in
float32 (the ring allgather sends ``(P-1) 2d`` bytes, the same as a float32
ring allreduce's ``2 (P-1)/P 4d`` at P = 2 and fewer above). Magnitudes above
float16's largest finite value (65504) saturate to +-65504 instead of
becoming inf. Biased (rounding to nearest), error at most 2^-11 relative.
"""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload, check_vector

FP16_MAX = float(np.finfo(np.float16).max)


class FP16(Compressor):
    """payload = (float16 (d,),), saturated at +-65504."""

    name = "fp16"
    summable = False
    compress_ns, decompress_ns = 3.1, 1.7  # CPU ns/entry, docs/bench/compression/compress-time.json

    def compress(self, v, step=0):
        v = check_vector(v)
        return Payload((np.clip(v, -FP16_MAX, FP16_MAX).astype(np.float16),), v.size, step)

    def decompress(self, payload):
        return payload.arrays[0].astype(np.float32)

    def payload_bytes(self, d):
        return 2 * d

    def layout(self, nbytes, d):
        return [(np.float16, d)]
