"""The image-classification task: test loss and accuracy of a model on an
:class:`~minips.data.ImageDataset` (Fashion-MNIST and sets of its layout)."""
from __future__ import annotations

from ..autograd import no_grad
from ..kernels import impl
from ..kernels import loss as kloss
from ..tensor import Tensor

__all__ = ["ClassificationTask"]


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
        self.val_arrays = None
        self.name = dataset.name

    def hold_out(self, fraction: float, seed: int | None = None) -> None:
        """Move a stratified, seeded ``fraction`` of the training set into a
        validation split (:func:`minips.data.holdout_indices`); ``evaluate(...,
        split="val")`` then scores it.

        Raises:
            ValueError: a bad fraction (the message names ``--val-fraction``).
        """
        from ..data import VAL_SEED, holdout_indices
        from ..data.shared import cached
        x, y = self.dataset.train_x, self.dataset.train_y
        seed = VAL_SEED if seed is None else seed

        def split():
            keep, val = holdout_indices(y, fraction, seed)
            return (x[keep], y[keep]), (x[val], y[val])
        # virtual ranks share the data set, and so its split (a copy of the images)
        self.train_arrays, self.val_arrays = cached(("holdout", id(x), fraction, seed), split)

    @staticmethod
    def samples(batch) -> int:
        return len(batch[0])

    def evaluate(self, model, comm=None, batch_size: int = 500, split: str = "test") -> dict:
        """Loss (mean cross-entropy, nats) and accuracy of ``model`` on the test
        set (keys ``test_loss``, ``test_accuracy``) or, with ``split="val"``, on
        the validation split of :meth:`hold_out` (``val_loss``, ``val_accuracy``).

        With a communicator of P ranks, rank r evaluates samples
        ``r::P`` and the sums are allreduced, so every rank returns the same
        numbers for the whole set. The model is put in eval mode and back.
        """
        x, y = (self.dataset.test_x, self.dataset.test_y) if split == "test" else self.val_arrays
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        x, y = x[rank::size], y[rank::size]
        was_training = model.training
        model.eval()
        loss_sum = correct = 0.0
        with no_grad():
            for i in range(0, len(x), batch_size):
                logits = model(Tensor(x[i:i + batch_size])).data
                yb = y[i:i + batch_size]
                loss, _ = impl(kloss).softmax_xent_forward(logits, yb)
                loss_sum += float(loss) * len(yb)
                correct += float((logits.argmax(axis=1) == yb).sum())
        model.train(was_training)
        n = float(len(y))
        if comm is not None and comm.size > 1:
            loss_sum, correct, n = (comm.allreduce_scalar(v) for v in (loss_sum, correct, n))
        return {f"{split}_loss": loss_sum / n, f"{split}_accuracy": correct / n}
