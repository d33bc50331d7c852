"""Tutorials on a busy machine (issue 14): when the load average is above the
core count, the tutorials' common setup (tutorials/_common.py) drops to one
Numba/BLAS thread per process. Tutorial 2 used to crash there, because Numba
had been imported (its threads launched) before the setup changed
NUMBA_NUM_THREADS: "RuntimeError: Cannot set NUMBA_NUM_THREADS to a different
value once the threads have been launched". Each order of imports must work
and end with one thread. The load and the cores are faked in the child
process, so the test does not depend on how busy the test machine is."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

CHILD = r"""
import os, sys
os.getloadavg = lambda: (50.0, 50.0, 50.0)          # a busy machine ...
os.sched_getaffinity = lambda pid: set(range(4))    # ... with 4 cores (Numba would start 4 threads)
sys.path.insert(0, sys.argv[1])
import numpy as np

def parallel_sum():
    import numba

    @numba.njit(parallel=True)
    def total(x):
        s = 0.0
        for i in numba.prange(x.size):
            s += x[i]
        return s
    return total(np.ones(1000))

if sys.argv[2] == "numba-first":        # tutorial 2's order before the fix: threads launched first
    assert parallel_sum() == 1000.0
    import _common  # noqa: F401
else:
    import _common  # noqa: F401
import numba
assert parallel_sum() == 1000.0         # compiles again: Numba re-reads NUMBA_NUM_THREADS here
print("threads after the setup:", numba.get_num_threads())
"""


@pytest.mark.parametrize("order", ["numba-first", "common-first"])
def test_common_setup_on_a_busy_machine_does_not_crash_numba(order, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                        "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")}
    env.update({"MPLBACKEND": "Agg", "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")})
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "tutorials"), order], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "this machine looks busy (load average 50.0 on 4 cores)" in r.stdout, r.stdout
    assert "threads after the setup: 1" in r.stdout, r.stdout
