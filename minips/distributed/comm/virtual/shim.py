"""The part of ``mpi4py.MPI`` that Comm uses, for virtual ranks: constants, reduction ops, Status, requests, windows.

:class:`MPI` stands in for the ``mpi4py.MPI`` module (``VIRTUAL`` tells
:class:`~minips.distributed.comm.Comm` which it has); :class:`VRequest` is a
pending virtual operation, completed by the rank that matches it
(:mod:`.communicator`) or by the world's abort (:mod:`.world`).
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["MPI", "Status", "VRequest", "VirtualMPIError", "VirtualWin"]


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

    def __init__(self, world):  # the job's World (.world)
        self.world = world
        self.event = threading.Event()
        self.error = None
        self.value = None
        self.count = 0
        self.source = -1
        world.track(self)

    def complete(self, error=None) -> None:
        """Mark it complete (with ``error`` to raise in its owner, or None): its waiter wakes."""
        self.error = error
        self.event.set()
        self.world.untrack(self)

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
        if not hasattr(comm, "allocate_shared"):  # a VirtualComm (.communicator)
            raise VirtualMPIError("Win.Allocate_shared needs the node's virtual communicator (comm=...)")
        return comm.allocate_shared(int(size), int(disp_unit))


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
