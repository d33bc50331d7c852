"""Stop and resume edge cases and run-folder safety (issue 13).

A run stopped anywhere records the epoch it stopped in (complete, or marked
partial); a resumed run's metrics.csv equals an uninterrupted run's; resuming
a finished run, or with --max-steps at or below the checkpoint, trains
nothing and says so; two runs never share a folder (run.lock); an unwritable
folder is refused before training.
"""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from minips import checkpoint, rundir
from minips.train import TrainConfig, Trainer

from .conftest import ROOT, run_cli, subprocess_env

# 10,000 training images / batch 500 = 20 steps per epoch, 2 epochs
BASE = dict(model="mlp", data="fashion-mnist-mini", epochs=2, batch_size=500, quiet=True,
            algo="pseudo-sync:predictor=adaptive:staleness=2")
METRICS = ("epoch", "step", "train_loss", "test_loss", "test_accuracy", "partial")


def train(out, **kw):
    return Trainer(TrainConfig(**{**BASE, "out": str(out), **kw})).run()


def rows(out):
    with open(out / rundir.METRICS) as f:
        return list(csv.DictReader(f))


def strict_json(path):
    """json.loads that refuses NaN/Infinity (not JSON)."""
    def bad(c):
        raise ValueError(f"{path}: {c} is not valid JSON")
    return json.loads(path.read_text(), parse_constant=bad)


pytestmark = pytest.mark.usefixtures("one_numba_thread")  # runs compared bit for bit (conftest.py)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    train(out)
    return out


