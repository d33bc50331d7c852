"""The one random-number generator of a minips rank.

Weight initialisation and dropout draw from it, so ``minips.random.seed(s)``
fixes a run; checkpoints save and restore its state (:func:`get_state`) so a
resumed run draws the same numbers. ``np.random.Generator`` (PCG64) is used.

Each thread has its own generator (``default_rng(0)`` until seeded), so the
ranks of a virtual job (:mod:`minips.distributed.comm.virtual`, threads of one
process) each draw from their own, as processes under ``mpiexec`` do. A plain
process uses its main thread's.
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["seed", "generator", "get_state", "set_state"]

_local = threading.local()  # .gen: this thread's generator


def seed(s: int) -> None:
    """Reset the calling thread's generator to ``np.random.default_rng(s)``."""
    _local.gen = np.random.default_rng(s)


def generator() -> np.random.Generator:
    """The calling thread's current generator (do not keep it across :func:`seed` calls)."""
    gen = getattr(_local, "gen", None)
    if gen is None:
        gen = _local.gen = np.random.default_rng(0)
    return gen


def get_state() -> dict:
    """The generator's state, a JSON-serialisable dict (for checkpoints)."""
    return generator().bit_generator.state


def set_state(state: dict) -> None:
    """Restore a state from :func:`get_state`."""
    generator().bit_generator.state = state
