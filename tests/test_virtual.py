"""Virtual ranks (minips/distributed/comm/virtual/): P ranks as threads of
one process, with MPI's semantics.

What MPI itself must agree with runs ``mpiexec`` (the reduction order, a
checkpoint resumed under mpiexec); the rest (failures, signals, compute
slots, per-rank state, shared data) runs in this process. The training runs
that must equal ``mpiexec`` are in tests/test_virtual_equals_mpi.py.
"""
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.comm import get_comm, virtual
from minips.distributed.comm.virtual import VirtualMPIError, binomial, recursive_doubling

from . import virtual_checks
from .conftest import ROOT, cli_on_ranks, run_cli, subprocess_env

WORKER = str(Path(__file__).with_name("virtual_mpi_worker.py"))


def mpiexec(P, args, tmp_path=None, timeout=180, env=None):
    exe = shutil.which("mpiexec")
    if exe is None:  # pragma: no cover - the mpi extra installs it
        pytest.fail("mpiexec not found: pip install -e '.[mpi,test]'", pytrace=False)
    return subprocess.run([exe, "-n", str(P), sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=subprocess_env(env), cwd=ROOT)


def no_rank_threads_left():
    return not [t for t in threading.enumerate() if t.name.startswith("minips-rank-")]


# --- the order of reductions: bitwise MPICH's -----------------------------------------------
def test_recursive_doubling_order_by_hand():
    xs = [np.array([v], np.float64) for v in (1e16, 1.0, -1e16, 1.0, 3.0)]
    # P = 5: pof2 = 4, rem = 1: (x0 + x1), x2, x3, x4 -> ((x0+x1) + x2) + (x3 + x4)
    want = ((1e16 + 1.0) + -1e16) + (1.0 + 3.0)
    assert recursive_doubling([x.copy() for x in xs], np.add)[0] == want
    assert binomial([1e16, 1.0, -1e16, 1.0, 3.0], lambda a, b: a + b) == ((1e16 + 1.0) + (-1e16 + 1.0)) + 3.0


@pytest.mark.mpi(ranks=6)
@pytest.mark.parametrize("P", [3, 6])
def test_reductions_are_bitwise_those_of_mpiexec(P, tmp_path):
    proc = mpiexec(P, [WORKER, "reductions", str(tmp_path)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    mpi = [pickle.loads((tmp_path / f"rank{r}.pkl").read_bytes()) for r in range(P)]
    mine = virtual.run(P, lambda: virtual_checks.reductions(get_comm()))
    for r in range(P):
        for n in (1, 7, 100, 3001, 100_003):
            for a, b in zip(mine[r][n], mpi[r][n]):
                assert a.dtype == b.dtype and np.array_equal(a, b), (r, n)  # no NaN here: bitwise
        assert mine[r]["scalar"] == mpi[r]["scalar"] and mine[r]["iscalar"] == mpi[r]["iscalar"]
        assert mine[r]["bytes_sent"] == mpi[r]["bytes_sent"]
    if P == 6:  # ((x0+x1) + (x2+x3)) + (x4+x5): a left-to-right sum differs in the last bits
        seq = [np.random.default_rng(100_003_000 + r).standard_normal(100_003).astype(np.float32)
               * np.float32(10.0 ** (r % 3)) for r in range(P)]
        assert not np.array_equal(sum(seq[1:], seq[0]), mpi[0][100_003][0])


# --- failures end the job -------------------------------------------------------------------
def test_a_rank_that_raises_ends_every_rank_and_is_named():
    def rank():
        c = get_comm()
        c.barrier()
        if c.rank == 2:
            raise ValueError("bad batch on this rank")
        c.barrier()  # the others wait here for rank 2, which never comes
        c.allreduce(np.ones(4, np.float32))
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="bad batch") as info:
        virtual.run(4, rank)
    assert time.perf_counter() - t0 < 30
    assert any("virtual rank 2 of 4" in n for n in getattr(info.value, "__notes__", []))
    assert no_rank_threads_left()


def test_collectives_that_differ_between_ranks_fail_on_every_rank():
    seen = []

    def rank():
        c = get_comm()
        try:
            if c.rank == 0:
                c.allreduce(np.ones(3, np.float32))
            else:
                c.bcast(np.ones(3, np.float32))
        except VirtualMPIError as e:
            seen.append(str(e))
            raise
    with pytest.raises(VirtualMPIError, match="differs between ranks"):
        virtual.run(2, rank)
    assert seen and "rank 0: allreduce(SUM), rank 1: bcast(root=0)" in seen[0]
    assert no_rank_threads_left()


def test_a_rank_that_returns_early_fails_the_calls_that_wait_for_it():
    def rank():
        c = get_comm()
        c.barrier()
        if c.rank == 1:
            return "done early"  # under MPI the others would wait for it for ever
        if c.rank == 2:
            c.iexchange(np.ones(3), 1).wait()  # a message from a rank that has ended
        c.allreduce(np.ones(4, np.float32))
    t0 = time.perf_counter()
    with pytest.raises(VirtualMPIError, match="rank 1 has ended, but this rank waits for it in") as info:
        virtual.run(3, rank)
    assert time.perf_counter() - t0 < 30 and no_rank_threads_left()
    assert any("virtual rank" in n for n in getattr(info.value, "__notes__", []))


def test_sys_exit_and_abort_on_one_rank_end_the_job():
    def rank():
        c = get_comm()
        if c.rank == 1:
            c.abort("giving up", code=3)
        c.barrier()
    with pytest.raises(SystemExit) as info:
        virtual.run(3, rank)
    assert info.value.code == 3 and no_rank_threads_left()


def test_sigint_before_the_stop_protocol_ends_every_rank():
    def rank():
        c = get_comm()
        c.barrier()
        if c.rank == 0:
            time.sleep(3)  # computing when the signal comes: it ends at its next call
        c.barrier()  # the others wait here
    # the handler a Python program starts with, whatever an earlier test in this worker left (one
    # run found SIG_IGN here): the job must put back the handler it found
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            virtual.run(3, rank)
        assert time.perf_counter() - t0 < 20 and no_rank_threads_left()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, found)


def test_a_signal_reaches_every_rank_stop_protocol():
    from minips.stop import StopAgreement

    def rank():
        c = get_comm()
        stop = StopAgreement(c)
        c.barrier()
        if c.rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        steps = 0
        while not stop.should_stop():
            steps += 1
            time.sleep(0.01)
        stop.close()
        return steps
    steps = virtual.run(4, rank)
    assert len(set(steps)) == 1 and steps[0] < 100  # every rank stopped at the same step


# --- threads and per-rank state ---------------------------------------------------------------
def test_at_most_cores_ranks_compute_at_once():
    lock, state = threading.Lock(), {"now": 0, "max": 0}

    def work():
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.005)  # "computing" with a slot (sleep releases the GIL, not the slot)
        with lock:
            state["now"] -= 1

    def rank():
        c = get_comm()
        for _ in range(5):
            work()
            c.allreduce(np.ones(8, np.float32))
            work()
            req = c.iallreduce(np.ones(8, np.float32))
            while not req.test():  # polling must not keep the other ranks from their slots
                pass
    virtual.run(8, rank, cores=2)
    assert state["max"] == 2


