"""STL-SGD (minips/distributed/algorithms/stl_sgd.py): the stage schedule
(lr halves, stage doubles, period x2 or x sqrt 2 rounded), P = 1 equals plain
SGD, H = 1 equals sync, replicas identical right after each average and apart
in between, a resumed run (crossing stage boundaries, non-iid partition,
proximal anchor) bitwise equal to the uninterrupted one, clear option errors."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .conftest import run_ranks

WORKER = str(Path(__file__).with_name("mpi_worker.py"))
LAUNCH = str(Path(__file__).with_name("toy_launch.py"))
MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--batch-size", "16",
       "--schedule", "constant", "--lr", "0.05"]
RTOL, ATOL = 2e-5, 2e-6  # as tests/test_mpi.py: float32 sums in another order, 12 steps


def _worker(n, opts, tmp_path):
    """mpi_worker on n virtual ranks (0: one)."""
    out = tmp_path / f"w-{n}-{abs(hash(json.dumps(opts, sort_keys=True)))}.npz"
    r = run_ranks(n, WORKER, json.dumps(opts), str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out)


def _train(n, args, timeout=120):
    """``train`` with the toy algorithm registered, on n virtual ranks (0: one)."""
    r = run_ranks(n, LAUNCH, "train", *MLP, *map(str, args), timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("spec,message", [
    ("stl-sgd:k1=0", "k1 (first communication period) must be >= 1 step, got 0"),
    ("stl-sgd:t1=0", "t1 (first stage length) must be >= 1 step, got 0"),
    ("stl-sgd:t1=4:k1=8", "k1=8 is longer than the first stage t1=4: choose k1 <= t1"),
    ("stl-sgd:data=noniid", "option data must be one of iid, non-iid, got 'noniid'"),
    ("stl-sgd:gamma=-1", "gamma must be >= 0"),
])
def test_bad_options_say_what_to_write(spec, message):
    with pytest.raises(ValueError, match=None) as e:
        resolve(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("data,periods", [("iid", [2, 4, 8, 16]), ("non-iid", [1, 1, 2, 3, 4, 6, 8])])
def test_stage_schedule(data, periods):
    """One process, steps driven by hand: stage s lasts t1*2^s steps, its lr is
    lr/2^s, its period k1*2^s (iid) or round(k1*sqrt(2)^s) (non-iid)."""
    import minips as mp
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import get_comm
    from minips.models import MLP as Net
    from minips.optim import SGD
    mp.random.seed(0)
    model = Net(4, (3,), 2)
    k1 = 2 if data == "iid" else 1
    algo = build_algorithm(f"stl-sgd:t1=3:k1={k1}:data={data}", model.parameters(),
                           SGD(model.parameters(), lr=0.1), get_comm())
    algo.start()
    seen = []
    for t in range(3 * (2 ** len(periods) - 1)):
        stage = int(np.log2(t // 3 + 1))  # stages start at steps 0, 3, 9, 21, ...
        assert algo.adjust_lr(0.8) == pytest.approx(0.8 / 2 ** stage)
        algo.before_backward()
        algo.step()
        assert algo.log["stage"] == stage
        if not seen or seen[-1][0] != stage:
            seen.append((stage, algo.log["period"]))
    assert [p for _, p in seen] == periods


def test_one_rank_is_plain_sgd_and_period_one_is_sync(tmp_path):
    """P = 1: the same weights as sync bitwise; P = 2 with k1 = 1 (and one
    stage): weights averaged every step equal sync's to float32 tolerance (the
    mean of the per-rank momentum buffers follows sync's buffer)."""
    one = _worker(0, {"algo": "stl-sgd:t1=1000:k1=4", "steps": 12, "batch": 8}, tmp_path)
    ref = _worker(0, {"algo": "sync", "steps": 12, "batch": 8}, tmp_path)
    assert np.array_equal(one["weights"], ref["weights"])
    many = _worker(2, {"algo": "stl-sgd:t1=1000:k1=1", "steps": 12, "batch": 8}, tmp_path)
    sync = _worker(2, {"algo": "sync", "steps": 12, "batch": 8}, tmp_path)
    np.testing.assert_allclose(many["weights"], sync["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(many["hashes"].tolist())) == 1  # the last step (12) is an averaging step


def _ranks(path):
    from minips.checkpoint import load
    s = load(path)
    return s, [np.asarray(r["weights"]) for r in s["ranks"]]


def test_replicas_meet_at_averages_and_resume_is_bitwise(tmp_path):
    """2 ranks, non-iid data (dirichlet:0.5), non-iid schedule, proximal
    term: stages of 4, 8, 16 steps with periods 2, 3, 4 (k1=2 x sqrt2 rounded).
    Consensus distance (logged after every step) is 0 exactly after averaging
    steps and > 0 after the others; the run checkpointed at step 7 and resumed
    to 15 ends with the same per-rank weights, optimizer state and metrics."""
    common = ["--algo", "stl-sgd:t1=4:k1=2:data=non-iid:gamma=10", "--partition", "dirichlet:0.5",
              "--consensus-every", "1"]
    full, part = tmp_path / "full", tmp_path / "part"
    _train(2, [*common, "--max-steps", "15", "--checkpoint-every", "15", "--out", str(full)])
    _train(2, [*common, "--max-steps", "7", "--checkpoint-every", "7", "--out", str(part)])
    _train(2, [*common, "--max-steps", "15", "--checkpoint-every", "15", "--out", str(part),
               "--resume", str(part / "checkpoint.h5")])
    rows = list(csv.DictReader(open(full / "trace.csv")))
    averaged = [int(r["step"]) + 1 for r in rows if r["consensus_before_avg"]]
    assert averaged == [2, 4, 7, 10, 12]  # stage 0: 2, 4; stage 1 (4..11): every 3 and its end; stage 2: k=4
    assert [int(r["period"]) for r in rows] == [2] * 4 + [3] * 8 + [4] * 3
    assert {float(r["lr"]) for r in rows[4:12]} == {0.025}
    for r in rows:
        d = float(r["consensus_distance"])
        assert (d == 0.0) if r["consensus_before_avg"] else (d > 0.0)
        if r["consensus_before_avg"]:
            assert float(r["consensus_before_avg"]) > 0
    a, wa = _ranks(full / "checkpoint.h5")
    b, wb = _ranks(part / "checkpoint.h5")
    assert int(a["step"]) == int(b["step"]) == 15 and not np.array_equal(wa[0], wa[1])
    for x, y in zip(wa, wb):
        assert np.array_equal(x, y)
    for x, y in zip(a["ranks"], b["ranks"]):
        assert np.array_equal(np.asarray(x["optimizer"]["buffers"][0]), np.asarray(y["optimizer"]["buffers"][0]))
        assert np.array_equal(np.asarray(x["algorithm"]["anchor"]), np.asarray(y["algorithm"]["anchor"]))
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["test_loss"] == sb["test_loss"] and sa["final_stage"] == 2 and sa["final_period"] == 4
