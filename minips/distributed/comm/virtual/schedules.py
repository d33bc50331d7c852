"""The order of virtual reductions: MPICH's recursive doubling for arrays, mpi4py's binomial tree for objects.

A float sum depends on the order it adds in; these orders make a virtual
job's sums bitwise those of ``mpiexec`` (tests/test_virtual.py checks it).
"""
from __future__ import annotations

import numpy as np

__all__ = ["binomial", "recursive_doubling"]


def recursive_doubling(arrays: list, ufunc) -> np.ndarray:
    """Reduce ``arrays`` (equal shapes and dtypes) in MPICH's recursive-doubling
    order, in place: with ``pof2`` the largest power of two <= P and
    ``rem = P - pof2``, ranks 2i and 2i+1 (i < rem) combine first, then the
    ``pof2`` partial results combine pairwise, level by level. The inputs are
    used as scratch; returns the array that holds the result (one of them).
    Each combination is one ``ufunc(a, b)``, commutative, so the result is
    bitwise MPICH's on every rank."""
    P = len(arrays)
    pof2 = 1 << (P.bit_length() - 1)
    rem = P - pof2
    level = []
    for i in range(rem):
        ufunc(arrays[2 * i], arrays[2 * i + 1], out=arrays[2 * i])
        level.append(arrays[2 * i])
    level += arrays[2 * rem:]
    while len(level) > 1:
        for j in range(0, len(level), 2):
            ufunc(level[j], level[j + 1], out=level[j])
        level = level[::2]
    return level[0]


def binomial(values: list, fn):
    """Reduce Python objects in mpi4py's order for ``comm.allreduce(obj)``: a
    binomial tree rooted at rank 0 (rank v adds rank v + mask, mask = 1, 2, 4, ...)."""
    res = list(values)
    mask = 1
    while mask < len(res):
        for v in range(0, len(res), 2 * mask):
            if v + mask < len(res):
                res[v] = fn(res[v], res[v + mask])
        mask <<= 1
    return res[0]
