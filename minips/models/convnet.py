"""The small CNN for Fashion-MNIST (``--model convnet``)."""
from __future__ import annotations

import numpy as np

from ..nn import Conv2d, Dropout, Flatten, Linear, MaxPool2d, ReLU, Sequential, init
from .classifier import Classifier

__all__ = ["ConvNet", "build_convnet"]


class ConvNet(Classifier):
    """A small CNN for 28x28 images (Fashion-MNIST)::

        conv(C->32, 3x3, pad 1) - ReLU - maxpool 2
        conv(32->64, 3x3, pad 1) - ReLU - maxpool 2
        flatten (64 * H/4 * W/4 = 3136 for 28x28) - Linear(->128) - ReLU - Dropout - Linear(128->classes)

    Args:
        in_channels: image channels (1 for Fashion-MNIST).
        image_size: (H, W) of the input, each >= 4.
        num_classes: outputs (logits).
        dropout: drop probability before the last layer (default 0.25).
        widths: channels of the two convolutions; hidden: width of the first Linear.

    Every weight starts as U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's
    default scale. With the He scale of :class:`~minips.nn.Linear` the first
    logits are about 3x too large (initial loss 6.9 instead of ln 10 = 2.3)
    and 3 epochs on fashion-mnist-mini reached 0.836 test accuracy instead of
    0.86 (measured, single process, seed 0; docs/kernels.md).

    Input float32 (N, in_channels, H, W) -> logits (N, num_classes). About
    422k parameters at the defaults (the first Linear holds 401k of them).
    """

    def __init__(self, in_channels: int = 1, image_size=(28, 28), num_classes: int = 10,
                 dropout: float = 0.25, widths=(32, 64), hidden: int = 128):
        super().__init__()
        H, W = image_size
        if H < 4 or W < 4:
            raise ValueError(f"ConvNet: images must be at least 4x4 (two 2x2 poolings), got {H}x{W}")
        c1, c2 = widths
        self.features = Sequential(
            Conv2d(in_channels, c1, 3, padding=1, init_mode="torch"), ReLU(), MaxPool2d(2),
            Conv2d(c1, c2, 3, padding=1, init_mode="torch"), ReLU(), MaxPool2d(2),
            Flatten())
        fc1, fc2 = Linear(c2 * (H // 4) * (W // 4), hidden), Linear(hidden, num_classes)
        for fc in (fc1, fc2):         # the same scale as the convolutions (see above)
            fc.weight.data[...] = init.uniform(fc.weight.shape, 1 / np.sqrt(fc.in_features))
        self.classifier = Sequential(fc1, ReLU(), Dropout(dropout), fc2)

    def forward(self, x):
        return self.classifier(self.features(x))


def build_convnet(task) -> ConvNet:
    """A ConvNet at the defaults for a classification task's (C, H, W) images and classes.

    Raises:
        ValueError: the task is not image classification with (C, H, W) inputs.
    """
    shape = tuple(getattr(task, "input_shape", ()))
    if getattr(task, "kind", None) != "classification" or len(shape) != 3:
        raise ValueError("model 'convnet' needs an image classification data set with (C, H, W) "
                         "images (fashion-mnist-mini or fashion-mnist)")
    return ConvNet(shape[0], shape[1:], task.num_classes)
