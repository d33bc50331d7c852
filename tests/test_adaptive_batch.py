"""Adaptive batch sizes for local SGD (minips/distributed/algorithms/adaptive_batch.py)
and the Trainer hook it needs (Algorithm.batches_per_step): the norm test
against a hand computation; with a test that never fires it is periodic
averaging with a fixed batch (bitwise equal to the toy fixture's); P = 1 is
plain SGD and H = 1 is sync; with a tiny theta the batch grows to max-batch,
an epoch holds fewer (bigger) steps, replicas meet at each average, and a run
stopped in the middle of an epoch resumes bitwise."""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.adaptive_batch import norm_test_batch

from .conftest import run_ranks

WORKER = str(Path(__file__).with_name("mpi_worker.py"))
LAUNCH = str(Path(__file__).with_name("toy_launch.py"))
MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--batch-size", "16",
       "--schedule", "constant", "--lr", "0.05"]
RTOL, ATOL = 2e-5, 2e-6  # as tests/test_mpi.py


def _worker(n, opts, tmp_path):
    """mpi_worker on n virtual ranks (0: one)."""
    out = tmp_path / f"w-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    r = run_ranks(n, WORKER, json.dumps(opts), str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out)


def _train(n, args):
    """``train`` with the toy algorithm registered, on n virtual ranks."""
    r = run_ranks(n, LAUNCH, "train", *MLP, *map(str, args))
    assert r.returncode == 0, r.stderr[-3000:]


def _ranks(path):
    from minips.checkpoint import load
    s = load(path)
    return s, [np.asarray(r["weights"]) for r in s["ranks"]]


