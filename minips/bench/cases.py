"""The rows of ``python -m minips bench kernels``: a :class:`Case` is one kernel
on one shape; a provider ``provider(ctx: BenchContext) -> iterable of Case``
makes them, and :data:`minips.bench.kernels.providers.KERNEL_CASES` lists the providers.
Here, below both the kernels benchmark and the modules that provide cases
(``minips/bench/lstm.py``), so that neither imports the other back.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Case", "BenchContext"]


@dataclass
class Case:
    """One row of the table: a kernel on one shape.

    Attributes:
        kernel: what is timed, e.g. ``"conv2d fwd+bwd"``.
        shape: a short description of the sizes, e.g. ``"N64 32->64 14x14 k3"``.
        numba: the kernel call (no arguments; inputs prepared beforehand).
        numpy: the NumPy twin doing the same work, or None.
        torch: the same operation in PyTorch, or None (torch missing or no equivalent).
        flops: floating-point operations per call (0: not compute-bound).
        bytes: the least memory traffic per call, bytes read + written (0: not counted).
    """
    kernel: str
    shape: str
    numba: Callable
    numpy: Callable | None = None
    torch: Callable | None = None
    flops: float = 0.0
    bytes: float = 0.0


@dataclass
class BenchContext:
    """What providers get: the batch sizes, a seeded generator, torch (or None)."""
    batches: tuple = (64, 128)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    torch: object = None
    dtype: type = np.float32

    def randn(self, *shape):
        return self.rng.standard_normal(shape).astype(self.dtype)
