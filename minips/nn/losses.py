"""Loss functions."""
from __future__ import annotations

from .. import ops

__all__ = ["cross_entropy"]


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of logits (N, C) against integer labels (N,).

    Fused and numerically stable; see :func:`minips.ops.softmax_cross_entropy`.

    Raises:
        ValueError: labels out of range [0, C), wrong count, or not integers.
    """
    return ops.softmax_cross_entropy(logits, labels)
