"""Nothing lost when folders collide or disks fill, data refused before anything
is written, non-finite options refused, no lost stop signal (issue 46).

Every run here is tiny (the MLP, a few steps, virtual ranks in this process).
A full disk is simulated by patching ``open`` (:func:`full_disk`: the first
half of what is written reaches the file, then ENOSPC, as a disk that fills
mid-write) and h5py's ``File`` for checkpoints.
"""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import socket
import threading
from pathlib import Path

import numpy as np
import pytest

from minips import rundir

from .conftest import cli_on_ranks

ENOSPC = os.strerror(errno.ENOSPC)  # "No space left on device"
TINY = ["--model", "mlp", "--epochs", "1", "--max-steps", "3", "--batch-size", "16", "--quiet"]


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


class _FullFile:
    """A file on a disk that fills while it is written: half of the first
    write reaches the file, then ENOSPC."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise OSError(errno.ENOSPC, ENOSPC)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


@pytest.fixture
def full_disk(monkeypatch):
    """The names (prefixes) appended to the returned list hit a full disk when
    opened for writing, through ``open`` and ``io.open`` (``Path.write_text``,
    matplotlib and Pillow)."""
    real, names = builtins.open, []

    def fake(file, mode="r", *a, **k):
        f = real(file, mode, *a, **k)
        if any(c in mode for c in "wax+") and any(Path(str(file)).name.startswith(n) for n in names):
            return _FullFile(f)
        return f
    monkeypatch.setattr(builtins, "open", fake)
    monkeypatch.setattr(io, "open", fake)
    return names


def tmp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


# --- folders that collide ----------------------------------------------------------------------
def _live_lock(folder: Path) -> None:
    """A lock as a running run (or compare, or study) holds it: this process's pid and host."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / rundir.LOCK).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                  "started": "now"}) + "\n")


