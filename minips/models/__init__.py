"""Models by name. Every model has ``loss(batch) -> scalar Tensor`` so the
Trainer and the distributed algorithms drive all of them the same way.

The table :data:`MODELS` below is the one place a model name is bound to its
builder: adding a model means writing its file and adding one line here (no
registration by import side effect, so what exists can be read off this file).
Models are built from layers of :mod:`minips.nn`; a task (:mod:`minips.tasks`)
tells the builder the input shape, the classes or the vocabulary.
"""
from __future__ import annotations

from .captioner import VideoCaptioner, build_captioner
from .classifier import Classifier
from .convnet import ConvNet, build_convnet
from .mlp import MLP, build_mlp

__all__ = ["MODELS", "build_model", "Classifier", "MLP", "ConvNet", "VideoCaptioner"]

#: name -> builder(task) returning a Module with ``loss(batch)``; the builder
#: raises ValueError when the task's data does not fit the model.
MODELS: dict = {
    "mlp": build_mlp,
    "convnet": build_convnet,
    "captioner": build_captioner,
}


def build_model(name: str, task):
    """Build model ``name`` for ``task`` (it supplies input shape / classes / vocabulary).

    Raises:
        ValueError: unknown model (valid names listed), or a model that does not
            fit the task's data (says which data it needs).
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODELS))}")
    return MODELS[name](task)
