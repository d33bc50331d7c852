"""The Tensor's arithmetic syntax and ``backward()``, bound onto the class here.

``x + y``, ``x @ w``, ``x[i]``, ``x.sum()``, ``x.exp()`` ... are sugar for the
functions of :mod:`minips.ops`, and ``x.backward()`` for
:func:`minips.autograd.backward`. Those modules are built on the Tensor, so the
methods cannot be written in ``tensor.py`` without an import circle: they are
bound here, in the one module that sits above all three, and imports go one way::

    tensor.py  <-  autograd.py  <-  ops.py  <-  tensor_methods.py (this file)

``minips/__init__.py`` imports this module. Python runs ``minips/__init__.py``
before any ``minips.*`` module, so the methods are there whatever a user imports
first (``from minips.tensor import Tensor`` included).
"""
from __future__ import annotations

from . import autograd, ops
from .tensor import Tensor

__all__ = ["TensorMethods"]


class TensorMethods:
    """Methods of :class:`~minips.tensor.Tensor`: read them as part of that class
    (the loop at the end of this file copies each one onto it)."""

    # --- gradients -----------------------------------------------------------
    def backward(self, grad=None, retain_graph: bool = False):
        """Backpropagate from this tensor; see :func:`minips.autograd.backward`."""
        autograd.backward(self, grad, retain_graph=retain_graph)

    # --- operators -----------------------------------------------------------
    def __add__(self, o):
        return ops.add(self, o)

    def __radd__(self, o):
        return ops.add(o, self)

    def __sub__(self, o):
        return ops.sub(self, o)

    def __rsub__(self, o):
        return ops.sub(o, self)

    def __mul__(self, o):
        return ops.mul(self, o)

    def __rmul__(self, o):
        return ops.mul(o, self)

    def __truediv__(self, o):
        return ops.div(self, o)

    def __rtruediv__(self, o):
        return ops.div(o, self)

    def __neg__(self):
        return ops.neg(self)

    def __pow__(self, p):
        return ops.pow(self, p)

    def __matmul__(self, o):
        return ops.matmul(self, o)

    def __rmatmul__(self, o):
        return ops.matmul(o, self)

    def __getitem__(self, idx):
        return ops.getitem(self, idx)

    # --- reductions and shapes -----------------------------------------------
    def sum(self, axis=None, keepdims=False):
        return ops.sum(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return ops.mean(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return ops.max(self, axis, keepdims)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return ops.reshape(self, shape)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return ops.transpose(self, axes or None)

    @property
    def T(self):
        return ops.transpose(self, None)

    def flatten(self, start_dim=1):
        return ops.flatten(self, start_dim)

    # --- elementwise functions -----------------------------------------------
    def exp(self):
        return ops.exp(self)

    def log(self):
        return ops.log(self)

    def tanh(self):
        return ops.tanh(self)

    def sigmoid(self):
        return ops.sigmoid(self)

    def relu(self):
        return ops.relu(self)


# Copy every method and property above onto Tensor (skipping what Python puts in
# any class body: __module__, __doc__, __dict__ ...).
for _name, _member in vars(TensorMethods).items():
    if callable(_member) or isinstance(_member, property):
        setattr(Tensor, _name, _member)
