"""The base class of the image classifiers (MLP, ConvNet): logits and their loss."""
from __future__ import annotations

from .. import nn
from ..tensor import Tensor

__all__ = ["Classifier"]


class Classifier(nn.Module):
    """A module mapping inputs to class logits, with the classification loss."""

    def loss(self, batch):
        """Mean cross-entropy of ``self(x)`` against labels, for ``batch = (x, y)``:
        x float32 (N, ...), y int64 (N,)."""
        x, y = batch
        return nn.cross_entropy(self(Tensor(x)), y)
