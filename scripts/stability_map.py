"""The stability map of issue 42 (docs/accuracy.md section 10): which rules train, and which
diverge or collapse, at each rank count P and learning rate, on virtual ranks. Reusable for a new
candidate rule (issue 43): add it to the config's ``rules`` (or pass ``--rules``) and run again; the
cells already run are skipped and the new rule gets its own rows in the table and marks in the figure.

The grid is a TOML file (default ``configs/stability-map.toml``): ``ranks``, ``rules`` (algorithm
specs), ``seeds`` (run in every cell), ``boundary_seeds`` (run in the cells next to a boundary),
``[lrs]`` (the learning rates at each P), ``[train]`` (the ``minips train`` options every run
shares), ``[env]``, ``timeout_s`` and ``chance`` (a finished run whose validation accuracy is below it
collapsed).

Outcomes: a run **trains** (finished, validation accuracy >= chance), **diverged** (stopped on a
non-finite loss) or **collapsed** (finished below chance). A collapse is a failure like a divergence:
it never enters a mean. A cell is **next to a boundary** when its outcome with the first seed
(trains, or fails) differs from that of a neighbouring cell of the same rule: the next learning rate
up or down at the same P, or the next P up or down at the same learning rate. Those cells get the
``boundary_seeds`` too.

Subcommands::

    nice -n 15 python scripts/stability_map.py run --workers 2 [--rules A,B] [--commit]
    python scripts/stability_map.py status [--rules A,B]     # cells left, which one runs, how to resume
    python scripts/stability_map.py report                   # table and figure from the raw runs

How the map was run and is resumed (docs/accuracy.md section 10.3): every finished run was trained
by the code of one frozen commit, which ``scripts/run_stability_map.sh COMMIT`` unpacks under
``runs/map-code-COMMIT`` (so that later edits of the checkout change no cell), in the background at
the lowest priority, one worker, committing each finished run's raw files, table and figure::

    setsid nohup nice -n 19 scripts/run_stability_map.sh 1047715 --workers 1 --commit > runs/map-driver.log 2>&1 &

It picks up where it stopped (finished cells are skipped; a cell whose worker died is taken over
and rerun from its start). ``status`` lists the cells left, marks the one a live worker is
training, and prints this command when no worker runs; ``touch runs/stability-map/PAUSE`` pauses
the workers between runs (remove it to go on); ``tail runs/map-driver.log`` or ``RAW/map.log``
follows them.

Reading the map: ``RAW/map.md`` has one table per P (learning rates down, rules across; each
seed's validation accuracy, ``div@N`` for a run stopped on a non-finite loss at step N, ``chance``
for a collapse; bold: every seed trained) and a last table with, per rule and P, the largest
learning rate at which every seed trained with every smaller rate run also training. The
figure puts P across and the learning rate up, one mark per rule in each cell: filled, trains on
every seed; hollow, on some; x, diverged; +, collapsed; a grey dot, not run yet.

``run`` trains each cell with ``python -m minips train --virtual-ranks P`` (through
``minips.bench.study``'s runner) into ``--out`` (default ``runs/stability-map``, ignored by git), and
copies each finished run's ``summary.json``, ``metrics.csv`` and ``command.txt`` to ``--raw``
(default ``docs/bench/scale/map``, folders ``P{P}/lr{lr}/{rule}/seed{s}/``) and rewrites the table
and the figure (as ``report``), so that they always match the raw files; ``--commit`` commits them.
It skips every cell whose raw files exist, so it resumes where it stopped; several ``run``
processes (or ``--workers N``) share the cells through claim files. Each run is logged in
``RAW/map.log`` (time, cell, outcome, wall seconds, load average, commit of the code that ran).

``report`` reads only ``--raw`` and writes ``RAW/map.md`` and ``RAW/map.json`` (per cell, each seed's
outcome and validation and test accuracy; per rule and P the largest learning rate at which every
seed trained) and the figure ``docs/figures/stability-map.png`` (P across, learning rate up, one mark
per rule). ``tests/test_stability_map.py`` checks that the committed table rebuilds unchanged.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "configs" / "stability-map.toml"
RAW = ROOT / "docs" / "bench" / "scale" / "map"
OUT = ROOT / "runs" / "stability-map"
FIGURE = ROOT / "docs" / "figures" / "stability-map.png"
RAW_FILES = ("summary.json", "metrics.csv", "command.txt")
FAILS = ("diverged", "collapsed")

# how the rules known when the map was made are named and drawn; a new rule gets a default
NAMES = {"sync": "sync", "pseudo-sync:local:1": "local (default)", "pseudo-sync:adaptive:1": "AESP (adaptive)",
         "pseudo-sync:adaptive-local:1": "adaptive-local", "pseudo-sync:spike:1": "spike"}
STYLE = {"sync": ("#222222", "s"), "pseudo-sync:local:1": ("#1f77b4", "o"),
         "pseudo-sync:adaptive:1": ("#d62728", "^"), "pseudo-sync:adaptive-local:1": ("#2ca02c", "D"),
         "pseudo-sync:spike:1": ("#9467bd", "v")}
EXTRA_STYLE = [("#ff7f0e", "P"), ("#8c564b", "X"), ("#e377c2", "h"), ("#17becf", "*"), ("#bcbd22", "p")]


class MapError(ValueError):
    """A bad grid file or option; the message names the fix."""


@dataclass(frozen=True)
class Cell:
    rule: str
    P: int
    lr: float
    seed: int

    @property
    def rel(self) -> Path:
        """The run's folder under the raw root (and under the runs folder)."""
        return Path(f"P{self.P}") / f"lr{self.lr:g}" / safe(self.rule) / f"seed{self.seed}"

    def __str__(self) -> str:
        return f"P={self.P} lr={self.lr:g} {self.rule} seed {self.seed}"