def test_random_generator_environment_and_callbacks_are_per_rank():
    from minips import autograd, environ
    from minips import random as mrandom
    from minips.nn import module

    def rank():
        c = get_comm()
        mrandom.seed(c.rank)
        if c.rank == 1:
            environ.set("MINIPS_REFERENCE_KERNELS", "1")
            autograd.backward_callbacks.append(print)
        c.barrier()
        from minips.kernels import reference_kernels
        draws = [float(mrandom.generator().random()) for _ in range(3)]
        c.barrier()
        return draws, reference_kernels(), len(autograd.backward_callbacks), len(module.forward_callbacks)
    got = virtual.run(3, rank)
    for r, (draws, ref, nb, nf) in enumerate(got):
        assert draws == np.random.default_rng(r).random(3).tolist()
        assert ref == (r == 1) and nb == (r == 1) and nf == 0
    assert "MINIPS_REFERENCE_KERNELS" not in os.environ and len(autograd.backward_callbacks) == 0


def test_data_is_loaded_once_and_shared_read_only():
    from minips.tasks import make_task

    def rank():
        task = make_task("fashion-mnist-mini")
        task.hold_out(0.1)
        x = task.train_arrays[0]
        try:
            x[0, 0, 0, 0] = 1.0
            wrote = True
        except ValueError:
            wrote = False
        return id(task.dataset), id(x), wrote
    got = virtual.run(3, rank)
    assert len({g[0] for g in got}) == 1 and len({g[1] for g in got}) == 1 and not any(g[2] for g in got)
    # outside a virtual job every load is its own, writable
    a, b = make_task("fashion-mnist-mini"), make_task("fashion-mnist-mini")
    assert a.dataset is not b.dataset and a.dataset.train_x.flags.writeable


