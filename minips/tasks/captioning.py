"""The video-captioning task: BLEU and exact-match metrics, and the
evaluation of a captioner on the moving Fashion-MNIST test clips.

- **Metrics**: corpus BLEU-4 (Papineni et al., ACL 2002) by sacrebleu, exact
  caption match, teacher-forced token accuracy.
- **Task** (:class:`CaptioningTask`): what the Trainer needs from the data
  (``train_arrays``, ``samples``) and how to evaluate a model on it. The model
  is passed in (any module with ``model(clips, captions)`` and
  ``greedy_decode(clips)``, e.g. :class:`minips.models.VideoCaptioner`).

The clips, captions and vocabulary are made in :mod:`minips.data.moving_fmnist`.
"""
from __future__ import annotations

import numpy as np

from ..autograd import no_grad
from ..data.moving_fmnist import DATA_NAME, CaptionDataset, Vocab, load_dataset

__all__ = ["bleu_score", "caption_metrics", "CaptioningTask", "make_captioning_task"]


def bleu_score(hypotheses, references) -> float:
    """Corpus BLEU-4 (0..100) of the hypotheses against one reference each.

    sacrebleu's corpus BLEU (Post, WMT 2018) with ``tokenize="none"``: our
    captions are already lower-case, space-separated tokens, so BLEU counts
    exactly the model's tokens (sacrebleu's default "13a" tokenizer would
    split "t-shirt" into three).
    """
    from sacrebleu.metrics import BLEU
    if not hypotheses:
        return 0.0
    return float(BLEU(tokenize="none").corpus_score(list(hypotheses), [list(references)]).score)


def caption_metrics(hypotheses, references) -> dict:
    """``{"bleu": corpus BLEU-4 (0..100), "exact_match": fraction (0..1) of
    hypotheses equal to their reference}``."""
    exact = sum(h == r for h, r in zip(hypotheses, references)) / max(len(references), 1)
    return {"bleu": bleu_score(hypotheses, references), "exact_match": exact}


def _pixel_stats(clips, sample: int = 256) -> tuple[float, float]:
    """Mean and std of the [0, 1]-scaled pixels of (up to) the first clips."""
    x = clips[:min(sample, len(clips))].astype(np.float32) / 255
    return float(x.mean()), float(x.std()) or 1.0


class CaptioningTask:
    """Video captioning on a :class:`~minips.data.moving_fmnist.CaptionDataset`.

    Attributes:
        kind: ``"captioning"``.
        vocab: the :class:`~minips.data.moving_fmnist.Vocab`; frame_size: S; pixel_stats: (mean, std).
        train_arrays: ``(train clips uint8 (N, T, 1, S, S), train token ids int64 (N, L))``.
    """

    kind = "captioning"

    def __init__(self, dataset: CaptionDataset, name: str = DATA_NAME):
        self.dataset, self.name = dataset, name
        self.vocab = dataset.vocab
        self.frame_size = dataset.train_clips.shape[-1]
        self.pixel_stats = _pixel_stats(dataset.train_clips)
        self.train_arrays = (dataset.train_clips, dataset.train_ids)
        self.val_split = None  # (clips, ids, texts) after hold_out

    def hold_out(self, fraction: float, seed: int | None = None) -> None:
        """Move a seeded random ``fraction`` of the training clips into a
        validation split (:func:`minips.data.holdout_indices`; not stratified:
        a clip holds several garments); ``evaluate(..., split="val")`` scores it.

        Raises:
            ValueError: a bad fraction (the message names ``--val-fraction``).
        """
        from ..data import VAL_SEED, holdout_indices
        from ..data.moving_fmnist import ClipSet
        ds = self.dataset
        keep, val = holdout_indices(len(ds.train_ids), fraction, VAL_SEED if seed is None else seed)
        c = ds.train_clips

        def subset(idx):
            return ClipSet(c.tables[idx], c.images, c.frames, c.size)
        self.train_arrays = (subset(keep), ds.train_ids[keep])
        self.val_split = (subset(val), ds.train_ids[val], [ds.train_text[i] for i in val])

    @staticmethod
    def samples(batch) -> int:
        return len(batch[0])

    def evaluate(self, model, comm=None, batch_size: int = 500, split: str = "test") -> dict:
        """Test-set loss, BLEU, exact match and token accuracy of ``model``
        (with ``split="val"``: of the validation split of :meth:`hold_out`,
        keys ``val_loss``, ``val_token_accuracy``, ``val_bleu``, ``val_exact_match``).

        - ``test_loss``: teacher-forced cross-entropy per real target token (nats);
        - ``token_accuracy``: fraction of real target tokens (words and <eos>)
          that are the argmax under teacher forcing;
        - ``bleu`` (0..100) and ``exact_match`` (0..1) of greedy-decoded
          captions against the references (see :func:`caption_metrics`).

        With a communicator of P ranks, rank r takes test clips ``r::P``; loss
        and token sums are allreduced and the decoded captions allgathered, so
        every rank returns the same numbers for the whole test set. The model
        is put in eval mode and back.
        """
        ds = self.dataset
        clips, all_ids, texts = (ds.test_clips, ds.test_ids, ds.test_text) if split == "test" else self.val_split
        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        mine = np.arange(len(all_ids))[rank::size]
        ids, refs = all_ids[mine], [texts[i] for i in mine]
        was_training = model.training
        model.eval()
        loss_sum = correct = tokens = 0.0
        hyps = []
        with no_grad():
            for i in range(0, len(mine), batch_size):
                c, y = clips[mine[i:i + batch_size]], ids[i:i + batch_size]
                logits = model(c, y).data                   # (L-1, n, V)
                target = y[:, 1:].T
                real = target != Vocab.PAD
                log_p = logits - logits.max(axis=2, keepdims=True)
                log_p -= np.log(np.exp(log_p).sum(axis=2, keepdims=True))
                picked = np.take_along_axis(log_p, target[..., None], axis=2)[..., 0]
                loss_sum += float(-(picked * real).sum())
                correct += float(((logits.argmax(axis=2) == target) & real).sum())
                tokens += float(real.sum())
                hyps += [self.vocab.decode(row) for row in model.greedy_decode(c)]
        model.train(was_training)
        if comm is not None and comm.size > 1:
            loss_sum, correct, tokens = (comm.allreduce_scalar(v) for v in (loss_sum, correct, tokens))
            pairs = [p for part in comm.allgather(list(zip(hyps, refs))) for p in part]
            hyps, refs = [h for h, _ in pairs], [r for _, r in pairs]
        out = {"test_loss": loss_sum / tokens, "token_accuracy": correct / tokens,
               **caption_metrics(hyps, list(refs))}
        if split == "test":
            return out
        return {"val_" + k.removeprefix("test_"): v for k, v in out.items()}


def make_captioning_task(name: str = DATA_NAME) -> CaptioningTask:
    """The captioning task on the default set (:func:`~minips.data.moving_fmnist.load_dataset`:
    20,000 train and 500 test clips, seed 0, cached in ``data/cache/``).

    Raises:
        FileNotFoundError: the source images (fashion-mnist-mini) are missing.
    """
    from ..data.shared import cached
    return CaptioningTask(cached(("captions", name), load_dataset), name)
