"""The multi-layer perceptron for image classification (``--model mlp``)."""
from __future__ import annotations

import numpy as np

from .. import nn
from .classifier import Classifier

__all__ = ["MLP", "build_mlp"]


class MLP(Classifier):
    """Multi-layer perceptron: Flatten -> Linear -> ReLU -> ... -> Linear.

    Args:
        in_features: inputs after flattening (784 for 1x28x28).
        hidden: hidden layer widths, e.g. (256,).
        num_classes: outputs (logits).
    Input: float32 (N, C, H, W) or (N, in_features). Output: (N, num_classes).
    """

    def __init__(self, in_features: int = 784, hidden=(256,), num_classes: int = 10):
        super().__init__()
        layers, d = [nn.Flatten()], in_features
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, num_classes, init_mode="xavier"))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build_mlp(task) -> MLP:
    """An MLP (one hidden layer of 256) for a classification task's images and classes.

    Raises:
        ValueError: the task is not image classification.
    """
    if getattr(task, "kind", None) != "classification":
        raise ValueError("model 'mlp' needs an image classification data set "
                         "(fashion-mnist-mini or fashion-mnist)")
    return MLP(int(np.prod(task.input_shape)), (256,), task.num_classes)
