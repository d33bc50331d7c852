"""Sequence layers: the LSTM and token embeddings.

Sequences are time-major, (T, N, F): time steps, batch, features (as
PyTorch's ``nn.LSTM`` with ``batch_first=False``), so step t is the contiguous
block ``x[t]``.
"""
from __future__ import annotations

import numpy as np

from ..autograd import Function
from ..tensor import Tensor
from . import init
from .module import Module, Parameter

__all__ = ["LSTMFunction", "LSTM", "EmbeddingFunction", "Embedding", "lstm"]


class LSTMFunction(Function):
    """An LSTM layer over a whole sequence as one autograd node.

    Forward: ``(x, w_ih, w_hh, b, h0, c0) -> (h, h_n, c_n)`` with x (T, N, F),
    w_ih (4H, F), w_hh (4H, H), b (4H,), h0/c0 (N, H) or None (zeros); h
    (T, N, H) holds every step's hidden state, h_n = h[-1] and c_n the final
    cell state. Backward is backpropagation through time in
    :func:`minips.kernels.lstm.lstm_backward`; gradients flow into every input,
    including h0 and c0 when they are Tensors that require grad.
    """

    def forward(self, x, w_ih, w_hh, b, h0, c0):
        from ..kernels import impl
        from ..kernels import lstm as klstm
        h, c, gates, tanh_c = impl(klstm).lstm_forward(x, w_ih, w_hh, b, h0, c0)
        self.saved = (x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c)
        return h, h[-1].copy(), c[-1].copy()

    def backward(self, dh, dh_n, dc_n):
        from ..kernels import impl
        from ..kernels import lstm as klstm
        x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c = self.saved
        dx, dh0, dc0, dw_ih, dw_hh, db = impl(klstm).lstm_backward(
            dh, dh_n, dc_n, x, w_ih, w_hh, h0, c0, h, c, gates, tanh_c)
        return (dx, dw_ih, dw_hh, db,
                dh0 if h0 is not None else None, dc0 if c0 is not None else None)


def _shape_of(t):
    return None if t is None else tuple(t.shape)


def lstm(x, w_ih, w_hh, b, h0=None, c0=None, name: str = "lstm"):
    """Functional LSTM with shape checks; returns ``(h, (h_n, c_n))``.

    Args:
        x: (T, N, F) Tensor. w_ih (4H, F), w_hh (4H, H), b (4H,) Tensors.
        h0, c0: (N, H) Tensors or None (zeros). Either both or neither.
        name: how errors refer to the layer.

    Raises:
        ValueError: any shape that does not fit, naming the layer, the tensor
            and the dimension (e.g. "LSTM(8, 16): input has 5 features ...").
    """
    xs = tuple(x.shape)
    four_h, features = w_ih.shape
    hidden = four_h // 4
    if len(xs) != 3:
        raise ValueError(f"{name}: input must be (T, N, F) = (time, batch, features), got shape {xs}; "
                         "time comes first (use ops.transpose to move it)")
    if xs[0] < 1 or xs[1] < 1:
        raise ValueError(f"{name}: input has shape {xs}; the sequence length T (dim 0) and the batch "
                         "size N (dim 1) must be at least 1")
    if xs[2] != features:
        raise ValueError(f"{name}: input has {xs[2]} features in dim 2 (shape {xs}), "
                         f"the layer expects {features}")
    if (h0 is None) != (c0 is None):
        raise ValueError(f"{name}: give both h0 and c0, or neither (zeros)")
    for label, s in (("h0", _shape_of(h0)), ("c0", _shape_of(c0))):
        if s is not None and s != (xs[1], hidden):
            raise ValueError(f"{name}: initial state {label} has shape {s}, expected (N, H) = "
                             f"({xs[1]}, {hidden}) for a batch of {xs[1]}")
    h, h_n, c_n = LSTMFunction.apply(x, w_ih, w_hh, b, h0, c0)
    return h, (h_n, c_n)


