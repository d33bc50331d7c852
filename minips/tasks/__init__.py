"""A task bundles a data set with how to evaluate a model on it.

``make_task(data_name)`` returns an object with ``kind``, ``train_arrays``
(inputs, targets: what the batch loader slices), ``evaluate(model, comm)`` and
``samples(batch)``. Image classification is in :mod:`.classification`, video
captioning in :mod:`.captioning`. Tasks read the data layer; models are passed
in, never imported.

The table :data:`TASKS` below is the one place a data-set name is bound to a
task of its own (no registration by import side effect).
"""
from __future__ import annotations

from .captioning import CaptioningTask, make_captioning_task
from .classification import ClassificationTask

__all__ = ["ClassificationTask", "CaptioningTask", "make_task", "task_names", "TASKS"]

#: data-set name -> task factory(name); names not listed are image .h5 files.
TASKS: dict = {
    "moving-fmnist-captions": make_captioning_task,
}


def make_task(data: str):
    """The task for data set ``data`` (a name or an .h5 path).

    Raises:
        FileNotFoundError: see :func:`minips.data.resolve_h5`; for an unknown
            name or missing .h5 path the message lists every ``--data`` name.
    """
    if data in TASKS:
        return TASKS[data](data)
    from ..data import UnknownDataError, load_image_dataset
    try:
        return ClassificationTask(load_image_dataset(data))
    except UnknownDataError as e:  # the data layer lists only image sets; add the tasks' names
        raise e.with_names(TASKS) from None


def task_names() -> list[str]:
    """The data set names that have their own task."""
    return sorted(TASKS)
