"""Functions that run the same code on MPI ranks and on virtual ranks, for
tests/test_virtual.py: each takes the rank's Comm and returns what it saw.
Under MPI, ``tests/virtual_mpi_worker.py NAME OUTDIR`` calls one and pickles
the result per rank; on virtual ranks the test calls it in-process."""
import numpy as np


def reductions(c):
    """Sums whose order shows: float32 arrays of several sizes (values of very
    different magnitudes, so another order changes the last bits), blocking
    and nonblocking, and Python floats through the scalar reductions."""
    out = {}
    for n in (1, 7, 100, 3001, 100_003):
        x = np.random.default_rng(1000 * n + c.rank).standard_normal(n).astype(np.float32)
        x *= np.float32(10.0 ** (c.rank % 3))
        a = x.copy()
        c.allreduce(a)
        b = x.copy()
        c.iallreduce(b).wait()
        out[n] = (a, b)
    v = float(np.random.default_rng(7 + c.rank).standard_normal() * 10 ** (c.rank % 4))
    out["scalar"] = [c.allreduce_scalar(v, op) for op in ("sum", "max", "min")]
    req = c.iallreduce_scalar(v)
    req.wait()
    out["iscalar"] = req.result
    out["bytes_sent"] = c.bytes_sent
    return out
