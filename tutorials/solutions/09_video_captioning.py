"""Reference solutions of step 9 (tutorials/09_video_captioning.py)."""
import numpy as np

from minips.data.moving_fmnist import VOCAB


# Exercise 9.1
def encode_caption(text, length):
    ids = [VOCAB.BOS] + [VOCAB.index.get(w, VOCAB.UNK) for w in text.lower().split()] + [VOCAB.EOS]
    return np.array(ids + [VOCAB.PAD] * (length - len(ids)), dtype=np.int64)


# Exercise 9.2
def masked_cross_entropy(logits, targets, pad_id):
    z = logits - logits.max(axis=-1, keepdims=True)                  # stable log-softmax
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
    real = targets != pad_id
    return float(-(picked * real).sum() / real.sum())
