"""What a user sees at the command line: a run folder that holds a run is
refused unless --overwrite (which clears the old files) or --resume; no
argparse abbreviations, a close-match hint for a misspelt option; the units of
summary.json and trace.csv; a note when ranks exceed the cores."""
from __future__ import annotations

import csv
import json

import pytest

from minips.cli import main

MLP = ["train", "--model", "mlp", "--epochs", "1", "--quiet", "--batch-size", "64"]


def test_a_second_run_into_a_folder_is_refused_and_overwrite_clears_stale_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*MLP, "--algo", "pseudo-sync:adaptive", "--max-steps", "3", "--out", str(out)]) == 0
    assert "lambda" in (out / "trace.csv").read_text().splitlines()[0]
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    # a second run, another algorithm, no trace: refused, nothing touched
    assert main([*MLP, "--algo", "sync", "--max-steps", "3", "--no-trace", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} already holds a run (metrics.csv, summary.json, trace.csv)" in err
    assert "--overwrite" in err and "--resume" in err and "Traceback" not in err
    assert json.loads((out / "summary.json").read_text())["algo"] == "pseudo-sync"
    # --overwrite: the old trace.csv is gone (plot would have drawn its lambda next to the new run)
    assert main([*MLP, "--algo", "sync", "--max-steps", "3", "--no-trace", "--overwrite", "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["algo"] == "sync"
    assert not (out / "trace.csv").exists()
    assert (out / "notes.txt").read_text() == "mine"  # not a run file: left alone


def test_resume_into_its_own_folder_is_allowed(tmp_path):
    out = tmp_path / "run"
    assert main([*MLP, "--algo", "sync", "--max-steps", "3", "--checkpoint-every", "3", "--out", str(out)]) == 0
    assert main([*MLP, "--algo", "sync", "--max-steps", "5", "--out", str(out),
                 "--resume", str(out / "checkpoint.h5")]) == 0
    assert json.loads((out / "summary.json").read_text())["steps"] == 5


def test_compare_refuses_a_folder_with_runs(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["compare", "--model", "mlp", "--epochs", "1", "--quiet", "--max-steps", "2", "--algos", "sync",
            "--out", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


def test_overwrite_removes_every_figure_compare_draws(tmp_path):
    """compare --overwrite clears all the figures a compare can write: a figure
    the new run does not draw (one process sends nothing: no accuracy against
    bytes) must not be left over from the old one."""
    from minips.rundir import clear_run_files
    out = tmp_path / "cmp"
    out.mkdir()
    figs = ["accuracy.png", "breakdown.png", "trace.png", "consensus.png", "traffic.png", "accuracy-bytes.png",
            "accuracy-traffic.png"]
    for f in [*figs, "compare.md", "notes.txt"]:
        (out / f).write_text("x")
    clear_run_files(out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_units_in_summary_and_trace(tmp_path):
    out = tmp_path / "run"
    assert main([*MLP, "--algo", "sync", "--max-steps", "8", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    for key in ("time_breakdown", "time_other_s", "images_per_s", "wall_images_per_s", "step_time_s"):
        assert key in s["units"] and s["units"][key]
    assert s["warmup_steps"] == 5
    # the other phase is the step minus the phases (computed here from the file's own numbers)
    assert s["time_other_s"] == pytest.approx(s["step_time_s"] - sum(s["time_breakdown"].values()), abs=1e-12)
    rows = list(csv.DictReader(open(out / "trace.csv")))
    assert {"forward_s", "backward_s", "wait_s", "update_s", "step_s"} <= set(rows[0])
    assert "forward" not in rows[0]
    assert [int(r["warmup"]) for r in rows] == [1] * 5 + [0] * 3


def test_the_printed_epoch_line_and_breakdown_explain_themselves(tmp_path, capsys):
    """The epoch line uses metrics.csv's column names (train_loss beside
    test_loss, not "train loss"); the breakdown prints the "other" phase and
    says which throughput is the step's and which the whole run's (issue 14)."""
    out = tmp_path / "run"
    assert main(["train", "--model", "mlp", "--epochs", "1", "--batch-size", "64", "--algo", "sync",
                 "--max-steps", "8", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    header = next(csv.reader(open(out / "metrics.csv")))
    (line,) = [x for x in said.splitlines() if "epoch 1/1:" in x]
    assert "train loss" not in line and "test loss" not in line
    for name in ("train_loss", "test_loss", "test_accuracy"):
        assert f"{name} " in line and name in header, (name, line, header)
    s = json.loads((out / "summary.json").read_text())
    assert any(x.split()[:1] == ["other"] and "(data, logging)" in x for x in said.splitlines()), said
    assert (f"{s['images_per_s']:.0f} images/s in the step (all ranks; the whole run, evaluations and warm-up "
            f"included: {s['wall_images_per_s']:.0f} images/s)") in said, said


@pytest.mark.parametrize("argv,hint", [
    (["train", "--algorithm", "sync"], "--algorithm: did you mean --algo?"),
    (["train", "--epoch", "1"], "--epoch: did you mean --epochs"),
    (["compare", "--algos", "sync", "--algo-s", "x"], "did you mean --algos"),
    (["plot", "x", "--out", "y", "--label", "a"], "--label: did you mean --labels?"),
])
def test_no_abbreviations_and_a_close_match(argv, hint, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert hint in err and f"usage: python -m minips {argv[0]}" in err


def test_eval_batch_size_is_a_flag(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--eval-batch-size" in capsys.readouterr().out


def test_a_note_when_ranks_exceed_the_cores(capsys):
    """Three ranks whose affinities cover 2 processors get the note; two ranks
    bound to one core each (mpiexec -bind-to core) do not."""
    import socket

    from minips.train import Trainer, TrainConfig
    host = socket.gethostname()

    class FakeComm:
        rank, size = 0, 3

        def __init__(self, gathered):
            self.gathered = gathered

        def allgather(self, mine):
            return self.gathered

    t = Trainer.__new__(Trainer)
    t.cfg = TrainConfig(quiet=False)
    t.comm = FakeComm([(host, [0, 1]), (host, [0, 1]), (host, [0, 1])])
    t._note_oversubscribed()
    assert "3 ranks share 2 core(s)" in capsys.readouterr().out
    t.comm = FakeComm([(host, [0]), (host, [1]), ("elsewhere", [0])])  # bound, one core each; a rank elsewhere
    t._note_oversubscribed()
    assert capsys.readouterr().out == ""
