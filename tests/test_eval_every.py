"""--eval-every N (issue 52, item 1): validation evaluations every N steps,
in curve.csv and summary.json's "curve", outside every clock; refused
without --val-fraction; a stopped and resumed run continues the same curve;
time_to_target reads the finest curve."""
import csv
import json

import pytest

from minips import report, rundir
from minips.train import TrainConfig, Trainer

from .conftest import run_cli

# 10,000 training images, 10 % held out: 9,000 / batch 500 = 18 steps per epoch
STEPS = 9000 // 500
BASE = dict(model="mlp", data="fashion-mnist-mini", epochs=2, batch_size=500, quiet=True, val_fraction=0.1,
            algo="pseudo-sync:predictor=adaptive:staleness=2")
SAME = ("step", "epoch", "epoch_end", "val_loss", "val_accuracy")  # what a resume must give bit for bit


def train(out, **kw):
    return Trainer(TrainConfig(**{**BASE, "out": str(out), **kw})).run()


def curve_csv(out):
    with open(out / rundir.CURVE) as f:
        return list(csv.DictReader(f))


pytestmark = pytest.mark.usefixtures("one_numba_thread")  # runs compared bit for bit (conftest.py)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole")
    return out, train(out, eval_every=7)


@pytest.mark.parametrize("n", [5, 6])  # 18 steps: 5 does not divide them, 6 does
def test_one_epoch_has_a_row_every_n_steps_and_the_epochs_row(n, tmp_path):
    s = train(tmp_path / "r", epochs=1, eval_every=n, algo="sync")
    mid = [k * n for k in range(1, STEPS // n + 1) if k * n < STEPS]  # an epoch's last step is its own row
    assert len(mid) == (STEPS // n if STEPS % n else STEPS // n - 1)
    assert [(r["step"], r["epoch_end"]) for r in s["curve"]] == [(k, 0) for k in mid] + [(STEPS, 1)]
    assert [r["epoch"] for r in s["curve"]] == [k / STEPS for k in mid] + [1.0]
    assert all(0 < r["val_accuracy"] <= 1 and r["val_loss"] > 0 and "test_accuracy" not in r for r in s["curve"])
    # the epoch's own row is the history's validation metrics; metrics.csv keeps one row per epoch
    h = s["history"]
    assert len(h) == 1 and s["curve"][-1]["val_accuracy"] == h[0]["val_accuracy"]
    with open(tmp_path / "r" / rundir.METRICS) as f:
        assert len(list(csv.DictReader(f))) == 1
    written = curve_csv(tmp_path / "r")
    assert [int(r["step"]) for r in written] == mid + [STEPS]
    assert [float(r["val_accuracy"]) for r in written] == [r["val_accuracy"] for r in s["curve"]]


def test_evaluations_change_nothing_else_and_no_clock_counts_them(whole, tmp_path, monkeypatch):
    out, s = whole
    plain = train(tmp_path / "plain")
    keys = ("epoch", "step", "train_loss", "test_loss", "test_accuracy", "val_loss", "val_accuracy")
    assert [{k: r[k] for k in keys} for r in s["history"]] == [{k: r[k] for k in keys} for r in plain["history"]]
    assert plain["curve"] == [] and not (tmp_path / "plain" / rundir.CURVE).exists()
    # each mid-epoch evaluation made 0.3 s slower: neither a step time nor the wall time holds those seconds
    slow = Trainer.evaluate

    def evaluate(self, test=True):
        if not test:
            import time
            time.sleep(0.3)
        return slow(self, test)

    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    s = train(tmp_path / "slow", eval_every=7)
    mids = sum(1 for r in s["curve"] if not r["epoch_end"])
    assert mids == 5 and s["eval_every_s"] >= 0.3 * mids  # steps 7, 14, 21, 28, 35 (18, 36: the epochs' ends)
    with open(tmp_path / "slow" / rundir.TRACE) as f:
        trace = list(csv.DictReader(f))
    after = [float(t["step_s"]) for t in trace if int(t["step"]) in (7, 14, 21, 28, 35)]  # the steps after each
    assert len(after) == 5 and max(after) < 0.3
    assert s["wall_time_s"] - sum(float(t["step_s"]) for t in trace) < 0.3 * mids
    assert s["history"][-1]["wall_time_s"] <= s["wall_time_s"]


@pytest.mark.parametrize("cut", [10, 14, 18])  # between evaluations, on one, on the first epoch's last step
def test_a_resumed_run_continues_the_same_curve(cut, whole, tmp_path):
    out, s = whole
    part = tmp_path / "part"
    first = train(part, eval_every=7, max_steps=cut, checkpoint_every=cut)
    assert [r["step"] for r in first["curve"]] == [k for k in (7, 14, 18) if k <= cut]
    resumed = train(part, eval_every=7, resume=str(part / rundir.CHECKPOINT))
    assert [r["step"] for r in s["curve"]] == [7, 14, 18, 21, 28, 35, 36]
    assert [{k: r[k] for k in SAME} for r in resumed["curve"]] == [{k: r[k] for k in SAME} for r in s["curve"]]
    a, b = curve_csv(out), curve_csv(part)
    assert [{k: r[k] for k in SAME} for r in b] == [{k: r[k] for k in SAME} for r in a]
    # the clock continues: no row's time goes back
    times = [r["wall_time_s"] for r in resumed["curve"]]
    assert times == sorted(times)


def test_eval_every_without_a_validation_split_is_refused_in_one_line(tmp_path):
    r = run_cli(["train", "--model", "mlp", "--eval-every", "5", "--out", str(tmp_path / "r")])
    assert r.returncode != 0 and "Traceback" not in r.stderr
    line = [x for x in r.stderr.splitlines() if "--eval-every" in x]
    assert len(line) == 1 and "add --val-fraction" in line[0]
    assert not (tmp_path / "r" / rundir.METRICS).exists()
    with pytest.raises(ValueError, match="must be >= 0"):
        TrainConfig(eval_every=-1, val_fraction=0.1).validate()


def test_time_to_target_reads_the_finest_curve():
    history = [{"epoch": 1, "step": 18, "val_accuracy": 0.80, "test_accuracy": 0.79, "wall_time_s": 10.0,
                "projected_time_s": 1.8, "partial": 0}]
    curve = [{"step": 5, "epoch": 5 / 18, "epoch_end": 0, "val_accuracy": 0.70, "wall_time_s": 3.0,
              "projected_time_s": 0.5},
             {"step": 10, "epoch": 10 / 18, "epoch_end": 0, "val_accuracy": 0.82, "wall_time_s": 6.0,
              "projected_time_s": 1.0},
             {"step": 18, "epoch": 1.0, "epoch_end": 1, "val_accuracy": 0.80, "wall_time_s": 10.0,
              "projected_time_s": 1.8}]
    s = {"history": history, "curve": curve}
    assert report.time_to_target(s, 0.81, "val_accuracy") == 6.0  # a mid-epoch point, not the epoch's 10 s
    assert report.time_to_target(s, 0.83, "val_accuracy") is None
    assert report.time_to_target({"history": history}, 0.75, "val_accuracy") == 10.0  # no curve: per epoch
    assert report.time_to_target(s, 0.75, "test_accuracy") == 10.0  # the curve holds no test metric
    assert report.time_to_target({**s, "virtual": True}, 0.81, "val_accuracy") == 1.0
    pts = report.evaluation_curve(s, None, "val_accuracy")
    assert [(p["step"], p["val_accuracy"]) for p in pts] == [(5, 0.70), (10, 0.82), (18, 0.80)]


def test_a_real_runs_time_to_target_is_its_first_mid_row_at_the_target(whole):
    _, s = whole
    first = s["curve"][0]  # step 7: inside the first epoch
    assert first["epoch_end"] == 0 and first["wall_time_s"] < s["history"][0]["wall_time_s"]
    assert report.time_to_target(s, first["val_accuracy"], "val_accuracy") == first["wall_time_s"]
    assert json.loads(json.dumps(s["curve"])) == s["curve"]  # what summary.json and the checkpoint hold
