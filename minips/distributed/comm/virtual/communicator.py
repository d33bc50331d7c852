"""VirtualComm: one virtual rank's communicator, answering the mpi4py calls that Comm makes, with MPI's semantics.

Collectives: the k-th collective call of every rank of a communicator
belongs to one slot; the rank that arrives last does the work and completes
every rank's request. Point-to-point messages match by (source, destination,
tag) in posting order. Neighbour collectives (:class:`VirtualGraphComm`) are
messages tagged with the call's sequence number.
"""
from __future__ import annotations

import pickle
from collections import deque

import numpy as np

from .schedules import binomial, recursive_doubling
from .shim import MPI, VirtualMPIError, VirtualWin, VRequest
from .world import Context, Slot, World

__all__ = ["VirtualComm", "VirtualGraphComm"]


# --- buffers -----------------------------------------------------------------------------
def _bytes(a) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (made now: it keeps the array's
    write permission of this moment, as MPI keeps a pointer)."""
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        raise TypeError(f"virtual MPI needs C-contiguous numpy buffers, got {type(a).__name__}")
    return a.reshape(-1).view(np.uint8)


def _spec(spec):
    """(flat bytes, extra) of a buffer argument: ``array``, ``[array, BYTE]``,
    ``[array, count, BYTE]`` (extra = count) or ``[array, counts, displs, BYTE]``
    (extra = (counts, displs))."""
    if isinstance(spec, (list, tuple)):
        if len(spec) == 2:
            return _bytes(spec[0]), None
        if len(spec) == 3:
            return _bytes(spec[0]), int(spec[1])
        if len(spec) == 4:
            return _bytes(spec[0]), (list(spec[1]), list(spec[2]))
        raise TypeError(f"unsupported buffer specification of {len(spec)} items")
    return _bytes(spec), None


def _typed(a) -> np.ndarray:
    """A writable view of a reduction buffer, taken when the call is posted."""
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        raise TypeError(f"virtual MPI needs C-contiguous numpy buffers, got {type(a).__name__}")
    return a.view()


class VirtualComm:
    """One rank's view of a virtual communicator: the mpi4py calls that
    :class:`~minips.distributed.comm.Comm` makes, with MPI's semantics.

    Args:
        world: the :class:`World` of the job.
        ctx: the shared side of this communicator.
        rank: this rank's index in it.
    """

    MPI = MPI

    def __init__(self, world: World, ctx: Context, rank: int):
        self.world, self.ctx, self.rank = world, ctx, rank
        self.signals = world.signals
        self._seq = 0

    @property
    def aborted(self) -> bool:
        """Whether the job was aborted (Comm then stays silent)."""
        return self.world.aborted is not None

    @property
    def world_rank(self) -> int:
        return self.ctx.ranks[self.rank]

    def idle(self):
        """Context: the calling rank's compute slot is free while it blocks inside."""
        return self.world.idle()

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.ctx.size

    def Free(self) -> None:
        pass

    def Abort(self, errorcode: int = 1) -> None:
        self.world.abort(self.world_rank, errorcode)

    def claim_abort(self, errorcode: int = 1) -> bool:
        """Abort the job; True if this rank is the first to (it then reports
        why), False if another rank already did (this one ends silently)."""
        return self.world.abort(self.world_rank, errorcode)

    # --- collectives: one slot per call, completed by the last rank to arrive -----------
    def _collective(self, kind: str, payload, finish) -> VRequest:
        world = self.world
        world.check()
        req = VRequest(world)
        seq, self._seq = self._seq, self._seq + 1
        failed = []
        with world.lock:
            slot = self.ctx.slots.get(seq)
            if slot is None:
                slot = self.ctx.slots[seq] = Slot(self.ctx.size)
            slot.kinds[self.rank], slot.payloads[self.rank], slot.requests[self.rank] = kind, payload, req
            slot.arrived += 1
            last = slot.arrived == self.ctx.size
            if last:
                del self.ctx.slots[seq]
            elif world.finished:
                failed = self.ctx.abandoned(world.finished)
        for r, error in failed:
            r.complete(error)
        if last:
            error = None
            if len(set(slot.kinds)) > 1:
                calls = ", ".join(f"rank {r}: {k}" for r, k in enumerate(slot.kinds))
                error = VirtualMPIError(f"collective call {seq} differs between ranks ({calls}); every rank must "
                                        "call the same collectives in the same order")
            else:
                try:
                    finish(slot)
                except Exception as e:  # noqa: BLE001 - reported on every rank
                    error = e
            for r in slot.requests:
                r.complete(error)
        return req

    def _wait(self, req: VRequest):
        req.Wait()
        return req.value

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM) -> VRequest:
        buf = _typed(recvbuf)
        if sendbuf is not MPI.IN_PLACE:
            np.copyto(buf, np.asarray(sendbuf).reshape(buf.shape))

        def finish(slot):
            bufs = slot.payloads
            if len({(b.shape, b.dtype) for b in bufs}) > 1:
                per = ", ".join(f"rank {r}: {b.dtype}{list(b.shape)}" for r, b in enumerate(bufs))
                raise VirtualMPIError(f"allreduce: the ranks' buffers differ ({per}); pass one shape and dtype")
            work = list(bufs)
            result = recursive_doubling(work, op.ufunc)
            for b in bufs:
                if b is not result:
                    np.copyto(b, result)
        return self._collective(f"allreduce({op.name})", buf, finish)

    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM) -> None:
        self._wait(self.Iallreduce(sendbuf, recvbuf, op))

    def Allgather(self, sendbuf, recvbuf) -> None:
        send, recv = _bytes(np.ascontiguousarray(sendbuf)), _bytes(recvbuf)

        def finish(slot):
            n = slot.payloads[0][0].size
            for _, out in slot.payloads:
                for r, (s, _) in enumerate(slot.payloads):
                    out[r * n:(r + 1) * n] = s
        self._wait(self._collective("allgather", (send, recv), finish))

    def Iallgatherv(self, sendbuf, recvbuf) -> VRequest:
        send, _ = _spec(sendbuf)
        out, (counts, displs) = _spec(recvbuf)

        def finish(slot):
            for _, o, cnt, dsp in slot.payloads:
                for r, (src, *_rest) in enumerate(slot.payloads):
                    if src.size != cnt[r]:
                        raise VirtualMPIError(f"allgatherv: rank {r} sent {src.size} bytes, {cnt[r]} expected")
                    o[dsp[r]:dsp[r] + cnt[r]] = src
        return self._collective("allgatherv", (send, out, counts, displs), finish)

    def Allgatherv(self, sendbuf, recvbuf) -> None:
        self._wait(self.Iallgatherv(sendbuf, recvbuf))

    def Ibcast(self, buf, root: int = 0) -> VRequest:
        b, _ = _spec(buf)

        def finish(slot):
            src = slot.payloads[root]
            for r, o in enumerate(slot.payloads):
                if o.size != src.size:
                    raise VirtualMPIError(f"bcast: rank {r}'s buffer holds {o.size} bytes, the root's {src.size}")
                if r != root:
                    o[...] = src
        return self._collective(f"bcast(root={root})", b, finish)

    def Bcast(self, buf, root: int = 0) -> None:
        self._wait(self.Ibcast(buf, root))

    def Barrier(self) -> None:
        self._wait(self._collective("barrier", None, lambda slot: None))

    def Ibarrier(self) -> VRequest:
        return self._collective("barrier", None, lambda slot: None)

    def allocate_shared(self, size: int, disp_unit: int) -> VirtualWin:
        """Collective: one buffer for the ranks of this communicator, which must
        all be on one emulated node (the world's ``ranks_per_node``)."""
        def finish(slot):
            nodes = {r // self.world.ranks_per_node for r in self.ctx.ranks}
            if len(nodes) > 1:
                raise VirtualMPIError(f"Win.Allocate_shared over ranks {self.ctx.ranks} of different emulated nodes "
                                      f"({self.world.ranks_per_node} rank(s) per node): they share no memory")
            sizes = [s for s, _ in slot.payloads]
            offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
            win = VirtualWin(np.zeros(offsets[-1], np.uint8), offsets, disp_unit)
            for r in slot.requests:
                r.value = win
        return self._wait(self._collective("win_allocate_shared", (size, disp_unit), finish))

    # pickled objects: each rank unpickles its own copy, as after a real message
    def bcast(self, obj, root: int = 0):
        data = pickle.dumps(obj) if self.rank == root else None

        def finish(slot):
            for r in slot.requests:
                r.value = slot.payloads[root]
        return pickle.loads(self._wait(self._collective(f"bcast_obj(root={root})", data, finish)))

    def allgather(self, obj) -> list:
        def finish(slot):
            for r in slot.requests:
                r.value = list(slot.payloads)
        return [pickle.loads(b) for b in self._wait(self._collective("allgather_obj", pickle.dumps(obj), finish))]

    def gather(self, obj, root: int = 0):
        def finish(slot):
            slot.requests[root].value = list(slot.payloads)
        got = self._wait(self._collective(f"gather_obj(root={root})", pickle.dumps(obj), finish))
        return [pickle.loads(b) for b in got] if self.rank == root else None

    def allreduce(self, obj, op=MPI.SUM):
        def finish(slot):
            data = pickle.dumps(binomial([pickle.loads(b) for b in slot.payloads], op.py))
            for r in slot.requests:
                r.value = data
        return pickle.loads(self._wait(self._collective(f"allreduce_obj({op.name})", pickle.dumps(obj), finish)))

    # --- new communicators ---------------------------------------------------------------
    def Split(self, color: int = 0, key: int = 0) -> VirtualComm | None:
        """Ranks of one ``color`` form a new communicator, ordered by (key, rank);
        ``MPI.UNDEFINED`` gets None."""
        def finish(slot):
            groups: dict = {}
            for r, (c, k) in enumerate(slot.payloads):
                if c != MPI.UNDEFINED:
                    groups.setdefault(c, []).append((k, r))
            for members in groups.values():
                members.sort()
                ctx = self.world.new_context([self.ctx.ranks[r] for _, r in members])
                for i, (_, r) in enumerate(members):
                    slot.requests[r].value = (ctx, i)
        got = self._wait(self._collective("split", (int(color), int(key)), finish))
        return None if got is None else VirtualComm(self.world, *got)

    def Split_type(self, split_type, key: int = 0) -> VirtualComm:
        """The ranks of this rank's (emulated) node: world ranks ``r // ranks_per_node``."""
        return self.Split(self.world_rank // self.world.ranks_per_node, key)

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None, destweights=None,
                                   info=None, reorder: bool = False) -> VirtualGraphComm:
        def finish(slot):
            ctx = self.world.new_context(self.ctx.ranks)
            for r in slot.requests:
                r.value = ctx
        ctx = self._wait(self._collective("dist_graph_create", None, finish))
        return VirtualGraphComm(self.world, ctx, self.rank, list(sources), list(destinations))

    # --- point to point: matched by (source, destination, tag) in posting order --------
    def _match(self, key, mine: deque, theirs: dict, entry) -> tuple | None:
        """Under the world lock: the oldest waiting counterpart of ``key`` (or
        queue ``entry`` in ``mine`` and return None)."""
        q = theirs.get(key)
        if q:
            other = q.popleft()
            if not q:
                del theirs[key]
            return other
        mine.append(entry)
        return None

    @staticmethod
    def _deliver(data: np.ndarray, send_req: VRequest, out: np.ndarray, recv_req: VRequest, source: int) -> None:
        """Copy a matched message into its receive buffer; complete both."""
        recv_req.count, recv_req.source = min(data.size, out.size), source
        if data.size > out.size:
            send_req.complete()
            recv_req.complete(VirtualMPIError(f"message truncated: rank {source} sent {data.size} bytes into a "
                                               f"receive buffer of {out.size}"))
            return
        out[:data.size] = data
        send_req.complete()
        recv_req.complete()

    def _post(self, key, mine: dict, theirs: dict, buf: np.ndarray) -> tuple[VRequest, tuple | None]:
        """Post one side of a message: under the world lock, match it with the
        oldest waiting counterpart of ``key`` in ``theirs`` or queue it in
        ``mine``; when it waits and ranks have already returned, fail the calls
        those ranks can no longer answer (their rank named). Returns the new
        request and the counterpart's ``(buffer, request)``, or None."""
        world = self.world
        world.check()
        req = VRequest(world)
        failed = []
        with world.lock:
            got = self._match(key, mine.setdefault(key, deque()), theirs, (buf, req))
            if got is None and world.finished:
                failed = self.ctx.abandoned(world.finished)
        for r, error in failed:
            r.complete(error)
        return req, got

    def _isend(self, data: np.ndarray, dest: int, tag) -> VRequest:
        req, got = self._post((self.rank, int(dest), tag), self.ctx.sends, self.ctx.recvs, data)
        if got is not None:
            self._deliver(data, req, got[0], got[1], self.rank)
        return req

    def _irecv(self, out: np.ndarray, source: int, tag) -> VRequest:
        req, got = self._post((int(source), self.rank, tag), self.ctx.recvs, self.ctx.sends, out)
        if got is not None:
            self._deliver(got[0], got[1], out, req, int(source))
        return req

    def Isend(self, buf, dest: int, tag: int = 0) -> VRequest:
        return self._isend(_spec(buf)[0], dest, ("p2p", tag))

    def Irecv(self, buf, source: int, tag: int = 0) -> VRequest:
        return self._irecv(_spec(buf)[0], source, ("p2p", tag))

    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = 0, recvtag: int = 0,
                 status=None) -> None:
        rreq = self.Irecv(recvbuf, source, recvtag)
        sreq = self.Isend(sendbuf, dest, sendtag)
        sreq.Wait()
        rreq.Wait(status)


