"""Virtual ranks: the P ranks of one job as threads of this process.

``python -m minips train --virtual-ranks 64`` runs 64 ranks in one process, each
a thread executing the same Trainer step and the same algorithm code as a rank
of ``mpiexec -n 64``. Each rank has its own :class:`~minips.distributed.comm.Comm`,
built on a :class:`VirtualComm`: a communicator that answers the calls of
mpi4py that Comm makes (``Iallreduce``, ``Allgatherv``, ``Create_dist_graph_adjacent``
and its neighbour collectives, ``Isend``/``Irecv``/``Sendrecv``, ``Bcast``/``Ibcast``,
the pickled-object collectives, ``Split_type``, ``Abort``, requests with
``Test``/``Wait``). So the byte accounting, the buffer locking, the checks and
the request life cycle are Comm's own code under both back-ends, and the
algorithms cannot tell them apart. Why beneath Comm and not beside it:
docs/distributed.md, "Virtual ranks".

How a collective completes: the ranks of a communicator call collectives in
the same order (as MPI requires), so the k-th collective call of every rank
belongs to one slot. Each rank deposits its buffer there when it posts; the
rank that arrives last does the work (sums the buffers, copies the blocks) and
writes every rank's receive buffer, then marks every request complete. So a
nonblocking request progresses without being polled; the progress modes are
accepted and call what they call under MPI, but change nothing here.
Two ranks that call different collectives as their k-th get an error on both
(MPI would hang or fail); point-to-point messages match by (source,
destination, tag) in posting order, as MPI's non-overtaking rule says.

Sums are bitwise those of MPICH's recursive doubling (:func:`recursive_doubling`:
the ranks beyond the largest power of two fold into their neighbours, then a
pairwise tree), which MPICH 4-5 uses on one node for every message size we
tested (tests/test_virtual.py checks it against ``mpiexec`` for P = 2..6);
object reductions (``allreduce`` of Python numbers) follow mpi4py's binomial
tree (:func:`binomial`).

Threads and cores: at most ``cores`` ranks compute at once. A rank holds one
of ``cores`` compute slots (a semaphore) while it runs and gives it back
while it waits in a collective or for a message, so a rank never waits for a
slot held by a rank that waits for it. Each rank uses one Numba thread
(``numba.set_num_threads`` is per thread) and BLAS is limited to one thread
for the whole run (OpenBLAS called from many threads at once with more can
abort or return wrong results: OpenBLAS issue 1882, NumPy issue 29391).

Failure: a rank that raises aborts the world (:meth:`World.abort`): every
rank waiting in a call wakes with :class:`~minips.distributed.comm.JobAborted`,
every other rank gets it at its next call, and :func:`run` raises the first
rank's exception in the calling thread, naming the rank. Signals go to the
process's main thread, which relays SIGINT and SIGTERM to every rank that
registered a handler (the stop protocol, :class:`minips.stop.StopAgreement`),
as mpiexec forwards them to every process; with none registered (or at a
second signal) the job is aborted.

Limits: P threads share one interpreter, so pure-Python work (the autograd
graph walk, the algorithms' bookkeeping) is serialised by the GIL; NumPy and
the Numba kernels (``nogil=True``) release it. Measured step times are not
cluster timings (outputs say VIRTUAL); network emulation does not sleep under
virtual ranks (``Comm.delays`` is False), the network only names the model
that projected times use.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager

import numpy as np

from .core import Comm
from .request import JobAborted

__all__ = ["MPI", "VirtualComm", "VirtualMPIError", "World", "SignalRelay", "run", "recursive_doubling", "binomial",
           "MAX_RANKS"]

#: the largest number of virtual ranks accepted (one thread each)
MAX_RANKS = 1024


class VirtualMPIError(RuntimeError):
    """An error MPI would report: a truncated message, collectives that do not
    match, buffers of different sizes in one reduction."""


class _Constant:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"MPI.{self.name}"


class _Op:
    """A reduction: ``ufunc`` on arrays, ``py`` on Python objects."""

    def __init__(self, name, ufunc, py):
        self.name, self.ufunc, self.py = name, ufunc, py

    def __repr__(self):
        return f"MPI.{self.name}"


class Status:
    """``MPI.Status`` of a receive: ``Get_count()`` is the bytes received."""

    def __init__(self):
        self.count, self.source, self.tag = 0, -1, -1

    def Get_count(self, datatype=None) -> int:
        return self.count


class VRequest:
    """A pending virtual operation (what ``mpi4py.MPI.Request`` is to MPI).

    It completes when its slot or message is matched; ``error`` is then
    raised by :meth:`Test`/:meth:`Wait` in the rank that owns it, and
    ``value`` holds what a collective returns to that rank.
    """

    __slots__ = ("world", "event", "error", "value", "count", "source", "__weakref__")

    def __init__(self, world: World):
        self.world = world
        self.event = threading.Event()
        self.error = None
        self.value = None
        self.count = 0
        self.source = -1
        world._track(self)

    def _complete(self, error=None) -> None:
        self.error = error
        self.event.set()
        self.world._untrack(self)

    def _raise(self):
        if self.error is not None:
            raise self.error

    def Test(self, status=None) -> bool:
        self.world.check()
        if not self.event.is_set():
            self.world.poll_yield()  # a rank polling in a loop must let the ranks it waits for compute
            return False
        self._raise()
        if status is not None:
            status.count, status.source = self.count, self.source
        return True

    def Wait(self, status=None) -> None:
        self.world.wait(self.event)
        self._raise()
        if status is not None:
            status.count, status.source = self.count, self.source

    @staticmethod
    def Testall(requests) -> bool:
        done = True
        for r in requests:
            done = r.Test() and done
        return done

    @staticmethod
    def Waitall(requests) -> None:
        for r in requests:
            r.Wait()


class VirtualWin:
    """A shared-memory window of an emulated node (``MPI.Win.Allocate_shared``):
    one NumPy buffer that every rank of the node sees; rank r's segment
    starts where rank r-1's ends, as in MPI's default contiguous layout."""

    def __init__(self, memory: np.ndarray, offsets: list, disp_unit: int):
        self.memory, self.offsets, self.disp_unit = memory, offsets, disp_unit

    def Shared_query(self, rank: int):
        """``(segment of rank, disp_unit)``: the segment as a uint8 array."""
        return self.memory[self.offsets[rank]:self.offsets[rank + 1]], self.disp_unit

    def Free(self) -> None:
        self.memory = None


class _Win:
    """``MPI.Win``: only ``Allocate_shared``, a collective over ``comm``."""

    @staticmethod
    def Allocate_shared(size: int, disp_unit: int = 1, info=None, comm=None) -> VirtualWin:
        if not isinstance(comm, VirtualComm):
            raise VirtualMPIError("Win.Allocate_shared needs the node's virtual communicator (comm=...)")
        return comm._allocate_shared(int(size), int(disp_unit))


class MPI:
    """The part of ``mpi4py.MPI`` that :class:`~minips.distributed.comm.Comm`
    uses, for virtual communicators (``VIRTUAL`` tells Comm which it has)."""

    VIRTUAL = True
    COMM_NULL = None  # Split's answer to MPI.UNDEFINED
    Win = _Win
    IN_PLACE = _Constant("IN_PLACE")
    BYTE = _Constant("BYTE")
    SUM = _Op("SUM", np.add, lambda a, b: a + b)
    MAX = _Op("MAX", np.maximum, max)
    MIN = _Op("MIN", np.minimum, min)
    COMM_TYPE_SHARED = 1
    UNDEFINED = -32766
    Status = Status
    Request = VRequest
    Exception = VirtualMPIError

    @staticmethod
    def Get_library_version() -> str:
        return "VIRTUAL ranks (threads of one process, no MPI)"


# --- the order of reductions -------------------------------------------------------------
def recursive_doubling(arrays: list, ufunc) -> np.ndarray:
    """Reduce ``arrays`` (equal shapes and dtypes) in MPICH's recursive-doubling
    order, in place: with ``pof2`` the largest power of two <= P and
    ``rem = P - pof2``, ranks 2i and 2i+1 (i < rem) combine first, then the
    ``pof2`` partial results combine pairwise, level by level. The inputs are
    used as scratch; returns the array that holds the result (one of them).
    Each combination is one ``ufunc(a, b)``, commutative, so the result is
    bitwise MPICH's on every rank."""
    P = len(arrays)
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    level = []
    for i in range(rem):
        ufunc(arrays[2 * i], arrays[2 * i + 1], out=arrays[2 * i])
        level.append(arrays[2 * i])
    level += arrays[2 * rem:]
    while len(level) > 1:
        for j in range(0, len(level), 2):
            ufunc(level[j], level[j + 1], out=level[j])
        level = level[::2]
    return level[0]


