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

from .conftest import ROOT, launcher_lines, run_cli, subprocess_env

MPIEXEC = shutil.which("mpiexec")
WORKER = str(Path(__file__).with_name("hang_worker.py"))
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


# --- messages that arrive once -------------------------------------------------------------------------


@pytest.mark.mpi
def test_an_error_before_mpi_starts_prints_once(tmp_path):
    """A bad value (every rank's options are the same) and a misspelt flag under
    mpiexec -n 2: one message for the job, not one per rank, with the status of
    a one-process run."""
    for args, message in ((["--epochs", "0"], "error: --epochs must be >= 1, got 0"),
                          (["--epoch", "1"], "error: unrecognized arguments: --epoch 1")):
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minips", "train", "--model", "mlp",
                            "--out", str(tmp_path / "x"), *args], capture_output=True, text=True,
                           timeout=TIMEOUT, env=subprocess_env(), cwd=ROOT)
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.count(message) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "[minips rank" not in r.stderr and "BAD TERMINATION" not in r.stdout  # rank 0 spoke for the job


@pytest.mark.mpi
def test_an_error_on_both_ranks_is_one_line(tmp_path):
    """Both ranks refuse the option once MPI is up: the job ends with the message
    (one line per rank that got to print it, nothing else: MPICH's own abort line
    is silenced once the message has been read)."""
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minips", "train", "--model", "mlp",
                        "--epochs", "1", "--quiet", "--partition", "dirichlet:nan", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 1
    lines = launcher_lines(r.stderr)  # less Open MPI's mpiexec's own report of the abort
    assert 1 <= len(lines) <= 2 and all("ALPHA must be a number > 0" in ln for ln in lines), r.stderr[-2000:]


def test_the_message_is_read_before_the_abort(monkeypatch):
    """Comm.abort waits until the reader of stderr (mpiexec's proxy) has taken the
    message before it calls MPI_Abort: the proxy would otherwise handle the
    abort, kill every rank and end with the message still in the pipe (a
    failed job with no output). Here the reader comes 0.5 s late."""
    import os
    import threading
    import time

    from minips.distributed import comm as mcomm
    r, w = os.pipe()
    got, at_abort = [], []

    class FakeMPI:
        @staticmethod
        def Abort(code):
            at_abort.append(list(got))  # what the reader had taken when the abort started
            raise SystemExit(code)

    c = mcomm.Comm.__new__(mcomm.Comm)
    c.rank, c.size, c.mpi = 1, 2, FakeMPI
    monkeypatch.setattr(sys, "stderr", os.fdopen(w, "w"))
    monkeypatch.setattr(mcomm.mpi, "silence_stderr", lambda: None, raising=False)  # (absent before the fix)

    def reader():
        time.sleep(0.5)  # a launcher scheduled late
        got.append(os.read(r, 1 << 16))
    t = threading.Thread(target=reader)
    t.start()
    try:
        with pytest.raises(SystemExit):
            c.abort("error: the message")
    finally:
        t.join()
        sys.stderr.close()
        os.close(r)
    assert at_abort == [[b"[minips rank 1] error: the message\n"]]


@pytest.mark.parametrize("late", [False, True])
def test_ctrl_c_while_starting_one_process_is_one_line(late, monkeypatch, capsys):
    """Without MPI: a SIGINT held back during the imports, or one during the
    option checks, ends with one line and status 130, not a traceback (the
    same under mpiexec: tests/test_hangs.py)."""
    import minips
    from minips import cli
    from minips.distributed import comm as mcomm
    monkeypatch.setattr(mcomm, "_world", None)  # as in a fresh process: MPI not started
    if late:
        def interrupted(args):
            raise KeyboardInterrupt
        monkeypatch.setattr(cli, "config_from_args", interrupted)
    else:
        monkeypatch.setattr(minips, "_STARTUP_SIGINT", [2])
    try:
        assert main([*MLP, "--epochs", "1", "--out", "unused"]) == 130
    except KeyboardInterrupt:  # (before the fix: a traceback)
        pytest.fail("the KeyboardInterrupt escaped main()")
    err = capsys.readouterr().err
    assert err == "interrupted (SIGINT) while starting; nothing ran\n"
    assert minips._STARTUP_SIGINT == []


# --- compare: every entry checked first; what finished is reported --------------------------------------

CMP = ["compare", "--model", "mlp", "--epochs", "1", "--quiet", "--max-steps", "2", "--batch-size", "500",
       "--no-figures"]


