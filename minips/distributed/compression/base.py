"""The compressor interface (GRACE's split: compressor / memory / communicator;
Xu et al., "GRACE: A Compressed Communication Framework for Distributed
Machine Learning", ICDCS 2021).

A :class:`Compressor` turns a flat float32 vector ``v`` (d,) into a
:class:`Payload` (the ndarrays that go on the wire) and back::

    p = C.compress(v, step)          # Payload: arrays + the original size d + the step
    C.nbytes(p)                      # bytes on the wire (what Comm counts)
    C.decompress(p)                  # float32 (d,)

``summable`` compressors have payloads whose single float32 array can be
summed elementwise across ranks (identity, random-k and the Gaussian
projection with a seed shared by all ranks, count-sketch with shared
hashes), so one Allreduce carries them and ``decompress(sum of payloads)``
is the sum of what each rank meant (for count-sketch: the sketch of the sum).
The others (fp16, top-k, sign, QSGD) send their own support or scale, so
ranks exchange them with an Allgather of variable-size byte strings
(:meth:`Compressor.pack` / :meth:`Compressor.unpack`) and decode each.

Randomness is a pure function of ``(seed, step)`` (and of the rank where it
must differ), so runs are reproducible and a resumed run draws the same.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Compressor", "Payload", "check_vector", "resolve_k"]


@dataclass
class Payload:
    """What one rank sends for one vector.

    Attributes:
        arrays: the ndarrays on the wire, in :meth:`Compressor.pack` order.
        size: d, the length of the compressed vector.
        step: the step it was compressed at (seeds shared randomness).
    """
    arrays: tuple
    size: int
    step: int = 0

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays))


def check_vector(v) -> np.ndarray:
    """``v`` as a contiguous float32 1-D array, or TypeError naming the problem."""
    if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype != np.float32:
        raise TypeError(f"compressors take a 1-D float32 numpy array, got {type(v).__name__} "
                        f"{getattr(v, 'dtype', '')} {getattr(v, 'shape', '')}; flatten and cast it "
                        "(v.ravel().astype(np.float32))")
    return np.ascontiguousarray(v)


def check_ratio(name: str, ratio) -> None:
    if ratio is not None and not (0.0 < ratio <= 1.0):
        raise ValueError(f"{name}: ratio must be in (0, 1] (the fraction of entries kept), got {ratio}")


def check_k(name: str, k) -> None:
    if k is not None and k < 1:
        raise ValueError(f"{name}: k must be >= 1 (entries kept), got {k}; or give ratio=FRACTION instead")


def resolve_k(name: str, k, ratio, d: int) -> int:
    """Entries kept of a d-vector: ``k`` if given, else ``ceil(ratio d)`` (at least 1).

    Raises:
        ValueError: k > d (naming both and the fix).
    """
    if k is not None:
        if k > d:
            raise ValueError(f"{name}: k={k} exceeds the vector's size d={d}; choose k <= {d} "
                             "or give ratio=FRACTION instead")
        return int(k)
    return max(1, min(d, math.ceil(ratio * d)))


class Compressor:
    """Base class: identity-free defaults and the byte packing.

    Subclasses set ``name``, ``summable``, ``unbiased`` (``E[decompress(compress(v))] = v``),
    validate their options in ``__init__`` (ValueError naming the option and
    the fix), and implement :meth:`compress`, :meth:`decompress`, and for
    non-summable ones :meth:`layout` (dtype and length of each array from the
    packed length and d).
    """

    name = "base"
    summable = False
    unbiased = False
    #: modelled compute cost, nanoseconds per entry of the input vector, of one
    #: compress and of one decompress: median CPU time of one thread for
    #: d = 421642 (scripts/bench_compression.py, docs/bench/compression/compress-time.json;
    #: qsgd-quant at s = 15, topk and randomk at ratio 0.01, countsketch 5 rows at ratio 0.05)
    compress_ns: float = 0.0
    decompress_ns: float = 0.0

    def seconds(self, d: int, decodes: int = 1) -> float:
        """Modelled seconds to compress a d-vector once and decompress
        ``decodes`` payloads (1 for a summed payload, P after an allgather)."""
        return d * (self.compress_ns + decodes * self.decompress_ns) * 1e-9

    def options(self) -> dict:
        """The options this compressor was built with (for logs and summaries)."""
        return {}

    def error_feedback_problem(self) -> str | None:
        """Why error feedback must not be used with this compressor, or None.
        Error feedback's memory ``m = v - C(v)`` stays bounded only when C is
        a contraction (``||v - C(v)|| < ||v||``, Stich et al. 2018)."""
        return None

    def describe(self) -> str:
        opts = ":".join(f"{k}={v}" for k, v in self.options().items())
        return f"{self.name}:{opts}" if opts else self.name

    def __repr__(self):
        return f"<compressor {self.describe()}>"

    def compress(self, v: np.ndarray, step: int = 0) -> Payload:  # pragma: no cover - abstract
        """``v`` (float32 (d,)) -> :class:`Payload`."""
        raise NotImplementedError

    def decompress(self, payload: Payload) -> np.ndarray:  # pragma: no cover - abstract
        """:class:`Payload` -> float32 (d,) (a new array)."""
        raise NotImplementedError

    def nbytes(self, payload: Payload) -> int:
        """Bytes this payload puts on the wire (= what Comm counts for it)."""
        return payload.nbytes

    def payload_bytes(self, d: int) -> int | None:
        """Bytes of the payload of a d-vector when every rank sends the same
        size (then a neighbour exchange needs no padding); None if it varies."""
        return None

    # --- bytes on the wire for the allgather of non-summable payloads ---------------
    def pack(self, payload: Payload) -> np.ndarray:
        """The payload's arrays concatenated as one uint8 array (nbytes long)."""
        if not payload.arrays:
            return np.empty(0, np.uint8)
        return np.concatenate([np.ascontiguousarray(a).view(np.uint8).ravel() for a in payload.arrays])

    def layout(self, nbytes: int, d: int) -> list:  # pragma: no cover - abstract
        """``[(dtype, count), ...]`` of the arrays in a packed payload of ``nbytes``."""
        raise NotImplementedError

    def unpack(self, raw: np.ndarray, d: int, step: int) -> Payload:
        """Inverse of :meth:`pack` for a payload of a d-vector."""
        arrays, off = [], 0
        for dtype, count in self.layout(raw.size, d):
            dt = np.dtype(dtype)
            arrays.append(raw[off:off + count * dt.itemsize].view(dt))
            off += count * dt.itemsize
        if off != raw.size:
            raise ValueError(f"{self.name}: a packed payload of {raw.size} bytes does not fit a vector of d={d} "
                             "(ranks compressing vectors of different sizes?)")
        return Payload(tuple(arrays), d, step)