def binomial(values: list, fn):
    """Reduce Python objects in mpi4py's order for ``comm.allreduce(obj)``: a
    binomial tree rooted at rank 0 (rank v adds rank v + mask, mask = 1, 2, 4, ...)."""
    res = list(values)
    mask = 1
    while mask < len(res):
        for v in range(0, len(res), 2 * mask):
            if v + mask < len(res):
                res[v] = fn(res[v], res[v + mask])
        mask <<= 1
    return res[0]


# --- shared state of one virtual job ----------------------------------------------------
class SignalRelay:
    """Signal handlers that virtual ranks register (they are not the main
    thread, so ``signal.signal`` is not theirs to call); the main thread,
    which receives SIGINT and SIGTERM, calls every registered handler, as
    mpiexec forwards a signal to every process."""

    def __init__(self):
        self._lock = threading.Lock()
        self._handlers: list = []

    def add(self, fn) -> None:
        """Register ``fn(signum, frame)``."""
        with self._lock:
            self._handlers.append(fn)

    def remove(self, fn) -> None:
        with self._lock:
            if fn in self._handlers:
                self._handlers.remove(fn)

    def deliver(self, signum: int, frame=None) -> int:
        """Call every registered handler; returns how many there were."""
        with self._lock:
            handlers = list(self._handlers)
        for fn in handlers:
            fn(signum, frame)
        return len(handlers)