def test_every_numba_kernel_releases_the_gil():
    import importlib

    from numba.core.registry import CPUDispatcher
    names = [f"minips.kernels.{k}" for k in ("conv", "pool", "elementwise", "loss", "lstm", "compress")]
    names += [f"minips.distributed.algorithms.{a}" for a in ("predictor_base", "local_predictors", "aesp")]
    found = 0
    for name in names:
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                found += 1
                assert obj.targetoptions.get("nogil"), f"{name}.{obj.__name__} holds the GIL: njit(nogil=True)"
    assert found >= 20


def test_jobs_do_not_nest_and_sizes_are_checked():
    with pytest.raises(ValueError, match="1..1024"):
        virtual.run(0, lambda: None)
    with pytest.raises(ValueError, match="do not nest"):
        virtual.run(2, lambda: virtual.run(2, lambda: None))


def test_virtual_ranks_under_mpiexec_are_refused(tmp_path):
    proc = mpiexec(2, ["-m", "minips", "train", "--virtual-ranks", "4", "--out", str(tmp_path / "r")], timeout=120)
    assert proc.returncode != 0
    assert "--virtual-ranks runs every rank as a thread of one process: start it without mpiexec" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_virtual_ranks_value_is_one_line(tmp_path):
    proc = run_cli(["train", "--virtual-ranks", "-2", "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "--virtual-ranks must be in 1..1024" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_rank_error_in_a_virtual_run_is_one_line_naming_the_rank(tmp_path):
    # every rank fails alike (an unknown data set): the first to abort names itself, the job ends with 1
    proc = run_cli(["train", "--virtual-ranks", "4", "--data", "nope", "--out", str(tmp_path / "r")], timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[minips rank")]
    assert len(lines) == 1 and "error: unknown data set 'nope'" in lines[0]
    assert "Traceback" not in proc.stderr


def test_a_rank_that_fails_its_checks_ends_the_job_before_out_is_touched(tmp_path, monkeypatch):
    """The checks before --out is touched (Trainer.preflight) on virtual ranks:
    only rank 2 fails them; the others, waiting in the barrier before the
    folder is created, end; the folder is never created; one line names rank 2."""
    from minips.config import ConfigError
    from minips.train import Trainer
    check = Trainer.preflight

    def rank_2_refuses(self):
        out = check(self)
        if self.comm.rank == 2:
            raise ConfigError("rank 2 refuses on purpose")
        return out
    monkeypatch.setattr(Trainer, "preflight", rank_2_refuses)
    out = tmp_path / "run"
    r = cli_on_ranks(4, ["train", "--model", "mlp", "--epochs", "1", "--quiet", "--out", out])
    assert r.returncode == 1, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("[minips rank")] == \
        ["[minips rank 2] error: rank 2 refuses on purpose"]
    assert "Traceback" not in r.stderr
    assert not out.exists() and no_rank_threads_left()


def test_a_failing_rank_other_than_0_leaves_no_lock(tmp_path, monkeypatch):
    """As tests/test_edges.py's MPI test: rank 1 fails in its third step; the
    run had started (metrics.csv exists), its lock is gone, one line names rank 1."""
    from minips import rundir
    from minips.train import Trainer
    step = Trainer._train_step

    def step_then_fail(self, *a, **kw):
        if self.comm.rank == 1 and self.global_step == 3:
            raise ValueError("rank 1 fails on purpose at step 3")
        return step(self, *a, **kw)
    monkeypatch.setattr(Trainer, "_train_step", step_then_fail)
    out = tmp_path / "run"
    r = cli_on_ranks(2, ["train", "--model", "mlp", "--epochs", "5", "--quiet", "--out", out])
    assert r.returncode == 1, r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("[minips rank")] == \
        ["[minips rank 1] error: rank 1 fails on purpose at step 3"]
    assert (out / rundir.METRICS).exists() and not (out / rundir.LOCK).exists()
    assert no_rank_threads_left()


# --- stop, checkpoint and resume ---------------------------------------------------------------
def _train_args(out, steps, *extra):
    return ["train", "--model", "mlp", "--epochs", "2", "--max-steps", str(steps), "--algo", "local-sgd:period=2",
            "--batch-size", "16", "--quiet", "--out", str(out), *extra]


def _trace_losses(out):
    import csv
    return [row["loss"] for row in csv.DictReader(open(Path(out) / "trace.csv"))]


def test_virtual_checkpoint_resumes_bitwise_here_and_under_mpiexec(tmp_path):
    from minips.cli import main
    assert main(_train_args(tmp_path / "whole", 8, "--virtual-ranks", "2")) == 0
    assert main(_train_args(tmp_path / "half", 4, "--virtual-ranks", "2", "--checkpoint-every", "4")) == 0
    ckpt = tmp_path / "half" / "checkpoint.h5"
    shutil.copytree(tmp_path / "half", tmp_path / "half-mpi")
    assert main(_train_args(tmp_path / "half", 8, "--virtual-ranks", "2", "--resume", str(ckpt))) == 0
    whole, resumed = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "half"))
    assert _trace_losses(tmp_path / "half") == _trace_losses(tmp_path / "whole")
    assert resumed["test_loss"] == whole["test_loss"] and resumed["steps"] == 8
    # the same checkpoint continues under mpiexec with the same P: the same trajectory
    ckpt2 = tmp_path / "half-mpi" / "checkpoint.h5"
    proc = mpiexec(2, ["-m", "minips", *_train_args(tmp_path / "half-mpi", 8, "--resume", str(ckpt2))])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _trace_losses(tmp_path / "half-mpi") == _trace_losses(tmp_path / "whole")
    assert json.loads((tmp_path / "half-mpi" / "summary.json").read_text())["test_loss"] == whole["test_loss"]


