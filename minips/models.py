"""Models by name: ``mlp`` (here), ``convnet`` and ``captioner`` (registered by
their modules). Every model has ``loss(batch) -> scalar Tensor`` so the Trainer
and the distributed algorithms drive all of them the same way.
"""
from __future__ import annotations

from . import nn

__all__ = ["MODELS", "register_model", "build_model", "Classifier", "MLP"]

#: name -> factory(task) returning a Module with ``loss(batch)``.
MODELS: dict = {}


def register_model(name: str):
    """Decorator: register ``factory(task) -> Module`` under ``name``."""
    def deco(factory):
        MODELS[name] = factory
        return factory
    return deco


def build_model(name: str, task):
    """Build model ``name`` for ``task`` (it supplies input shape / classes / vocabulary).

    Raises:
        ValueError: unknown model (valid names listed), or a model that does not
            fit the task's data (says which data it needs).
    """
    _load_optional()
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name](task)


def _load_optional():
    import importlib
    for mod in ("minips.nn.conv", "minips.captioning"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


class Classifier(nn.Module):
    """A module mapping inputs to class logits, with the classification loss."""

    def loss(self, batch):
        """Mean cross-entropy of ``self(x)`` against labels, for ``batch = (x, y)``:
        x float32 (N, ...), y int64 (N,)."""
        from .tensor import Tensor
        x, y = batch
        return nn.cross_entropy(self(Tensor(x)), y)


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


@register_model("mlp")
def _mlp(task):
    if getattr(task, "kind", None) != "classification":
        raise ValueError("model 'mlp' needs an image classification data set "
                         "(fashion-mnist-mini or fashion-mnist)")
    import numpy as np
    return MLP(int(np.prod(task.input_shape)), (256,), task.num_classes)
