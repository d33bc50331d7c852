"""Shared test helpers."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def figures(monkeypatch):
    """Capture each figure minips.plots saves (still written, not closed) by
    file name, so a test can read its axes, titles and legends."""
    from minips import plots
    got = {}

    def keep(fig, path):
        fig.savefig(path, dpi=120, bbox_inches="tight")
        got[str(path).rsplit("/", 1)[-1]] = fig
    monkeypatch.setattr(plots, "_save", keep)
    yield got
    import matplotlib.pyplot as plt
    plt.close("all")


def subprocess_env(extra=None):
    """Environment for subprocesses: no inherited MPI launcher variables, and one
    Numba/BLAS thread (the tests check correctness; on a loaded 2-core machine
    parallel loops whose threads get descheduled make runs 10x slower)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    e.setdefault("NUMBA_NUM_THREADS", "1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    e.update(extra or {})
    return e


def run_cli(args, timeout=120, env=None, cwd=None):
    """Run ``python -m minips ARGS`` in a subprocess; returns CompletedProcess."""
    e = subprocess_env(env)
    return subprocess.run([sys.executable, "-m", "minips", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=cwd or ROOT)
