"""What the compressed model-averaging and compressed-gossip methods of this
package share (pqasgd, qprsgd, choco-sgd): the ``compressor`` option and its
own options, and the compressor built from them.

In a spec the compressor is named by ``compressor=NAME`` and its options are
further ``key=value`` pairs that the method itself does not have, e.g.
``choco-sgd:compressor=topk:ratio=0.05:gamma=0.4`` (``ratio`` goes to the
compressor; the options of each compressor: :mod:`minips.distributed.compression`).
A method option of the same name wins (``seed`` is the random-geometric
graph's seed in the gossip methods).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import field

import numpy as np

from ..compression import COMPRESSORS, make_compressor

__all__ = ["PublicCopies", "averaging_time", "build_compressor", "codec_seconds", "compressor_field",
           "compressor_kwargs", "compressor_options_field", "compressor_spec", "exchange_time", "payload_bytes",
           "validate_compressor"]


def compressor_field(default: str):
    """The ``compressor`` option (a new Field each call)."""
    return field(default=default, metadata={
        "choices": tuple(COMPRESSORS),
        "help": "compressor of the messages; its options as more key=value (e.g. compressor=topk:ratio=0.05)"})


def compressor_options_field(default: dict | None = None):
    """The dict that collects the compressor's options (the Options' ``EXTRA``)."""
    return field(default_factory=lambda: dict(default or {}), metadata={
        "help": "the compressor's options: any key=value the method does not know"})


def compressor_kwargs(options) -> dict:
    """The compressor's options: the method's defaults for that compressor
    (``Options.COMPRESSOR_DEFAULTS[name]``, a ClassVar) under the spec's."""
    defaults = getattr(options, "COMPRESSOR_DEFAULTS", {}).get(options.compressor, {})
    return {**defaults, **options.compressor_options}


def compressor_spec(options) -> str:
    """The compressor as one spec string, e.g. ``qsgd-quant:s=1`` (labels, logs)."""
    kw = compressor_kwargs(options)
    return ":".join([options.compressor, *(f"{k.replace('_', '-')}={v}" for k, v in kw.items())])


def validate_compressor(options) -> None:
    """Build the compressor once, so a bad name or option fails at parse time;
    with ``options.error_feedback`` true, refuse a compressor that error
    feedback would make diverge (random-k with scale=true).

    Raises:
        ValueError: ``compressor=NAME: <the compressor's one-line message>``.
    """
    try:
        c = make_compressor(options.compressor, **compressor_kwargs(options))
    except (TypeError, ValueError) as e:
        raise ValueError(f"compressor={options.compressor}: "
                         f"{str(e).removeprefix(f'compressor {options.compressor}: ')}") from None
    problem = c.error_feedback_problem() if getattr(options, "error_feedback", False) else None
    if problem:
        raise ValueError(f"compressor={options.compressor} with error-feedback=true: {problem}")


def build_compressor(options, rank: int, d: int):
    """The compressor for vectors of d floats on this rank; one trial
    compression of zeros checks the options that depend on d (k > d ...).

    Raises:
        ValueError: ``compressor=NAME: ...`` (e.g. k larger than the model).
    """
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    if hasattr(c, "rank"):
        c.rank = rank  # stochastic rounding differs per rank (drawn from seed, rank, step)
    try:
        c.compress(np.zeros(d, np.float32), 0)
    except ValueError as e:
        raise ValueError(f"compressor={options.compressor}: "
                         f"{str(e).removeprefix(f'compressor {options.compressor}: ')}") from None
    return c


def payload_bytes(options, d: int) -> int:
    """Bytes of one rank's payload for a d-vector: the compressor's fixed size,
    or, where it varies with the data, that of a seeded Gaussian vector."""
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    n = c.payload_bytes(d)
    if n is None:
        v = np.random.default_rng(0).standard_normal(d).astype(np.float32)
        n = c.nbytes(c.compress(v, 0))
    return int(n)


def codec_seconds(options, d: int, decodes: int) -> float:
    """Modelled compute seconds to compress a d-vector once and decompress
    ``decodes`` payloads, from the compressor's measured per-entry costs
    (:meth:`~minips.distributed.compression.Compressor.seconds`)."""
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    return c.seconds(d, decodes=decodes)


