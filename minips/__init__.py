"""minips: a readable deep-learning engine for studying communication-efficient
data-parallel SGD (NumPy + Numba kernels + mpi4py).

Quick tour::

    import minips as mp
    x = mp.tensor([[1.0, 2.0]], requires_grad=True)
    y = (x * x).sum()
    y.backward()          # x.grad == 2 * x

See README.md and tutorials/.
"""
import os as _os
import signal as _signal
import sys as _sys


def _defer_sigint_while_starting():
    """``python -m minips``: note a Ctrl-C (SIGINT) that arrives while the
    interpreter imports NumPy, Numba and minips, instead of raising
    KeyboardInterrupt in the middle of an import (a long traceback, and under
    mpiexec a rank that dies before MPI starts). :func:`minips.cli.main`
    restores the usual handler once the imports are done and then ends the run
    (every rank of an MPI job) with one line. Only for the command line:
    a program that imports minips keeps its own SIGINT handling."""
    argv = getattr(_sys, "orig_argv", [])
    i = argv.index("-m") if "-m" in argv else -1
    if _sys.argv[:1] != ["-m"] or argv[i + 1:i + 2] != ["minips"] or i < 0:
        return
    if _signal.getsignal(_signal.SIGINT) is not _signal.default_int_handler:
        return  # someone else's handler (or SIGINT ignored): leave it
    _signal.signal(_signal.SIGINT, _note_startup_sigint)


#: SIGINTs noted while ``python -m minips`` started (see _defer_sigint_while_starting)
_STARTUP_SIGINT: list = []


def _note_startup_sigint(signum, frame):
    _STARTUP_SIGINT.append(signum)


def end_startup_sigint_deferral() -> bool:
    """Give SIGINT back to Python's handler if ``python -m minips`` held it back
    during the imports (see _defer_sigint_while_starting); returns whether one
    arrived. Called once by :func:`minips.cli.main` when its imports are done."""
    if _signal.getsignal(_signal.SIGINT) is _note_startup_sigint:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    arrived = bool(_STARTUP_SIGINT)
    _STARTUP_SIGINT.clear()
    return arrived


_defer_sigint_while_starting()


def _limit_blas_threads():
    """Give BLAS (OpenBLAS/MKL) cores_on_node // ranks_on_node threads.

    BLAS reads these variables once, when NumPy loads it, which is before MPI
    can tell us the ranks per node; so read the launcher's own variables
    (MPICH/Hydra, Open MPI, Slurm). The user's own settings always win.
    See kernels/threads.py for the Numba side.
    """
    local = (_os.environ.get("MPI_LOCALNRANKS") or _os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE")
             or _os.environ.get("SLURM_NTASKS_PER_NODE", "").split("(")[0] or "1")
    try:
        local = max(1, int(local))
    except ValueError:
        local = 1
    if local > 1:
        cores = len(_os.sched_getaffinity(0)) if hasattr(_os, "sched_getaffinity") else (_os.cpu_count() or 1)
        n = max(1, cores // local)
        user_set = any(_os.environ.get(v) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"))
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            _os.environ.setdefault(var, str(n))
        # A script that imported NumPy (or matplotlib) before minips has already
        # loaded BLAS with one thread per core: limit the running pools too, or
        # two ranks on two cores run four BLAS threads and every GEMM waits.
        import sys as _sys

        if "numpy" in _sys.modules and not user_set:
            try:
                from threadpoolctl import threadpool_limits

                threadpool_limits(n)
            except ImportError:
                pass


_limit_blas_threads()
from . import random  # noqa: F401
from .autograd import Function, enable_grad, is_grad_enabled, no_grad  # noqa: F401
from .tensor import Tensor, as_tensor, tensor  # noqa: F401

# The arithmetic syntax (x + y, x @ w, x.exp(), x.backward() ...) is sugar for
# minips.ops and minips.autograd, bound onto Tensor by this import, so that
# tensor.py imports nothing above it. Python runs this file before any minips.*
# module, so the syntax is there whatever is imported first.
from . import tensor_methods  # noqa: F401

__version__ = "0.1.0"
