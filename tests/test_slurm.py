"""The Slurm batch example, examples/slurm_pseudo_sync.sh: its launch line
for each launcher and MPI (``MINIPS_DRY_RUN=1``, no Slurm needed), and the job
itself, submitted with ``sbatch`` to a running Slurm (the one-node cluster
of scripts/slurm_one_node.sh: .ci/run starts it and runs this file with
``-m slurm`` when it comes up; the default test run deselects the marker). A job whose time limit hits stops at
Slurm's SIGUSR1 with every rank's checkpoint, requeues itself and, requeued,
resumes and finishes with the trajectory of the same job run without a stop:
the same metrics.csv (all but the timings), summary and final weights, bitwise.

Both jobs run the example's own command line with tiny settings given after
it (an MLP on data/fashion-mnist-mini.h5, 2 ranks, 3 epochs of 70 steps). An
emulated network (``--network alpha=0.1,beta=0``: each message costs 0.1 s,
slept) makes a step last about 0.4 s on an idle or a busy machine alike, so
training takes about 90 s; Slurm sends ``--signal=B:USR1@N`` at its first
check of time limits (every 30 s) once a job is within N + 30 s of its limit,
so 30 to 60 s into a job of ``--time=3 --signal=B:USR1@120``: inside the
training, after the ranks have started. The emulated delays change no number
the run computes."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from minips.distributed.comm import mpi

from .conftest import ROOT, subprocess_env
from .test_launchers import VERSIONS

EXAMPLE = ROOT / "examples" / "slurm_pseudo_sync.sh"
TINY = ["--model", "mlp", "--epochs", "3", "--batch-size", "64", "--lr", "0.05", "--warmup-epochs", "0",
        "--checkpoint-every", "50", "--network", "alpha=0.1,beta=0"]
DONE = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
        "PREEMPTED"}
#: srun's --mpi for the MPI of this environment (.ci/run's is the mpich wheel: pmi2, tested; Open MPI 5 needs
#: pmix, Intel MPI pmi2 with I_MPI_PMI_LIBRARY set to Slurm's libpmi2.so: not tried here)
SRUN_MPI = {"mpich": "pmi2", "intel": "pmi2", "openmpi": "pmix"}


# --- the launch line, without Slurm -----------------------------------------------------------------

def _dry_run(tmp_path, env, *args):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MINIPS_"))}
    return subprocess.run(["bash", str(EXAMPLE), *args], capture_output=True, text=True, timeout=60,
                          env={**base, "MINIPS_DRY_RUN": "1", **env})


@pytest.mark.parametrize("key", sorted(VERSIONS))
@pytest.mark.parametrize("ranks,threads", [(2, 1), (1, 2)])
def test_the_mpiexec_line_binds_in_each_mpis_spelling(key, ranks, threads, tmp_path):
    """With MINIPS_LAUNCHER=mpiexec the script asks `mpiexec --version` which MPI
    it is and binds as docs/distributed.md's table of launchers says (the flags
    of minips.distributed.comm.mpi, which bench train uses): one core a rank,
    or T cores a rank of T threads; the ranks and threads come from Slurm."""
    fake = tmp_path / "bin" / "mpiexec"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{VERSIONS[key]}EOF\n")
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "MINIPS_LAUNCHER": "mpiexec",
           "SLURM_NTASKS": str(ranks), "SLURM_CPUS_PER_TASK": str(threads), "SLURM_JOB_ID": "7"}
    r = _dry_run(tmp_path, env, "--epochs", "1")
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[-1].split()
    bind = mpi.LAUNCHERS[key].bind_args(ranks, threads, ranks * threads)
    assert line[:4 + len(bind)] == ["+", "mpiexec", "-n", str(ranks), *bind], line
    assert line[4 + len(bind):8 + len(bind)] == ["python", "-m", "minips", "train"], line
    assert line[-2:] == ["--epochs", "1"] and "--resume" not in line  # given last, the job's own options win


def test_the_srun_line_and_a_requeued_job_resumes(tmp_path):
    out = tmp_path / "run"
    env = {"SLURM_NTASKS": "8", "SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_ID": "7", "MINIPS_OUT": str(out),
           "MINIPS_SRUN_MPI": "pmix"}
    r = _dry_run(tmp_path, env)
    assert r.returncode == 0, r.stderr
    line = r.stdout.splitlines()[-1]
    assert line.startswith("+ srun --ntasks=8 --cpus-per-task=2 --cpu-bind=cores --kill-on-bad-exit=1 --mpi=pmix "
                           "python -m minips train ")
    assert "--algo pseudo-sync:predictor=local:staleness=1" in line and "--resume" not in line
    out.mkdir()
    (out / "checkpoint.h5").write_bytes(b"")
    r = _dry_run(tmp_path, env)
    assert f"--out {out} --resume {out / 'checkpoint.h5'}" in r.stdout.splitlines()[-1]


def test_outside_slurm_the_script_says_so_in_one_line(tmp_path):
    r = _dry_run(tmp_path, {})
    assert r.returncode != 0 and r.stderr.strip().endswith("not inside a Slurm job: submit with sbatch"), r.stderr


# --- the job under a running Slurm -------------------------------------------------------------------

@pytest.fixture(scope="module")
def slurm():
    """The running Slurm's commands, or a one-line failure naming how to start one."""
    if not shutil.which("sbatch"):
        pytest.fail("sbatch not found: start a one-node Slurm with scripts/slurm_one_node.sh start --install "
                    "and run these tests with SLURM_CONF set (.ci/run does both)", pytrace=False)
    r = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not re.search(r"idle|mixed|alloc", r.stdout):
        pytest.fail(f"no Slurm node is up ({(r.stderr or r.stdout).strip()[:200]}): "
                    "eval $(scripts/slurm_one_node.sh env) after scripts/slurm_one_node.sh start", pytrace=False)


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_a_task_that_fails_ends_the_srun_step(slurm, tmp_path):
    """The example's srun flags (its dry-run line, 2 ranks) on a step whose task 1 exits with 3 after 2 s and
    whose task 0 is by then asleep for 120 s: the step ends within 60 s with an error (--kill-on-bad-exit=1;
    without it srun waited for task 0: 40.1 s against 0.3 s for a 40 s sleep, docs/bench/ci/slurm-stale-shm.txt)."""
    r = _dry_run(tmp_path, {"SLURM_NTASKS": "2", "SLURM_CPUS_PER_TASK": "1", "SLURM_JOB_ID": "7"})
    words = r.stdout.splitlines()[-1].split()
    launch = words[1:words.index("python")]
    assert launch[0] == "srun", words
    prog = ("import os, sys, time\n"
            "if os.environ['SLURM_PROCID'] == '1':\n    time.sleep(2); sys.exit(3)\n"
            "print('task 0 sleeping', flush=True); time.sleep(120)")
    t0 = time.time()
    p = subprocess.run([*launch, "--oversubscribe", sys.executable, "-c", prog], capture_output=True, text=True,
                       timeout=150, env=subprocess_env())
    took = time.time() - t0
    # both tasks ran (task 0 was asleep when task 1 failed), and the step ended long before task 0's sleep would
    assert "task 0 sleeping" in p.stdout and re.search(r"task 1: Exited with exit code 3", p.stderr), \
        (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    assert p.returncode != 0 and took < 60, (p.returncode, took, p.stderr[-2000:])


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_a_second_one_node_cluster_numbers_its_jobs_apart(slurm, tmp_path):
    """Two starts of scripts/slurm_one_node.sh (the running one and a second, beside it) give their jobs
    different ids, so a job of one never opens a shared-memory segment that a killed job of the other left
    under the same PMI name (docs/distributed.md, "Job ids on the one-node cluster")."""
    script = ROOT / "scripts" / "slurm_one_node.sh"

    def first_job_id(conf):
        r = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "SLURM_CONF": str(conf)})
        return int(re.search(r"FirstJobId\s*=\s*(\d+)", r.stdout).group(1))

    d = tmp_path / "second"
    env = {k: v for k, v in os.environ.items() if k != "MINIPS_SLURM_PORT"}  # its own ports, not the first's
    try:
        r = subprocess.run(["bash", str(script), "start", str(d)], capture_output=True, text=True, timeout=150,
                           env=env)
        assert r.returncode == 0, r.stderr[-2000:]
        a, b = first_job_id(os.environ["SLURM_CONF"]), first_job_id(d / "slurm.conf")
        assert a != 1 and b != 1 and abs(a - b) >= 100, (a, b)
        job = subprocess.run(["srun", "--ntasks=1", "true"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "SLURM_CONF": str(d / "slurm.conf")})
        assert job.returncode == 0, job.stderr[-2000:]
    finally:
        subprocess.run(["bash", str(script), "stop", str(d)], capture_output=True, text=True, timeout=120)