class VirtualGraphComm(VirtualComm):
    """A virtual ``MPI_Dist_graph_create_adjacent`` communicator: neighbour
    collectives send to ``destinations`` and receive from ``sources`` (in
    that order), matched by the call's sequence number."""

    def __init__(self, world, ctx, rank, sources, destinations):
        super().__init__(world, ctx, rank)
        self.sources, self.destinations = sources, destinations
        self._nseq = 0

    def Ineighbor_allgather(self, sendbuf, recvbuf) -> VRequest:
        send, n = _spec(sendbuf)
        out, m = _spec(recvbuf)
        tag = ("neighbor", self._nseq)
        self._nseq += 1
        reqs = [self._irecv(out[k * m:(k + 1) * m], s, tag) for k, s in enumerate(self.sources)]
        reqs += [self._isend(send, d, tag) for d in self.destinations]
        return _Group(self.world, reqs)

    def Neighbor_allgather(self, sendbuf, recvbuf) -> None:
        self.Ineighbor_allgather(sendbuf, recvbuf).Wait()


class _Group:
    """Several requests that complete together (a neighbour collective)."""

    def __init__(self, world, reqs):
        self.world, self.reqs = world, reqs

    def Test(self, status=None) -> bool:
        return VRequest.Testall(self.reqs)

    def Wait(self, status=None) -> None:
        VRequest.Waitall(self.reqs)