class FairSemaphore:
    """A counting semaphore that hands a released unit to the longest waiting
    thread (first come, first served: a thread that releases and acquires at
    once queues behind the others instead of taking the unit back)."""

    def __init__(self, value: int):
        self._lock = threading.Lock()
        self._value = value
        self._waiters: deque = deque()

    def waiting(self) -> int:
        """How many threads wait for a unit."""
        return len(self._waiters)

    def acquire(self, timeout: float | None = None) -> bool:
        with self._lock:
            if self._value > 0 and not self._waiters:
                self._value -= 1
                return True
            gate = threading.Event()
            self._waiters.append(gate)
        if gate.wait(timeout):
            return True
        with self._lock:
            if gate.is_set():  # handed over just as the wait timed out
                return True
            self._waiters.remove(gate)
            return False

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                self._waiters.popleft().set()  # the unit goes to the first waiter
            else:
                self._value += 1


def _gone(ctx, member: int, what: str) -> VirtualMPIError:
    return VirtualMPIError(f"rank {ctx.ranks[member]} has ended, but this rank waits for it in {what}: every rank "
                           "must make the same collective calls and post a send for every receive")


class _Context:
    """The shared side of one communicator (a world, a node, a graph): its
    member ranks, the collectives in progress by sequence number, and the
    point-to-point messages not yet matched."""

    def __init__(self, world_ranks: list):
        self.ranks = list(world_ranks)
        self.size = len(self.ranks)
        self.slots: dict = {}
        self.sends: dict = {}   # (src, dst, tag) -> deque of (bytes, request)
        self.recvs: dict = {}   # (src, dst, tag) -> deque of (bytes, request)

    def abandoned(self, finished: set) -> list:
        """Under the world lock: (request, error) of every call of this context
        that waits for a rank in ``finished``; their slots and queues are dropped."""
        out = []
        gone = [i for i, r in enumerate(self.ranks) if r in finished]
        for seq, slot in list(self.slots.items()):
            missing = [i for i in gone if slot.kinds[i] is None]
            if missing:
                del self.slots[seq]
                kind = next(k for k in slot.kinds if k is not None)
                out += [(r, _gone(self, missing[0], f"{kind} (call {seq})")) for r in slot.requests if r is not None]
        for queues, who in ((self.recvs, 0), (self.sends, 1)):  # a receive from / a send to a rank that ended
            for key, q in list(queues.items()):
                if key[who] in gone:
                    del queues[key]
                    what = f"a message {'from' if who == 0 else 'to'} rank {self.ranks[key[who]]}"
                    out += [(req, _gone(self, key[who], what)) for _, req in q]
        return out