class LSTM(Module):
    """One LSTM layer (Hochreiter & Schmidhuber 1997) with a forget gate
    (Gers, Schmidhuber & Cummins 2000).

    Per step, with gates in the order (i, f, g, o) along the 4H axis::

        z = x_t W_ih^T + h_{t-1} W_hh^T + b
        i, f, o = sigmoid(z_i), sigmoid(z_f), sigmoid(z_o);  g = tanh(z_g)
        c_t = f * c_{t-1} + i * g;   h_t = o * tanh(c_t)

    Args:
        input_size: F, features per step.
        hidden_size: H.
        forget_bias: initial bias of the forget gate (default 1.0, so the cell
            remembers by default early in training: Gers et al. 2000;
            Jozefowicz, Zaremba & Sutskever 2015). Other biases start at 0.
        rng: a ``np.random.Generator``; default the global :mod:`minips.random`.

    Weights (float32): ``weight_ih`` (4H, F) and ``weight_hh`` (4H, H) drawn
    from U(-1/sqrt(H), 1/sqrt(H)) as in PyTorch; one ``bias`` (4H,) (PyTorch
    keeps two, ``b_ih + b_hh``, which sum to ours).

    Call: ``output, (h_n, c_n) = lstm(x, state=None)`` with x (T, N, F),
    state ``(h0, c0)`` each (N, H) or None (zeros); output (T, N, H).

    Raises:
        ValueError: sizes < 1, or an input/state shape that does not fit
            (the message names the layer and the dimension).
    """

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float = 1.0, rng=None):
        super().__init__()
        if input_size < 1 or hidden_size < 1:
            raise ValueError(f"LSTM sizes must be >= 1, got input_size={input_size}, hidden_size={hidden_size}")
        self.input_size, self.hidden_size = input_size, hidden_size
        bound = 1.0 / np.sqrt(hidden_size)
        self.weight_ih = Parameter(init.uniform((4 * hidden_size, input_size), bound, rng))
        self.weight_hh = Parameter(init.uniform((4 * hidden_size, hidden_size), bound, rng))
        bias = np.zeros(4 * hidden_size, np.float32)
        bias[hidden_size:2 * hidden_size] = forget_bias  # the f block
        self.bias = Parameter(bias)

    def forward(self, x, state=None):
        h0, c0 = (None, None) if state is None else state
        return lstm(x, self.weight_ih, self.weight_hh, self.bias, h0, c0, name=f"LSTM({self.extra_repr()})")

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


class EmbeddingFunction(Function):
    """Row lookup ``weight[ids]``; the backward adds each output row's gradient
    into the row it came from (``np.add.at``, so repeated ids accumulate and
    rows never looked up get exactly zero)."""

    def forward(self, weight, *, ids):
        self.ids, self.shape = ids, weight.shape
        return weight[ids]

    def backward(self, g):
        grad = np.zeros(self.shape, g.dtype)
        np.add.at(grad, self.ids.reshape(-1), g.reshape(-1, self.shape[1]))
        return grad


class Embedding(Module):
    """A lookup table of learnable vectors, one per token id.

    Args:
        num_embeddings: V, the vocabulary size.
        embedding_dim: D.
        rng: a ``np.random.Generator``; default the global :mod:`minips.random`.

    Weight ``weight`` (V, D) float32 drawn from N(0, 1) (as PyTorch).
    Call: ``emb(ids)`` with integer ids of any shape S (array or Tensor) ->
    Tensor of shape S + (D,).

    Raises:
        ValueError: ids are not integers, or one is outside [0, V) (the message
            gives the first bad id and the vocabulary size).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, rng=None):
        super().__init__()
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(f"Embedding sizes must be >= 1, got {num_embeddings} x {embedding_dim}")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        gen = init.resolve_rng(rng)
        self.weight = Parameter(gen.standard_normal((num_embeddings, embedding_dim)))

    def forward(self, ids):
        ids = np.asarray(ids.data if isinstance(ids, Tensor) else ids)
        if ids.dtype.kind not in "iu":
            raise ValueError(f"Embedding({self.extra_repr()}): token ids must be integers, got dtype {ids.dtype}")
        bad = (ids < 0) | (ids >= self.num_embeddings)
        if bad.any():
            raise ValueError(f"Embedding({self.extra_repr()}): token id {int(ids[bad][0])} is outside "
                             f"[0, {self.num_embeddings}); was the text encoded with a different vocabulary?")
        return EmbeddingFunction.apply(self.weight, ids=ids.astype(np.int64, copy=False))

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"