@pytest.mark.parametrize("cut", [5, 20, 35])  # inside epoch 1, exactly at its end, inside epoch 2
def test_resumed_run_has_the_metrics_of_an_uninterrupted_one(cut, full, tmp_path):
    part = tmp_path / "part"
    s = train(part, max_steps=cut, checkpoint_every=cut)
    got = rows(part)
    assert got, "metrics.csv has no row"
    assert list(got[0]) == list(rows(full)[0])  # same header
    if cut < 20:  # a run shorter than one epoch records its partial epoch, marked as such
        assert [(r["epoch"], r["step"], r["partial"]) for r in got] == [("1", str(cut), "1")]
        assert s["epochs"] == 0 and s["stopped"] == "max_steps"
    else:  # the epochs completed so far, the one it stopped in included
        assert [r["partial"] for r in got] == ["0"] * (cut // 20) + ["1"] * (cut % 20 > 0)
        assert got[0] == {**got[0], **{k: rows(full)[0][k] for k in METRICS}}
    ckpt = checkpoint.load(part / rundir.CHECKPOINT)
    train(part, resume=str(part / rundir.CHECKPOINT))
    a, b = rows(full), rows(part)
    assert [{k: r[k] for k in METRICS} for r in b] == [{k: r[k] for k in METRICS} for r in a]
    # the epoch's seconds and the wall time continue from the checkpoint's
    trace = list(csv.DictReader(open(part / rundir.TRACE)))
    after = sum(float(t["step_s"]) for t in trace if int(t["step"]) >= cut)
    last = b[-1]
    assert float(last["wall_time_s"]) >= float(ckpt["wall_time_s"]) + after
    if cut % 20:  # the epoch the cut fell in: its seconds before and after the resume
        end = (cut // 20 + 1) * 20
        rest = sum(float(t["step_s"]) for t in trace if cut <= int(t["step"]) < end)
        assert float(b[cut // 20]["seconds"]) >= float(ckpt["epoch_seconds"]) + rest
    s = strict_json(part / rundir.SUMMARY)
    assert s["epochs"] == 2 and s["stopped"] is None and s["wall_time_s"] >= float(last["wall_time_s"])


def test_stop_signal_at_an_epoch_boundary_records_that_epoch(full, tmp_path, monkeypatch):
    """SIGTERM whose agreed stop falls on the last step of epoch 1: the epoch is
    complete, so its row is written before stopping (and kept on resume)."""
    import minips.train as mtrain

    class StopAfter20(mtrain.StopAgreement):
        calls = 0

        def should_stop(self):
            StopAfter20.calls += 1
            return StopAfter20.calls == 20

    monkeypatch.setattr(mtrain, "StopAgreement", StopAfter20)
    out = tmp_path / "sig"
    s = train(out)
    assert s["stopped"] == "signal" and s["steps"] == 20
    assert [(r["epoch"], r["partial"]) for r in rows(out)] == [("1", "0")]
    monkeypatch.undo()
    train(out, resume=str(out / rundir.CHECKPOINT))
    assert [{k: r[k] for k in METRICS} for r in rows(out)] == [{k: r[k] for k in METRICS} for r in rows(full)]


def test_resuming_a_finished_run_trains_nothing_and_says_so(tmp_path, capsys):
    out = tmp_path / "done"
    train(out, checkpoint_every=1000)
    before = (out / rundir.SUMMARY).read_text()
    s = train(out, resume=str(out / rundir.CHECKPOINT), quiet=False)
    said = capsys.readouterr().out
    assert "is of a finished run (step 40 of 40" in said and "nothing to train" in said
    assert (out / rundir.SUMMARY).read_text() == before  # the results stay
    assert s["steps"] == 40 and s["stopped"] is None and s["test_accuracy"] is not None and s["epochs"] == 2
    # into a new folder: a summary of the finished run, valid JSON
    s = train(tmp_path / "again", resume=str(out / rundir.CHECKPOINT))
    written = strict_json(tmp_path / "again" / rundir.SUMMARY)
    assert written["test_accuracy"] == s["test_accuracy"] is not None and written["step_time_s"] is None


def test_max_steps_at_or_below_the_checkpoint_trains_nothing(tmp_path, capsys):
    out = tmp_path / "cut"
    train(out, max_steps=10, checkpoint_every=10)
    for m in (10, 3):
        s = train(out, resume=str(out / rundir.CHECKPOINT), max_steps=m, quiet=False)
        said = capsys.readouterr().out
        assert f"--max-steps {m} is at or below the checkpoint's step 10: nothing to train" in said
        assert s["steps"] == 10 and checkpoint.load(out / rundir.CHECKPOINT)["step"] == 10


def test_staleness_at_or_above_the_steps_is_refused(tmp_path):
    # 10,000 images / batch 2,000 = 5 steps per epoch
    r = run_cli(["train", "--model", "mlp", "--epochs", "1", "--batch-size", "2000", "--quiet",
                 "--algo", "pseudo-sync", "--staleness", "5", "--out", str(tmp_path / "x")])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "staleness 5 (--staleness" in r.stderr and "at or above the run's 5 steps" in r.stderr
    assert "nothing would be trained" in r.stderr
    # cut short by --max-steps (a run to be resumed): a loud warning, not an error
    r = run_cli(["train", "--model", "mlp", "--epochs", "1", "--batch-size", "2000", "--max-steps", "2",
                 "--algo", "pseudo-sync", "--staleness", "2", "--out", str(tmp_path / "y")])
    assert r.returncode == 0, r.stderr
    assert "warning: staleness 2" in r.stdout and "before --max-steps 2 stops it" in r.stdout


def test_summary_json_is_valid_json_without_nan(tmp_path):
    rundir.write_json(tmp_path / "s.json", {"a": float("nan"), "b": [np.float32("inf"), 1.5]})
    assert strict_json(tmp_path / "s.json") == {"a": None, "b": [None, 1.5]}


# --- the run-folder lock ------------------------------------------------------------------------------

def test_a_second_run_in_the_same_folder_is_refused(tmp_path):
    out = tmp_path / "busy"
    first = subprocess.Popen([sys.executable, "-m", "minips", "train", "--model", "mlp", "--epochs", "50",
                              "--quiet", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=subprocess_env(), cwd=ROOT)
    try:
        deadline = time.time() + 60
        while not (out / rundir.LOCK).exists():  # the event: the first run took the folder
            assert first.poll() is None, first.communicate()[1]
            assert time.time() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        lock = json.loads((out / rundir.LOCK).read_text())
        assert lock["pid"] == first.pid and lock["host"]
        r = run_cli(["train", "--model", "mlp", "--epochs", "1", "--quiet", "--out", str(out)])
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"is in use by another run: process {first.pid} on host {lock['host']}" in r.stderr
        assert str(out / rundir.LOCK) in r.stderr
        assert first.poll() is None  # the first run goes on
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0 and not (out / rundir.LOCK).exists()  # released at the end


def test_a_stale_lock_is_replaced_and_a_foreign_one_reported(tmp_path, capsys):
    out = tmp_path / "stale"
    out.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()  # a pid that has just ended
    import socket
    (out / rundir.LOCK).write_text(json.dumps({"pid": int(dead), "host": socket.gethostname(), "started": "x"}))
    train(out, max_steps=2, quiet=False)
    assert f"removed the stale lock {out / rundir.LOCK} of process {dead}" in capsys.readouterr().out
    assert not (out / rundir.LOCK).exists()
    (out / rundir.LOCK).write_text(json.dumps({"pid": 1, "host": "elsewhere.example", "started": "y"}))
    with pytest.raises(rundir.RunFolderError, match="process 1 on host elsewhere.example.*delete the lock file"):
        train(out, max_steps=2, overwrite=True)  # --overwrite never clears a folder another process holds
    assert (out / rundir.LOCK).exists()  # not ours to remove


def _unwritable_dir(tmp_path):
    """An existing directory this process cannot create files in."""
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    for d in ("/sys/kernel", "/proc/sys/kernel"):  # root ignores permissions; these are read-only
        try:
            os.close(os.open(os.path.join(d, "minips-probe"), os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            os.unlink(os.path.join(d, "minips-probe"))
        except OSError:
            return d
    pytest.fail("no unwritable directory found for this test")


def test_an_unwritable_out_is_refused_before_training(tmp_path):
    d = _unwritable_dir(tmp_path)
    t0 = time.time()
    r = run_cli(["train", "--model", "mlp", "--epochs", "3", "--out", str(d)])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"--out {d} is not writable" in r.stderr and "give --out a directory you can write" in r.stderr
    assert "epoch" not in r.stdout and time.time() - t0 < 60  # nothing trained


def test_resume_from_a_checkpoint_taken_on_the_last_step_of_an_epoch(full, tmp_path, monkeypatch):
    """--checkpoint-every fires on the epoch's last step, before the epoch is
    evaluated: the resumed run closes that epoch first, so its row is not lost."""
    import shutil

    saved = Trainer.save_checkpoint

    def keep_each(self, path):
        saved(self, path)
        shutil.copy(path, tmp_path / f"step{self.global_step}.h5")
    monkeypatch.setattr(Trainer, "save_checkpoint", keep_each)
    train(tmp_path / "a", checkpoint_every=20, max_steps=25)
    monkeypatch.undo()
    train(tmp_path / "b", resume=str(tmp_path / "step20.h5"))
    assert [{k: r[k] for k in METRICS} for r in rows(tmp_path / "b")] == \
        [{k: r[k] for k in METRICS} for r in rows(full)]


class _Comm:
    rank = 0


class _Trainer:
    comm = _Comm()

    def __init__(self, threads):
        self.threads = threads


def test_a_resume_reuses_the_checkpoints_thread_count(monkeypatch):
    import numba

    from minips.checkpoint import _reuse_thread_count
    before = numba.get_num_threads()
    try:
        monkeypatch.delenv("NUMBA_NUM_THREADS", raising=False)
        t = _Trainer(threads=3)  # chosen from this machine's load; the checkpoint ran with 1
        _reuse_thread_count(t, 1)
        assert (t.threads, numba.get_num_threads()) == (1, 1)
        monkeypatch.setenv("NUMBA_NUM_THREADS", "1")  # the user's choice wins
        t = _Trainer(threads=3)
        _reuse_thread_count(t, 1)
        assert t.threads == 3
        monkeypatch.delenv("NUMBA_NUM_THREADS")
        t = _Trainer(threads=1)  # more than the pool holds: kept, with a note
        _reuse_thread_count(t, numba.config.NUMBA_NUM_THREADS + 1)
        assert t.threads == 1
    finally:
        numba.set_num_threads(before)
