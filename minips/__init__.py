"""minips: a readable deep-learning engine for studying communication-efficient
data-parallel SGD (NumPy + Numba kernels + mpi4py).

Quick tour::

    import minips as mp
    x = mp.tensor([[1.0, 2.0]], requires_grad=True)
    y = (x * x).sum()
    y.backward()          # x.grad == 2 * x

See README.md and tutorials/.
"""
from . import random  # noqa: F401
from .autograd import Function, enable_grad, is_grad_enabled, no_grad  # noqa: F401
from .tensor import Tensor, as_tensor, tensor  # noqa: F401

__version__ = "0.1.0"
