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
