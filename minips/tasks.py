"""A task bundles a data set with how to evaluate a model on it.

``make_task(data_name)`` returns an object with ``kind``, ``train_arrays``
(inputs, targets: what the batch loader slices), ``evaluate(model, comm)`` and
``samples(batch)``. Image classification lives here; video captioning
registers its own in :mod:`minips.captioning`.
"""
from __future__ import annotations


from .autograd import no_grad
from .tensor import Tensor

__all__ = ["ClassificationTask", "make_task", "task_names", "TASKS"]

#: data-set name -> task factory(name); names not listed are image .h5 files.
TASKS: dict = {}


class ClassificationTask:
    """Image classification on an :class:`~minips.data.ImageDataset`.

    Attributes:
        kind: ``"classification"``.
        input_shape: (C, H, W) of one image.
        num_classes: number of classes.
        train_arrays: ``(train_x float32 (N,C,H,W), train_y int64 (N,))``.
    """

    kind = "classification"

    def __init__(self, dataset):
        self.dataset = dataset
        self.input_shape = dataset.train_x.shape[1:]
        self.num_classes = dataset.num_classes
        self.train_arrays = (dataset.train_x, dataset.train_y)
        self.name = dataset.name

    @staticmethod
    def samples(batch) -> int:
        return len(batch[0])

    def evaluate(self, model, comm=None, batch_size: int = 500) -> dict:
        """Test loss (mean cross-entropy, nats) and accuracy of ``model``.

        With a communicator of P ranks, rank r evaluates test samples
        ``r::P`` and the sums are allreduced, so every rank returns the same
        numbers for the whole test set. The model is put in eval mode and back.
        """
        x, y = self.dataset.test_x, self.dataset.test_y
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        x, y = x[rank::size], y[rank::size]
        was_training = model.training
        model.eval()
        loss_sum = correct = 0.0
        with no_grad():
            for i in range(0, len(x), batch_size):
                logits = model(Tensor(x[i:i + batch_size])).data
                yb = y[i:i + batch_size]
                from .kernels.loss import softmax_xent_forward
                loss, _ = softmax_xent_forward(logits, yb)
                loss_sum += float(loss) * len(yb)
                correct += float((logits.argmax(axis=1) == yb).sum())
        model.train(was_training)
        n = float(len(y))
        if comm is not None and comm.size > 1:
            loss_sum, correct, n = (comm.allreduce_scalar(v) for v in (loss_sum, correct, n))
        return {"test_loss": loss_sum / n, "test_accuracy": correct / n}


def make_task(data: str):
    """The task for data set ``data`` (a name or an .h5 path).

    Raises:
        FileNotFoundError: see :func:`minips.data.resolve_h5`; for an unknown
            name or missing .h5 path the message lists every ``--data`` name.
    """
    _load_optional()
    if data in TASKS:
        return TASKS[data](data)
    from .data import UnknownDataError, load_image_dataset
    try:
        return ClassificationTask(load_image_dataset(data))
    except UnknownDataError as e:  # the data layer lists only image sets; add the tasks' names
        raise e.with_names(TASKS) from None


def task_names() -> list[str]:
    """The data set names that have their own task (after loading the optional ones)."""
    _load_optional()
    return sorted(TASKS)


def _load_optional():
    import importlib
    try:
        importlib.import_module("minips.captioning")
    except ModuleNotFoundError as e:
        if e.name != "minips.captioning":
            raise
