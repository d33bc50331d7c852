"""Compressed communication: the building blocks, no training algorithm.

GRACE's split (Xu et al., ICDCS 2021), so any compressor runs with any method:

- a compressor (:mod:`.base`, one module each): ``compress(v, step) ->
  Payload``, ``decompress(payload) -> v``, ``nbytes(payload)``, ``summable``;
- a memory (:mod:`.memory`): error feedback on (:class:`ErrorFeedback`) or off
  (:class:`NoMemory`);
- a communicator (:mod:`.communicator`): :func:`exchange` (Allreduce when
  summable, else Allgather of variable-size bytes) and
  :func:`gossip_exchange` (neighbour exchange).

:class:`LowRank` (rank-r factors by power iteration) is built by its method
with the model's matrix shapes, not by name: its two rounds of communication
do not fit :func:`exchange` (:mod:`.lowrank` says why).

A compressor is named by a spec ``NAME[:key=value]...`` (e.g.
``topk:ratio=0.01``, ``qsgd-quant:s=4:bucket=256``) or by a name and keyword
options: :func:`make_compressor`. Compressor names differ from the algorithm
names (the quantizer is ``qsgd-quant``).
"""
from __future__ import annotations

from ...options import fields_of, parse_literal
from .base import Compressor, Payload
from .communicator import exchange, gossip_exchange
from .countsketch import CountSketch
from .fp16 import FP16
from .gaussian import GaussianProjection
from .identity import Identity
from .lowrank import LowRank
from .memory import ErrorFeedback, NoMemory, make_memory
from .qsgd import QSGD
from .randomk import RandomK
from .sign import Sign
from .topk import TopK

__all__ = ["COMPRESSORS", "Compressor", "ErrorFeedback", "LowRank", "NoMemory", "Payload", "compressor_options",
           "exchange", "gossip_exchange", "make_compressor", "make_memory", "parse_compressor"]

#: name -> class; every compressor minips has.
COMPRESSORS: dict[str, type[Compressor]] = {
    c.name: c for c in (Identity, FP16, TopK, RandomK, Sign, QSGD, CountSketch, GaussianProjection)
}


def compressor_options(name: str) -> dict:
    """``{option: default}`` of compressor ``name``: the fields of its ``Options`` (for listings and errors)."""
    return fields_of(COMPRESSORS[name].Options)


def parse_compressor(spec: str) -> tuple[str, dict]:
    """``"topk:ratio=0.01"`` -> ``("topk", {"ratio": 0.01})`` (values read by
    :func:`minips.options.parse_literal`: bool, int, float or str).

    Raises:
        ValueError: an option without ``=``.
    """
    name, *parts = str(spec).strip().split(":")
    opts = {}
    for p in parts:
        if "=" not in p:
            raise ValueError(f"compressor spec {spec!r}: write NAME:key=value..., e.g. topk:ratio=0.01")
        k, _, v = p.partition("=")
        opts[k.strip().replace("-", "_")] = parse_literal(v.strip())
    return name.strip(), opts


def make_compressor(spec: str, **options) -> Compressor:
    """A compressor from a spec (``"topk:ratio=0.01"``) and/or keyword options
    (keywords win; None values are dropped). Values in text are read by
    :func:`minips.options.parse_literal`; the compressor's constructor types
    them by its ``Options`` fields and checks their ranges (``Options.validate()``).

    Raises:
        ValueError: unknown name or option (the valid ones listed), or a bad
            value (the compressor's own one-line message).
    """
    name, opts = parse_compressor(spec)
    opts.update({k.replace("-", "_"): parse_literal(v) for k, v in options.items() if v is not None})
    if name not in COMPRESSORS:
        raise ValueError(f"unknown compressor {name!r}; choose one of {', '.join(COMPRESSORS)}")
    valid = compressor_options(name)
    bad = [k for k in opts if k not in valid]
    if bad:
        listed = ", ".join(k.replace("_", "-") for k in valid) or "none"
        raise ValueError(f"compressor {name} has no option {bad[0].replace('_', '-')!r}; its options: {listed}")
    return COMPRESSORS[name](**opts)