def _finished_run(folder: Path) -> dict:
    """A finished run's files (as a first compare left them); returns their texts."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {rundir.SUMMARY: '{"label": "sync"}\n', rundir.METRICS: "epoch,step\n1,3\n", rundir.TRACE: "step\n0\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
    return files


COMPARE = ["compare", "--algos", "sync,local-sgd", "--seeds", "0,1", "--overwrite", "--no-figures", *TINY]


def test_compare_seeds_overwrite_refuses_a_folder_whose_run_is_in_progress(tmp_path):
    """The first compare trains local-sgd-seed1 (its lock is held) and has
    finished sync-seed0: a second `compare --seeds 0,1 --overwrite` into the
    folder is refused before it clears or trains anything (it used to check
    only the seed-less folders' locks, clear everything, train three runs and
    replace the first compare's sync-seed0)."""
    out = tmp_path / "cmp"
    kept = _finished_run(out / "sync-seed0")
    _live_lock(out / "local-sgd-seed1")
    r = cli_on_ranks(2, [*COMPARE, "--out", out])
    assert r.returncode != 0
    assert len(lines(r.stderr)) == 1 and "local-sgd-seed1 is in use by another run" in r.stderr, r.stderr
    assert {n: (out / "sync-seed0" / n).read_text() for n in kept} == kept
    assert not (out / "local-sgd-seed0").exists() and not (out / "compare.md").exists()


def test_a_second_compare_is_refused_while_the_first_holds_the_folder(tmp_path):
    """Between two of its runs a compare holds no run's lock, but it holds the
    folder's own (OUT/run.lock) from its check to its end: a second compare
    with --overwrite is refused and deletes nothing."""
    out = tmp_path / "cmp"
    kept = _finished_run(out / "sync-seed0")
    _live_lock(out)
    r = cli_on_ranks(2, [*COMPARE, "--out", out])
    assert r.returncode != 0 and f"--out {out} is in use by another run" in r.stderr, r.stderr
    assert {n: (out / "sync-seed0" / n).read_text() for n in kept} == kept


def test_a_compare_holds_its_folders_lock_while_it_runs_and_removes_it(tmp_path, monkeypatch):
    from minips.train import Trainer
    out, seen = tmp_path / "cmp", []
    run = Trainer.run

    def spy(self):
        seen.append(json.loads((out / rundir.LOCK).read_text())["pid"])
        return run(self)
    monkeypatch.setattr(Trainer, "run", spy)
    r = cli_on_ranks(2, ["compare", "--algos", "sync", "--no-figures", *TINY, "--out", out])
    assert r.returncode == 0, r.stderr
    assert seen == [os.getpid()] * 2  # each rank's run, under the compare's lock
    assert not (out / rundir.LOCK).exists() and (out / "compare.json").exists()


GRID = """
ranks = [2]
seeds = [0, 1]
algos = ["sync", "local-sgd"]
virtual = true
[train]
model = "mlp"
epochs = 1
[lr.base]
lr = 0.05
"""


def _fake_record(spec, root, grid, mpiexec, log):
    """What run_one returns for a finished run (no training)."""
    m = 0.8 + 0.01 * spec.seed
    return {"P": spec.P, "lr": spec.lr_name, "label": spec.label, "seed": spec.seed, "virtual": True,
            "status": "ok", "metric": m, "wall_s": 1.0, "step_time_s": 0.01, "test_loss": 0.5,
            "bytes_sent_per_step": 1000, "family": "synchronous", "replicated": True, "time_to_target": None,
            "curve": [{"epoch": 1, "step": 3, "wall_time_s": 1.0, "wall_after_warmup_s": 0.5, "mib_sent": 0.1,
                       "test_accuracy": m}]}


def test_bench_study_refuses_a_folder_another_study_is_running_in(tmp_path, monkeypatch):
    """A second study into a running study's folder is refused before it starts
    a run (it used to run the same points at once: each one's train --overwrite
    could replace a run the other had just finished)."""
    from minips.bench.study import cli as study_cli
    from minips.cli import main
    started = []
    monkeypatch.setattr(study_cli, "run_one", lambda spec, *a: started.append(spec) or _fake_record(spec, *a))
    grid, out = tmp_path / "g.toml", tmp_path / "study"
    grid.write_text(GRID)
    _live_lock(out)
    assert main(["bench", "study", str(grid), "--out", str(out)]) == 2
    assert started == [] and not (out / "g.json").exists()
    (out / rundir.LOCK).unlink()  # that study ended: this one runs, holding the lock meanwhile
    assert main(["bench", "study", str(grid), "--out", str(out)]) == 0
    assert len(started) == 4 and (out / "g.json").exists() and not (out / rundir.LOCK).exists()


# --- a full disk ----------------------------------------------------------------------------------
def _one_error_line(r, *parts):
    errors = lines(r.stderr)
    assert r.returncode != 0 and len(errors) == 1, r.stderr
    assert all(p in errors[0] for p in parts), errors[0]
    return errors[0]


def test_a_full_disk_at_the_end_of_a_run_is_one_line_and_leaves_no_half_run(tmp_path, full_disk):
    """It used to end in a 20-line OSError traceback with summary.json written,
    no trace.csv and an empty trace.csv.tmp left."""
    out = tmp_path / "run"
    full_disk.append("trace.csv")
    r = cli_on_ranks(0, ["train", *TINY, "--out", out])
    _one_error_line(r, f"cannot write {out / 'trace.csv'} ({ENOSPC})", f"free space on the disk that holds {out}")
    assert not tmp_files(out)
    assert not (out / "summary.json").exists() and not (out / "trace.csv").exists()  # all end files or none
    assert (out / "metrics.csv").read_text().startswith("epoch,step")  # the version from the run's start


def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_earlier_one(tmp_path, monkeypatch):
    """h5py's error was two lines of HDF5 internals; the earlier checkpoint stays."""
    import h5py

    from minips import checkpoint
    real, calls = h5py.File, []

    def file(name, mode="r", *a, **k):
        if mode == "w" and Path(str(name)).name.startswith("checkpoint.h5"):
            calls.append(name)
            if len(calls) == 2:  # the second checkpoint: the disk fills while HDF5 writes it
                Path(name).write_bytes(b"\x89HDF\r\n" + b"\0" * 100)
                raise OSError(errno.ENOSPC, "Can't close file (file write failed: time = now\n, filename = "
                              f"'{name}', file descriptor = 3, errno = 28, error message = '{ENOSPC}', ...)")
        return real(name, mode, *a, **k)
    monkeypatch.setattr(h5py, "File", file)
    out = tmp_path / "run"
    r = cli_on_ranks(2, ["train", *TINY, "--checkpoint-every", "1", "--out", out])
    _one_error_line(r, f"cannot write checkpoint {out / 'checkpoint.h5'} ({ENOSPC})", "free space",
                    "the earlier checkpoint, if any, is kept")
    assert not tmp_files(out)
    assert checkpoint.load(out / "checkpoint.h5")["step"] == 1


@pytest.mark.parametrize("name", ["compare.json", "accuracy.png"])
def test_a_full_disk_under_compare_is_one_line_and_writes_nothing_half(tmp_path, full_disk, name):
    """compare.md and compare.json are written together or not at all; a
    figure is written whole or not at all (they used to end in a traceback,
    compare.md beside no compare.json, a .tmp left)."""
    out = tmp_path / "cmp"
    full_disk.append(name)
    r = cli_on_ranks(2, ["compare", "--algos", "sync,local-sgd", *TINY, "--out", out])
    _one_error_line(r, f"cannot write {out / name} ({ENOSPC})", f"free space on the disk that holds {out}")
    assert not tmp_files(out) and not (out / name).exists()
    assert (out / "compare.md").exists() == (out / "compare.json").exists()
    assert not (out / rundir.LOCK).exists()


@pytest.mark.parametrize("name", ["g.json", "g-base.png", "study.log"])
def test_a_full_disk_under_bench_study_is_one_line_and_writes_nothing_half(tmp_path, monkeypatch, full_disk,
                                                                          capsys, name):
    from minips.bench.study import cli as study_cli
    from minips.cli import main
    monkeypatch.setattr(study_cli, "run_one", _fake_record)
    grid, out = tmp_path / "g.toml", tmp_path / "study"
    grid.write_text(GRID)
    full_disk.append(name)
    assert main(["bench", "study", str(grid), "--out", str(out)]) == 2
    err = lines(capsys.readouterr().err)
    assert len(err) == 1 and f"cannot write {out / name} ({ENOSPC})" in err[0], err
    assert not tmp_files(out) and (out / "g.json").exists() == (out / "g.md").exists()
    assert name == "study.log" or not (out / name).exists()
    assert not (out / rundir.LOCK).exists()


# --- data checked before --out is touched -----------------------------------------------------------
def _data(path: Path, train_x=None, train_y=None, test_x=None, test_y=None, names=True) -> Path:
    import h5py
    rng = np.random.default_rng(0)
    train_x = rng.integers(0, 256, (64, 28, 28), dtype=np.uint8) if train_x is None else train_x
    test_x = rng.integers(0, 256, (32, 28, 28), dtype=np.uint8) if test_x is None else test_x
    train_y = np.arange(len(train_x)) % 10 if train_y is None else train_y
    test_y = np.arange(len(test_x)) % 10 if test_y is None else test_y
    with h5py.File(path, "w") as f:
        for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
            f[f"{split}/images"], f[f"{split}/labels"] = x, y
        if names:
            f.attrs["class_names"] = np.array([f"c{i}" for i in range(10)], dtype="S")
    return path


def _nan_pixel():
    x = np.random.default_rng(1).random((64, 28, 28)).astype(np.float32) * 255
    x[5, 3, 4] = np.nan
    return x


BAD_DATA = {
    "label 42": (dict(train_y=np.where(np.arange(64) == 7, 42, np.arange(64) % 10)),
                 "/train/labels[7] is 42, outside 0..9"),
    "label -1": (dict(test_y=np.where(np.arange(32) == 3, -1, np.arange(32) % 10)),
                 "/test/labels[3] is -1, outside 0..9"),
    "NaN pixel": (dict(train_x=_nan_pixel()), "/train/images[5] holds a pixel that is NaN or infinite"),
    "constant images": (dict(train_x=np.full((64, 28, 28), 7, np.uint8)),
                        "every training image holds the same value (7)"),
    "empty test set": (dict(test_x=np.zeros((0, 28, 28), np.uint8), test_y=np.zeros(0, np.int64)),
                       "/test holds no samples"),
    "float labels": (dict(train_y=(np.arange(64) % 10) + np.where(np.arange(64) == 2, 0.5, 0.0)),
                     "/train/labels[2] is 2.5: labels must be whole class indices"),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_is_refused_in_one_line_before_the_run_folder_exists(tmp_path, case):
    """They used to be caught at step 0 after metrics.csv was written (labels
    42, -1), end as 'loss is nan ... Lower --lr' (NaN pixels, constant
    images), fail after training with a ZeroDivisionError (empty test set) or
    train on truncated labels (2.5 -> 2)."""
    arrays, message = BAD_DATA[case]
    data, out = _data(tmp_path / "bad.h5", **arrays), tmp_path / "run"
    r = cli_on_ranks(2, ["train", *TINY, "--data", data, "--out", out])
    _one_error_line(r, str(data), message)
    assert "RuntimeWarning" not in r.stderr and not out.exists()


def test_good_data_and_whole_float_labels_train(tmp_path):
    data = _data(tmp_path / "ok.h5", train_y=(np.arange(64) % 10).astype(np.float32), names=False)
    r = cli_on_ranks(2, ["train", *TINY, "--data", data, "--out", tmp_path / "run"])
    assert r.returncode == 0, r.stderr


# --- non-finite numbers -----------------------------------------------------------------------------
@pytest.mark.parametrize("flag,value", [("--lr", "inf"), ("--lr", "nan"), ("--weight-decay", "inf"),
                                        ("--warmup-epochs", "inf"), ("--lr", "-inf")])
def test_non_finite_train_options_are_refused_in_one_line(tmp_path, flag, value):
    out = tmp_path / "run"
    r = cli_on_ranks(0, ["train", *TINY, f"{flag}={value}", "--out", out])
    _one_error_line(r, f"{flag} must be a finite number, got {value}")
    assert not out.exists()


def test_non_finite_numbers_in_a_config_file_are_refused(tmp_path):
    cfg, out = tmp_path / "c.toml", tmp_path / "run"
    cfg.write_text("lr = inf\n")
    r = cli_on_ranks(0, ["train", *TINY, "--config", cfg, "--out", out])
    _one_error_line(r, "--lr must be a finite number, got inf")
    assert not out.exists()


@pytest.mark.parametrize("args,flag", [
    (["compare", "--algos", "sync", "--within", "nan"], "--within"),
    (["compare", "--algos", "sync", "--target-accuracy", "inf"], "--target-accuracy"),
    (["bench", "train", "--timeout", "inf"], "--timeout"),
    (["topology", "ring", "--radius", "inf"], "--radius"),
])
def test_non_finite_numbers_of_other_commands_are_refused(tmp_path, capsys, args, flag):
    from minips.cli import main
    with pytest.raises(SystemExit) as e:
        main([*args, "--out", str(tmp_path / "x")] if args[0] == "compare" else args)
    assert e.value.code == 2
    assert f"argument {flag}: must be a finite number" in capsys.readouterr().err


def test_a_grid_with_an_infinite_number_is_refused(tmp_path):
    from minips.bench.study import StudyError, load_grid
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.replace("lr = 0.05", "lr = inf"))
    with pytest.raises(StudyError, match=r"lr\.base\.lr = inf: give a finite number"):
        load_grid(grid)


def test_a_diverging_run_prints_its_one_line_and_no_numpy_warning(tmp_path, full_disk):
    """NumPy's overflow warnings used to print before the one line; and a full
    disk when the diverged trace is written must not hide the divergence."""
    import warnings
    full_disk.append("trace-diverged")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = cli_on_ranks(2, ["train", *TINY, "--lr", "1e6", "--max-steps", "20", "--out", tmp_path / "run"])
    assert r.returncode != 0 and len(lines(r.stderr)) == 1 and "loss is nan" in r.stderr, r.stderr
    assert f"the trace up to here could not be written to {tmp_path / 'run'}" in r.stderr and ENOSPC in r.stderr
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


# --- a stop signal never lost ----------------------------------------------------------------------
@pytest.fixture
def signal_at(monkeypatch):
    """``signal_at(method, when)``: a hook at a racy point. When rank 0 enters
    ``Trainer.<method>`` with ``when(trainer)`` true, SIGINT goes to this
    process, and rank 0 goes on only once the main thread has relayed it to
    the ranks' stop protocol (so the signal lands exactly there, every time)."""
    import signal

    from minips.distributed.comm.virtual.world import SignalRelay
    from minips.train import Trainer
    relayed, deliver = threading.Event(), SignalRelay.deliver

    def relay(self, signum, frame=None):
        n = deliver(self, signum, frame)
        relayed.set()
        return n
    monkeypatch.setattr(SignalRelay, "deliver", relay)

    def arm(method, when):
        real = getattr(Trainer, method)

        def hooked(self, *a, **k):
            if self.comm.rank == 0 and not relayed.is_set() and when(self):
                os.kill(os.getpid(), signal.SIGINT)
                assert relayed.wait(30), "the main thread did not relay the signal"
            return real(self, *a, **k)
        monkeypatch.setattr(Trainer, method, hooked)
    return arm


def test_a_signal_in_the_last_step_stops_the_run_there_with_a_checkpoint(tmp_path, signal_at):
    """The race: each rank posts its stop flag after a step and reads the sum
    one step later, but the loop left at the last step before any read; a
    signal after the last read (the last two steps, or the final evaluation)
    was relayed (so a second would abort) and acted on by no rank: the run
    trained to the end, no checkpoint, stopped null, exit 0."""
    from minips import checkpoint
    out = tmp_path / "run"
    signal_at("_train_step", lambda t: t.global_step == t.total_steps - 1)  # entering the last step
    r = cli_on_ranks(4, ["train", *TINY, "--no-quiet", "--out", out])
    assert r.returncode == 0, r.stderr
    assert "stopped by signal at step 3" in r.stdout
    summary = json.loads((out / rundir.SUMMARY).read_text())
    assert summary["stopped"] == "signal" and summary["steps"] == 3
    assert checkpoint.load(out / rundir.CHECKPOINT)["step"] == 3


def test_a_signal_after_the_last_step_is_acknowledged_and_the_run_finishes(tmp_path, signal_at):
    """In the final evaluation nothing is left to stop: the run writes its
    results and says the signal came too late (it used to say nothing)."""
    out = tmp_path / "run"
    signal_at("evaluate", lambda t: t.global_step == t.total_steps)
    r = cli_on_ranks(4, ["train", *TINY, "--no-quiet", "--out", out])
    assert r.returncode == 0, r.stderr
    assert "note: the stop signal came after the last step, with nothing left to stop" in r.stdout
    assert json.loads((out / rundir.SUMMARY).read_text())["stopped"] == "max_steps"  # as planned, not "signal"
    assert (out / rundir.TRACE).exists() and not tmp_files(out)
