"""Nothing lost at the edges (issue 28): every check that can refuse a run comes
before anything in --out is touched; metrics.csv grows an epoch at a time; a
failing rank other than 0 leaves no run.lock; bad option values are one-line
errors; what compare finished is reported when a later run fails; the saved
reports say when ranks shared cores."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minips import rundir
from minips.cli import main
from minips.train import TrainConfig, Trainer

from .conftest import ROOT, run_cli, subprocess_env

MPIEXEC = shutil.which("mpiexec")
WORKER = str(Path(__file__).with_name("edge_worker.py"))
TIMEOUT = 120
# 10,000 training images / batch 500 = 20 steps per epoch
MLP = ["train", "--model", "mlp", "--quiet", "--batch-size", "500"]


def _rows(out: Path) -> list[dict]:
    with open(out / rundir.METRICS) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished one-epoch run whose folder the refused runs must leave alone."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main([*MLP, "--epochs", "1", "--max-steps", "3", "--out", str(out)]) == 0
    return out


def _snapshot(out: Path) -> dict:
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


@pytest.mark.parametrize("args,message", [
    # 10,000 images / batch 2,000 = 5 steps: a staleness of 5 would train nothing
    (["--batch-size", "2000", "--algo", "pseudo-sync", "--staleness", "5"], "at or above the run's 5 steps"),
    (["--eval-batch-size", "0"], "--eval-batch-size must be >= 1"),
])
def test_overwrite_refused_by_a_later_check_leaves_the_old_run(finished, args, message, capsys):
    before = _snapshot(finished)
    capsys.readouterr()
    assert main([*MLP, "--epochs", "1", "--overwrite", "--out", str(finished), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert _snapshot(finished) == before  # nothing deleted, nothing written


def test_a_refused_resume_leaves_a_new_folder_uncreated(finished, tmp_path, capsys):
    out = tmp_path / "new"
    assert main([*MLP, "--epochs", "1", "--out", str(out), "--resume", str(finished / "missing.h5")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "-5"])
def test_eval_batch_size_must_be_positive(value, tmp_path):
    r = run_cli([*MLP, "--epochs", "1", "--eval-batch-size", value, "--out", str(tmp_path / "x")])
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"--eval-batch-size must be >= 1 (samples per forward pass when evaluating; it only bounds memory, " \
           f"e.g. 500), got {value}" in r.stderr
    assert not (tmp_path / "x").exists()


def test_metrics_csv_has_each_epoch_as_it_finishes(tmp_path, monkeypatch):
    """A crash in epoch 2 keeps epoch 1's row; the header is there from the start;
    after each epoch the file holds exactly the epochs so far."""
    out = tmp_path / "crash"
    seen = []
    end_epoch, step = Trainer._end_epoch, Trainer._train_step

    def end_then_read(self, *a, **kw):
        end_epoch(self, *a, **kw)
        seen.append([int(r["epoch"]) for r in _rows(out)])

    def crash_in_epoch_2(self, *a, **kw):
        if self.global_step == 25:
            raise RuntimeError("crash in epoch 2")
        if self.global_step == 0:
            seen.append((out / rundir.METRICS).read_text())  # before the first step
        return step(self, *a, **kw)

    monkeypatch.setattr(Trainer, "_end_epoch", end_then_read)
    monkeypatch.setattr(Trainer, "_train_step", crash_in_epoch_2)
    cfg = TrainConfig(model="mlp", epochs=3, batch_size=500, quiet=True, out=str(out))
    with pytest.raises(RuntimeError, match="crash in epoch 2"):
        Trainer(cfg).run()
    assert seen[0] == ",".join(rundir.METRICS_COLUMNS) + "\n"  # the header, before any epoch ended
    assert seen[1:] == [[1]]
    rows = _rows(out)
    assert [r["epoch"] for r in rows] == ["1"] and float(rows[0]["test_accuracy"]) > 0.5
    assert not list(out.glob("*.tmp"))  # written atomically: no temporary file left
    assert not (out / rundir.LOCK).exists()


@pytest.mark.mpi
def test_a_failing_rank_other_than_0_leaves_no_lock(tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, WORKER, "fail1", str(out)], capture_output=True,
                       text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=ROOT)
    assert r.returncode != 0
    assert "[minips rank 1] error: rank 1 fails on purpose at step 3" in r.stderr, r.stderr[-2000:]
    assert not (out / rundir.LOCK).exists()
    assert (out / rundir.METRICS).exists()  # the run had started (rank 0 had taken the lock)


def test_release_lock_of_removes_only_that_owners_lock(tmp_path):
    lock = rundir.take_lock(tmp_path / "d")
    assert not rundir.release_lock_of(lock.path, {**lock.owner, "pid": lock.owner["pid"] + 1})
    assert not rundir.release_lock_of(lock.path, {**lock.owner, "host": "elsewhere.example"})
    assert lock.path.exists()
    assert rundir.release_lock_of(lock.path, json.loads(json.dumps(lock.owner)))  # as broadcast: a plain dict
    assert not lock.path.exists()


@pytest.mark.parametrize("spec,message", [
    ("topk-sgd:ratio=abc", "compressor=topk: option ratio must be a number, got 'abc'; write e.g. ratio=0.01"),
    ("topk-sgd:ratio=", "compressor=topk: option ratio must be a number, got no value (ratio=); write e.g. "
                        "ratio=0.01"),
    ("topk-sgd:compressor=randomk:scale=3", "option scale must be true or false, got 3; write e.g. scale=true"),
    ("topk-sgd:compressor=qsgd-quant:s=", "option s must be an integer, got no value (s=); write e.g. s=15"),
])
def test_a_compressor_option_of_the_wrong_type_is_one_line(spec, message, tmp_path, capsys):
    assert main([*MLP, "--epochs", "1", "--algo", spec, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and "not supported between" not in err and len(err.strip().splitlines()) == 1, err
