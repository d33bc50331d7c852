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


def run_cli(args, timeout=120, env=None, cwd=None):
    """Run ``python -m minips ARGS`` in a subprocess; returns CompletedProcess."""
    e = dict(os.environ)
    e.pop("PMI_RANK", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "minips", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=cwd or ROOT)
