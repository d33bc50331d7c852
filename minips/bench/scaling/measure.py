"""Measuring weak scaling: the ``--ranks`` and ``--algos`` flags checked, and every
(P, algorithm) run as ``mpiexec -n P python -m minips train`` with its step times read back."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ...distributed.algorithms import DEFAULT_ALGOS
from ...kernels.threads import cores_on_node
from ..launch import MpiexecNotFound, bind_args, flag_args, launch_env, load_avg, mpiexec_command, require_mpiexec

__all__ = ["ScalingError", "parse_ranks", "parse_algos", "option_flags", "load_avg", "measure"]


class ScalingError(ValueError):
    """Bad option or a failed run; the message names the fix."""


def read_json_file(path, flag: str, key: str, made_by: str) -> dict:
    """The JSON object in ``path``, given to ``flag``, which must hold ``key``.

    Raises:
        ScalingError: the file is missing, is not JSON, or is not an object
            with ``key``; the message names the flag and ``made_by``, the
            command that writes such a file.
    """
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ScalingError(f"{flag} {path}: no such file; give a JSON file written by {made_by}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ScalingError(f"{flag} {path}: not a JSON file ({e}); give one written by {made_by}") from None
    if not isinstance(data, dict) or key not in data:
        raise ScalingError(f"{flag} {path}: not the JSON of {made_by} (no {key!r} key)")
    return data


def parse_ranks(spec: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``.

    Raises:
        ScalingError: empty, not integers, or a value < 1.
    """
    try:
        ranks = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise ScalingError(f"--ranks {spec!r}: give comma-separated integers, e.g. 1,2,4") from None
    if not ranks:
        raise ScalingError("--ranks is empty; e.g. --ranks 1,2")
    bad = [r for r in ranks if r < 1]
    if bad:
        raise ScalingError(f"--ranks {spec!r}: rank counts must be >= 1 (got {bad[0]})")
    return sorted(set(ranks))


def parse_algos(spec: str) -> list[dict]:
    """``"sync,overlap-sync,pseudo-sync:predictor=adaptive"`` -> one entry per
    comma-separated algorithm spec: ``{"algo": the spec, "label": its label}``
    (the grammar of ``compare``).

    Raises:
        ScalingError: empty, or an entry that is not a valid spec or whose
            algorithm has no step-time model.
    """
    from ...distributed.algorithms import resolve
    from ...labs.projection import StepProfile

    out = []
    for item in [s.strip() for s in str(spec).split(",") if s.strip()]:
        try:
            a = resolve(item)
            a.step_time(StepProfile(forward=1e-3, backward=1e-3, grad_bytes=4.0), 1, _NoNetwork())
        except ValueError as e:
            raise ScalingError(f"--algos entry {item!r}: {e}") from None
        except NotImplementedError as e:
            raise ScalingError(f"--algos entry {item!r}: {e}; the projection needs one") from None
        out.append({"algo": item, "label": a.label})
    if not out:
        raise ScalingError("--algos is empty; e.g. --algos " + ",".join(DEFAULT_ALGOS))
    return out


class _NoNetwork:
    """A free network (every primitive takes 0 s): to check that a cost model runs."""

    def __getattr__(self, name):
        return lambda *a, **k: 0.0


def _train_cmd(args, entry: dict, P: int, out: Path, mpiexec: str) -> list[str]:
    cmd = mpiexec_command(mpiexec, P)
    cmd += bind_args(P, args.threads, cores_on_node(), args.bind, mpiexec)
    cmd += [sys.executable, "-m", "minips", "train", "--model", args.model, "--data", args.data,
            "--algo", entry["algo"], "--epochs", "1", "--max-steps", str(args.steps),
            "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--progress", args.progress,
            *flag_args(option_flags(vars(args))), "--seed", "0", "--quiet", "--no-trace", "--out", str(out),
            "--overwrite"]
    if args.network:
        cmd += ["--network", args.network]
    return cmd


def option_flags(values: dict) -> dict:
    """The older per-option flags (the algorithms package's ``OPTION_FLAGS``,
    e.g. a bucket size) given in ``values`` (the arguments, or a JSON's
    ``config``): name -> value, those not given left out."""
    from ...distributed.algorithms.option_flags import OPTION_FLAGS
    return {k: values[k] for k, f in OPTION_FLAGS.items() if f.type != "dict" and values.get(k) is not None}




def measure(args, entries: list[dict], ranks: list[int], out_dir: Path, say=print) -> list[dict]:
    """Run every (P, algorithm) ``args.repeats`` times; one row per (P, algorithm)
    with the median step time and that run's breakdown.

    Raises:
        ScalingError: a run failed or timed out (its stderr tail is quoted).
    """
    try:
        mpiexec = require_mpiexec()
    except MpiexecNotFound as e:
        raise ScalingError(str(e)) from None
    rows = []
    for P in ranks:
        for e in entries:
            runs = []
            for i in range(args.repeats):
                out = out_dir / f"P{P}-{e['label'].replace(':', '-')}-r{i}"
                cmd = _train_cmd(args, e, P, out, mpiexec)
                load = load_avg()
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, env=launch_env(args.threads),
                                       timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    raise ScalingError(f"P={P} {e['label']}: no result after {args.timeout} s "
                                       f"(raise --timeout or lower --steps): {' '.join(cmd)}") from None
                if r.returncode != 0 or not (out / "summary.json").exists():
                    tail = "\n".join(r.stderr.strip().splitlines()[-5:])
                    raise ScalingError(f"P={P} {e['label']} failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")
                s = json.loads((out / "summary.json").read_text())
                s["load_before"] = load
                runs.append(s)
            times = [s["step_time_s"] for s in runs]
            med = sorted(runs, key=lambda s: s["step_time_s"])[len(runs) // 2]
            row = {"P": P, "label": e["label"], "algo": e["algo"], "step_time_s": med["step_time_s"],
                   "step_times_s": times,
                   "images_per_s": args.batch_size * P / med["step_time_s"],
                   "time_breakdown": med["time_breakdown"], "comm_alone_s": med.get("comm_alone_s"),
                   "overlap_efficiency": med.get("overlap_efficiency"),
                   "threads_per_rank": med.get("threads_per_rank"), "network": med.get("network"),
                   "network_emulated": med.get("network_emulated"),
                   "load_before": [s["load_before"] for s in runs]}
            rows.append(row)
            say(f"  P={P} {e['label']}: step {1e3 * row['step_time_s']:.2f} ms "
                f"(runs: {', '.join(f'{1e3 * t:.1f}' for t in times)}; load {row['load_before'][0]})")
    for r in rows:
        base = next((b for b in rows if b["label"] == r["label"] and b["P"] == 1), None)
        r["efficiency"] = base["step_time_s"] / r["step_time_s"] if base else None
    return rows