def _job(jobid: str) -> dict:
    r = subprocess.run(["scontrol", "show", "job", "-o", jobid], capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"(\w+)=(\S*)", r.stdout))


def _submit(tmp_path, name, launcher, time_limit, signal=None):
    from minips.bench.launch import find_mpiexec
    mpiexec = find_mpiexec()
    assert mpiexec, "mpiexec not found: pip install -e '.[mpi,test]'"
    key = mpi.mpiexec_launcher(mpiexec).key
    out = tmp_path / name
    env = subprocess_env({"MINIPS_VENV": sys.prefix, "MINIPS_LAUNCHER": launcher, "MINIPS_OUT": str(out),
                          "MINIPS_DATA": str(ROOT / "data" / "fashion-mnist-mini.h5"),
                          "MINIPS_SRUN_MPI": SRUN_MPI[key]})
    cmd = ["sbatch", "--parsable", f"--job-name=minips-{name}", "--nodes=1", "--ntasks=2", "--ntasks-per-node=2",
           "--cpus-per-task=1", f"--time={time_limit}", "--oversubscribe", f"--chdir={ROOT}",
           f"--output={tmp_path / name}.out"]
    if signal:
        cmd.append(f"--signal={signal}")
    r = subprocess.run([*cmd, str(EXAMPLE), *TINY], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0], out