@pytest.mark.parametrize("spec,message", [
    ("adaptive-batch:period=0", "period (H) must be >= 1 step, got 0"),
    ("adaptive-batch:theta=0", "theta must be > 0"),
    ("adaptive-batch:max-batch=-4", "max-batch must be >= 0 samples"),
    ("adaptive-batch:lr-rule=cubic", "lr-rule must be one of constant, linear, sqrt, got 'cubic'"),
])
def test_bad_options_say_what_to_write(spec, message):
    with pytest.raises(ValueError) as e:
        resolve(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_norm_test_formula_by_hand():
    # P = 2 gradients of batches of b = 4: g1 = (1, 0), g2 = (3, 0); gbar = (2, 0);
    # sum ||g_i - gbar||^2 = 2; V = 4/(2-1)*2 = 8; theta = 0.5: 8 / (2 * 0.25 * 4) = 4
    assert norm_test_batch(2.0, 4.0, 4, 2, 0.5) == 4
    assert norm_test_batch(2.0, 4.0, 4, 2, 0.49) == 5  # ceil(4.16...)
    assert norm_test_batch(2.0, 4.0, 4, 1, 0.5) == 4   # one rank: no estimate, unchanged
    assert norm_test_batch(2.0, 0.0, 4, 2, 0.5) == 4   # zero mean gradient: unchanged
    r = np.random.default_rng(0)
    g = r.standard_normal((5, 7))
    gbar = g.mean(0)
    v = 8 * ((g - gbar) ** 2).sum() / 4
    assert norm_test_batch(float(((g - gbar) ** 2).sum()), float(gbar @ gbar), 8, 5, 0.3) == \
        math.ceil(v / (5 * 0.09 * (gbar @ gbar)))


CODE = """
import json, numpy as np, minips as mp
from minips.distributed.algorithms import build_algorithm
from minips.distributed.comm import get_comm
from minips.models import MLP
from minips.optim import SGD
comm = get_comm(); mp.random.seed(0); model = MLP(3, (2,), 2)
algo = build_algorithm("adaptive-batch:period=2:theta=0.3:max-batch=80", model.parameters(),
                       SGD(model.parameters(), lr=0.1), comm)
algo.batch_size(8); algo.start()
g = np.random.default_rng(comm.rank).standard_normal(algo.flat.weights.size).astype(np.float32)
algo.before_backward(); algo.flat.grads[0][...] = g; algo.step()
allg = comm.allgather(g)
if comm.rank == 0:
    print(json.dumps({"b_test": algo.log["b_test"], "m": algo.batches_per_step(), "g": [x.tolist() for x in allg]}))
"""


def test_norm_test_in_the_class_matches_numpy_on_three_ranks(tmp_path):
    """Three (virtual) ranks with known gradients: the class's b_test and new m
    equal a numpy computation of the test from the same three vectors."""
    script = tmp_path / "norm_test.py"
    script.write_text(CODE)
    r = run_ranks(3, script)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    g = np.array(out["g"], np.float64)
    gbar = g.mean(0)
    V = 8 / 2 * ((g - gbar) ** 2).sum()
    b_test = math.ceil(V / (3 * 0.3 ** 2 * (gbar @ gbar)))
    assert out["b_test"] == b_test
    assert out["m"] == min(10, max(1, math.ceil(b_test / 8)))


def test_one_rank_is_plain_sgd_and_period_one_is_sync(tmp_path):
    one = _worker(0, {"algo": "adaptive-batch:period=3", "steps": 12, "batch": 8}, tmp_path)
    ref = _worker(0, {"algo": "sync", "steps": 12, "batch": 8}, tmp_path)
    assert np.array_equal(one["weights"], ref["weights"])
    many = _worker(2, {"algo": "adaptive-batch:period=1:theta=1e9", "steps": 12, "batch": 8}, tmp_path)
    sync = _worker(2, {"algo": "sync", "steps": 12, "batch": 8}, tmp_path)
    np.testing.assert_allclose(many["weights"], sync["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(many["hashes"].tolist())) == 1


def test_a_test_that_never_fires_is_periodic_averaging_with_a_fixed_batch(tmp_path):
    """theta = 1e9: the batch stays b0 and the run is bitwise the toy fixture's
    periodic averaging (tests/toy_algorithm.py, an independent implementation)."""
    args = ["--epochs", "1", "--max-steps", "9", "--checkpoint-every", "9"]
    _train(2, [*args, "--algo", "adaptive-batch:period=3:theta=1e9", "--out", str(tmp_path / "a")])
    _train(2, [*args, "--algo", "toy-drift:period=3", "--out", str(tmp_path / "t")])
    _, wa = _ranks(tmp_path / "a" / "checkpoint.h5")
    _, wt = _ranks(tmp_path / "t" / "checkpoint.h5")
    for x, y in zip(wa, wt):
        assert np.array_equal(x, y)
    rows = list(csv.DictReader(open(tmp_path / "a" / "trace.csv")))
    assert {int(r["batch"]) for r in rows} == {16}


def test_tiny_theta_grows_the_batch_to_max_and_resumes_bitwise(tmp_path):
    """theta = 1e-3 grows the batch to max-batch = 64 (4 loader batches of 16)
    at the first test; an epoch of 312 loader batches per rank then holds
    1 + 77 steps (3 batches left over); a run stopped at step 50 and resumed
    to 90 (across the epoch end) ends bitwise equal to the uninterrupted run."""
    common = ["--algo", "adaptive-batch:period=2:theta=1e-3:max-batch=64", "--epochs", "2",
              "--consensus-every", "1"]
    full, part = tmp_path / "full", tmp_path / "part"
    _train(2, [*common, "--max-steps", "90", "--checkpoint-every", "90", "--out", str(full)])
    _train(2, [*common, "--max-steps", "50", "--checkpoint-every", "50", "--out", str(part)])
    _train(2, [*common, "--max-steps", "90", "--checkpoint-every", "90", "--out", str(part),
               "--resume", str(part / "checkpoint.h5")])
    rows = list(csv.DictReader(open(full / "trace.csv")))
    assert [int(r["batch"]) for r in rows[:3]] == [16, 64, 64] and {int(r["batch"]) for r in rows[1:]} == {64}
    assert [r["epoch"] for r in rows].count("0") == 78
    for r in rows:  # replicas meet at each average (steps 2, 4, ...), apart in between
        assert (float(r["consensus_distance"]) == 0.0) == (int(r["step"]) % 2 == 1)
    a, wa = _ranks(full / "checkpoint.h5")
    b, wb = _ranks(part / "checkpoint.h5")
    assert list(b["position"]) == list(a["position"]) == [1, 12 * 4]  # epoch 1, 12 steps of 4 batches in
    for x, y in zip(wa, wb):
        assert np.array_equal(x, y)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["test_loss"] == sb["test_loss"] and sa["final_batch_per_rank"] == 64
    # the full epoch, then the partial one --max-steps ended in (marked; the resumed run's rows are the same)
    assert [(h["step"], h["partial"]) for h in sa["history"]] == [(78, 0), (90, 1)]
    assert [{k: h[k] for k in ("step", "train_loss", "test_loss", "partial")} for h in sb["history"]] == \
        [{k: h[k] for k in ("step", "train_loss", "test_loss", "partial")} for h in sa["history"]]