class _Slot:
    """The k-th collective call of every rank of a context."""

    def __init__(self, size: int):
        self.kinds = [None] * size
        self.payloads = [None] * size
        self.requests = [None] * size
        self.arrived = 0


class World:
    """What the ranks of one virtual job share: compute slots, abort state,
    contexts, the signal relay.

    Args:
        size: the number of ranks P.
        cores: how many ranks may compute at once (compute slots).
        ranks_per_node: ranks per emulated node (``Split_type`` of the shared-
            memory kind groups ranks ``r // ranks_per_node``); default all P.
    """

    #: seconds a rank may keep its compute slot while it polls an incomplete
    #: request when other ranks wait for a slot (a scheduler's time slice)
    QUANTUM_S = 0.02

    def __init__(self, size: int, cores: int, ranks_per_node: int | None = None):
        self.size = size
        self.cores = max(1, int(cores))
        self.ranks_per_node = int(ranks_per_node or size)
        self.lock = threading.Lock()
        self.slots = FairSemaphore(self.cores)
        self.aborted = None  # (rank or None, exit code) once aborted
        self._live: set = set()
        self._thread = threading.local()  # .slot: whether this thread holds a compute slot
        self.signals = SignalRelay()
        self.finished: set = set()  # world ranks whose function returned
        self.root = _Context(range(size))
        self.contexts = [self.root]

    def new_context(self, world_ranks) -> _Context:
        ctx = _Context(world_ranks)
        with self.lock:
            self.contexts.append(ctx)
        return ctx

    def rank_done(self, rank: int) -> None:
        """Rank ``rank`` returned: every call that waits for it now (a collective
        it never joined, a message it never sends or receives) fails, and so
        will every later one, instead of waiting for ever (MPI would hang)."""
        failed = []
        with self.lock:
            self.finished.add(rank)
            for ctx in self.contexts:
                failed += ctx.abandoned(self.finished)
        for req, error in failed:
            req._complete(error)

    # --- abort ---------------------------------------------------------------------
    def check(self) -> None:
        """Raise :class:`JobAborted` when the job was aborted."""
        if self.aborted is not None:
            raise JobAborted()

    def abort(self, rank, code: int) -> bool:
        """End the job: every request still pending completes (its waiter then
        raises JobAborted) and every later call raises it. The first abort wins
        (returns True; later ones return False and change nothing)."""
        with self.lock:
            if self.aborted is not None:
                return False
            self.aborted = (rank, int(code))
            live = list(self._live)
        for r in live:
            r.event.set()
        return True

    def _track(self, req) -> None:
        with self.lock:
            self._live.add(req)

    def _untrack(self, req) -> None:
        with self.lock:
            self._live.discard(req)

    # --- compute slots ---------------------------------------------------------------
    def take_slot(self) -> None:
        """Block until a compute slot is free and take it (the calling rank)."""
        while not self.slots.acquire(timeout=0.25):
            self.check()
        self._thread.slot = True
        self._thread.since = time.perf_counter()

    def poll_yield(self) -> None:
        """Called when the calling rank polls a request that is not complete.
        A rank that spins on ``test()`` (many polls, each less than a
        millisecond after the last) for :attr:`QUANTUM_S` seconds with its
        slot while other ranks wait for one goes to the back of the queue, so
        it cannot keep the ranks it waits for from computing. Polls between
        layers (``--progress poll``) are further apart and keep the slot: a
        rank that gave it up mid-step would keep its activations in memory
        while others run."""
        th, now = self._thread, time.perf_counter()
        th.spins = getattr(th, "spins", 0) + 1 if now - getattr(th, "last_poll", 0.0) < 1e-3 else 0
        th.last_poll = now
        if th.spins >= 50 and getattr(th, "slot", False) and self.slots.waiting() and now - th.since > self.QUANTUM_S:
            th.spins = 0
            self.give_slot()
            self.take_slot()

    def give_slot(self) -> None:
        """Give the calling rank's compute slot back (if it holds one)."""
        if getattr(self._thread, "slot", False):
            self._thread.slot = False
            self.slots.release()

    @contextmanager
    def idle(self):
        """While blocked inside: the calling rank's compute slot is free for another."""
        held = getattr(self._thread, "slot", False)
        if held:
            self.give_slot()
        try:
            yield
        finally:
            if held:
                self.take_slot()

    def wait(self, event: threading.Event) -> None:
        """Wait for ``event`` without holding a compute slot; JobAborted if the job ends."""
        self.check()
        if not event.is_set():
            with self.idle():
                event.wait()
        self.check()


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

    def __init__(self, world: World, ctx: _Context, rank: int):
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
                slot = self.ctx.slots[seq] = _Slot(self.ctx.size)
            slot.kinds[self.rank], slot.payloads[self.rank], slot.requests[self.rank] = kind, payload, req
            slot.arrived += 1
            last = slot.arrived == self.ctx.size
            if last:
                del self.ctx.slots[seq]
            elif world.finished:
                failed = self.ctx.abandoned(world.finished)
        for r, error in failed:
            r._complete(error)
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
                r._complete(error)
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

    def _allocate_shared(self, size: int, disp_unit: int) -> VirtualWin:
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
            send_req._complete()
            recv_req._complete(VirtualMPIError(f"message truncated: rank {source} sent {data.size} bytes into a "
                                               f"receive buffer of {out.size}"))
            return
        out[:data.size] = data
        send_req._complete()
        recv_req._complete()

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
            r._complete(error)
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


