"""Reverse-mode automatic differentiation over a dynamic graph.

Every differentiable operation is a subclass of :class:`Function` with two
methods working on plain ``np.ndarray`` objects::

    class Mul(Function):
        def forward(self, a, b):          # arrays in, array out
            self.a, self.b = a, b         # keep what backward needs
            return a * b
        def backward(self, grad):         # dL/d(out) in
            return grad * self.b, grad * self.a   # dL/d(input), one per input

    c = Mul.apply(x, y)                   # Tensors in, Tensor out; records the graph

``Tensor.backward()`` (that is :func:`backward`) walks the graph in reverse
topological order. The order is computed with an explicit stack (no recursion),
so graphs of any depth work. This is the design of PyTorch's
``torch.autograd.Function`` and of micrograd (A. Karpathy), reduced to what a
course needs.

Layering: this module is built on :mod:`minips.tensor` and imports it; the ops
(:mod:`minips.ops`) are built on this one. ``Tensor.backward`` and the operators
are bound onto the Tensor class above all three, in :mod:`minips.tensor_methods`,
so no import goes back down.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np

from .tensor import Tensor

__all__ = ["Function", "no_grad", "enable_grad", "is_grad_enabled", "backward",
           "backward_callbacks", "CallbackList"]

_state = threading.local()

class CallbackList(threading.local):
    """A list of functions of no arguments, one list per thread: each rank of
    a virtual job (a thread) registers and calls only its own."""

    def __init__(self):
        self._items: list = []

    def append(self, fn) -> None:
        self._items.append(fn)

    def remove(self, fn) -> None:
        self._items.remove(fn)

    def __iter__(self):
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, fn) -> bool:
        return fn in self._items


#: Functions called with no arguments after every node's backward (in the
#: thread that registered them). The distributed layer adds ``comm.progress``
#: here ("poll" progress mode) so a nonblocking allreduce advances between
#: layers; empty otherwise.
backward_callbacks = CallbackList()

# Creation counter of graph nodes: creation order is a topological order.
_sequence = itertools.count()


def is_grad_enabled() -> bool:
    """True unless inside a :func:`no_grad` block (per thread)."""
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def no_grad():
    """Context manager: operations inside record no graph (evaluation, updates)."""
    prev = is_grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = prev


@contextlib.contextmanager
def enable_grad():
    """Context manager: re-enable graph recording inside a :func:`no_grad` block."""
    prev = is_grad_enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = prev


class Function:
    """Base class of a differentiable operation (one node of the graph).

    Subclasses implement ``forward(*arrays, **options) -> ndarray | tuple`` and
    ``backward(*grads) -> ndarray | tuple``. ``backward`` receives one gradient
    per output (zeros for outputs that did not reach the loss) and returns one
    gradient per positional input, or ``None`` for inputs that need none.
    ``self.needs_input_grad`` (tuple of bool) lets it skip work.

    Errors: ``backward`` returning a gradient of the wrong shape raises
    ``RuntimeError`` naming the function and the input.
    """

    # Set by apply(): the input Tensors, whether each needs a gradient, and
    # the shapes/dtypes of the outputs (to build zero grads for unused ones).
    inputs: tuple = ()
    needs_input_grad: tuple = ()
    _out_meta: tuple = ()
    _multi: bool = False

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, *grads):  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **options):
        """Run ``forward`` on the inputs' arrays and record the node if needed.

        Positional ``inputs`` may be Tensors, arrays or Python scalars
        (non-Tensors are constants); keyword ``options`` are passed to
        ``forward`` unchanged. Returns a Tensor, or a tuple of Tensors when
        ``forward`` returns a tuple.
        """
        fn = cls()
        arrays = [x.data if isinstance(x, Tensor) else x for x in inputs]
        out = fn.forward(*arrays, **options)
        multi = isinstance(out, tuple)
        outs = out if multi else (out,)
        track = is_grad_enabled() and any(
            isinstance(x, Tensor) and x.requires_grad for x in inputs)
        results = []
        for i, o in enumerate(outs):
            t = Tensor(o, requires_grad=track)
            if track:
                t._fn, t._out_index = fn, i
            results.append(t)
        if track:
            fn.seq = next(_sequence)
            fn.inputs = tuple(inputs)
            fn.needs_input_grad = tuple(
                isinstance(x, Tensor) and x.requires_grad for x in inputs)
            fn._out_meta = tuple((np.shape(o), np.asarray(o).dtype) for o in outs)
            fn._multi = multi
        return tuple(results) if multi else results[0]


def _topological_order(root_fn):
    """Functions reachable from ``root_fn``, each after every function that
    consumes its outputs: descending creation order (an iterative walk finds
    them; no recursion limit).

    Any reverse topological order gives the same gradients, but this one also
    finishes each leaf's gradient as early as the forward pass allows: the
    weight of ``x @ W.T`` is transposed just before the product, so its
    gradient is complete right after the product's backward, not at the end of
    the whole backward pass. That is what lets overlapped allreduce start the
    last layers' buckets early (PyTorch orders its engine by the same
    sequence numbers).
    """
    nodes, seen, stack = [], {id(root_fn)}, [root_fn]
    while stack:
        fn = stack.pop()
        if fn.inputs is None:
            raise RuntimeError("backward through a graph that was already freed: "
                               "pass retain_graph=True to the first backward()")
        nodes.append(fn)
        for x in fn.inputs:
            if isinstance(x, Tensor) and x._fn is not None and id(x._fn) not in seen:
                seen.add(id(x._fn))
                stack.append(x._fn)
    nodes.sort(key=lambda f: f.seq, reverse=True)
    return nodes


def backward(tensor, grad=None, retain_graph=False):
    """Accumulate d(tensor)/d(leaf) into ``leaf.grad`` for every leaf.

    Args:
        tensor: the output Tensor (usually a scalar loss).
        grad: dL/d(tensor), same shape; defaults to 1 for a one-element tensor.
        retain_graph: keep the saved arrays so backward can run again.

    Leaves accumulate (``leaf.grad += g``, in place when ``grad`` already
    exists, so gradients can live in a preallocated flat buffer). When a leaf's
    gradient is complete for this pass, its hooks (``Tensor.register_grad_hook``)
    are called: this is how overlapped allreduce starts a bucket early.

    Raises:
        RuntimeError: the tensor does not require grad, the graph was freed
            by an earlier backward, or grad is missing for a non-scalar.
    """
    if not tensor.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad: "
                           "set requires_grad=True on an input, or do not call it "
                           "inside no_grad()")
    if grad is None:
        if tensor.data.size != 1:
            raise RuntimeError(f"backward() of a tensor of shape {tensor.shape} needs "
                               "an explicit grad= of the same shape (only scalars default to 1)")
        grad = np.ones_like(tensor.data)
    grad = np.asarray(grad, dtype=tensor.data.dtype)
    if tensor._fn is None:  # a leaf: its gradient is grad itself
        tensor._accumulate(grad)
        tensor._run_hooks()
        return

    order = _topological_order(tensor._fn)
    # How many gradient contributions each leaf will receive in this pass.
    pending = {}
    for fn in order:
        for x in fn.inputs:
            if isinstance(x, Tensor) and x.requires_grad and x._fn is None:
                pending[id(x)] = pending.get(id(x), 0) + 1

    grads = {id(tensor._fn): [None] * len(tensor._fn._out_meta)}
    grads[id(tensor._fn)][tensor._out_index] = grad
    for fn in order:
        gouts = grads.pop(id(fn), None)
        if gouts is None:  # no path from this node to the root's gradient
            continue
        gouts = [g if g is not None else np.zeros(shape, dtype)
                 for g, (shape, dtype) in zip(gouts, fn._out_meta)]
        gins = fn.backward(*gouts)
        if not isinstance(gins, tuple):
            gins = (gins,)
        if len(gins) != len(fn.inputs):
            raise RuntimeError(f"{type(fn).__name__}.backward returned {len(gins)} "
                               f"gradients for {len(fn.inputs)} inputs")
        for i, (x, g) in enumerate(zip(fn.inputs, gins)):
            if not (isinstance(x, Tensor) and x.requires_grad) or g is None:
                continue
            if np.shape(g) != x.shape:
                raise RuntimeError(f"{type(fn).__name__}.backward: gradient for input {i} "
                                   f"has shape {np.shape(g)}, the input has {x.shape}")
            if x._fn is None:
                x._accumulate(g)
                pending[id(x)] -= 1
                if pending[id(x)] == 0:
                    x._run_hooks()
            else:
                slot = grads.setdefault(id(x._fn), [None] * len(x._fn._out_meta))
                k = x._out_index
                slot[k] = g if slot[k] is None else slot[k] + g
        for cb in backward_callbacks:
            cb()
        if not retain_graph:
            # Free saved arrays and graph edges: memory is released as we go.
            fn.__dict__.clear()
            fn.inputs = None
