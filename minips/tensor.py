"""Tensor: an ``np.ndarray`` plus the gradient and the operation that made it.

This is the bottom of the engine and imports nothing else of minips. The other
files build on the Tensor, and imports go one way, with no circle (each file
below imports only those above it)::

    tensor.py          the Tensor: data, grad, the Function that made it, hooks
      <- autograd.py   Function (one node of the graph), backward (the graph walk)
      <- ops.py        the differentiable operations, each a Function
      <- tensor_methods.py   the syntax: ``x + y``, ``x @ w``, ``x.exp()``,
                             ``x.backward()`` ... bound onto Tensor

``minips/__init__.py`` imports ``tensor_methods``, and Python runs it before any
``minips.*`` module, so a Tensor always has its operators.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Tensor", "tensor", "as_tensor"]

_FLOAT_TYPES = (np.float32, np.float64)


class Tensor:
    """A node of the autograd graph.

    Attributes:
        data: the value, an ``np.ndarray``; float32 for training, float64 for
            gradient checks (integer arrays are allowed for labels and indices,
            but cannot require grad).
        grad: ``dL/d(self)`` after ``backward()``, same shape and dtype as
            ``data``, or ``None``. Leaves accumulate into it.
        requires_grad: whether operations on this tensor are recorded.

    A Tensor made by an operation remembers it (``_fn``); a Tensor made by the
    user is a *leaf* (``_fn is None``). Arithmetic operators and methods
    (``+ - * / @ **``, ``sum``, ``reshape``, ``exp`` ...) and ``backward()`` are
    thin wrappers over :mod:`minips.ops` and :mod:`minips.autograd`, bound onto
    this class in :mod:`minips.tensor_methods` (they are built on this class, so
    they cannot be written in it without an import circle).

    Raises:
        TypeError: ``requires_grad=True`` on a non-floating array.
    """

    __array_priority__ = 1000  # make ndarray + Tensor call Tensor.__radd__

    def __init__(self, data, requires_grad: bool = False, dtype=None):
        if isinstance(data, Tensor):
            data = data.data
        arr = np.asarray(data, dtype=dtype)
        if arr.dtype == np.float16 or (arr.dtype.kind == "f" and arr.dtype not in _FLOAT_TYPES):
            arr = arr.astype(np.float32)
        if requires_grad and arr.dtype.kind != "f":
            raise TypeError(f"only floating tensors can require grad (got dtype {arr.dtype}); "
                            "convert with .astype(np.float32)")
        self.data = arr
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self._fn = None
        self._out_index = 0
        self._hooks = []

    # --- basic properties -------------------------------------------------
    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def is_leaf(self):
        return self._fn is None

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        flag = ", requires_grad=True" if self.requires_grad else ""
        return f"Tensor({np.array2string(self.data, precision=4, threshold=20)}{flag})"

    def numpy(self) -> np.ndarray:
        """The underlying array (no copy)."""
        return self.data

    def item(self) -> float:
        """The value of a one-element tensor as a Python number."""
        return self.data.item()

    def detach(self) -> Tensor:
        """A new leaf sharing ``data``, cut from the graph (no gradient flows back)."""
        return Tensor(self.data, requires_grad=False)

    def astype(self, dtype) -> Tensor:
        """A detached copy converted to ``dtype`` (float32 <-> float64 for gradcheck)."""
        return Tensor(self.data.astype(dtype), requires_grad=self.requires_grad and np.dtype(dtype).kind == "f")

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and self.data.dtype.kind != "f":
            raise TypeError(f"only floating tensors can require grad (got dtype {self.data.dtype})")
        self.requires_grad = flag
        return self

    # --- gradients (backward() itself is in minips.tensor_methods) ----------
    def zero_grad(self):
        """Zero ``grad`` in place if it exists (keeps views into flat buffers)."""
        if self.grad is not None:
            self.grad[...] = 0

    def register_grad_hook(self, hook):
        """Call ``hook(tensor)`` each time this leaf's gradient is complete in a
        backward pass. Returns a handle with ``remove()``."""
        self._hooks.append(hook)
        hooks = self._hooks

        class _Handle:
            def remove(self_inner):
                if hook in hooks:
                    hooks.remove(hook)
        return _Handle()

    def _accumulate(self, g):
        if self.grad is None:
            self.grad = np.array(g, dtype=self.data.dtype, copy=True)
        else:
            self.grad += g  # in place: grad may be a view of a flat buffer

    def _run_hooks(self):
        for h in list(self._hooks):
            h(self)


def tensor(data, requires_grad: bool = False, dtype=None) -> Tensor:
    """Make a leaf Tensor from array-like ``data`` (float64 input stays float64)."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype)


def as_tensor(x, like: Tensor | None = None) -> Tensor:
    """``x`` as a Tensor; Python scalars take the dtype of ``like`` (so
    ``float32_tensor * 2.0`` stays float32)."""
    if isinstance(x, Tensor):
        return x
    if like is not None and np.isscalar(x):
        return Tensor(np.asarray(x, dtype=like.dtype))
    return Tensor(x)
