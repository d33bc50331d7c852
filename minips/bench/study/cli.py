"""The ``bench study`` command: its flags (:func:`add_arguments`) and the driver (:func:`run`)
that runs the grid's points one after the other, then writes the study's JSON, reports and
figures (what it writes: :mod:`minips.bench.study`)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from ...options import finite_float
from ...rundir import atomic_write_all, take_lock, write_error
from ...stats import collapsed
from ..launch import MPIEXEC_MISSING, find_mpiexec
from .aggregate import contrasts, family_cells, mark_collapsed, paired_comparisons
from .figures import plot_families, plot_study, plot_time_to_accuracy
from .grid import RunSpec, StudyError, expand, load_grid, parse_contrasts, parse_within
from .report import families_report, markdown_report
from .runner import finished, run_one, run_record, train_command
from .timeaxis import time_cells, time_report

__all__ = ["run", "add_arguments"]


def _split(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else None


def _ints(flag: str, s, minimum: int = 1, example: str = "2,4"):
    """``--ranks``/``--seeds`` "0,1" -> [0, 1] (None when not given).

    Raises:
        StudyError: a value is not an integer or is below ``minimum`` (rank
            counts start at 1, seeds at 0).
    """
    try:
        values = [int(x) for x in _split(s)] if s else None
    except ValueError:
        raise StudyError(f"{flag} {s}: give comma-separated integers, e.g. {flag} {example}") from None
    if values and min(values) < minimum:
        raise StudyError(f"{flag} {s}: every value must be >= {minimum}, e.g. {flag} {example}")
    return values


def _add_records(records: list[dict], paths: str, specs: list[RunSpec]) -> list[dict]:
    """``records`` plus the run records of earlier studies' ``G.json`` files
    (comma-separated paths) in the cells (P, lr setting, entry) selected here,
    any seed: the seeds of a study whose run folders were not kept. A run
    present in both is taken from ``records`` (its folder)."""
    have = {(r["P"], r["lr"], r["label"], r["seed"]) for r in records}
    wanted = {(s.P, s.lr_name, s.label) for s in specs}
    out = list(records)
    for path in _split(paths):
        try:
            runs = json.loads(Path(path).read_text())["runs"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StudyError(f"--add-records {path}: not a study's JSON file with a 'runs' list ({e})") from None
        for r in runs:
            key = (r["P"], r["lr"], r["label"], r["seed"])
            if key not in have and key[:3] in wanted:
                out.append(r)
                have.add(key)
    return out


def run(args) -> int:
    grid = load_grid(args.grid)
    if getattr(args, "within", None) is not None:
        grid.within_points = parse_within("--within", args.within)
    if getattr(args, "contrast", None):
        grid.contrasts += parse_contrasts("--contrast", list(args.contrast), grid.algos)
    root = Path(args.out)
    ranks, seeds = _ints("--ranks", args.ranks), _ints("--seeds", args.seeds, minimum=0, example="0,1")
    vranks = _ints("--virtual-ranks", getattr(args, "virtual_ranks", None))
    if vranks and ranks:
        raise StudyError("give --ranks (the grid's launch) or --virtual-ranks (those P as threads of one process), "
                         "not both")
    specs = expand(grid, vranks or ranks, seeds, _split(args.lr), _split(args.algos), True if vranks else None)
    add_records = getattr(args, "add_records", None)
    if args.report_only and not (root / "runs").is_dir() and not add_records:
        raise StudyError(f"--report-only: {root} holds no runs folder; give the --out of a study that ran "
                         f"(or start it: the same command without --report-only)")
    mpiexec = find_mpiexec()
    if mpiexec is None and not args.report_only and not args.dry_run and not all(s.virtual for s in specs):
        raise StudyError(MPIEXEC_MISSING)
    if args.dry_run:
        for s in specs:
            print(" ".join(train_command(s, s.out(root), mpiexec or "mpiexec")))
        print(f"{len(specs)} runs (dry run: nothing started)", file=sys.stderr)
        return 0
    # A study that runs holds OUT/run.lock until it ends: a second study into the
    # same folder is refused before it starts a run (it would run the same
    # points at once, and its `train --overwrite` could replace a run the first
    # had just finished). --report-only only reads the runs (and writes the
    # report atomically): it may look at a study in progress.
    lock = None if args.report_only else take_lock(root)
    if lock is not None and lock.replaced:
        print(f"note: removed the stale lock {lock.path} of process {lock.replaced.get('pid')} on this host, which "
              "no longer runs (a study killed before it ended)", flush=True)
    try:
        return _run(args, grid, root, specs, mpiexec)
    finally:
        if lock is not None:
            lock.release()


def _run(args, grid, root: Path, specs: list[RunSpec], mpiexec) -> int:
    """The runs (unless --report-only) and the report of :func:`run`."""
    root.mkdir(parents=True, exist_ok=True)
    add_records = getattr(args, "add_records", None)
    log_path = root / "study.log"

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        try:
            with open(log_path, "a") as logf:
                logf.write(line + "\n")
        except OSError as e:
            raise write_error(log_path, e) from None

    records = []
    if not args.report_only:
        log(f"study {grid.source}: {len(specs)} runs -> {root}")
        failures = 0
        for i, s in enumerate(specs):
            while (root / "PAUSE").exists():
                time.sleep(5)
            done = finished(s.out(root))
            rec = run_one(s, root, grid, mpiexec, log)
            records.append(rec)
            if not done:
                m = rec.get("metric")
                status = rec["status"]
                if status == "ok" and collapsed(m, grid.chance):
                    status = "collapsed (at chance)"
                log(f"{i + 1}/{len(specs)} P={s.P} {s.lr_name} {s.label} seed {s.seed}: {status}"
                    + (f" {grid.metric} {m:.4f}" if m is not None else "")
                    + (f" ({rec['wall_s']:.0f} s)" if rec.get("wall_s") else ""))
                failures = failures + 1 if rec["status"] == "failed" else 0
                if failures >= 3:
                    raise StudyError(f"three runs in a row failed (see {root / 'study.log'} and the runs' "
                                     "command.txt); fix the grid and run the same command again")
    else:
        records = [{"P": s.P, "lr": s.lr_name, "label": s.label, "seed": s.seed,
                    **run_record(s.out(root), grid.metric, grid.report_metric, grid.target_accuracy)}
                   for s in specs if finished(s.out(root))]
    if add_records:
        records = _add_records(records, add_records, specs)
    if not records:
        print(f"no finished runs yet in {root / 'runs'} for the {len(specs)} runs of this grid "
              "(check --out and the --ranks/--seeds/--lr/--algos selection)")
        return 1
    stem = Path(grid.source).stem
    records = mark_collapsed(records, grid.chance)  # the JSON says which runs collapsed
    cells = family_cells(grid, records)
    try:
        tcells = time_cells(grid, records)
    except ValueError as e:  # e.g. an algorithm without a cost model
        raise StudyError(f"{grid.source}: networks: {e}") from None
    report = markdown_report(grid, records, args.title or stem) + "\n" + families_report(grid, records, cells)
    if tcells:
        report += "\n" + time_report(grid, tcells)
    # the JSON and the report together or neither (a full disk: one line, no temporary file)
    atomic_write_all({root / f"{stem}.json": json.dumps({"grid": grid.__dict__, "runs": records, "cells": cells,
                                                         "paired": paired_comparisons(grid, records),
                                                         "contrasts": contrasts(grid, records),
                                                         "time_to_accuracy": tcells}, indent=2) + "\n",
                      root / f"{stem}.md": report + "\n"})
    if args.figures:
        plot_study(grid, records, root, args.title or stem, stem)
        plot_families(grid, records, root, stem, cells)
        plot_time_to_accuracy(grid, records, tcells, root, stem)
    print("\n" + report)
    return 0


def add_arguments(p):
    p.add_argument("grid", help="grid TOML file (configs/study-*.toml)")
    p.add_argument("--out", required=True, help="study directory (runs/, GRID.json, GRID.md, figures)")
    p.add_argument("--ranks", help="these rank counts instead of the grid's (a subset, or others), e.g. 2,4")
    p.add_argument("--virtual-ranks", help="run these rank counts instead of the grid's as virtual ranks (threads "
                                           "of one process, no mpiexec), e.g. 16,64 (the grid key virtual = true "
                                           "runs the grid's own ranks so)")
    p.add_argument("--seeds", help="these seeds instead of the grid's (a subset, or others), e.g. 0")
    p.add_argument("--lr", help="only these learning-rate settings (names of [lr.NAME] tables)")
    p.add_argument("--algos", help="only these algos entries")
    p.add_argument("--title", help="title of the report")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--report-only", action="store_true", help="aggregate the finished runs, run nothing")
    p.add_argument("--no-figures", dest="figures", action="store_false",
                   help="write the report and its JSON without drawing the figures")
    p.add_argument("--within", type=finite_float, metavar="POINTS",
                   help="target: within POINTS of the baseline (accuracy points, 0.5 = 0.005; BLEU points); the "
                        "report says met / missed / unresolved per cell (overrides the grid's within_points)")
    p.add_argument("--contrast", action="append", metavar='"A - B"',
                   help="also pair algos entry A with entry B by seed (repeatable; adds to the grid's contrasts)")
    p.add_argument("--add-records", metavar="G.json[,...]",
                   help="also count the runs recorded in earlier studies' JSON files (for seeds whose run folders "
                        "were not kept); a run with a folder under --out wins")
    p.set_defaults(func=run)