def safe(rule: str) -> str:
    return rule.replace(":", "-").replace("@", "_").replace("=", "-")


# ----------------------------------------------------------------------------- grid

def load_config(path: Path, rules: list[str] | None = None) -> dict:
    """Read and check the grid file; ``rules`` replaces its ``rules`` when given.

    Raises:
        MapError: missing file or key, or a value of the wrong kind.
    """
    import tomllib

    path = Path(path)
    if not path.exists():
        raise MapError(f"grid file {path} does not exist (see configs/stability-map.toml)")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise MapError(f"{path}: not valid TOML ({e}); fix the file") from None
    for key in ("ranks", "rules", "seeds", "lrs", "train"):
        if key not in raw:
            raise MapError(f"{path}: missing key {key!r} (needs ranks, rules, seeds, [lrs], [train])")
    lrs = {}
    for P in raw["ranks"]:
        v = raw["lrs"].get(str(P))
        if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and x > 0 for x in v):
            raise MapError(f"{path}: [lrs] needs a list of positive learning rates for every P in ranks, "
                           f"e.g. {P} = [0.04, 0.08, 0.16]; got {v!r} for {P}")
        lrs[int(P)] = sorted(float(x) for x in v)
    cfg = {"ranks": [int(P) for P in raw["ranks"]], "rules": list(rules or raw["rules"]),
           "seeds": [int(s) for s in raw["seeds"]], "boundary_seeds": [int(s) for s in raw.get("boundary_seeds", [])],
           "lrs": lrs, "train": dict(raw["train"]), "env": {k: str(v) for k, v in raw.get("env", {}).items()},
           "timeout_s": float(raw.get("timeout_s", 7200)), "chance": float(raw.get("chance", 0.11)),
           "centre_lr": float(raw.get("centre_lr", 0.1)),
           "source": str(path)}
    from minips.distributed.algorithms import resolve
    for r in cfg["rules"]:
        try:
            resolve(r)
        except ValueError as e:
            raise MapError(f"rule {r!r}: {e}") from None
    return cfg


