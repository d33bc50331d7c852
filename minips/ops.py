"""Differentiable operations on Tensors, each a :class:`~minips.autograd.Function`.

Every op is written as forward (NumPy) + backward (the chain rule by hand), next
to each other, so a student can check the derivative on paper. The hot ops of
the CNN and LSTM call Numba kernels from :mod:`minips.kernels`; their plain
NumPy twins live in ``kernels/reference.py``.

Shapes follow NumPy broadcasting; backward of a broadcast operand sums the
gradient over the broadcast axes (:func:`unbroadcast`).

Long because one job: the 23 elementwise, reduction, shape and loss ops are
each a short forward/backward pair a student checks on paper against the one
:func:`unbroadcast` they share; split by kind, the same chain rule would be
read across several files.
"""
from __future__ import annotations

import numpy as np

from .autograd import Function
from .tensor import Tensor

__all__ = [
    "add", "sub", "mul", "div", "neg", "pow", "matmul", "sum", "mean", "max",
    "reshape", "transpose", "flatten", "getitem", "concat", "stack", "exp", "log",
    "tanh", "sigmoid", "relu", "log_softmax", "softmax_cross_entropy", "unbroadcast",
]


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` down to ``shape``, undoing NumPy broadcasting.

    Broadcasting prepends axes and stretches axes of length 1; the gradient of
    a stretched input is the sum over the copies it was stretched into.
    """
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


def _pair(a, b):
    """Operands as Tensors; a Python/NumPy scalar takes the other's dtype."""
    if not isinstance(a, Tensor):
        a = Tensor(np.asarray(a, dtype=b.dtype) if np.ndim(a) == 0 else a)
    if not isinstance(b, Tensor):
        b = Tensor(np.asarray(b, dtype=a.dtype) if np.ndim(b) == 0 else b)
    return a, b


# --- elementwise arithmetic -------------------------------------------------
class Add(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a + b

    def backward(self, g):
        return unbroadcast(g, self.shapes[0]), unbroadcast(g, self.shapes[1])


class Sub(Function):
    def forward(self, a, b):
        self.shapes = a.shape, b.shape
        return a - b

    def backward(self, g):
        return unbroadcast(g, self.shapes[0]), unbroadcast(-g, self.shapes[1])


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, g):
        ga = unbroadcast(g * self.b, self.a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * self.a, self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Div(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a / b

    def backward(self, g):
        ga = unbroadcast(g / self.b, self.a.shape) if self.needs_input_grad[0] else None
        # d(a/b)/db = -a / b^2
        gb = unbroadcast(-g * self.a / (self.b * self.b), self.b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Neg(Function):
    def forward(self, a):
        return -a

    def backward(self, g):
        return -g


class Pow(Function):
    """``a ** p`` for a constant exponent ``p`` (a Python number)."""

    def forward(self, a, *, p):
        self.a, self.p = a, p
        return a ** p

    def backward(self, g):
        return g * self.p * self.a ** (self.p - 1)


def add(a, b) -> Tensor:
    """``a + b`` with broadcasting."""
    return Add.apply(*_pair(a, b))


def sub(a, b) -> Tensor:
    """``a - b`` with broadcasting."""
    return Sub.apply(*_pair(a, b))


def mul(a, b) -> Tensor:
    """``a * b`` elementwise with broadcasting."""
    return Mul.apply(*_pair(a, b))


def div(a, b) -> Tensor:
    """``a / b`` elementwise with broadcasting."""
    return Div.apply(*_pair(a, b))


def neg(a) -> Tensor:
    """``-a``."""
    return Neg.apply(a)


def pow(a, p) -> Tensor:  # noqa: A001 - the field's name for it
    """``a ** p`` for a constant Python number ``p``.

    Raises:
        TypeError: ``p`` is a Tensor (a learnable exponent is not supported).
    """
    if isinstance(p, Tensor):
        raise TypeError("pow(a, p): the exponent must be a Python number, not a Tensor")
    return Pow.apply(a, p=float(p) if not float(p).is_integer() else int(p))


# --- linear algebra ---------------------------------------------------------
class MatMul(Function):
    """``a @ b`` for 1-D to N-D operands (NumPy matmul rules)."""

    def forward(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("matmul: operands must have at least 1 dimension; use * for scalars")
        if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align "
                             f"({a.shape[-1]} != {b.shape[-2 if b.ndim > 1 else 0]})")
        self.a, self.b = a, b
        return a @ b

    def backward(self, g):
        a, b = self.a, self.b
        # Promote 1-D operands to matrices so one rule covers every case.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = g
        if b.ndim == 1:  # first: for vector @ vector, g is 0-D, and this makes it (1,)
            g2 = np.expand_dims(g2, -1)
        if a.ndim == 1:
            g2 = np.expand_dims(g2, -2)
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = unbroadcast(g2 @ np.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = unbroadcast(np.swapaxes(a2, -1, -2) @ g2, b2.shape).reshape(b.shape)
        return ga, gb


def matmul(a, b) -> Tensor:
    """Matrix product ``a @ b`` (shapes as ``np.matmul``; batch axes broadcast).

    Raises:
        ValueError: the inner dimensions differ (the message shows both shapes).
    """
    return MatMul.apply(*_pair(a, b))


# --- reductions -------------------------------------------------------------
def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    return tuple(sorted(a % ndim for a in axis))


def _expand(g, shape, axes, keepdims):
    """Reinsert reduced axes so ``g`` broadcasts against the input."""
    if not keepdims:
        for ax in axes:
            g = np.expand_dims(g, ax)
    return np.broadcast_to(g, shape)


class Sum(Function):
    def forward(self, a, *, axis, keepdims):
        self.shape, self.axes, self.keepdims = a.shape, _norm_axes(axis, a.ndim), keepdims
        return np.asarray(a.sum(axis=self.axes, keepdims=keepdims))

    def backward(self, g):
        return _expand(g, self.shape, self.axes, self.keepdims).copy()


class Mean(Function):
    def forward(self, a, *, axis, keepdims):
        self.shape, self.axes, self.keepdims = a.shape, _norm_axes(axis, a.ndim), keepdims
        self.count = int(np.prod([a.shape[i] for i in self.axes])) if self.axes else 1
        return np.asarray(a.mean(axis=self.axes, keepdims=keepdims))

    def backward(self, g):
        return _expand(g / self.count, self.shape, self.axes, self.keepdims).copy()


class Max(Function):
    """Max over axes; the gradient goes to the maximal entries, split evenly on ties."""

    def forward(self, a, *, axis, keepdims):
        self.axes, self.keepdims = _norm_axes(axis, a.ndim), keepdims
        out = a.max(axis=self.axes, keepdims=True)
        mask = (a == out)
        self.mask = mask / mask.sum(axis=self.axes, keepdims=True)
        return np.asarray(out if keepdims else out.squeeze(self.axes) if self.axes else out)

    def backward(self, g):
        return (_expand(g, self.mask.shape, self.axes, self.keepdims) * self.mask).astype(g.dtype)


def sum(a, axis=None, keepdims=False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (int, tuple or None for all)."""
    return Sum.apply(a, axis=axis, keepdims=keepdims)


def mean(a, axis=None, keepdims=False) -> Tensor:
    """Mean over ``axis`` (int, tuple or None for all)."""
    return Mean.apply(a, axis=axis, keepdims=keepdims)


def max(a, axis=None, keepdims=False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; ties share the gradient equally."""
    return Max.apply(a, axis=axis, keepdims=keepdims)


# --- shape manipulation -----------------------------------------------------
class Reshape(Function):
    def forward(self, a, *, shape):
        self.shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape {a.shape} ({a.size} elements) "
                             f"into {tuple(shape)}") from None

    def backward(self, g):
        return g.reshape(self.shape)


class Transpose(Function):
    def forward(self, a, *, axes):
        self.axes = axes
        return np.transpose(a, axes)

    def backward(self, g):
        if self.axes is None:
            return np.transpose(g)
        return np.transpose(g, np.argsort(self.axes))


class GetItem(Function):
    """Basic and integer-array indexing; backward scatters with ``np.add.at``
    so repeated indices accumulate."""

    def forward(self, a, *, idx):
        self.shape, self.dtype, self.idx = a.shape, a.dtype, idx
        return np.asarray(a[idx])

    def backward(self, g):
        out = np.zeros(self.shape, self.dtype)
        np.add.at(out, self.idx, g)
        return out


class Concat(Function):
    def forward(self, *arrays, axis):
        self.axis = axis
        self.splits = np.cumsum([a.shape[axis] for a in arrays])[:-1]
        return np.concatenate(arrays, axis=axis)

    def backward(self, g):
        return tuple(np.split(g, self.splits, axis=self.axis))


class Stack(Function):
    def forward(self, *arrays, axis):
        self.axis = axis
        return np.stack(arrays, axis=axis)

    def backward(self, g):
        n = g.shape[self.axis]
        return tuple(np.take(g, i, axis=self.axis) for i in range(n))


def reshape(a, shape) -> Tensor:
    """View ``a`` with a new ``shape`` (one entry may be -1).

    Raises:
        ValueError: the element counts differ.
    """
    return Reshape.apply(a, shape=tuple(shape))


def transpose(a, axes=None) -> Tensor:
    """Permute axes (reverse them when ``axes`` is None)."""
    return Transpose.apply(a, axes=None if axes is None else tuple(axes))


def flatten(a, start_dim: int = 1) -> Tensor:
    """Merge axes ``start_dim..`` into one: (N, C, H, W) -> (N, C*H*W) by default."""
    shape = a.shape[:start_dim] + (-1,)
    return reshape(a, shape)


def getitem(a, idx) -> Tensor:
    """``a[idx]`` for basic slicing and integer arrays."""
    if isinstance(idx, Tensor):
        idx = idx.data
    if isinstance(idx, tuple):
        idx = tuple(i.data if isinstance(i, Tensor) else i for i in idx)
    return GetItem.apply(a, idx=idx)


def concat(tensors, axis: int = 0) -> Tensor:
    """Join tensors along an existing ``axis``."""
    return Concat.apply(*tensors, axis=axis)


def stack(tensors, axis: int = 0) -> Tensor:
    """Join tensors of equal shape along a new ``axis``."""
    return Stack.apply(*tensors, axis=axis)


# --- elementwise functions ---------------------------------------------------
class Exp(Function):
    def forward(self, a):
        self.out = np.exp(a)
        return self.out

    def backward(self, g):
        return g * self.out


class Log(Function):
    def forward(self, a):
        self.a = a
        return np.log(a)

    def backward(self, g):
        return g / self.a


class Tanh(Function):
    def forward(self, a):
        self.out = np.tanh(a)
        return self.out

    def backward(self, g):
        return g * (1 - self.out * self.out)


def _sigmoid(x):
    # Stable for large |x|: exp of a non-positive number only.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


class Sigmoid(Function):
    def forward(self, a):
        self.out = _sigmoid(a)
        return self.out

    def backward(self, g):
        return g * self.out * (1 - self.out)


class ReLU(Function):
    """``max(a, 0)`` through the Numba kernels of :mod:`minips.kernels.elementwise`;
    backward keeps only the output (``y > 0`` exactly where ``a > 0``)."""

    def forward(self, a):
        from .kernels import elementwise as kew
        from .kernels import impl
        if a.dtype.kind != "f":  # integer input: no gradient, no kernel needed
            return np.maximum(a, 0)
        self.out = impl(kew).relu_forward(a)
        return self.out

    def backward(self, g):
        from .kernels import elementwise as kew
        from .kernels import impl
        return impl(kew).relu_backward(self.out, g)


def exp(a) -> Tensor:
    """Elementwise ``e**a``."""
    return Exp.apply(a)


def log(a) -> Tensor:
    """Elementwise natural log (``-inf``/``nan`` for a <= 0, as NumPy)."""
    return Log.apply(a)


def tanh(a) -> Tensor:
    """Elementwise hyperbolic tangent."""
    return Tanh.apply(a)


def sigmoid(a) -> Tensor:
    """Elementwise logistic function ``1 / (1 + e**-a)``, computed stably."""
    return Sigmoid.apply(a)


def relu(a) -> Tensor:
    """Elementwise ``max(a, 0)``; the subgradient at 0 is taken as 0."""
    return ReLU.apply(a)


# --- softmax and the loss ------------------------------------------------------
def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)  # exp() never overflows
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


class LogSoftmax(Function):
    def forward(self, a, *, axis):
        self.axis = axis
        self.out = _log_softmax(a, axis)
        return self.out

    def backward(self, g):
        # y = x - logsumexp(x): dy/dx = I - softmax  ->  g - softmax * sum(g)
        p = np.exp(self.out)
        return g - p * g.sum(axis=self.axis, keepdims=True)


def log_softmax(a, axis: int = -1) -> Tensor:
    """``log(softmax(a))`` along ``axis``, stable for large logits."""
    return LogSoftmax.apply(a, axis=axis)


def check_labels(labels: np.ndarray, n: int, num_classes: int, what: str = "labels"):
    """Validate integer class labels; raise ValueError naming the problem.

    Args:
        labels: integer array of shape (n,).
        n: expected batch size.
        num_classes: labels must be in ``[0, num_classes)``.
    """
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        raise ValueError(f"{what} must be integers (class indices), got dtype {labels.dtype}")
    if labels.shape != (n,):
        raise ValueError(f"{what} have shape {labels.shape}, expected ({n},) to match the logits")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        bad = labels[(labels < 0) | (labels >= num_classes)][0]
        raise ValueError(f"{what} out of range: found {bad}, valid classes are 0..{num_classes - 1}; "
                         "check the dataset or the model's number of outputs")
    return labels


class SoftmaxCrossEntropy(Function):
    """Mean over the batch of ``-log softmax(logits)[label]``, fused.

    Fusing keeps it stable (log-sum-exp with the max subtracted) and makes the
    backward the famous ``(softmax - onehot) / N``.
    """

    def forward(self, logits, labels):
        from .kernels import impl
        from .kernels import loss as kloss
        n = logits.shape[0]
        self.labels = labels
        loss, self.probs = impl(kloss).softmax_xent_forward(logits, labels)
        self.n = n
        return np.asarray(loss, dtype=logits.dtype)

    def backward(self, g):
        from .kernels import impl
        from .kernels import loss as kloss
        return impl(kloss).softmax_xent_backward(self.probs, self.labels, g), None


def softmax_cross_entropy(logits, labels) -> Tensor:
    """Mean cross-entropy of ``logits`` (N, C) against integer ``labels`` (N,).

    Returns a scalar Tensor of the logits' dtype.

    Raises:
        ValueError: logits are not 2-D, or labels are not integers in ``[0, C)``
            or do not have N entries.
    """
    if isinstance(labels, Tensor):
        labels = labels.data
    data = logits.data if isinstance(logits, Tensor) else np.asarray(logits)
    if data.ndim != 2:
        raise ValueError(f"softmax_cross_entropy expects logits of shape (N, C), got {data.shape}")
    labels = check_labels(labels, data.shape[0], data.shape[1])
    return SoftmaxCrossEntropy.apply(logits, labels.astype(np.int64))
