"""Running one point of a study's grid: its ``python -m minips train`` command line
(under ``mpiexec -n P``, or on virtual ranks), the run itself, and the record read back
from its ``summary.json``."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from ...rundir import atomic_write
from ..launch import flag_args, launch_env, mpiexec_command
from .grid import Grid, RunSpec

__all__ = ["train_command", "VARIANT_TOML", "run_one", "run_record", "finished", "stopped_by_signal"]


def stopped_by_signal(out: Path) -> bool:
    """Whether the run in ``out`` stopped at a signal (SIGTERM, SIGINT, a launcher's stop: its
    summary.json says ``"stopped": "signal"``): not finished, and resumable from its checkpoint."""
    try:
        return json.loads((out / "summary.json").read_text()).get("stopped") == "signal"
    except (OSError, ValueError, AttributeError):
        return False


def finished(out: Path) -> bool:
    """Whether the run in ``out`` is done: a summary.json (a finished or diverged run's) that is
    not a stopped run's (:func:`stopped_by_signal`)."""
    return (out / "summary.json").exists() and not stopped_by_signal(out)


def train_command(spec: RunSpec, out: Path, mpiexec: str, python: str = sys.executable,
                  resume: Path | None = None) -> list[str]:
    """The ``mpiexec -n P python -m minips train ...`` command of one run, or
    ``python -m minips train --virtual-ranks P ...`` for a virtual one (every
    option explicit; a variant's options through ``OUT/variant.toml``; ``--overwrite``: a
    finished run is skipped before this, so what is there is a failed attempt's leftovers;
    ``resume``: a stopped run's checkpoint, continued in the same folder instead)."""
    launch = [python] if spec.virtual else [*mpiexec_command(mpiexec, spec.P), python]
    start = ["--resume", str(resume)] if resume is not None else ["--overwrite"]
    args = [*launch, "-m", "minips", "train", *flag_args(spec.flags),
            "--out", str(out), "--quiet", *start, *(["--virtual-ranks", str(spec.P)] if spec.virtual else [])]
    if spec.variant_options:
        args += ["--config", str(out / VARIANT_TOML)]
    return args


#: the config file of a run with a variant (its options as a TOML table)
VARIANT_TOML = "variant.toml"


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def run_one(spec: RunSpec, root: Path, grid: Grid, mpiexec: str, log) -> dict:  # noqa: C901
    """Run one grid point (unless it finished: :func:`finished`); returns its record. A run
    that stopped at a signal (a study stopped with its driver) continues from its checkpoint,
    the same trajectory (``train --resume``), or starts again when it has none."""
    out = spec.out(root)
    rec = {"P": spec.P, "lr": spec.lr_name, "label": spec.label, "seed": spec.seed, "virtual": spec.virtual}
    if finished(out):
        return {**rec, **run_record(out, grid.metric, grid.report_metric, grid.target_accuracy)}
    resume = out / "checkpoint.h5" if stopped_by_signal(out) and (out / "checkpoint.h5").exists() else None
    out.mkdir(parents=True, exist_ok=True)
    if spec.variant_options:  # a TOML table named as the algorithm's options table
        from ...distributed.algorithms import resolve
        table = resolve(spec.flags["algo"]).cls.Options.EXTRA
        atomic_write(out / VARIANT_TOML,
                     f"[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in spec.variant_options.items()))
    cmd = train_command(spec, out, mpiexec, resume=resume)
    env = launch_env()
    env.update(grid.env)
    atomic_write(out / "command.txt", " ".join(cmd) + "\n")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=grid.timeout_s)
        rc, stderr = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, stderr = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    wall = time.perf_counter() - t0
    if rc == 0 and finished(out):
        return {**rec, **run_record(out, grid.metric, grid.report_metric, grid.target_accuracy)}
    status = "diverged" if "diverged" in stderr else ("timeout" if rc == "timeout" else "failed")
    result = {"status": status, "metric": None, "wall_s": wall, "returncode": rc,
              "message": stderr.strip().splitlines()[-3:] if stderr.strip() else _silent_end(rc, grid.timeout_s)}
    if status == "diverged":  # keep the record so a rerun skips it
        atomic_write(out / "summary.json", json.dumps({"status": "diverged", "stderr_tail": result["message"]}) + "\n")
    log(f"  {status}: {' '.join(result['message'])[-300:]}")
    return {**rec, **result}


def _silent_end(rc, timeout_s=None) -> list[str]:
    """What to say of a run that ended without a word on stderr: its time limit (``rc`` "timeout"),
    a signal that killed it (a negative return code: the process itself; 128 + N: a launcher
    such as mpiexec reporting a rank killed by signal N), SIGKILL most often from the kernel's
    out-of-memory killer."""
    import signal
    if rc == "timeout":
        return [f"stopped at the grid's time limit ({timeout_s} s), nothing on stderr"]
    if not isinstance(rc, int) or 0 <= rc <= 128:
        return [f"exit status {rc}, nothing on stderr"]
    number, who = (-rc, "killed") if rc < 0 else (rc - 128, f"exit status {rc}: a rank killed")
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    hint = (": often the kernel's out-of-memory killer (dmesg | grep -i 'out of memory'); run fewer at once"
            if number == signal.SIGKILL else "")
    return [f"{who} by {name}, nothing on stderr{hint}"]


def run_record(out: Path, metric: str, report_metric: str | None = None, target: float | None = None) -> dict:
    """The record of a finished run: its metric (and ``reported`` twin), timing,
    traffic (``bytes_sent_per_step``: bytes per rank per step), ``family``,
    ``time_to_target`` (seconds to the first evaluation of the test metric at or
    above ``target``; None when never), ``consensus_distance`` (only for runs
    whose ranks differ), ``rank0_*`` (with ``eval-rank0``), ``curve`` (the
    test metric, wall seconds and cumulative MiB sent per rank at each
    evaluation: :func:`minips.report.evaluation_curve`), ``steps``,
    ``val_curve`` (``metric`` at each evaluation, the ``--eval-every`` ones
    included) and ``projection`` (a virtual run's cost-model inputs; None
    otherwise)."""
    from ...report import evaluation_curve, time_to_target
    from ...rundir import load_run

    s = json.loads((out / "summary.json").read_text())
    if s.get("status") == "diverged":
        return {"status": "diverged", "metric": None, "reported": None, "wall_s": None}
    extra = {"reported": s.get(report_metric)} if report_metric else {}
    for k in ("val_accuracy", "val_loss", "val_bleu", "consensus_distance"):
        if k in s:
            extra[k] = s[k]
    extra.update({k: v for k, v in s.items() if k.startswith("rank0_")})
    tm = report_metric or metric  # the test metric (a val_* metric's report_metric is its test twin)
    return {"status": "ok", "metric": s.get(metric), **extra, "wall_s": s.get("wall_time_s"),
            "step_time_s": s.get("step_time_s"), "test_loss": s.get("test_loss"),
            "final_lr": s.get("lr"), "world_size": s.get("world_size"), "algo": s.get("algo"),
            "family": s.get("family"), "replicated": s.get("replicated"),
            "threads_per_rank": s.get("threads_per_rank"), "bytes_sent_per_step": s.get("bytes_sent_per_step"),
            "cpu": s.get("cpu"), "load_average_end": s.get("load_average_end"),
            "oversubscribed": s.get("oversubscribed"),
            "time_to_target": time_to_target(s, target, tm), "virtual": bool(s.get("virtual")),
            "projected_step_time_s": s.get("projected_step_time_s"), "projected_network": s.get("projected_network"),
            "curve": evaluation_curve(s, load_run(out)["trace"], tm), "steps": s.get("steps"),
            # the grid metric at every evaluation (the --eval-every curve when the run has one) and what
            # the cost model reads to put them on another network's time axis (.timeaxis)
            "val_curve": [{"step": p["step"], "value": p[metric]} for p in evaluation_curve(s, None, metric)],
            "projection": {k: s.get(k) for k in PROJECTION_KEYS} if s.get("projected_grad_bytes") else None}


#: what a run record keeps of a virtual run's summary.json for :func:`minips.report.projected_step_time`
PROJECTION_KEYS = ("algo", "algo_options", "algo_spec", "world_size", "projected_profile_s", "projected_grad_bytes",
                   "projected_profile_extras")

