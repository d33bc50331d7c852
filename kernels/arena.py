"""Work buffers reused by shape: a small arena per layer (and per thread).

A training step of a CNN needs the same large arrays at every step: the patch
matrix of each convolution, its output, the gradients. Allocating them afresh
costs more than it seems: a large ``np.empty`` is mapped from the operating
system, and the first write to each 4 KiB page takes a page fault (measured
on the ConvNet: a first-layer forward took 5.7 ms on fresh memory instead of
1.5 ms). An :class:`Arena` keeps the arrays it handed out and gives one back
when the same shape and dtype is asked for again **and nobody uses it any
more**.

"Nobody uses it" is decided by CPython's reference count: every view of a
NumPy array (a reshape, a transpose, a Tensor holding it, a slice of a slice)
keeps a reference to the array that owns the memory. So when the arena's own
list is the only holder left, no view of that memory exists anywhere and it
can be rewritten. No lifetime rules to follow by hand: an output kept by the
caller (a Tensor in the graph, an activation someone saved) is simply not
reused, and the arena allocates another one.

Arenas are owned by layer instances and looked up per thread
(:func:`arena_for`), never module globals: ranks that run as threads of one
process, each with its own model, never share a buffer.

Memory: an arena keeps at most ``max_shapes`` different (shape, dtype) keys,
the least recently used are dropped (evaluation at another batch size adds
its shapes, then they age out).
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict

import numpy as np

__all__ = ["Arena", "arena_for", "NO_ARENA"]


class Arena:
    """Arrays reused by (shape, dtype).

    Attributes:
        allocations: how many arrays were allocated (not reused) so far.
        allocated_bytes: their total size in bytes.
    """

    def __init__(self, max_shapes: int = 16):
        self.max_shapes = max_shapes
        self._pool: OrderedDict = OrderedDict()    # (shape, dtype) -> [arrays]
        self.allocations = 0
        self.allocated_bytes = 0

    def take(self, shape, dtype) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype`` that no one else
        references; its content is arbitrary (as ``np.empty``)."""
        key = (tuple(int(s) for s in shape), np.dtype(dtype).str)
        arrays = self._pool.get(key)
        if arrays is None:
            arrays = self._pool[key] = []
            while len(self._pool) > self.max_shapes:
                self._pool.popitem(last=False)      # forget the least recently used shape
        else:
            self._pool.move_to_end(key)
            for a in arrays:
                # references: the list, the loop variable, getrefcount's argument
                if sys.getrefcount(a) == 3:
                    return a
        a = np.empty(key[0], dtype)
        arrays.append(a)
        self.allocations += 1
        self.allocated_bytes += a.nbytes
        return a

    def zeros(self, shape, dtype) -> np.ndarray:
        """As :meth:`take`, filled with zeros."""
        a = self.take(shape, dtype)
        a.fill(0)
        return a

    def __deepcopy__(self, memo):     # a copied model gets its own, empty arena
        return Arena(self.max_shapes)

    def __getstate__(self):           # pickling keeps no buffers
        return {"max_shapes": self.max_shapes}

    def __setstate__(self, state):
        self.__init__(state["max_shapes"])


class _NoArena:
    """Allocates every time (the functional forms and the kernel API use it,
    so their results never alias a later call's)."""

    allocations = 0

    @staticmethod
    def take(shape, dtype):
        return np.empty(shape, dtype)

    @staticmethod
    def zeros(shape, dtype):
        return np.zeros(shape, dtype)


#: The allocator of calls made without an arena: plain ``np.empty``.
NO_ARENA = _NoArena()


def arena_for(owner) -> Arena:
    """The arena of ``owner`` (a layer) for the calling thread, created on
    first use and stored in ``owner.__dict__['_arenas']``."""
    arenas = owner.__dict__.get("_arenas")
    if arenas is None:
        arenas = {}
        object.__setattr__(owner, "_arenas", arenas)
    tid = threading.get_ident()
    a = arenas.get(tid)
    if a is None:
        a = arenas[tid] = Arena()
    return a