# --- running a job ------------------------------------------------------------------------
def _exit_code(e: BaseException) -> int:
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) and e.code else (0 if e.code in (None, 0) else 1)
    if isinstance(e, KeyboardInterrupt):
        return 130
    return 1


@contextmanager
def _one_blas_thread():
    """BLAS limited to one thread for the whole process while the ranks run."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency of the package
        yield
        return
    with threadpool_limits(1):
        yield


@contextmanager
def _relay_signals(world: World):
    """In the main thread: SIGINT and SIGTERM go to the ranks' handlers; with
    none registered, or at a second signal, they abort the job."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []

    def handler(signum, frame):
        if not seen and world.signals.deliver(signum, frame):
            seen.append(signum)
            return
        name = signal.Signals(signum).name
        sys.stderr.write(f"[minips] {name}: ending every virtual rank\n")
        sys.stderr.flush()
        world.abort(None, 128 + signum)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _join(ended, world: World, grace_s: float = 30.0) -> None:
    """Wait until every rank has ended (``ended``: one Event per rank, set when
    its thread leaves); after an abort, give the computing ones ``grace_s``
    seconds to reach their next call (the threads are daemons: one that never
    returns does not keep the process alive). Events, not ``Thread.join``: a
    join interrupted by Ctrl-C can leave ``is_alive()`` wrong."""
    deadline = None
    for e in ended:
        while not e.wait(0.1):
            if world.aborted is not None:
                deadline = deadline or time.monotonic() + grace_s
                if time.monotonic() > deadline:
                    return


