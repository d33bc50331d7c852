"""Identity: the vector itself (float32, 4d bytes); summable. With it every
compressed method must equal its uncompressed parent (the equivalence tests)."""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload, check_vector


class Identity(Compressor):
    """No compression: payload = (v,) float32 (d,)."""

    name = "identity"
    summable = True
    compress_ns, decompress_ns = 0.09, 0.09  # CPU ns/entry, docs/bench/compression/compress-time.json
    unbiased = True

    def compress(self, v, step=0):
        v = check_vector(v)
        return Payload((v.copy(),), v.size, step)

    def decompress(self, payload):
        return np.array(payload.arrays[0], np.float32, copy=True)

    def payload_bytes(self, d):
        return 4 * d

    def layout(self, nbytes, d):
        return [(np.float32, d)]
