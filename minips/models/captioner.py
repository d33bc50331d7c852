"""The video captioner (``--model captioner``): a CNN on every frame, an LSTM
encoder over the frames, an LSTM decoder over the caption.

The encoder-decoder design of Sutskever, Vinyals & Le (NeurIPS 2014) and, for
video, Venugopalan et al., "Sequence to Sequence - Video to Text" (ICCV 2015).
Token ids follow the vocabulary of the clips (:mod:`minips.data.moving_fmnist`:
<pad>=0, <bos>=1, <eos>=2); the data, metrics and evaluation live there and in
:mod:`minips.tasks.captioning`.
"""
from __future__ import annotations

import numpy as np

from .. import nn, ops
from ..autograd import no_grad
from ..data.moving_fmnist import CAPTION_LEN, DATA_NAME, Vocab
from ..tensor import Tensor

__all__ = ["frame_encoder", "VideoCaptioner", "build_captioner"]


def frame_encoder(out_features: int, size: int = 48) -> nn.Module:
    """The per-frame CNN (shared by all frames and clips): (M, 1, S, S) -> (M, out_features).

    ::

        conv(1->16, 4x4, stride 4) - ReLU          S/4 x S/4: one 4x4 patch per pixel
        conv(16->32, 3x3, pad 1) - ReLU - maxpool 2  S/8 x S/8
        flatten - Linear(32 (S/8)^2 -> out_features) - ReLU

    Small on purpose: it runs on every frame of every clip (320 frames per
    batch of 32), so it must cost about what the two LSTMs cost. The final
    Linear sees where each feature is, which the captions need (directions,
    left-to-right order).

    Raises:
        ValueError: ``size`` not a multiple of 8.
    """
    if size % 8:
        raise ValueError(f"frame_encoder: the frame size {size} must be a multiple of 8")
    cells = (size // 8) ** 2
    return nn.Sequential(nn.Conv2d(1, 16, 4, stride=4), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * cells, out_features), nn.ReLU())


class VideoCaptioner(nn.Module):
    """Frame encoder -> LSTM over frames -> LSTM decoder -> vocabulary logits.

    Args:
        vocab_size: V (token ids 0..V-1; 0 is <pad>, 1 <bos>, 2 <eos>).
        frame_features: D, the frame encoder's output size.
        hidden: H of both LSTMs (the encoder's final state starts the decoder).
        embed: E, the size of the token embeddings.
        size: frame side in pixels; pixel_mean/pixel_std standardise the
            frames ([0, 1]-scaled) before the encoder.

    Inputs: clips uint8 or float32 (N, T, 1, S, S) in [0, 255]; captions
    int (N, L) = ``<bos> w1 ... wk <eos> <pad>...``. Teacher forcing feeds
    tokens 0..L-2 and predicts tokens 1..L-1.

    Raises:
        ValueError: clips or captions of the wrong shape (names which).
    """

    def __init__(self, vocab_size: int, frame_features: int = 128, hidden: int = 256, embed: int = 32,
                 size: int = 48, pixel_mean: float = 0.0, pixel_std: float = 1.0):
        super().__init__()
        self.vocab_size, self.size = vocab_size, size
        self.pixel_mean, self.pixel_std = float(pixel_mean), float(pixel_std)
        self.cnn = frame_encoder(frame_features, size)
        self.encoder = nn.LSTM(frame_features, hidden)
        self.embed = nn.Embedding(vocab_size, embed)
        self.decoder = nn.LSTM(embed, hidden)
        self.out = nn.Linear(hidden, vocab_size, init_mode="xavier")

    # --- pieces -------------------------------------------------------------------
    def _check_clips(self, clips):
        c = np.asarray(clips)
        if c.ndim != 5 or c.shape[2:] != (1, self.size, self.size):
            raise ValueError(f"VideoCaptioner: clips must be (N, T, 1, {self.size}, {self.size}), got {c.shape}")
        return c

    def encode(self, clips):
        """The encoder's final state ``(h_n, c_n)``, each (N, H), for clips (N, T, 1, S, S)."""
        c = self._check_clips(clips)
        n, steps = c.shape[:2]
        x = (c.reshape(n * steps, 1, self.size, self.size).astype(np.float32) / np.float32(255)
             - np.float32(self.pixel_mean)) / np.float32(self.pixel_std)
        f = self.cnn(Tensor(x))                                      # (N*T, D)
        f = ops.transpose(ops.reshape(f, (n, steps, -1)), (1, 0, 2))  # (T, N, D): time first
        _, state = self.encoder(f)
        return state

    def decode(self, state, tokens):
        """Logits (L, N, V) for the token after each of ``tokens`` (N, L), and
        the decoder's state after the last one."""
        n, steps = tokens.shape
        e = self.embed(np.ascontiguousarray(tokens.T))               # (L, N, E)
        out, state = self.decoder(e, state)                          # (L, N, H)
        logits = self.out(ops.reshape(out, (steps * n, -1)))
        return ops.reshape(logits, (steps, n, self.vocab_size)), state

    def forward(self, clips, captions):
        """Teacher-forced logits (L-1, N, V) for captions (N, L)."""
        captions = np.asarray(captions)
        if captions.ndim != 2 or captions.shape[1] < 2:
            raise ValueError(f"VideoCaptioner: captions must be (N, L) token ids with L >= 2, got {captions.shape}")
        if captions.shape[0] != np.shape(clips)[0]:
            raise ValueError(f"VideoCaptioner: {np.shape(clips)[0]} clips but {captions.shape[0]} captions")
        return self.decode(self.encode(clips), captions[:, :-1])[0]

    def loss(self, batch):
        """Mean cross-entropy per real (non-padding) target token, for
        ``batch = (clips, captions)``."""
        clips, captions = batch
        captions = np.asarray(captions)
        logits = self(clips, captions)
        return nn.sequence_cross_entropy(logits, np.ascontiguousarray(captions[:, 1:].T), pad_id=Vocab.PAD)

    def greedy_decode(self, clips, max_len: int = CAPTION_LEN - 1) -> np.ndarray:
        """Token ids (N, max_len): at each step feed back the most likely token,
        starting from <bos>; positions after <eos> are <pad>."""
        with no_grad():
            state = self.encode(clips)
            n = len(clips)
            token = np.full(n, Vocab.BOS, np.int64)
            out = np.full((n, max_len), Vocab.PAD, np.int64)
            done = np.zeros(n, bool)
            for t in range(max_len):
                logits, state = self.decode(state, token[:, None])  # one step
                token = logits.data[0].argmax(axis=1)
                out[~done, t] = token[~done]
                done |= token == Vocab.EOS
                if done.all():
                    break
        return out



def build_captioner(task) -> VideoCaptioner:
    """A VideoCaptioner at the defaults for a captioning task's vocabulary, frame
    size and pixel statistics.

    Raises:
        ValueError: the task is not captioning.
    """
    if getattr(task, "kind", None) != "captioning":
        raise ValueError(f"model 'captioner' needs a captioning data set (--data {DATA_NAME})")
    mean, std = task.pixel_stats
    return VideoCaptioner(len(task.vocab), size=task.frame_size, pixel_mean=mean, pixel_std=std)
