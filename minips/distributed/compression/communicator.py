"""Moving compressed payloads between ranks, counted by :class:`~minips.distributed.comm.Comm`.

- :func:`exchange`: every rank gets the mean over ranks of the decompressed
  payloads. Summable compressors: one ``Comm.allreduce`` of the payload's
  float32 array, then ``decompress(sum) / P``. The others: the payload packed
  into bytes, one ``Comm.allgatherv`` (sizes may differ per rank, zero
  included), each rank's payload decoded, summed in rank order in float32,
  divided by P.
- :func:`gossip_exchange`: each rank gets its in-neighbours' decompressed
  payloads over a static graph (``Comm.neighbor_allgather``), for compressed
  gossip (CHOCO-SGD). A neighbour exchange needs one size on every rank: two
  scalar allreduces (max and min of the sizes) decide, the same way on every
  rank, whether the payloads go as they are (all equal) or padded to the
  largest with the true length in an 8-byte header.

What the Comm counts as payload bytes (``stats['allreduce_bytes']`` or
``stats['allgatherv_bytes']``) equals ``compressor.nbytes(payload)``.
"""
from __future__ import annotations

import numpy as np

from .base import Compressor, Payload

__all__ = ["exchange", "gossip_exchange"]


def _phase(timer, name):
    from contextlib import nullcontext
    return timer.phase(name) if timer is not None else nullcontext()


def exchange(comm, compressor: Compressor, payload: Payload, timer=None) -> np.ndarray:
    """Mean over ranks of ``decompress(payload_r)``: float32 (d,), a new array.

    Collective: every rank calls it with its own payload of a vector of the
    same d. ``timer`` (a StepTimer), if given, gets ``wait`` (the
    communication) and ``decompress``.
    """
    P = comm.size
    if compressor.summable:
        buf = np.ascontiguousarray(payload.arrays[0], np.float32)
        if buf is payload.arrays[0]:
            buf = buf.copy()  # the sender's payload stays as it was
        with _phase(timer, "wait"):
            comm.allreduce(buf)
        with _phase(timer, "decompress"):
            out = compressor.decompress(Payload((buf,), payload.size, payload.step))
    else:
        with _phase(timer, "wait"):
            parts = comm.allgatherv(compressor.pack(payload))
        with _phase(timer, "decompress"):
            out = np.zeros(payload.size, np.float32)
            for raw in parts:
                out += compressor.decompress(compressor.unpack(raw, payload.size, payload.step))
    if P > 1:
        out *= np.float32(1.0 / P)
    return out


def gossip_exchange(comm, graph, compressor: Compressor, payload: Payload, timer=None) -> list:
    """The in-neighbours' decompressed payloads: a list of float32 (d,) arrays
    in ``graph.sources`` order (this rank's own if it is a self-loop source).

    Collective over the graph's ranks (every rank calls it with one vector
    size d). Counts ``remote_out x`` the bytes sent per neighbour (the payload,
    plus the padding and 8-byte header when sizes vary by rank) as neighbour
    exchange, and two scalar allreduces.
    """
    raw = compressor.pack(payload)
    with _phase(timer, "wait"):
        width = int(comm.allreduce_scalar(float(raw.size), op="max"))
        if int(comm.allreduce_scalar(float(raw.size), op="min")) == width:
            rows = comm.neighbor_allgather(graph, raw)
            lengths = [raw.size] * len(rows)
        else:
            framed = np.zeros(8 + width, np.uint8)
            framed[:8] = np.array([raw.size], np.int64).view(np.uint8)
            framed[8:8 + raw.size] = raw
            got = comm.neighbor_allgather(graph, framed)
            lengths = [int(r[:8].copy().view(np.int64)[0]) for r in got]
            rows = [r[8:] for r in got]
    with _phase(timer, "decompress"):
        return [compressor.decompress(compressor.unpack(np.ascontiguousarray(r[:n]), payload.size, payload.step))
                for r, n in zip(rows, lengths)]
