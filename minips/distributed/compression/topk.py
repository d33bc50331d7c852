"""Top-k sparsification: the k entries of largest magnitude, as k float32
values and k int32 indices (8k bytes). Not summable (each rank's support
differs): an Allgather of variable size. Biased; a contraction
(``||v - C(v)||^2 <= (1 - k/d) ||v||^2``), which is what error feedback needs
(Stich, Cordonnier & Jaggi, "Sparsified SGD with Memory", NeurIPS 2018).

Options: ``k`` (entries kept) or ``ratio`` (fraction of d, default 0.01).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Compressor, Payload, check_k, check_ratio, check_vector, resolve_k


class TopK(Compressor):
    """payload = (values float32 (k,), indices int32 (k,) ascending)."""

    name = "topk"
    summable = False
    compress_ns, decompress_ns = 10.5, 0.08  # CPU ns/entry, docs/bench/compression/compress-time.json

    @dataclass
    class Options:
        k: int | None = field(default=None, metadata={"help": "entries kept (default: from ratio)"})
        ratio: float = field(default=0.01, metadata={"help": "fraction of the d entries kept, in (0, 1]"})

        def validate(self):
            check_k("topk", self.k)
            check_ratio("topk", self.ratio)

    def options(self):
        return {"k": self.k} if self.k is not None else {"ratio": self.ratio}

    def compress(self, v, step=0):
        v = check_vector(v)
        d = v.size
        k = resolve_k(self.name, self.k, self.ratio, d)
        if k == d:
            idx = np.arange(d, dtype=np.int32)
        else:  # O(d) selection of the k largest |v_j|, then in index order
            idx = np.sort(np.argpartition(np.abs(v), d - k)[d - k:]).astype(np.int32)
        return Payload((v[idx], idx), d, step)

    def decompress(self, payload):
        values, idx = payload.arrays
        out = np.zeros(payload.size, np.float32)
        out[idx] = values
        return out

    def payload_bytes(self, d):
        return 8 * resolve_k(self.name, self.k, self.ratio, d)

    def layout(self, nbytes, d):
        if nbytes % 8:
            raise ValueError(f"topk: a packed payload of {nbytes} bytes is not k values + k indices")
        return [(np.float32, nbytes // 8), (np.int32, nbytes // 8)]