def test_another_number_of_virtual_ranks_is_refused_on_resume(tmp_path):
    from minips.cli import main
    assert main(_train_args(tmp_path / "a", 2, "--virtual-ranks", "2", "--checkpoint-every", "2")) == 0
    proc = run_cli(_train_args(tmp_path / "a", 4, "--virtual-ranks", "3", "--resume",
                               str(tmp_path / "a" / "checkpoint.h5")), timeout=120)
    assert proc.returncode != 0 and "was written by 2 rank(s), this job has 3" in proc.stderr
    assert "--virtual-ranks 2" in proc.stderr and "Traceback" not in proc.stderr


def test_ctrl_c_stops_a_virtual_run_cleanly_with_a_checkpoint(tmp_path):
    out = tmp_path / "r"
    args = [sys.executable, "-m", "minips", *_train_args(out, 0, "--virtual-ranks", "4")]
    args[args.index("--quiet")] = "--no-quiet"
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
                            cwd=ROOT)
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("minips:"):
            line = proc.stdout.readline()
        assert line.startswith("minips:"), proc.stderr.read()[-3000:]
        time.sleep(2.0)  # a few steps into the run
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert "stopped by signal at step" in stdout and (out / "checkpoint.h5").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "signal" and summary["virtual"] is True


# --- the cost benchmark ------------------------------------------------------------------
def test_bench_virtual_writes_its_table_and_json(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli(["bench", "virtual", "--ranks", "2", "--steps", "2", "--warmup", "1", "--model", "mlp",
                 "--memory-ranks", "2", "--memory-model", "mlp", "--memory-data", "fashion-mnist-mini",
                 "--memory-algos", "sync", "--memory-steps", "1", "--json", str(out)], timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    plain, virt = res["time"]
    assert not plain["virtual"] and virt["virtual"] and virt["ranks"] == 2
    for row in (plain, virt, *res["memory"]):
        assert row["s_per_sample"] > 0 and row["cpu_s_per_sample"] > 0 and row["peak_rss_bytes"] > 50 * 2**20
        assert len(row["load_before"]) == 3 and row["steady_steps"] >= 1
    assert virt["s_per_sample"] == pytest.approx(virt["step_s"] / (2 * 32))
    text = out.with_suffix(".txt").read_text()
    assert "VIRTUAL x2" in text and "plain train" in text and "peak memory (VmHWM) of 2 VIRTUAL ranks" in text