def outcome(summary: dict, chance: float) -> str:
    """``trains``, ``diverged`` (stopped on a non-finite loss) or ``collapsed``
    (finished with validation accuracy below ``chance``).

    Raises:
        MapError: the summary is of a run that did not finish (a stop signal
            ended it: ``stopped``; or it has no validation accuracy).
    """
    if summary.get("status") == "diverged":
        return "diverged"
    if summary.get("stopped") == "signal" or summary.get("val_accuracy") is None:
        raise MapError(f"a run that did not finish (stopped: {summary.get('stopped')}, after "
                       f"{summary.get('steps')} steps, no validation accuracy) is not a map cell: delete its raw "
                       "folder and run the map again")
    return "collapsed" if summary["val_accuracy"] < chance else "trains"


def stopped_early(summary_path: Path) -> str | None:
    """Why a run whose process exited 0 did not reach its last step, or None:
    ``minips train`` stops on SIGTERM, SIGINT or SIGUSR1 with a checkpoint and
    exit status 0 and marks its summary ``stopped`` (docs/runs.md)."""
    if not summary_path.exists():
        return None
    s = json.loads(summary_path.read_text())
    if s.get("stopped") == "signal":  # ("max_steps": a --max-steps in [train] ended it, as asked)
        return f"stopped (signal) at step {s.get('steps')}"
    return None


def diverged_step(summary: dict) -> int | None:
    """The step at which a diverged run stopped, from the error it printed."""
    m = re.search(r"at step (\d+)", " ".join(summary.get("stderr_tail", [])))
    return int(m.group(1)) if m else None


def read_raw(raw: Path, chance: float) -> dict:
    """``{Cell: record}`` of every run under ``raw`` (record: outcome, val, test, step)."""
    out = {}
    for s in sorted(raw.glob("P*/lr*/*/seed*/summary.json")):
        d = s.parent
        cmd = (d / "command.txt").read_text().split() if (d / "command.txt").exists() else []
        rule = cmd[cmd.index("--algo") + 1] if "--algo" in cmd else None
        if rule is None:
            continue
        summary = json.loads(s.read_text())
        cell = Cell(rule, int(d.parents[2].name[1:]), float(d.parents[1].name[2:]), int(d.name[4:]))
        try:
            o = outcome(summary, chance)
        except MapError as e:
            raise MapError(f"{s}: {e}") from None
        out[cell] = {"outcome": o, "val": summary.get("val_accuracy"), "test": summary.get("test_accuracy"),
                     "step": diverged_step(summary) if o == "diverged" else None,
                     "steps": summary.get("steps")}
    return out


def neighbours(cfg: dict, rule: str, P: int, lr: float) -> list[tuple[int, float]]:
    """The cells next to (P, lr) in the map: the next learning rate up and down at
    this P, and the next P up and down at this learning rate (where the grid has it)."""
    out = []
    lrs = cfg["lrs"][P]
    i = lrs.index(lr)
    out += [(P, lrs[j]) for j in (i - 1, i + 1) if 0 <= j < len(lrs)]
    ranks = cfg["ranks"]
    k = ranks.index(P)
    out += [(ranks[j], lr) for j in (k - 1, k + 1) if 0 <= j < len(ranks) and lr in cfg["lrs"][ranks[j]]]
    return out


def boundary_cells(cfg: dict, done: dict) -> set[tuple[str, int, float]]:
    """(rule, P, lr) of every cell whose first seed's outcome (trains or fails)
    differs from a neighbour's first seed."""
    s0 = cfg["seeds"][0]
    trains = {(c.rule, c.P, c.lr): r["outcome"] == "trains" for c, r in done.items() if c.seed == s0}
    out = set()
    for (rule, P, lr), t in trains.items():
        if P not in cfg["lrs"] or lr not in cfg["lrs"][P]:
            continue
        if any(trains.get((rule, Q, m), t) != t for Q, m in neighbours(cfg, rule, P, lr)):
            out.add((rule, P, lr))
    return out


