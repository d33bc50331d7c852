"""What the ranks of one virtual job share: the scheduler of their threads, abort state, calls in progress, signals.

:class:`World` holds ``cores`` compute slots (a :class:`FairSemaphore`): a
rank holds one while it runs and gives it back while it waits, so at most
``cores`` ranks compute at once and a rank never waits for a slot held by a
rank that waits for it. Each communicator's shared side is a
:class:`Context` (its collectives in progress, one :class:`Slot` per call,
and its unmatched messages). A :class:`SignalRelay` hands the signals the
main thread receives to the ranks' handlers.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager

from ..request import JobAborted
from .shim import VirtualMPIError

__all__ = ["Context", "FairSemaphore", "SignalRelay", "Slot", "World"]


class SignalRelay:
    """Signal handlers that virtual ranks register (they are not the main
    thread, so ``signal.signal`` is not theirs to call); the main thread,
    which receives SIGINT, SIGTERM and SIGUSR1, calls every registered handler, as
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


class Context:
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


class Slot:
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
        self.root = Context(range(size))
        self.contexts = [self.root]

    def new_context(self, world_ranks) -> Context:
        ctx = Context(world_ranks)
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
            req.complete(error)

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

    def track(self, req) -> None:
        """Note a pending request (:class:`~.shim.VRequest`), so that an abort can wake its waiter."""
        with self.lock:
            self._live.add(req)

    def untrack(self, req) -> None:
        """Forget a request that completed."""
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
