"""Numba kernels of minips, installed as ``minips.kernels``.

Each kernel is a plain function compiled by ``numba.njit`` (``cache=True``, so
a second process loads the machine code from ``__pycache__`` instead of
recompiling). Setting ``NUMBA_DISABLE_JIT=1`` turns them back into ordinary
Python that a debugger can step through. Every kernel has a plain-NumPy twin in
:mod:`minips.kernels.reference`: the readable specification and the test oracle.

Kernels know nothing about Tensors or MPI: arrays in, arrays out.
"""
from .threads import configure_threads, set_passive_wait, threads_per_rank  # noqa: F401

set_passive_wait()   # before Numba loads its OpenMP runtime: idle threads sleep, not spin