def _wait(jobs: list[str], timeout: float) -> dict:
    deadline, last = time.time() + timeout, {}
    while time.time() < deadline:
        last = {j: _job(j) for j in jobs}
        if all(info.get("JobState") in DONE for info in last.values()):
            return last
        time.sleep(2)
    subprocess.run(["scancel", *jobs], timeout=30)
    pytest.fail(f"the jobs did not end within {timeout:.0f} s: "
                + "; ".join(f"{j} {i.get('JobState')} restarts {i.get('Restarts')}" for j, i in last.items()))


def _metrics(out):
    with open(out / "metrics.csv") as f:
        return [{k: v for k, v in row.items() if k not in ("seconds", "wall_time_s")} for row in csv.DictReader(f)]


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_a_job_stopped_at_its_time_limit_requeues_and_finishes_as_if_uninterrupted(slurm, launcher, tmp_path):
    from minips.checkpoint import load
    stopped, s_out = _submit(tmp_path, "stopped", launcher, "3", signal="B:USR1@120")
    whole, w_out = _submit(tmp_path, "whole", launcher, "10")
    info = _wait([stopped, whole], timeout=600)
    log = (tmp_path / "stopped.out").read_text()
    assert info[stopped]["JobState"] == "COMPLETED", log[-3000:]
    assert info[whole]["JobState"] == "COMPLETED", (tmp_path / "whole.out").read_text()[-3000:]
    # the limit hit: Slurm's signal stopped the ranks, the script requeued the job, which resumed
    assert int(info[stopped]["Restarts"]) >= 1 and int(info[whole]["Restarts"]) == 0, info
    assert "SIGUSR1 from Slurm" in log and f"requeueing job {stopped}" in log, log[-3000:]
    assert "(restart 1)" in log and "--resume" in log.split("(restart 1)")[1], log[-3000:]
    # ... and finished on the trajectory of the uninterrupted job
    s, w = (json.loads((d / "summary.json").read_text()) for d in (s_out, w_out))
    assert s["stopped"] is None and w["stopped"] is None, (s["stopped"], w["stopped"])
    assert s["steps"] == w["steps"] == 210
    for k in ("test_loss", "test_accuracy", "val_loss", "val_accuracy", "consensus_distance"):
        assert s[k] == w[k], k
    assert _metrics(s_out) == _metrics(w_out) and len(_metrics(w_out)) == 3
    a, b = load(s_out / "checkpoint.h5"), load(w_out / "checkpoint.h5")
    assert a["step"] == b["step"] == 210
    for x, y in zip(a["ranks"], b["ranks"]):
        assert np.array_equal(np.asarray(x["weights"]), np.asarray(y["weights"]))
        assert np.array_equal(np.asarray(x["optimizer"]["buffers"][0]), np.asarray(y["optimizer"]["buffers"][0]))
    assert not (s_out / "run.lock").exists() and not list(s_out.glob("*.tmp"))
