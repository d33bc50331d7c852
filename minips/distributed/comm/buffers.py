"""Buffers as MPI sees them: the byte view of an array, and read-only locks while a request is in flight.

The array primitives move bytes (``MPI_BYTE``, :func:`as_bytes`), so any
dtype works without an MPI datatype for it. While a request is pending, the
arrays it reads and writes are made read-only (``ndarray.flags.writeable =
False``, :class:`BufferLocks`): code that writes a gradient in flight fails
loudly instead of silently corrupting the average.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BufferLocks", "as_bytes"]


def as_bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of a C-contiguous array, as a flat uint8 view (no copy). The
    array primitives move bytes (``MPI_BYTE``): nothing is reduced, so any
    dtype works, float16 and bool included, without an MPI datatype for it."""
    return a.reshape(-1).view(np.uint8)


class BufferLocks:
    """The arrays that pending requests hold read-only, with a count per array
    (one :class:`BufferLocks` per :class:`~minips.distributed.comm.Comm`)."""

    def __init__(self):
        self._locks: dict[int, list] = {}  # id(array) -> [array, requests holding it read-only]

    def lock(self, arrays) -> list:
        """Make ``arrays`` read-only while a request uses them; returns the ones
        this request holds. A count per array lets two requests share one (it is
        writable again when the last completes); an array that was read-only for
        another reason is left alone, and never made writable by us."""
        held = []
        for a in arrays:
            entry = self._locks.get(id(a))
            if entry is None:
                if not a.flags.writeable:
                    continue
                a.flags.writeable = False
                entry = self._locks[id(a)] = [a, 0]
            entry[1] += 1
            held.append(a)
        return held

    def unlock(self, arrays) -> None:
        for a in arrays:  # in locking order: a buffer before the views into it
            entry = self._locks[id(a)]
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[id(a)]
                a.flags.writeable = True
