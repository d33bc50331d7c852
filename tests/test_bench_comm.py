"""bench comm smoke test (tiny sizes) and the alpha-beta fit."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from minips.distributed.costmodel import fit_ring_allreduce, ring_allreduce_time

from .conftest import ROOT, subprocess_env


def test_fit_recovers_hand_made_model_and_reports_quality():
    n = np.array([8, 64, 1024, 65536, 2**20, 2**24], dtype=float)
    t = np.array([ring_allreduce_time(x, 8, 3e-6, 2e-10) for x in n])
    f = fit_ring_allreduce(n, t, 8)
    assert f.model.alpha == pytest.approx(3e-6, rel=1e-6)
    assert f.model.beta == pytest.approx(2e-10, rel=1e-6)
    assert f.r2 == pytest.approx(1.0) and f.max_rel_error < 1e-9
    noisy = t * np.array([1.3, 0.8, 1.0, 1.1, 0.9, 1.0])
    g = fit_ring_allreduce(n, noisy, 8)
    assert 0.1 < g.max_rel_error < 0.5
    with pytest.raises(ValueError, match="P >= 2"):
        fit_ring_allreduce(n, t, 1)


@pytest.mark.mpi
def test_bench_comm_smoke(tmp_path):
    out = tmp_path / "c.json"
    env = subprocess_env()
    r = subprocess.run([shutil.which("mpiexec"), "-n", "2", sys.executable, "-m", "minips", "bench", "comm",
                        "--max-bytes", "4096", "--iters", "20", "--overlap-mb", "0.25", "--json", str(out),
                        "--plot", str(tmp_path / "c.png")],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert [row["nbytes"] for row in res["allreduce"]] == [8 * 2**i for i in range(10)]
    assert all(row["allreduce_s"] > 0 for row in res["allreduce"])
    assert res["fit"]["points"] == 10 and res["fit"]["alpha_s"] >= 0
    assert {o["mode"] for o in res["overlap"]} == {"none", "poll", "thread"}
    assert all(0 <= o["overlap_efficiency"] <= 1 for o in res["overlap"])
    assert (tmp_path / "c.png").stat().st_size > 1000
    assert "ring model fit" in r.stdout
    # the header names no progress mode (the overlap table has one per row), and the
    # overlap table's columns are explained under it (issue 14)
    header = r.stdout.splitlines()[0]
    assert header.startswith("bench comm: ") and "progress=" not in header, header
    assert "overlap eff = 1 - wait after / allreduce" in r.stdout
    assert "slowdown = compute+comm / compute" in r.stdout
    assert "vs serial = (compute + allreduce) / (compute+comm + wait after)" in r.stdout
