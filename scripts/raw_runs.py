"""The raw runs behind a committed table: each table script names every run folder it needs
under docs/bench/ (``summary.json`` and ``metrics.csv`` per run, as ``bench study`` writes them)
and refuses to run when one is missing, so a table never falls back to fewer seeds.

A folder's ``summary.json`` is either a finished run's summary or, for a run that stopped on a
non-finite loss, ``bench study``'s record ``{"status": "diverged", ...}``: such a run is
returned as :class:`minips.stats.Failure` ("diverged"), counted and left out of every mean and
pair (as is a run that ended at chance, which the statistics judge from its value).

Used by scripts/five_seed_tables.py and scripts/gap_tables.py; tests/test_tables_rebuild.py
rebuilds every table from the committed runs and checks it is unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

from minips.stats import Failure

ROOT = Path(__file__).resolve().parents[1]


def safe(label: str) -> str:
    """A run folder's name for an algos entry (as ``bench study`` names it)."""
    return label.replace(":", "-").replace("@", "_")


def load(folders: dict, script: str) -> dict:
    """``{key: summary dict}`` for ``{key: run folder}``.

    Raises:
        SystemExit: a folder without ``summary.json`` (or a finished run's folder without
            ``metrics.csv``): one line naming how many are missing, the first of them,
            and what to do.
    """
    missing = [f for f in folders.values() if not (Path(f) / "summary.json").is_file()]
    out = {}
    for key, f in folders.items():
        if f in missing:
            continue
        s = json.loads((Path(f) / "summary.json").read_text())
        if s.get("status") != "diverged" and not (Path(f) / "metrics.csv").is_file():
            missing.append(f)
        out[key] = s
    if missing:
        first = Path(missing[0])
        first = first.relative_to(ROOT) if first.is_absolute() and first.is_relative_to(ROOT) else first
        raise SystemExit(f"{script}: {len(missing)} of the {len(folders)} raw runs it needs are missing (first: "
                         f"{first}/summary.json or metrics.csv); a table is never built from fewer runs: "
                         "commit the runs (the README.md beside the table says how they were made)")
    return out


def value(summary: dict, key: str):
    """The run's ``key`` (e.g. ``val_accuracy``), or ``Failure("diverged")`` for a diverged run."""
    if summary.get("status") == "diverged":
        return Failure("diverged")
    if summary.get(key) is None:
        raise SystemExit(f"a run's summary.json has no {key!r} (run {summary.get('label')} seed "
                         f"{summary.get('seed')}): it was not made with the flags the table needs")
    return summary[key]


def check_or_write(files: dict, check: bool) -> int:
    """Write ``{path: text}``; with ``check``, write nothing and return 1 (naming the first
    file) when a committed file differs from the rebuilt text, else 0."""
    for path, text in files.items():
        if check:
            if not path.is_file() or path.read_text() != text:
                print(f"{path.relative_to(ROOT)} differs from the table rebuilt from the committed raw runs")
                return 1
        else:
            path.write_text(text)
    return 0