def run(size: int, fn, *args, cores: int | None = None, ranks_per_node: int | None = None,
        network=None, progress: str = "poll", allreduce: str = "auto", **kwargs) -> list:
    """Run ``fn(*args, **kwargs)`` on ``size`` virtual ranks (threads of this
    process); returns the list of the ranks' return values, by rank.

    In each rank's thread, :func:`minips.distributed.comm.get_comm` returns
    that rank's own :class:`Comm` (``network`` and ``progress`` as given), the
    random generator of :mod:`minips.random` is the rank's own, the
    environment switches are a copy taken now, Numba runs one thread and BLAS
    one thread; data sets are loaded once and shared read-only
    (:func:`minips.data.shared.shared_data`).

    Args:
        size: ranks P, 1..:data:`MAX_RANKS`.
        fn: the function every rank runs (the same code as under ``mpiexec``).
        cores: ranks computing at once (default: the cores this process may use).
        ranks_per_node: ranks per emulated node (``Comm.local_size``, and the
            node layout of each rank's Comm, as ``--ranks-per-node``); default P.
        network, progress, allreduce: as for :class:`Comm`.

    Raises:
        ValueError: ``size`` out of range, or this process was started by mpiexec,
            or it is already a virtual rank.
        the first failing rank's exception (with a note naming the rank), or
        SystemExit / KeyboardInterrupt when the job was aborted or interrupted.
    """
    from ...data.shared import shared_data
    from ...kernels.threads import cores_on_node
    from . import set_rank_world, in_virtual_rank
    from .mpi import launched_by_mpi
    from ... import environ

    if not isinstance(size, int) or not 1 <= size <= MAX_RANKS:
        raise ValueError(f"virtual ranks must be an integer in 1..{MAX_RANKS}, got {size!r}")
    if launched_by_mpi():
        raise ValueError("--virtual-ranks runs every rank as a thread of one process: start it without mpiexec "
                         "(or drop --virtual-ranks to run one rank per MPI process)")
    if in_virtual_rank():
        raise ValueError("already on a virtual rank: virtual jobs do not nest")
    world = World(size, min(cores or cores_on_node(), size), ranks_per_node)
    results: list = [None] * size
    failures: list = []  # (rank, exception) in the order they happened
    ended = [threading.Event() for _ in range(size)]
    env = dict(os.environ)

    def body(rank: int) -> None:
        comm = None
        try:
            import numba
            numba.set_num_threads(1)  # per thread
            environ.begin_rank(env)
            world.take_slot()
            comm = Comm(VirtualComm(world, world.root, rank), network=network, progress=progress,
                        allreduce=allreduce, ranks_per_node=ranks_per_node)
            set_rank_world(comm)
            results[rank] = fn(*args, **kwargs)
            world.rank_done(rank)
        except JobAborted:
            pass
        except SystemExit as e:
            if e.code not in (None, 0):  # sys.exit(0): the rank ended normally, as a process would
                with world.lock:
                    failures.append((rank, e))
                world.abort(rank, _exit_code(e))
            else:
                world.rank_done(rank)
        except BaseException as e:  # noqa: BLE001 - ends the job, reported by run()
            with world.lock:
                failures.append((rank, e))
            world.abort(rank, _exit_code(e))
        finally:
            if comm is not None:
                comm.close()
            set_rank_world(None)
            environ.end_rank()
            world.give_slot()
            ended[rank].set()

    threads = [threading.Thread(target=body, args=(r,), name=f"minips-rank-{r}", daemon=True) for r in range(size)]
    with _one_blas_thread(), shared_data(), _relay_signals(world):
        try:
            for t in threads:
                t.start()
            _join(ended, world)
        except BaseException:
            world.abort(None, 130)
            _join(ended, world, grace_s=10.0)
            raise
    if failures:
        rank, exc = failures[0]
        if not isinstance(exc, SystemExit):
            exc.add_note(f"(raised on virtual rank {rank} of {size}; the other ranks were ended)")
        raise exc
    if world.aborted is not None:
        raise SystemExit(world.aborted[1])
    return results
