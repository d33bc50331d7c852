"""Point-to-point calls of Comm: ``sendrecv`` and ``iexchange`` with a peer that may change every call.

Messages are bytes (``MPI_BYTE``) under one tag, so MPI keeps them in order
per peer; both sides pass arrays of one shape and dtype. What they cost and
send: :mod:`.meter`.
"""
from __future__ import annotations

import numpy as np

from .buffers import as_bytes
from .request import Request

__all__ = ["P2P_TAG", "PointToPoint"]

#: the tag of sendrecv/iexchange messages; MPI keeps them in order per (peer, tag)
P2P_TAG = 0x6D70


class PointToPoint:
    """Mixin of :class:`~minips.distributed.comm.Comm`: point-to-point calls.

    It uses the Comm's ``mpi``, ``MPI``, ``rank``, ``size``, the request tail
    ``_post`` and rank check ``_peer`` (:mod:`.core`) and the meter
    (:mod:`.meter`).
    """

    def sendrecv(self, send: np.ndarray, dest: int, source: int, recv: np.ndarray | None = None) -> np.ndarray:
        """Send ``send`` to ``dest`` and receive from ``source`` at once
        (``MPI_Sendrecv``; safe in rings and shifts, where plain sends could
        deadlock). The message from ``source`` must have exactly the size of
        ``recv`` (by default: the shape and dtype of ``send``), so all ranks
        taking part exchange arrays of one shape and dtype.

        Args:
            send: numpy array, any shape and dtype.
            dest, source: ranks; either may be this rank (a local copy).
            recv: optional C-contiguous, writable array of ``send``'s shape and
                dtype to receive into.

        Returns:
            ``recv`` (a new array if not given) holding ``source``'s message.

        Counts ``send.nbytes`` bytes sent unless ``dest`` is this rank;
        emulated time ``alpha + n beta`` (0 if both peers are this rank).

        Raises:
            TypeError: ``send``/``recv`` not arrays, or ``recv`` of another
                shape/dtype; ValueError: a rank outside 0..P-1, ``recv``
                read-only, or the message received has another size.
        """
        a, recv = self._p2p_bufs(send, recv, "sendrecv")
        dest, source = self._peer(dest, "dest"), self._peer(source, "source")
        seconds, _ = self._message_model(a.nbytes, dest != self.rank or source != self.rank)
        _, sent = self._message_model(a.nbytes, dest != self.rank)  # only what leaves this rank counts

        def call():
            if self.size == 1:
                recv[...] = a
                return
            status = self.MPI.Status()
            self.mpi.Sendrecv([as_bytes(a), self.MPI.BYTE], dest, P2P_TAG,
                              [as_bytes(recv), self.MPI.BYTE], source, P2P_TAG, status)
            got = status.Get_count(self.MPI.BYTE)
            if got != recv.nbytes:
                raise ValueError(f"sendrecv: rank {source} sent {got} bytes, expected {recv.nbytes}; "
                                 "send arrays of one shape and dtype on every rank")
        self._blocking("sendrecv", seconds, a.nbytes, sent, call)
        return recv

    def _p2p_bufs(self, send, recv, name: str):
        if not isinstance(send, np.ndarray):
            raise TypeError(f"{name} expects a numpy array, got {type(send).__name__}; pass np.asarray(x)")
        a = np.ascontiguousarray(send)
        if recv is None:
            return a, np.empty_like(a)
        if not isinstance(recv, np.ndarray) or recv.shape != a.shape or recv.dtype != a.dtype \
                or not recv.flags.c_contiguous:
            raise TypeError(f"{name}: recv must be a C-contiguous array of the shape {a.shape} and dtype "
                            f"{a.dtype} of send; pass recv=None to get a new one")
        if not recv.flags.writeable:
            raise ValueError(f"{name}: recv is read-only (still in flight?); wait for its request first")
        return a, recv

    def iexchange(self, send: np.ndarray, peer: int, tag=None) -> Request:
        """Send ``send`` to ``peer`` and receive ``peer``'s array (``MPI_Isend`` +
        ``MPI_Irecv``, one :class:`Request` that completes when both have).
        The peer may change every call (hypercube or rotating-ring partners),
        but the pairing must be mutual: ``peer`` calls ``iexchange(.., rank)``
        with an array of the same shape and dtype (not checked: a larger one is
        an MPI error, a smaller one leaves the tail unwritten). Messages between
        the same pair arrive in the order posted.

        Returns:
            A Request; ``result`` is the received array (shape and dtype of
            ``send``) once complete. ``send`` is read-only until then.
            ``peer == rank`` (e.g. on one rank) returns a copy of ``send``.

        Counts ``send.nbytes`` bytes sent unless ``peer`` is this rank; emulated
        time ``alpha + n beta`` (full duplex: both directions at once).

        Raises:
            TypeError, ValueError: ``send`` is not an array; ``peer`` outside 0..P-1.
        """
        a, recv = self._p2p_bufs(send, None, "iexchange")
        peer = self._peer(peer, "peer")
        seconds, sent = self._message_model(a.nbytes, peer != self.rank)
        reqs = None
        if self.size > 1:
            reqs = [self.mpi.Irecv([as_bytes(recv), self.MPI.BYTE], peer, P2P_TAG),
                    self.mpi.Isend([as_bytes(a), self.MPI.BYTE], peer, P2P_TAG)]
        else:
            recv[...] = a
        return self._post("exchange", reqs, recv, [send], seconds, a.nbytes, sent, tag)
