"""Loss functions."""
from __future__ import annotations

import numpy as np

from .. import ops
from ..autograd import Function

__all__ = ["cross_entropy", "sequence_cross_entropy"]


def cross_entropy(logits, labels):
    """Mean softmax cross-entropy of logits (N, C) against integer labels (N,).

    Fused and numerically stable; see :func:`minips.ops.softmax_cross_entropy`.

    Raises:
        ValueError: labels out of range [0, C), wrong count, or not integers.
    """
    return ops.softmax_cross_entropy(logits, labels)


# --- sequences ----------------------------------------------------------------------
class MaskedCrossEntropy(Function):
    """Mean of ``-log softmax(logits)[target]`` over the positions whose target
    is not the padding id; padded positions get zero loss and zero gradient."""

    def forward(self, logits, *, targets, pad_id):
        flat = logits.reshape(-1, logits.shape[-1])
        t = targets.reshape(-1)
        self.mask = t != pad_id
        self.count = int(self.mask.sum())
        shifted = flat - flat.max(axis=1, keepdims=True)  # exp never overflows
        log_z = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        self.log_probs = shifted - log_z
        picked = self.log_probs[np.arange(len(t)), t]
        self.shape, self.targets = logits.shape, t
        return np.asarray(-(picked * self.mask).sum() / self.count, dtype=logits.dtype)

    def backward(self, g):
        # d/dz of -log softmax(z)[y] is softmax(z) - onehot(y); mask, then mean.
        grad = np.exp(self.log_probs)
        grad[np.arange(len(self.targets)), self.targets] -= 1
        grad *= (self.mask * (float(g) / self.count))[:, None]
        return grad.reshape(self.shape).astype(self.log_probs.dtype, copy=False)


def sequence_cross_entropy(logits, targets, pad_id: int = 0):
    """Cross-entropy of a batch of token sequences, ignoring padding.

    Args:
        logits: Tensor (..., V), e.g. (L, N, V) decoder outputs.
        targets: integer array (...) with the logits' leading shape, e.g. (L, N);
            positions equal to ``pad_id`` are ignored.
        pad_id: the padding token id (default 0).

    Returns:
        A scalar Tensor: the sum of the per-token losses (nats) divided by the
        number of real (non-padding) tokens, so a batch's loss does not depend
        on how much padding it carries.

    Raises:
        ValueError: shapes do not match, targets are not integers or fall
            outside [0, V), or every target is padding (nothing to learn from).
    """
    from ..tensor import Tensor
    if isinstance(targets, Tensor):
        targets = targets.data
    targets = np.asarray(targets)
    shape = tuple(logits.shape)
    if targets.shape != shape[:-1]:
        raise ValueError(f"sequence_cross_entropy: logits {shape} need targets of shape {shape[:-1]}, "
                         f"got {targets.shape}")
    if targets.dtype.kind not in "iu":
        raise ValueError(f"sequence_cross_entropy: targets must be integer token ids, got dtype {targets.dtype}")
    vocab = shape[-1]
    real = targets[targets != pad_id]
    if real.size == 0:
        raise ValueError("sequence_cross_entropy: every target is padding; the batch has no tokens to score")
    if real.min() < 0 or real.max() >= vocab:
        bad = real[(real < 0) | (real >= vocab)][0]
        raise ValueError(f"sequence_cross_entropy: target token id {bad} is outside [0, {vocab}) "
                         "(the logits' last dimension)")
    return MaskedCrossEntropy.apply(logits, targets=targets.astype(np.int64), pad_id=pad_id)