def test_compare_checks_every_entry_before_the_first_run(tmp_path, capsys):
    """A later entry that a run would refuse only once built (a compressor larger
    than the model) is refused before the first run trains."""
    out = tmp_path / "cmp"
    assert main([*CMP, "--algos", "sync,topk-sgd:k=99999999", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--algos entry 'topk-sgd:k=99999999': compressor=topk: topk: k=99999999 exceeds the vector's size" \
        in err, err
    assert not (out / "sync").exists() and not list(out.rglob("*.csv"))  # sync did not run


@pytest.mark.mpi
def test_compare_checks_that_each_topology_fits_the_ranks(tmp_path):
    """The issue's case: a topology that does not fit P (a random geometric graph
    with a tiny radius is not connected on 2 ranks) is refused before sync runs."""
    out = tmp_path / "cmp"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minips", *CMP, "--out", str(out),
                        "--algos", "sync,d-psgd:topology=random-geometric:radius=0.01"],
                       capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 2 or r.returncode == 1, r.stderr[-2000:]
    assert "--algos entry 'd-psgd:topology=random-geometric:radius=0.01'" in r.stderr, r.stderr[-2000:]
    assert "is not connected" in r.stderr
    assert not (out / "sync").exists()


def test_compare_reports_what_finished_when_a_later_run_fails(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    step = Trainer._train_step

    def fail_in_the_second_run(self, *a, **kw):
        if self.cfg.label == "pseudo-sync" and self.global_step == 1:
            raise FloatingPointError("loss is nan at step 1 (rank 0); training diverged")
        return step(self, *a, **kw)
    monkeypatch.setattr(Trainer, "_train_step", fail_in_the_second_run)
    assert main([*CMP, "--algos", "sync,pseudo-sync,local-sgd", "--out", str(out)]) == 2
    assert "training diverged" in capsys.readouterr().err
    md = (out / rundir.COMPARE_MD).read_text()
    assert "| sync |" in md and "| pseudo-sync" not in md
    assert ("**Incomplete**: 1 of 3 runs finished. pseudo-sync failed (FloatingPointError: loss is nan at step 1 "
            "(rank 0); training diverged). Not run: local-sgd.") in md
    assert [s["label"] for s in json.loads((out / rundir.COMPARE_JSON).read_text())] == ["sync"]


@pytest.mark.mpi
def test_compare_md_says_when_ranks_shared_cores(tmp_path):
    """Two ranks confined to one core (the affinity mpiexec's ranks inherit):
    summary.json records it and compare.md says the times are not comparable."""
    import os
    cpu = min(os.sched_getaffinity(0))
    out = tmp_path / "cmp"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "minips", *CMP, "--algos", "sync",
                        "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT, env=subprocess_env(),
                       cwd=ROOT, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((out / "sync" / rundir.SUMMARY).read_text())
    assert s["oversubscribed"] == {"ranks_on_node": 2, "cores": 1}
    md = (out / rundir.COMPARE_MD).read_text()
    assert "**Ranks shared cores** (oversubscribed: 2 ranks on 1 core(s) of a node, in 1 of 1 run(s))" in md


def test_a_study_report_says_when_ranks_shared_cores(tmp_path, monkeypatch):
    """The runs' own record of sharing cores reaches the study's tables, also
    when the machine writing the report has cores enough."""
    from minips.bench import study
    from minips.bench.study.aggregate import oversubscribed

    from .test_bench_study import write
    monkeypatch.setattr("minips.kernels.threads.cores_on_node", lambda: 64)
    grid = study.load_grid(write(tmp_path))
    shared = {"ranks_on_node": 2, "cores": 1}
    recs = [{"P": 2, "lr": "base", "label": "sync", "seed": s, "status": "ok", "metric": 0.8,
             "oversubscribed": shared if s == 0 else None, "threads_per_rank": 1} for s in (0, 1)]
    md = study.markdown_report(grid, recs)
    assert ("**Ranks shared cores** in 1 of 2 finished runs (P = 2; e.g. 2 ranks on 1 core(s) of a node)" in md)
    assert oversubscribed(recs) == [2]
    assert "Ranks shared cores" not in study.markdown_report(grid, [{**r, "oversubscribed": None} for r in recs])


# --- bench train writes into a named folder ---------------------------------------------------------------

def test_bench_train_writes_into_its_out_folder_not_the_current_one(tmp_path, monkeypatch):
    from minips.bench import train as btrain
    from minips.cli import build_parser
    args = build_parser().parse_args(["bench", "train"])
    assert btrain.json_path(args) == Path("runs/bench-train/bench-train.json")
    args = build_parser().parse_args(["bench", "train", "--out", str(tmp_path / "b")])
    assert btrain.json_path(args) == tmp_path / "b" / "bench-train.json"
    args = build_parser().parse_args(["bench", "train", "--json", str(tmp_path / "x.json")])
    assert btrain.json_path(args) == tmp_path / "x.json"


# --- the tutorials' "not done" message --------------------------------------------------------------------

def test_the_not_done_message_says_how_to_go_on_inside_a_notebook(monkeypatch):
    """In a running kernel the message gives the line to run, and setting the
    variable there, then running the cell again, uses the reference answer."""
    sys.path.insert(0, str(ROOT / "tutorials"))
    import _common

    def placeholder(x):
        raise NotImplementedError
    monkeypatch.setattr(_common, "IN_NOTEBOOK", True)
    monkeypatch.setenv("MINIPS_TUTORIAL_SOLUTIONS", "0")
    with pytest.raises(_common.ExerciseNotDone) as e:
        _common.exercise("1.2", placeholder)
    msg = str(e.value)
    assert ('run `import os; os.environ["MINIPS_TUTORIAL_SOLUTIONS"] = "1"` (or `%env '
            'MINIPS_TUTORIAL_SOLUTIONS=1`) in a cell of this notebook, then run this cell again') in msg
    monkeypatch.setenv("MINIPS_TUTORIAL_SOLUTIONS", "1")  # what that line does, in the same kernel
    answer = _common.exercise("1.2", placeholder)
    assert answer is not placeholder and callable(answer)
    monkeypatch.setattr(_common, "IN_NOTEBOOK", False)
    monkeypatch.setenv("MINIPS_TUTORIAL_SOLUTIONS", "0")
    with pytest.raises(_common.ExerciseNotDone) as e:
        _common.exercise("1.2", placeholder)
    assert "run the step as `MINIPS_TUTORIAL_SOLUTIONS=1 python " in str(e.value)