def averaging_time(options, d: int, P: int, net) -> float:
    """Seconds of one compressed average of a d-vector: compress, the exchange
    (:func:`exchange_time`), and decompress one summed payload (summable) or P."""
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    return codec_seconds(options, d, 1 if c.summable else P) + exchange_time(options, d, P, net)


def exchange_time(options, d: int, P: int, net) -> float:
    """Seconds of one :func:`~minips.distributed.compression.exchange` of a
    d-vector: an allreduce of the payload (summable compressors) or a ring
    allgatherv of P payloads; 0 for P = 1 (network time only; see
    :func:`averaging_time` for compression compute)."""
    if P <= 1:
        return 0.0
    c = make_compressor(options.compressor, **compressor_kwargs(options))
    n = payload_bytes(options, d)
    return net.allreduce_time(n, P) if c.summable else net.allgatherv_time([n] * P)


class PublicCopies:
    """One rank's share of compressed gossip's public copies (Koloskova, Stich
    & Jaggi, ICML 2019): ``x_hat_i``, this rank's public copy, which every
    out-neighbour holds identically because all holders apply the same
    compressed messages, and ``s_i = sum_j W_ij x_hat_j`` over this rank and
    its in-neighbours (kept as the weighted sum, so the neighbours' copies
    need no storage of their own: ``s_i += sum_j W_ij decompress(q_j)``).

    Args:
        comm: the communicator; graph: the :class:`~minips.distributed.comm.NeighborGraph`
            of a static topology (sources = in-neighbours, with weights
            ``W[rank, sources]``), or None on one rank; w_self: ``W[rank, rank]``.
        x0: the start of every copy: the initial model, which every rank knows
            after the broadcast (the paper starts from 0; starting from w_0
            saves the first, largest, messages).
    """

    def __init__(self, comm, graph, w_self: float, x0: np.ndarray):
        self.comm, self.graph, self.w_self = comm, graph, np.float32(w_self)
        self.x_hat = x0.astype(np.float32, copy=True)
        self.s = x0.astype(np.float32, copy=True)     # sum_j W_ij x_hat_j with every x_hat_j = x0

    def reset(self, x0: np.ndarray) -> None:
        """Every copy back to ``x0`` (identical on all ranks)."""
        self.x_hat[...] = x0
        self.s[...] = x0

    def send(self, compressor, payload, timer=None) -> None:
        """Send ``payload`` (this rank's ``q_i``) to the out-neighbours, receive
        theirs, and apply all: ``x_hat_i += dec(q_i)``, ``s_i += sum_j W_ij dec(q_j)``
        (in ascending rank order; collective over the graph)."""
        own = compressor.decompress(payload)
        terms = [(self.comm.rank, self.w_self, own)]
        if self.graph is not None:
            rows = self._exchange(compressor, payload, timer)
            terms += [(j, np.float32(wj), r) for j, wj, r in zip(self.graph.sources, self.graph.weights, rows)]
        self.x_hat += own
        for _, wj, r in sorted(terms, key=lambda t: t[0]):
            self.s += wj * r

    def _exchange(self, compressor, payload, timer) -> list:
        """The in-neighbours' decompressed payloads. A compressor whose payload
        size is fixed by d (identity, fp16, top-k, random-k, sign, QSGD, ...)
        sends it as it is in one neighbour exchange: no global collective, as
        gossip wants. Otherwise :func:`~minips.distributed.compression.gossip_exchange`
        (two scalar allreduces agree on a padded width first)."""
        from ..compression import gossip_exchange
        fixed = compressor.payload_bytes(payload.size)
        if fixed is None:
            return gossip_exchange(self.comm, self.graph, compressor, payload, timer)
        raw = compressor.pack(payload)
        if raw.size != fixed:
            raise RuntimeError(f"{compressor.name}: a payload of {raw.size} bytes, its fixed size is {fixed}")
        with timer.phase("wait") if timer else nullcontext():
            got = self.comm.neighbor_allgather(self.graph, raw)
        with timer.phase("decompress") if timer else nullcontext():
            return [compressor.decompress(compressor.unpack(r, payload.size, payload.step)) for r in got]

    def state_dict(self) -> dict:
        return {"x_hat": self.x_hat.copy(), "s": self.s.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.x_hat[...] = np.asarray(state["x_hat"], np.float32)
        self.s[...] = np.asarray(state["s"], np.float32)
