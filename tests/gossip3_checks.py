"""Shared by test_gradient_tracking.py, test_dng.py, test_hetero_gossip.py:
launch tests/gossip3_worker.py on n virtual ranks (0: one) in this process."""
import json
from pathlib import Path

import numpy as np

from .conftest import run_ranks

WORKER = str(Path(__file__).with_name("gossip3_worker.py"))
#: mpi_worker's training run: MLP, synthetic data, batch 8 per rank, SGD lr 0.1
RUN = {"steps": 12, "batch": 8}


def launch3(n, opts, tmp_path, timeout=120):
    """Run the worker on n virtual ranks (0: one); returns its npz (rank 0's results)."""
    out = tmp_path / f"g3-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    proc = run_ranks(n, WORKER, json.dumps(opts), str(out), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(out)
