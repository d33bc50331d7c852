"""Shared by test_gradient_tracking.py, test_dng.py, test_hetero_gossip.py:
launch tests/gossip3_worker.py on n ranks (0: one process) with a timeout."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from .conftest import ROOT, subprocess_env
from .test_mpi import MPIEXEC

WORKER = str(Path(__file__).with_name("gossip3_worker.py"))
#: mpi_worker's training run: MLP, synthetic data, batch 8 per rank, SGD lr 0.1
RUN = {"steps": 12, "batch": 8}


def launch3(n, opts, tmp_path, timeout=120):
    """Run the worker; returns its npz (rank 0's results)."""
    out = tmp_path / f"g3-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    cmd = [sys.executable, WORKER, json.dumps(opts), str(out)]
    if n:
        cmd = [MPIEXEC, "-n", str(n), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=subprocess_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(out)
