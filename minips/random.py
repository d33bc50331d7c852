"""The one random-number generator of a minips process.

Weight initialisation and dropout draw from it, so ``minips.random.seed(s)``
fixes a run; checkpoints save and restore its state (:func:`get_state`) so a
resumed run draws the same numbers. ``np.random.Generator`` (PCG64) is used.
"""
from __future__ import annotations

import numpy as np

__all__ = ["seed", "generator", "get_state", "set_state"]

_gen = np.random.default_rng(0)


def seed(s: int) -> None:
    """Reset the generator to ``np.random.default_rng(s)``."""
    global _gen
    _gen = np.random.default_rng(s)


def generator() -> np.random.Generator:
    """The current generator (do not keep it across :func:`seed` calls)."""
    return _gen


def get_state() -> dict:
    """The generator's state, a JSON-serialisable dict (for checkpoints)."""
    return _gen.bit_generator.state


def set_state(state: dict) -> None:
    """Restore a state from :func:`get_state`."""
    _gen.bit_generator.state = state
