"""The meter of a Comm: network emulation (modelled seconds, the emulated link) and byte accounting.

Network emulation (:class:`~minips.distributed.costmodel.NetworkModel`): each
allreduce can be charged the time an alpha-beta model of an interconnect
would take for a ring allreduce, ``2 (P-1) alpha + 2 (P-1)/P * n * beta``,
and every other primitive its own model (ring allgatherv, neighbour exchange,
one message, binomial broadcast; :mod:`minips.distributed.costmodel`); a
request completes no earlier than post time + that time, and the waiting rank
sleeps (does not spin), as with an offloading NIC. Scalar reductions are not
charged: they carry metrics and timings, which an emulated delay would
distort. Requests share the emulated link one after another (a request posted
while another is on the wire starts when it finishes). Results produced this
way are labelled *emulated*. Under virtual ranks nothing sleeps (their
measured times are not cluster times anyway): the network only names the
model that projected step times use (``Comm.delays`` is False).

Byte accounting: every primitive counts its calls, the payload bytes passed
in and the bytes this rank sends as the models count them (``Comm.stats``,
:attr:`Meter.bytes_sent`); allreduce bytes are also split by where they go,
inside the node or across nodes.
"""
from __future__ import annotations

import time

from .. import costmodel

__all__ = ["PRIMITIVES", "Meter"]

#: the primitives counted in ``Comm.stats`` (blocking and nonblocking together)
PRIMITIVES = ("allreduce", "allgatherv", "neighbor_allgather", "sendrecv", "exchange", "bcast",
              "allreduce_scalar")


class Meter:
    """Mixin of :class:`~minips.distributed.comm.Comm`: the modelled seconds and
    counted bytes of every primitive, and the emulated link they share.

    It uses the Comm's ``network`` (a NetworkModel or None), ``delays``,
    ``rank``, ``size``, ``node_of`` and ``nodes``, and owns ``stats`` and the
    link's free time (set by :meth:`_start_meter`).
    """

    def _start_meter(self) -> None:
        """Zero the counters and free the emulated link."""
        self._link_free = 0.0  # emulated network: when the wire is free again
        # Per primitive (blocking and nonblocking together): NAME_calls; NAME_bytes,
        # the payload this rank passed in; NAME_sent, the bytes it sent as modelled.
        self.stats = {f"{p}_{k}": 0 for p in PRIMITIVES for k in ("calls", "bytes", "sent")}
        self.stats["progress_calls"] = 0
        # allreduce bytes sent, split by where they go (they also count in allreduce_sent)
        self.stats["allreduce_sent_intra"] = self.stats["allreduce_sent_inter"] = 0

    @property
    def bytes_inter_node(self) -> int:
        """Allreduce bytes this rank sent to other nodes, as the models count them (int)."""
        return self.stats["allreduce_sent_inter"]

    @property
    def bytes_intra_node(self) -> int:
        """Allreduce bytes this rank passed to ranks of its own node (shared memory), as counted (int)."""
        return self.stats["allreduce_sent_intra"]

    @property
    def emulated(self) -> bool:
        """True when allreduce times come from a network model, not the wire."""
        return self.network is not None

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has sent so far, as the models count them (int).

        Per call of ``n`` payload bytes: allreduce ``2 (P-1) n // P`` (ring);
        allgatherv ``sum(n_j) - n_{rank+1 mod P}`` (ring: every block but the
        successor's is forwarded); neighbour exchange ``remote_out * n``; one
        message ``n``; bcast ``children * n`` in the binomial tree (the root
        ``ceil(log2 P)`` children); scalar reductions as an 8-byte allreduce.
        Messages to oneself are local copies and count 0; so does everything on
        one rank. ``bcast_obj`` and ``allgather`` (pickled objects) are not
        counted. Formulas: :mod:`minips.distributed.costmodel`.
        """
        return sum(v for k, v in self.stats.items() if k.endswith("_sent"))

    # --- the emulated link ---------------------------------------------------------
    def _emulated_finish(self, nbytes: int, now: float) -> float:
        """When an allreduce of ``nbytes`` posted at ``now`` leaves the emulated
        link. The link carries one collective at a time (they share the same
        wire): a request starts when the previous one has finished."""
        return self._link_until(self._modelled_seconds(nbytes), now)

    def _link_until(self, seconds: float, now: float) -> float:
        """When an operation of ``seconds`` modelled time, posted at ``now``,
        leaves the emulated link (one operation on the wire at a time; an
        operation that moves nothing, e.g. a copy to oneself, does not queue)."""
        if not self.network or seconds <= 0 or not self.delays:
            return now
        start = max(now, self._link_free)
        self._link_free = start + seconds
        return self._link_free

    def _blocking(self, prim, seconds, nbytes, sent, call):
        """Run the blocking MPI ``call``; with emulation, return no earlier than
        its modelled finish (sleeping the rest). Counts it; returns its result."""
        finish = self._link_until(seconds, time.perf_counter())
        out = call()
        rest = finish - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        self._count(prim, nbytes, sent)
        return out

    def _count(self, prim: str, nbytes: int, sent: int) -> None:
        self.stats[f"{prim}_calls"] += 1
        self.stats[f"{prim}_bytes"] += int(nbytes)
        self.stats[f"{prim}_sent"] += int(sent)

    def _count_allreduce_split(self, sent: int, inter: bool) -> None:
        self.stats["allreduce_sent_inter" if inter else "allreduce_sent_intra"] += int(sent)

    # --- what each primitive costs: (modelled seconds, bytes this rank sends) ------------
    def _modelled_seconds(self, nbytes: int) -> float:
        """Emulated seconds of a flat ring allreduce: every ring step has an
        inter-node hop on its critical path, so ``T_ring(n, P)``; 0 when all
        ranks are on one node (the traffic is real shared memory)."""
        if not self.network or self.nodes == 1:
            return 0.0
        return self.network.allreduce_time(nbytes, self.size)

    def _flat_sent(self, nbytes: int) -> int:
        """Bytes of a flat ring allreduce this rank sends (to rank+1), counted
        as inter-node when rank+1 is on another node."""
        sent = costmodel.ring_allreduce_bytes_sent(nbytes, self.size)
        nxt = (self.rank + 1) % self.size
        self._count_allreduce_split(sent, self.node_of[nxt] != self.node_of[self.rank])
        return sent

    def _allgatherv_model(self, blocks):
        seconds = self.network.allgatherv_time(blocks) if self.network else 0.0
        return seconds, costmodel.ring_allgatherv_bytes_sent(blocks, self.rank)

    def _neighbor_model(self, nbytes: int, graph):
        degree = max(graph.remote_in, graph.remote_out)
        seconds = self.network.neighbor_time(nbytes, degree) if self.network else 0.0
        return seconds, graph.remote_out * nbytes

    def _message_model(self, nbytes: int, remote: bool):
        if not remote:
            return 0.0, 0  # a message to oneself is a local copy
        return (self.network.message_time(nbytes) if self.network else 0.0), nbytes

    def _bcast_model(self, nbytes: int, root: int):
        seconds = self.network.bcast_time(nbytes, self.size) if self.network else 0.0
        return seconds, costmodel.binomial_bcast_bytes_sent(nbytes, self.size, self.rank, root)
