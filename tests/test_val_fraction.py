"""--val-fraction: a stratified, seeded validation split held out from the
training set; validation metrics per epoch; bench study choosing by them."""
import csv
import json

import numpy as np
import pytest

from minips.bench.study import StudyError, load_grid, markdown_report
from minips.data import holdout_indices

from .conftest import run_cli


def test_holdout_is_stratified_disjoint_and_fixed(rng):
    y = np.repeat(np.arange(5), [100, 200, 300, 50, 350])
    keep, val = holdout_indices(y, 0.1)
    assert len(np.intersect1d(keep, val)) == 0 and len(keep) + len(val) == len(y)
    assert np.array_equal(np.sort(np.concatenate([keep, val])), np.arange(len(y)))
    assert np.bincount(y[val]).tolist() == [10, 20, 30, 5, 35]  # each class keeps its share
    again = holdout_indices(y, 0.1)
    assert np.array_equal(again[1], val)                       # the same samples in every run
    assert not np.array_equal(holdout_indices(y, 0.1, seed=1)[1], val)
    k2, v2 = holdout_indices(1000, 0.25)                        # no labels: a plain random subset
    assert len(v2) == 250 and len(k2) == 750


@pytest.mark.parametrize("labels,fraction,message", [
    (np.zeros(10, int), 0.0, "--val-fraction must be in (0, 1)"),
    (np.zeros(10, int), 1.0, "--val-fraction must be in (0, 1)"),
    (np.repeat([0, 1], [8, 20]), 0.01,
     "holds out no sample of the 28 training samples; use at least 0.12 (the smallest class has 8"),
    (np.zeros(3, int), 0.9, "leaves no training sample of 3"),
])
def test_holdout_errors(labels, fraction, message):
    with pytest.raises(ValueError) as e:
        holdout_indices(labels, fraction)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_train_records_validation_metrics(tmp_path):
    out = tmp_path / "run"
    r = run_cli(["train", "--model", "mlp", "--epochs", "2", "--batch-size", "256", "--algo", "sync",
                 "--val-fraction", "0.2", "--quiet", "--out", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert len(rows) == 2 and all(0.5 < float(row["val_accuracy"]) <= 1 for row in rows)
    s = json.loads((out / "summary.json").read_text())
    assert s["val_fraction"] == 0.2 and s["val_accuracy"] == float(rows[-1]["val_accuracy"])
    assert s["val_loss"] > 0 and s["test_accuracy"] is not None
    # 8,000 of the mini set's 10,000 training images remain: 31 steps of 256 per epoch
    assert s["steps"] == 2 * (8000 // 256)
    for bad, msg in (("1.5", "--val-fraction must be in [0, 1)"), ("0.00001", "holds out no sample")):
        r = run_cli(["train", "--model", "mlp", "--val-fraction", bad, "--out", str(tmp_path / "bad")])
        assert r.returncode != 0 and msg in r.stderr and "Traceback" not in r.stderr


GRID = """
ranks = [2]
seeds = [0, 1]
algos = ["sync", "pseudo-sync:last:1", "pseudo-sync:local:1"]
metric = "val_accuracy"
[train]
model = "mlp"
{val}
[lr.fixed]
lr = 0.05
"""


def test_study_chooses_by_validation_and_reports_test(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(val=""))
    with pytest.raises(StudyError, match="add val-fraction"):
        load_grid(p)
    p.write_text(GRID.format(val="val-fraction = 0.1"))
    g = load_grid(p)
    assert g.report_metric == "test_accuracy"
    # local is best on validation, last on test: the report must choose local and say so
    vals = {"sync": (0.90, 0.91), "pseudo-sync:last:1": (0.80, 0.95), "pseudo-sync:local:1": (0.88, 0.85)}
    recs = [{"P": 2, "lr": "fixed", "label": a, "seed": s, "status": "ok", "metric": v, "reported": t}
            for a, (v, t) in vals.items() for s in (0, 1)]
    md = markdown_report(g, recs)
    assert "# reported: test_accuracy of the same runs" in md
    assert "| fixed | 2 | pseudo-sync:local:1 | 0.8800 | 0.8500 (2 seeds) | 0.9100 (2 seeds) |" in md
