"""Training on several ranks through the public algorithm interface.

On virtual ranks (threads of this process; the rules are under test): N-rank
synchronous SGD equals 1-rank SGD on the N-times batch; pseudo-sync equals a
one-process simulation of the stale-by-k rule. Under ``mpiexec -n P`` (with a
timeout; marked ``mpi``): replicas stay bit-identical and nothing is left
pending in every progress mode; a failing rank aborts the job; a buffer
written while in flight fails loudly; the emulated network delays completion.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import ROOT, run_ranks, subprocess_env

WORKER = str(Path(__file__).with_name("mpi_worker.py"))
MPIEXEC = shutil.which("mpiexec")
if MPIEXEC is None:  # pragma: no cover - the mpi extra installs it
    pytest.fail("mpiexec not found: pip install -e '.[mpi,test]'", pytrace=False)


def launch(n, opts, tmp_path, timeout=120, expect_ok=True, mpi=False):
    """Run the worker on n ranks (n=0: one rank); returns (npz or None, proc). The
    ranks are virtual (threads of this process: the algorithms' rules are under
    test) unless ``mpi`` (``mpiexec -n n``; n = 0: plain python, one process)."""
    out = tmp_path / f"out-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    proc = run_ranks(n, WORKER, json.dumps(opts), str(out), timeout=timeout, mpi=mpi)
    if expect_ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
        return np.load(out), proc
    return None, proc


def run_code_on_ranks(n, code, env=None, timeout=60):
    """``mpiexec -n n python -c code`` from the repository root; returns the CompletedProcess."""
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env if env is not None else subprocess_env())


# float32 sums in a different order (per-rank means, then the allreduce) agree
# with the big-batch mean to a few ulps per step; over 12 steps of SGD with
# momentum the weights agree to ~1e-6 relative.
RTOL, ATOL = 2e-5, 2e-6


@pytest.mark.parametrize("P", [2, 3, 4])
@pytest.mark.parametrize("algo", ["sync", "overlap-sync"])
def test_sync_on_P_ranks_equals_one_rank_with_P_times_batch(P, algo, tmp_path):
    many, _ = launch(P, {"algo": algo, "steps": 12, "batch": 8}, tmp_path)
    one, _ = launch(0, {"algo": "sync", "steps": 12, "batch": 8 * P}, tmp_path)
    np.testing.assert_allclose(many["weights"], one["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(many["hashes"].tolist())) == 1 and int(many["pending"]) == 0


def _reference_stale_run(P, batch, steps, predictor, staleness):
    """One-process simulation of the stale-by-k rule on the same model and global batches."""
    import minips as mp
    from minips.data import BatchLoader, DistributedSampler
    from minips.distributed.flat import FlatParams
    from minips.labs.staleness import simulate_stale_sgd
    from minips.models import MLP

    sys.path.insert(0, str(Path(WORKER).parent))
    from mpi_worker import synthetic

    mp.random.seed(0)
    model = MLP(20, (16,), 4)
    flat = FlatParams(model.parameters())
    x, y = synthetic()
    loader = BatchLoader(x, y, batch * P, DistributedSampler(len(x), 0, 1, seed=3))
    batches = []
    while len(batches) < steps:
        batches += list(loader)
    saved = flat.weights.copy()

    def grad_fn(w, t):
        flat.weights[...] = w
        flat.grads[0].fill(0)
        model.loss(batches[t]).backward()
        return flat.grads[0].copy()

    return simulate_stale_sgd(grad_fn, saved, predictor, staleness, lr=0.1, momentum=0.9, steps=steps)["w"]


@pytest.mark.parametrize("predictor,staleness,P", [("last", 1, 2), ("adaptive", 1, 2), ("adaptive", 2, 3),
                                                   ("lookahead", 1, 2), ("holt", 2, 2)])
def test_pseudo_sync_equals_one_process_simulation(predictor, staleness, P, tmp_path):
    run, _ = launch(P, {"algo": "pseudo-sync", "steps": 12, "batch": 8, "predictor": predictor,
                        "staleness": staleness}, tmp_path)
    ref = _reference_stale_run(P, 8, 12, predictor, staleness)
    np.testing.assert_allclose(run["weights"], ref, rtol=RTOL, atol=ATOL)
    assert len(set(run["hashes"].tolist())) == 1 and int(run["pending"]) == 0


@pytest.mark.mpi(ranks=3)
@pytest.mark.parametrize("progress", ["none", "poll", "thread"])
def test_replicas_identical_and_nothing_pending(progress, tmp_path):
    """sync, overlap-sync and pseudo-sync one after the other in one launch per progress mode."""
    algos = ["sync", "overlap-sync", "pseudo-sync"]
    _, proc = launch(3, {"algos": algos, "steps": 15, "batch": 8, "progress": progress, "predictor": "adaptive",
                         "perturb_rank0": True}, tmp_path, expect_ok=False, mpi=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for algo in algos:
        run = np.load(next(tmp_path.glob(f"out-3-*-{algo}.npz")))
        assert len(set(run["hashes"].tolist())) == 1, algo
        assert int(run["pending"]) == 0, algo
        assert int(run["steps"]) == 15, algo


@pytest.mark.mpi(ranks=3)
def test_one_failing_rank_aborts_the_job(tmp_path):
    _, proc = launch(3, {"algo": "pseudo-sync", "steps": 50, "fail_rank": 1, "fail_step": 3},
                     tmp_path, timeout=60, expect_ok=False, mpi=True)
    assert proc.returncode != 0
    assert "injected failure on rank 1 at step 3" in proc.stderr
    assert "aborting all ranks" in proc.stderr


@pytest.mark.mpi
def test_writing_a_buffer_in_flight_fails_loudly(tmp_path):
    _, proc = launch(2, {"algo": "pseudo-sync", "steps": 5, "write_in_flight": True, "progress": "none"},
                     tmp_path, timeout=60, expect_ok=False, mpi=True)
    assert proc.returncode != 0
    assert "read-only" in proc.stderr


@pytest.mark.mpi
def test_emulated_network_delays_completion(tmp_path):
    # 2 ranks, 1 MB over a 1 Gb/s link: ring allreduce ~ 2*50us + 1MB*8ns = ~8.5 ms.
    script = (
        "import time, numpy as np\n"
        "from minips.distributed.comm import get_comm\n"
        "c = get_comm(network='1gbe')\n"
        "b = np.ones(262144, np.float32)\n"
        "t0 = time.perf_counter(); r = c.iallreduce(b); early = r.test(); r.wait()\n"
        "dt = time.perf_counter() - t0\n"
        "expect = c.network.allreduce_time(b.nbytes, 2)\n"
        "assert not early and dt >= expect, (early, dt, expect)\n"
        "assert b[0] == 2.0\n"
        "t0 = time.perf_counter(); c.allreduce(b); assert time.perf_counter() - t0 >= expect\n"
        "print('ok', dt, expect)\n")
    proc = run_code_on_ranks(2, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok") == 2


@pytest.mark.mpi
def test_emulated_link_carries_one_request_at_a_time(tmp_path):
    # Two 1 MB requests posted together on emulated 1 GbE: the second leaves the
    # wire one modelled time after the first, not at the same moment.
    script = (
        "import time, numpy as np\n"
        "from minips.distributed.comm import get_comm\n"
        "c = get_comm(network='1gbe')\n"
        "a, b = np.ones(262144, np.float32), np.ones(262144, np.float32)\n"
        "T = c.network.allreduce_time(a.nbytes, 2)\n"
        "t0 = time.perf_counter(); ra = c.iallreduce(a); rb = c.iallreduce(b)\n"
        "ra.wait(); ta = time.perf_counter() - t0; rb.wait(); tb = time.perf_counter() - t0\n"
        "assert ta >= T and tb >= 2 * T, (ta, tb, T)\n"
        "print('ok')\n")
    proc = run_code_on_ranks(2, script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok") == 2


BLAS_PROBE = """
import os, numpy as np          # NumPy (and so BLAS) first, as tutorials and user scripts do
import minips
from minips.distributed.comm.mpi import launcher_world   # the rank its launcher set (PMI_RANK, OMPI_COMM_WORLD_RANK)
from threadpoolctl import threadpool_info
cores = len(os.sched_getaffinity(0))
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
with open(os.path.join(OUT, "rank" + str(launcher_world()[0])), "w") as f:   # no interleaved stdout
    f.write(" ".join(map(str, [cores, *blas])))
"""


@pytest.mark.mpi
def test_blas_pool_is_limited_per_rank_even_when_numpy_came_first(tmp_path):
    """Two ranks on a node get cores // 2 BLAS threads each, also in a script that
    loaded BLAS before minips could set the environment variables."""
    env = {k: v for k, v in subprocess_env().items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    code = f"OUT = {str(tmp_path)!r}\n" + BLAS_PROBE
    proc = run_code_on_ranks(2, code, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [(tmp_path / f"rank{r}").read_text().split() for r in (0, 1)]
    for cores, *blas in lines:
        assert blas and all(int(b) == max(1, int(cores) // 2) for b in blas), lines
