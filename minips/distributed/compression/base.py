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
from dataclasses import dataclass, fields

import numpy as np

from ...options import base_type, convert_value, fields_of, parse_literal, type_hints

__all__ = ["Compressor", "Payload", "check_options_types", "check_vector", "resolve_k"]


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


def check_options_types(name: str, opts) -> None:
    """Give each option of ``opts`` (a compressor's ``Options``) its declared
    type, in place, or raise the compressor's one-line message.

    A text value is read by :func:`minips.options.parse_literal` first (so a
    spec's ``k=8`` and a keyword ``k="8"`` are the same) and a NumPy scalar
    becomes its Python value; then an ``int`` option takes an integer (never
    a bool or a fraction), a ``float`` option a number (an integer becomes a
    float; ``validate()`` checks its range), a ``bool`` option ``true/yes/on``,
    ``false/no/off`` or 1/0 (:func:`minips.options.convert_value`). ``None``
    passes where it is the default.

    Raises:
        ValueError: ``compressor NAME: option K must be an integer|a number|true
            or false, got V; write e.g. K=DEFAULT`` (for ``k``: ``for a fraction use ratio=``).
    """
    hints = type_hints(type(opts))
    defaults = fields_of(type(opts))
    for f in fields(opts):
        k, v, default = f.name, parse_literal(getattr(opts, f.name)), defaults[f.name]
        if isinstance(v, np.generic):  # np.int64(8), np.float32(0.1), np.bool_: the Python value
            v = v.item()
        if v is None and default is None:
            continue
        tp = base_type(hints[k])
        got = f"no value ({k}=)" if v == "" else repr(v)
        example = f.metadata.get("example", default if default else 1)
        if tp is int:
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"compressor {name}: option {k} must be an integer, got {got}"
                                 + ("; for a fraction use ratio=" if k == "k" else f"; write e.g. {k}={example}"))
            v = int(v)
        elif tp is float:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"compressor {name}: option {k} must be a number, got {got}; write e.g. {k}={example}")
            v = float(v)
        elif tp is bool:
            try:
                v = convert_value(v, bool, k)
            except ValueError:
                raise ValueError(f"compressor {name}: option {k} must be true or false, got {v!r}; write e.g. "
                                 f"{k}={str(default).lower()}") from None
        setattr(opts, k, v)


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
    declare their options as a nested ``Options`` dataclass (as algorithms and
    predictors do, :mod:`minips.options`), and implement :meth:`compress`,
    :meth:`decompress`, and for non-summable ones :meth:`layout` (dtype and
    length of each array from the packed length and d).

    Args:
        **options: the fields of ``Options``; each is typed by
            :func:`check_options_types`, checked by ``Options.validate()`` and
            set as an attribute of the same name.

    Raises:
        TypeError: an option the compressor does not have (:func:`~minips.distributed.compression.make_compressor`
            names the valid ones instead).
        ValueError: a value of the wrong type or out of range, naming the option and the fix.
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

    @dataclass
    class Options:
        """No options. A compressor with options declares its own ``Options``:
        one field per option with its type, default and ``metadata={"help": ...}``
        (``"example"``: the value an error suggests where the default is None),
        and, if a value can be out of range, a ``validate()`` raising ValueError."""

        def validate(self) -> None:
            pass

    def __init__(self, **options):
        opts = self.Options(**options)  # an unknown keyword: TypeError, as for any function
        check_options_types(self.name, opts)
        if hasattr(opts, "validate"):
            opts.validate()
        for n in fields_of(self.Options):
            setattr(self, n, getattr(opts, n))

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