def all_cells(cfg: dict, done: dict) -> list[Cell]:
    """Every run the grid asks for, given the runs done so far: the first seeds in
    every cell and the boundary seeds in the cells next to a boundary, in the order
    they run: learning rates from ``centre_lr`` outwards (with ``centre_lr`` at the
    grid's top, from the top down: the boundaries are found first, and a map cut
    short lacks the low rates, where every rule trains), each at every P and rule,
    a boundary cell's second seed right after the first seeds of its rate."""
    import math

    def key(c: Cell):
        return (abs(math.log2(c.lr / cfg["centre_lr"])), -c.lr, c.seed not in cfg["seeds"], c.P,
                cfg["rules"].index(c.rule))

    edge = boundary_cells(cfg, done)
    cells = [Cell(rule, P, lr, s) for s in cfg["seeds"] for rule in cfg["rules"] for P in cfg["ranks"]
             for lr in cfg["lrs"][P]]
    cells += [Cell(rule, P, lr, s) for s in cfg["boundary_seeds"] for rule in cfg["rules"]
              for P in cfg["ranks"] for lr in cfg["lrs"][P] if (rule, P, lr) in edge]
    return sorted(cells, key=key)


def pending(cfg: dict, raw: Path) -> tuple[list[Cell], bool]:
    """The cells not yet in ``raw``, and whether the list is final (every first
    seed done, so no further boundary cell can appear)."""
    done = read_raw(raw, cfg["chance"])
    cells = all_cells(cfg, done)
    first_done = all(c in done for c in cells if c.seed in cfg["seeds"])
    return [c for c in cells if c not in done], first_done


# ----------------------------------------------------------------------------- running

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim(out: Path, cell: Cell) -> bool:
    """Take the cell for this process (an exclusive claim file; a claim whose
    process is gone is taken over)."""
    d = out / cell.rel
    d.mkdir(parents=True, exist_ok=True)
    f = d / "claim"
    for _ in range(2):
        try:
            fd = os.open(f, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(f.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and _alive(pid):
                return False
            f.unlink(missing_ok=True)
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def _commit_of(code: Path) -> str:
    f = code / "COMMIT"  # a frozen copy made with git archive names its commit here
    if f.exists():
        return f.read_text().strip()
    r = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "--", "minips", "kernels"],
                           capture_output=True, text=True).stdout.strip()
    return (r.stdout.strip() + ("+changes" if dirty else "")) if r.returncode == 0 else "unknown"


