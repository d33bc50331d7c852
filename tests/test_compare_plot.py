"""compare checks every --algos entry before training; plot takes a compare
directory (its runs are subfolders)."""
import json

import pytest

from minips.timing import PHASES

from .conftest import run_cli

MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--max-steps", "2"]


@pytest.mark.parametrize("algos,message", [
    ("sync,psuedo-sync", "--algos entry 'psuedo-sync': unknown algorithm 'psuedo-sync'; choose one of sync"),
    ("sync,pseudo-sync:adaptve",
     "--algos entry 'pseudo-sync:adaptve': option predictor must be one of last, ema, holt, lookahead, adaptive"),
    ("sync,pseudo-sync:last:0", "--algos entry 'pseudo-sync:last:0': staleness must be >= 1"),
    ("sync,pseudo-sync,sync", "--algos entries 'sync' and 'sync' are the same run"),
])
def test_compare_checks_every_entry_before_training(algos, message, tmp_path):
    out = tmp_path / "cmp"
    r = run_cli(["compare", *MLP, "--algos", algos, "--out", str(out)])
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert "=== sync ===" not in r.stdout and not (out / "sync").exists()  # nothing was trained


def _fake_run(d, label, acc=0.5):
    d.mkdir(parents=True)
    summary = {"label": label, "algo": label.split(":")[0], "network_emulated": False,
               "history": [{"epoch": 1, "wall_time_s": 1.0, "test_accuracy": acc}],
               "time_breakdown": {p: 0.001 for p in PHASES}}
    (d / "summary.json").write_text(json.dumps(summary))
    return summary


def test_find_runs_expands_a_compare_directory(tmp_path):
    from minips.plots import find_runs

    cmp = tmp_path / "cmp"
    s = [_fake_run(cmp / "sync", "sync"), _fake_run(cmp / "pseudo-sync-last", "pseudo-sync:last")]
    (cmp / "notes").mkdir()  # a folder without a run is skipped
    assert find_runs([cmp]) == [cmp / "pseudo-sync-last", cmp / "sync"]  # sorted by name
    (cmp / "compare.json").write_text(json.dumps(s))
    assert find_runs([cmp]) == [cmp / "sync", cmp / "pseudo-sync-last"]  # the order compare ran them
    one = tmp_path / "one"
    _fake_run(one, "overlap-sync")
    assert find_runs([one, cmp]) == [one, cmp / "sync", cmp / "pseudo-sync-last"]
    with pytest.raises(FileNotFoundError, match="no summary.json and no subdirectory with one"):
        find_runs([cmp / "notes"])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_runs([tmp_path / "nope"])


def test_plot_takes_a_compare_directory(tmp_path):
    cmp = tmp_path / "cmp"
    _fake_run(cmp / "sync", "sync")
    _fake_run(cmp / "overlap-sync", "overlap-sync", 0.6)
    r = run_cli(["plot", str(cmp), "--out", str(tmp_path / "figs")])
    assert r.returncode == 0, r.stderr
    assert {p.name for p in (tmp_path / "figs").iterdir()} == {"accuracy.png", "breakdown.png", "trace.png"}
    r = run_cli(["plot", str(tmp_path / "figs"), "--out", str(tmp_path / "figs2")])
    assert r.returncode == 2 and "no summary.json and no subdirectory with one" in r.stderr
    assert "Traceback" not in r.stderr


def _summary(algo, acc_per_epoch, bytes_per_step, wall_per_epoch=10.0):
    zero = {ph: 0.001 for ph in ("forward", "backward", "post", "wait", "predict", "update")}
    hist = [{"epoch": i + 1, "test_accuracy": a, "wall_time_s": wall_per_epoch * (i + 1)}
            for i, a in enumerate(acc_per_epoch)]
    return {"label": algo, "algo": algo, "test_accuracy": acc_per_epoch[-1], "test_loss": 0.5,
            "time_breakdown": zero, "images_per_s": 100.0, "step_time_s": 0.01, "wall_time_s": 30.0,
            "bytes_sent_per_step": bytes_per_step, "history": hist}


def test_compare_table_reports_time_to_target_and_traffic_against_the_baseline():
    from minips.compare import markdown_table, time_to_target, traffic_ratio

    sync = _summary("sync", [0.80, 0.84, 0.86], 4e6)
    local = _summary("local-sgd:period=8", [0.78, 0.83, 0.85], 5e5, wall_per_epoch=6.0)
    never = _summary("d-psgd", [0.70, 0.75, 0.79], 8e6)
    assert time_to_target(sync, 0.84) == 20.0            # epoch 2 reaches it exactly: "at or above"
    assert time_to_target(local, 0.84) == 18.0           # epoch 3 of 6 s each
    assert time_to_target(never, 0.84) is None and time_to_target(sync, None) is None
    runs = [sync, local, never]
    assert traffic_ratio(local, runs) == pytest.approx(0.125) and traffic_ratio(never, runs) == pytest.approx(2.0)
    assert traffic_ratio(local, [local, never]) is None  # no baseline run in the comparison
    table = markdown_table(runs, target=0.84)
    head = table.splitlines()[0]
    assert "sent vs sync" in head and "s to 0.84" in head
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:5]}
    assert "| 0.125x |" in rows["local-sgd:period=8"] and "| 18.0 |" in rows["local-sgd:period=8"]
    assert "| not reached |" in rows["d-psgd"] and "| 1x |" in rows["sync"]
    assert "s to" not in markdown_table(runs).splitlines()[0]  # no --target-accuracy: no column


def test_compare_refuses_a_target_outside_the_metric_range(tmp_path):
    r = run_cli(["compare", "--algos", "sync", "--model", "mlp", "--target-accuracy", "-1", "--out",
                 str(tmp_path / "c")], timeout=60)
    assert r.returncode == 2 and "--target-accuracy -1" in r.stderr and "Traceback" not in r.stderr


def test_compare_refuses_a_percentage_as_an_accuracy_target(tmp_path):
    r = run_cli(["compare", "--algos", "sync", "--model", "mlp", "--target-accuracy", "85", "--out",
                 str(tmp_path / "c")], timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--target-accuracy 85: test accuracy is a fraction in (0, 1] (did you mean 0.85?)" in r.stderr
    assert not (tmp_path / "c").exists()  # nothing was trained
