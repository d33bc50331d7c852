"""Numba kernels of minips, installed as ``minips.kernels``.

Each kernel is a plain function compiled by ``numba.njit`` (``cache=True``, so
a second process loads the machine code from ``__pycache__`` instead of
recompiling). Setting ``NUMBA_DISABLE_JIT=1`` turns them back into ordinary
Python that a debugger can step through. Every kernel has a plain-NumPy twin in
:mod:`minips.kernels.reference`: the readable specification and the test oracle.

Kernels know nothing about Tensors or MPI: arrays in, arrays out.

**The reference switch.** ``MINIPS_REFERENCE_KERNELS=1`` in the environment
(or ``--reference-kernels`` on the command line, which sets it) makes the
layers (convolution, pooling, ReLU, LSTM) and the loss call
those NumPy twins instead of the Numba kernels: edit a function in
``kernels/reference.py`` (say ``relu_forward``) and the next run uses your
edit. The gradient predictors of pseudo-sync are not kernels: each rule is
written once, in its own file under ``minips/distributed/algorithms/``, and
that code always runs. Slower (the convolution's twin
several times so), same results to float rounding. The switch is read at every
call, so a test or a notebook can flip it with ``os.environ`` (on virtual
ranks each rank reads its own copy of the environment: :mod:`minips.environ`).
"""
from .threads import configure_threads, set_passive_wait, threads_per_rank  # noqa: F401

set_passive_wait()   # before Numba loads its OpenMP runtime: idle threads sleep, not spin

#: the environment variable of the reference switch (any value but "" and "0" turns it on)
REFERENCE_ENV = "MINIPS_REFERENCE_KERNELS"


def reference_kernels() -> bool:
    """Whether the readable NumPy twins run instead of the Numba kernels
    (``MINIPS_REFERENCE_KERNELS`` set to anything but "" or "0")."""
    from ..environ import get
    return get(REFERENCE_ENV, "") not in ("", "0")


def impl(module):
    """``module`` (a kernel module, e.g. :mod:`minips.kernels.pool`), or
    :mod:`minips.kernels.reference` when :func:`reference_kernels` is on: the
    twins have the same names and signatures (except the convolution's, which
    :mod:`minips.nn.conv` dispatches itself)."""
    if reference_kernels():
        from . import reference
        return reference
    return module