def run_cell(cfg: dict, cell: Cell, out: Path, raw: Path, log, commit: bool, figure_path: Path | None = None) -> str:
    """Train one cell (unless its summary is there), copy its raw files, and
    rewrite the table (and the figure, when given) so that they always match the
    raw files; with ``commit``, commit all of it."""
    from minips.bench.launch import load_avg
    from minips.bench.study.grid import Grid, RunSpec
    from minips.bench.study.runner import run_one

    grid = Grid(ranks=[cell.P], seeds=[cell.seed], algos=[cell.rule], train=cfg["train"], lr={},
                env=cfg["env"], timeout_s=cfg["timeout_s"], metric="val_accuracy", report_metric="test_accuracy")
    flags = {**cfg["train"], "lr": cell.lr, "scale-lr": False, "algo": cell.rule, "seed": cell.seed,
             "label": cell.rule}
    spec = RunSpec(cell.P, f"lr{cell.lr:g}", cell.rule, cell.seed, flags, {}, virtual=True)
    run_dir = out / cell.rel / "run"
    spec.out = lambda root, d=run_dir: d  # this map's folder layout
    earlier = (run_dir / "summary.json").exists()  # finished by a worker that stopped before copying it
    load0 = load_avg()
    t0 = time.time()
    rec = run_one(spec, out, grid, "mpiexec", lambda m: log(f"  {cell}: {m.strip()}"))
    wall = time.time() - t0
    if rec["status"] not in ("ok", "diverged"):
        log(f"{cell}: {rec['status']} after {wall:.0f} s (not copied; rerun to retry): {rec.get('message')}")
        return rec["status"]
    stopped = stopped_early(run_dir / "summary.json")
    if stopped:  # exit status 0, but a stop signal ended it before its last step: not a finished cell
        shutil.rmtree(run_dir)  # else the next attempt would find its summary and take it as finished
        log(f"{cell}: {stopped} after {wall:.0f} s (not copied, its run folder removed: the next worker to "
            "start trains it from the start)")
        return "stopped"
    dest = raw / cell.rel
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in RAW_FILES:
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, tmp / name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)  # the cell appears in raw whole or not at all
    summary = json.loads((dest / "summary.json").read_text())
    o = outcome(summary, cfg["chance"])
    what = (f"val {summary['val_accuracy']:.4f} test {summary['test_accuracy']:.4f}" if o != "diverged"
            else f"step {diverged_step(summary)}")
    took = (f"finished earlier, {summary['wall_time_s']:.0f} s" if earlier and "wall_time_s" in summary else
            "finished earlier" if earlier else f"{wall:.0f} s; load {load0} -> {load_avg()}")
    log(f"{cell}: {o} {what} ({took}; code {_commit_of(ROOT)})")
    write_report(cfg, raw, figure_path)
    if commit:
        grid = Path(cfg["source"]).stem   # a screen's runs (another grid file) are not the map's
        where = "" if grid == "stability-map" else f" [{grid}]"
        _git_commit(raw, f"stability map{where}: {cell}: {o} ({what})", [figure_path] if figure_path else [])
    return o


def _git_commit(raw: Path, msg: str, extra=()) -> None:
    """Commit the raw folder (and ``extra`` files that git does not ignore: a figure under runs/ is
    left out, not a reason to commit nothing); retried while another git command holds the index,
    then said on stderr."""
    extra = [str(Path(p).resolve()) for p in extra]
    extra = [p for p in extra if subprocess.run(["git", "-C", str(raw), "check-ignore", "-q", p]).returncode != 0]
    paths = [".", *extra]
    for _ in range(5):
        a = subprocess.run(["git", "-C", str(raw), "add", *paths], capture_output=True, text=True)
        c = subprocess.run(["git", "-C", str(raw), "commit", "-q", "-m", msg, "--", *paths], capture_output=True,
                           text=True)
        if a.returncode == 0 and (c.returncode == 0 or "nothing" in c.stdout + c.stderr):
            return
        time.sleep(3)  # another git command holds the index
    print(f"stability_map: could not commit {raw}: {(a.stderr + c.stderr).strip()[-300:]}; commit it by hand",
          file=sys.stderr)


def cmd_run(args) -> int:
    cfg = load_config(args.config, _split(args.rules))
    out, raw = Path(args.out), Path(args.raw)
    raw.mkdir(parents=True, exist_ok=True)
    if args.workers > 1:
        child = [sys.executable, __file__, "run", "--config", str(args.config), "--raw", str(raw), "--out", str(out),
                 "--figure", str(args.figure), "--workers", "1", *(["--rules", args.rules] if args.rules else []),
                 *(["--commit"] if args.commit else [])]
        procs = []
        for _ in range(args.workers):
            procs.append(subprocess.Popen(child))
            time.sleep(2)  # the first claims its cell before the next looks
        return max(p.wait() for p in procs)
    logf = raw / "map.log"

    def log(msg):
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] [{os.getpid()}] {msg}"
        print(line, flush=True)
        with open(logf, "a") as f:
            f.write(line + "\n")

    log(f"worker started: {cfg['source']}, rules {', '.join(cfg['rules'])}, code {_commit_of(ROOT)}, "
        f"out {out}, raw {raw}")
    skipped: set[Cell] = set()
    while True:
        while (out / "PAUSE").exists():
            time.sleep(10)
        todo, final = pending(cfg, raw)
        todo = [c for c in todo if c not in skipped]
        picked = next((c for c in todo if claim(out, c)), None)
        if picked is None:
            if final:  # nothing left that another worker is not running
                log("worker done: no cell left to claim")
                return 0
            time.sleep(30)  # boundary cells wait for the other worker's first seeds
            continue
        try:
            status = run_cell(cfg, picked, out, raw, log, args.commit, Path(args.figure))
        finally:
            (out / picked.rel / "claim").unlink(missing_ok=True)
        if status not in ("trains", "diverged", "collapsed"):
            skipped.add(picked)


