"""Copy a ``bench study``'s raw run files into docs/bench, and check reruns against the log of
the runs they replace (issue 41).

    python scripts/collect_runs.py STUDY_OUT DEST [--log ORIGINAL_STUDY_LOG ...]
        [--records ORIGINAL_STUDY_JSON ...] [--report FILE]

For every run folder ``STUDY_OUT/runs/P{P}[-virtual]/{lr}/{label}/seed{S}/`` with a
``summary.json``, copies ``summary.json``, ``metrics.csv`` and ``command.txt`` (never
checkpoints or traces) to the same relative path under ``DEST``; a run stopped at a signal
(``"stopped": "signal"``: not finished, ``bench study`` continues it) is not copied. A diverged run's
``summary.json`` is ``bench study``'s record ``{"status": "diverged", ...}``.

With ``--log``: each log line ``[..] i/n P=P lr LABEL seed S: ok METRIC VALUE (...)`` of the
study that made the original runs is matched with the copied run of the same (P, lr, label,
seed), and the rerun's metric, rounded to the log's 4 decimals, must equal the logged value
(a diverged line must match a diverged rerun). With ``--records``: each run record of the
original study's JSON (``bench study`` writes it, with the losses to full precision) is matched
the same way, and the rerun's ``val_loss`` and ``test_loss`` must equal the recorded ones to the
last digit (bit for bit). The table of matches goes to ``--report`` (and stdout); exit status 1
when any rerun differs.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

LINE = re.compile(r"\] \d+/\d+ P=(\d+) (\S+) (\S+) seed (\d+): (\w+)(?: (\w+) ([0-9.]+))?")
FILES = ("summary.json", "metrics.csv", "command.txt")


def safe(label: str) -> str:
    return label.replace(":", "-").replace("@", "_")


def collect(study: Path, dest: Path) -> dict:
    """Copy the run files; ``{(P, lr, safe label, seed): summary}`` of the copied runs."""
    out = {}
    for s in sorted((study / "runs").glob("P*/*/*/seed*/summary.json")):
        run = s.parent
        summary = json.loads(s.read_text())
        if summary.get("stopped") == "signal":  # minips.bench.study.runner.stopped_by_signal's test
            continue
        rel = run.relative_to(study / "runs")
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, dest / rel / name)
        P = int(rel.parts[0][1:].split("-")[0])
        out[(P, rel.parts[1], rel.parts[2], int(rel.parts[3][4:]))] = summary
    return out


def check(runs: dict, logs: list[Path]) -> tuple[list[str], int]:
    lines, bad = ["| P | lr | run | seed | logged | rerun | equal |", "|---|---|---|---|---|---|---|"], 0
    for log in logs:
        for m in LINE.finditer(log.read_text()):
            P, lr, label, seed, status, metric, value = m.groups()
            key = (int(P), lr, safe(label), int(seed))
            if key not in runs:
                continue
            s = runs[key]
            if status == "diverged":
                got, want = s.get("status", "ok"), "diverged"
            else:
                got, want = f"{s[metric]:.4f}" if s.get(metric) is not None else s.get("status"), value
            same = got == want
            bad += not same
            lines.append(f"| {P} | {lr} | {label} | {seed} | {want} | {got} | {'yes' if same else '**no**'} |")
    return lines, bad


def check_records(runs: dict, paths: list[Path]) -> tuple[list[str], int]:
    lines = ["| P | lr | run | seed | recorded val_loss / test_loss | rerun | bit for bit |",
             "|---|---|---|---|---|---|---|"]
    bad = 0
    for path in paths:
        for r in json.loads(path.read_text())["runs"]:
            key = (r["P"], r["lr"], safe(r["label"]), r["seed"])
            if key not in runs:
                continue
            s = runs[key]
            want = ("diverged",) if r.get("status") == "diverged" else (r.get("val_loss"), r.get("test_loss"))
            got = ("diverged",) if s.get("status") == "diverged" else (s.get("val_loss"), s.get("test_loss"))
            same = want == got
            bad += not same
            lines.append(f"| {r['P']} | {r['lr']} | {r['label']} | {r['seed']} | {' / '.join(map(repr, want))} "
                         f"| {' / '.join(map(repr, got))} | {'yes' if same else '**no**'} |")
    return lines, bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--log", type=Path, action="append", default=[])
    ap.add_argument("--records", type=Path, action="append", default=[])
    ap.add_argument("--report", type=Path)
    args = ap.parse_args(argv)
    runs = collect(args.study, args.dest)
    print(f"copied {len(runs)} runs to {args.dest}")
    if not args.log and not args.records:
        return 0
    text, bad = "", 0
    if args.log:
        lines, b = check(runs, args.log)
        text += "\n".join(lines) + f"\n\n{len(lines) - 2} reruns matched with a logged run, {b} differ.\n\n"
        bad += b
    if args.records:
        lines, b = check_records(runs, args.records)
        text += "\n".join(lines) + f"\n\n{len(lines) - 2} reruns matched with a recorded run, {b} differ.\n"
        bad += b
    print(text)
    if args.report:
        args.report.write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
