"""The run-folder layout: what ``train`` and ``compare`` write where, and how
``plot`` (and anything else) finds runs again.

A run folder (``train --out DIR``) holds::

    metrics.csv     one row per completed epoch (test metrics, seconds)
    summary.json    final numbers, options, timing breakdown, bytes sent
    trace.csv       one row per step (phases in seconds, loss, lr, bytes, diagnostics)
    checkpoint.h5   with --checkpoint-every or after a stop signal
    trace-diverged-rankR.csv   the trace up to a non-finite loss

A ``compare --out DIR`` folder holds one run folder per ``--algos`` entry
(:func:`run_folder`), ``compare.md`` and ``compare.json`` (the summaries, in
order) and the figures. Every file is written atomically (:func:`atomic_write`).
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

__all__ = ["METRICS", "SUMMARY", "TRACE", "CHECKPOINT", "COMPARE_MD", "COMPARE_JSON", "run_folder",
           "diverged_trace", "load_run", "find_runs", "atomic_write", "csv_text", "json_default",
           "write_csv", "write_json"]

METRICS, SUMMARY, TRACE, CHECKPOINT = "metrics.csv", "summary.json", "trace.csv", "checkpoint.h5"
COMPARE_MD, COMPARE_JSON = "compare.md", "compare.json"


def run_folder(out, label: str) -> Path:
    """Where ``compare`` writes the run of the ``--algos`` entry ``label``
    (colons, which separate spec options, become dashes; ``=`` is kept)."""
    return Path(out) / label.replace(":", "-").replace("/", "-")


def diverged_trace(out, rank: int) -> Path:
    """Where rank ``rank`` writes its trace when the loss became non-finite."""
    return Path(out) / f"trace-diverged-rank{rank}.csv"


def load_run(run_dir) -> dict:
    """``{"name", "summary", "trace"}`` of a run directory (trace may be empty).

    Raises:
        FileNotFoundError: no summary.json in ``run_dir`` (not a finished run).
    """
    d = Path(run_dir)
    if not (d / SUMMARY).exists():
        raise FileNotFoundError(f"{d} has no summary.json: is it the --out directory of a finished run?")
    summary = json.loads((d / SUMMARY).read_text())
    trace = []
    if (d / TRACE).exists():
        with open(d / TRACE) as f:
            trace = list(csv.DictReader(f))
    return {"name": summary.get("label") or d.name, "summary": summary, "trace": trace}


def find_runs(paths) -> list[Path]:
    """The run directories in ``paths``: each path that holds a ``summary.json``,
    or else its subdirectories that do (a ``compare`` output: in the order of its
    ``compare.json`` when there is one, then sorted by name).

    Raises:
        FileNotFoundError: a path that does not exist, or holds no run at all.
    """
    runs = []
    for d in map(Path, paths):
        if (d / SUMMARY).exists():
            runs.append(d)
            continue
        if not d.is_dir():
            raise FileNotFoundError(f"{d} does not exist: give the --out directory of a train or compare run")
        subs = sorted(c for c in d.iterdir() if (c / SUMMARY).exists())
        if not subs:
            raise FileNotFoundError(f"{d} has no summary.json and no subdirectory with one: give the --out "
                                    "directory of a finished train or compare run")
        order = []
        if (d / COMPARE_JSON).exists():
            try:
                listed = [run_folder(d, s["label"]) for s in json.loads((d / COMPARE_JSON).read_text())]
            except (ValueError, TypeError, KeyError):
                listed = []
            order = [c for c in listed if c in subs]
        runs.extend(order + [c for c in subs if c not in order])
    return runs


def json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def csv_text(keys, rows) -> str:
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)



def write_csv(path: Path, rows: list[dict], keys=None) -> None:
    """Rows (dicts) as CSV, atomically; columns: ``keys`` or every key any row has."""
    keys = list(keys) if keys is not None else list(dict.fromkeys(k for r in rows for k in r))
    atomic_write(Path(path), csv_text(keys, rows))


def write_json(path: Path, obj) -> None:
    """``obj`` as indented JSON, atomically (NumPy scalars become numbers)."""
    atomic_write(Path(path), json.dumps(obj, indent=2, default=json_default) + "\n")