def codes_run(raw: Path) -> list[str]:
    """The commits whose code trained the finished runs (``RAW/map.log``), in order of first use."""
    f = raw / "map.log"
    found = re.findall(r": (?:trains|diverged|collapsed) .*; code ([0-9a-f]+(?:\+changes)?)\)$",
                       f.read_text(), re.M) if f.exists() else []
    return list(dict.fromkeys(found))


def running(out: Path, cell: Cell) -> int | None:
    """The process id of the live worker that holds the cell's claim, else None."""
    try:
        pid = int((out / cell.rel / "claim").read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    return pid if pid and _alive(pid) else None


def cmd_status(args) -> int:
    cfg = load_config(args.config, _split(args.rules))
    raw, out = Path(args.raw), Path(args.out)
    todo, final = pending(cfg, raw)
    done = read_raw(raw, cfg["chance"])
    n_done = sum(1 for c in done if c.rule in cfg["rules"])
    print(f"{n_done} runs done in {args.raw}; {len(todo)} left" + ("" if final else
          " so far (boundary seeds are added as the first seeds finish)"))
    for c in todo:
        pid = running(out, c)
        print(f"  {c}" + (f"   (running: worker {pid})" if pid else ""))
    if todo or not final:
        rules = f" --rules {','.join(cfg['rules'])}" if args.rules else ""
        codes = codes_run(raw)
        if any(running(out, c) for c in todo):
            print("a worker is running: it takes the cells left in turn (python scripts/stability_map.py status "
                  "again to follow it; touch runs/stability-map/PAUSE to pause it between runs)")
        elif len(codes) == 1 and not codes[0].endswith("+changes"):
            print(f"resume (the code of {codes[0]}, which trained every finished run, one worker, committing each "
                  f"run):\n  setsid nohup nice -n 19 scripts/run_stability_map.sh {codes[0]} --workers 1 --commit"
                  f"{rules} > runs/map-driver.log 2>&1 &")
        else:
            print(f"resume: nice -n 15 python scripts/stability_map.py run --workers 2 --commit{rules}"
                  + (f"  (finished runs were trained by the code of {', '.join(codes)})" if codes else ""))
    return 0


# ----------------------------------------------------------------------------- report

def run_text(r: dict) -> str:
    """A run as the map's tables print it, from its :func:`read_raw` record: the validation
    accuracy, ``div@N`` (stopped on a non-finite loss at step N) or ``chance (acc)``."""
    if r["outcome"] == "diverged":
        return f"div@{r['step']}" if r["step"] is not None else "div"
    if r["outcome"] == "collapsed":
        return f"chance ({r['val']:.3f})"
    return f"{r['val']:.4f}"


def cell_outcome(runs: dict) -> str:
    """A cell's verdict over its seeds: ``trains`` (every seed trained), ``fails``
    (every seed diverged or collapsed) or ``mixed``."""
    t = [r["outcome"] == "trains" for r in runs.values()]
    return "trains" if all(t) else ("fails" if not any(t) else "mixed")


def tables(cfg: dict, done: dict) -> tuple[str, dict]:
    """The map as markdown (one table per P, learning rates down, rules across; a
    summary of the largest learning rate that trains) and as JSON."""
    rules = [r for r in cfg["rules"] if any(c.rule == r for c in done)]
    rules += sorted({c.rule for c in done} - set(rules))
    by = {}
    for c, r in done.items():
        by.setdefault((c.rule, c.P, c.lr), {})[c.seed] = r
    Ps = sorted({c.P for c in done})
    lines = ["Validation accuracy per seed (`/` between seeds); `div@N`: stopped on a non-finite loss at step N; "
             f"`chance`: finished below {cfg['chance']} (a collapse). A cell **trains** when every seed trained.", ""]
    js = {"chance": cfg["chance"], "cells": [], "largest_stable": {}}
    for P in Ps:
        lrs = sorted({c.lr for c in done if c.P == P}, reverse=True)
        lines += [f"**P = {P}**", "", "| lr | " + " | ".join(f"`{NAMES.get(r, r)}`" for r in rules) + " |",
                  "|---:|" + "---|" * len(rules)]
        for lr in lrs:
            row = []
            for r in rules:
                runs = by.get((r, P, lr))
                if not runs:
                    row.append("")
                    continue
                txt = " / ".join(run_text(runs[s]) for s in sorted(runs))
                row.append(f"**{txt}**" if cell_outcome(runs) == "trains" else txt)
                js["cells"].append({"rule": r, "P": P, "lr": lr, "verdict": cell_outcome(runs),
                                    "seeds": {str(s): runs[s] for s in sorted(runs)}})
            lines.append(f"| {lr:g} | " + " | ".join(row) + " |")
        lines.append("")
    lines += ["Largest learning rate at which every seed trained, every smaller rate run also training "
              "(`< x`: no rate run trained, the smallest run being x):", "",
              "| rule | " + " | ".join(f"P = {P}" for P in Ps) + " |", "|---|" + "---:|" * len(Ps)]
    for r in rules:
        row = []
        for P in Ps:
            lrs = sorted(lr for (rr, PP, lr) in by if rr == r and PP == P)
            best = None
            for lr in lrs:
                if cell_outcome(by[(r, P, lr)]) != "trains":
                    break
                best = lr
            js["largest_stable"].setdefault(r, {})[str(P)] = best
            row.append("" if not lrs else (f"{best:g}" if best is not None else f"< {lrs[0]:g}"))
        lines.append(f"| `{NAMES.get(r, r)}` | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n", js


def figure(cfg: dict, done: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    rules = [r for r in cfg["rules"] if any(c.rule == r for c in done)]
    rules += sorted({c.rule for c in done} - set(rules))
    style = dict(STYLE)
    for r, st in zip([r for r in rules if r not in STYLE], EXTRA_STYLE):
        style[r] = st
    by = {}
    for c, r in done.items():
        by.setdefault((c.rule, c.P, c.lr), {})[c.seed] = r
    Ps = sorted(set(cfg["ranks"]) | {c.P for c in done})
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    width = 0.7
    for i, r in enumerate(rules):
        color, marker = style[r]
        dx = (i - (len(rules) - 1) / 2) * width / max(len(rules), 1)
        for j, P in enumerate(Ps):
            lrs = set(cfg["lrs"].get(P, [])) if r in cfg["rules"] else set()
            lrs |= {lr for (rr, PP, lr) in by if rr == r and PP == P}
            for lr in lrs:
                x, runs = j + dx, by.get((r, P, lr))
                if runs is None:      # in the grid, not run (yet)
                    ax.scatter(x, lr, marker=".", s=12, color="#bbbbbb", zorder=2)
                    continue
                v = cell_outcome(runs)
                if v == "trains":
                    ax.scatter(x, lr, marker=marker, s=70, color=color, zorder=3)
                elif v == "mixed":
                    ax.scatter(x, lr, marker=marker, s=70, facecolors="none", edgecolors=color, linewidths=1.6,
                               zorder=3)
                elif all(run["outcome"] == "collapsed" for run in runs.values()):
                    ax.scatter(x, lr, marker="+", s=80, color=color, linewidths=2, zorder=3)
                else:
                    ax.scatter(x, lr, marker="x", s=45, color=color, linewidths=1.6, zorder=3)
    ax.set_yscale("log", base=2)
    lrs = sorted({c.lr for c in done} | {lr for P in Ps for lr in cfg["lrs"].get(P, [])})
    ax.set_yticks(lrs)
    ax.set_yticklabels([f"{lr:g}" for lr in lrs])
    ax.set_xticks(range(len(Ps)))
    ax.set_xticklabels([f"{P}\n({_steps(cfg, P)} steps)" for P in Ps])
    ax.set_xlim(-0.6, len(Ps) - 0.4)
    for j in range(len(Ps) - 1):
        ax.axvline(j + 0.5, color="#dddddd", lw=0.8, zorder=1)
    ax.set_xlabel("ranks P (virtual; 3 epochs)")
    ax.set_ylabel("learning rate (after warm-up)")
    ax.grid(axis="y", color="#eeeeee", zorder=0)
    handles = [Line2D([], [], ls="", marker=style[r][1], color=style[r][0], label=NAMES.get(r, r)) for r in rules]
    handles += [Line2D([], [], ls="", marker="o", color="#777777", label="trains (every seed)"),
                Line2D([], [], ls="", marker="o", markerfacecolor="none", color="#777777",
                       label="trains on some seeds"),
                Line2D([], [], ls="", marker="x", color="#777777", label="diverged"),
                Line2D([], [], ls="", marker="+", color="#777777", markeredgewidth=2, label="collapsed (at chance)"),
                Line2D([], [], ls="", marker=".", color="#bbbbbb", label="not run")]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, fontsize=9)
    ax.set_title("Which rules train: full Fashion-MNIST, ConvNet, per-rank batch 16, k = 1", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _steps(cfg: dict, P: int) -> int:
    """Optimizer steps of a run at P ranks: 3 epochs of the 54,000 training images."""
    n_train = 60000 - round(60000 * cfg["train"].get("val-fraction", 0.1))
    return cfg["train"].get("epochs", 3) * (n_train // (cfg["train"]["batch-size"] * P))


def report_text(cfg: dict, raw: Path) -> tuple[str, dict, dict]:
    done = read_raw(raw, cfg["chance"])
    md, js = tables(cfg, done)
    return md, js, done


def write_report(cfg: dict, raw: Path, figure_path: Path | None) -> tuple[str, dict]:
    """Write RAW/map.md and RAW/map.json (atomically) and the figure from the raw runs."""
    md, js, done = report_text(cfg, raw)
    for name, text in (("map.md", md), ("map.json", json.dumps(js, indent=1) + "\n")):
        tmp = raw / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(raw / name)
    if figure_path is not None and done:
        figure(cfg, done, Path(figure_path))
    return md, done


def cmd_report(args) -> int:
    cfg = load_config(args.config)
    raw = Path(args.raw)
    if not read_raw(raw, cfg["chance"]):
        print(f"no runs in {raw} yet: start them with python scripts/stability_map.py run")
        return 1
    md, _ = write_report(cfg, raw, Path(args.figure))
    print(md)
    print(f"wrote {raw / 'map.md'}, {raw / 'map.json'}, {args.figure}")
    return 0


def _split(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("run", "status", "report"):
        q = sub.add_parser(name)
        q.add_argument("--config", default=str(CONFIG), help="grid file (default configs/stability-map.toml)")
        q.add_argument("--raw", default=str(RAW), help="raw runs folder (default docs/bench/scale/map)")
        if name != "report":
            q.add_argument("--rules", help="these rules instead of the config's (comma-separated algorithm specs)")
            q.add_argument("--out", default=str(OUT), help="runs folder (default runs/stability-map)")
        if name == "run":
            q.add_argument("--workers", type=int, default=1, help="runs at once (default 1)")
            q.add_argument("--commit", action="store_true", help="git-commit each finished run's raw files")
        if name in ("run", "report"):
            q.add_argument("--figure", default=str(FIGURE), help="figure path (default docs/figures/stability-map.png)")
    args = p.parse_args(argv)
    try:
        return {"run": cmd_run, "status": cmd_status, "report": cmd_report}[args.cmd](args)
    except MapError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
