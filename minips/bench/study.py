"""``python -m minips bench study GRID.toml --out DIR``: a convergence study.

Runs ``python -m minips train`` under ``mpiexec -n P`` for every point of a
grid (ranks x learning-rate setting x algorithm x seed), one run after the
other, and aggregates the final test metric (accuracy, or BLEU for the
captioner) into tables and figures. It is a plain driver process: do not start
it under mpiexec.

The grid is a TOML file (see ``configs/study-*.toml``)::

    ranks = [2, 4, 8]
    seeds = [0, 1, 2]
    algos = ["sync", "overlap-sync", "pseudo-sync:last:1", "pseudo-sync:adaptive:2@rho99"]
    timeout_s = 1800            # per run
    metric = "test_accuracy"    # or "bleu"; "val_accuracy" / "val_bleu" with val-fraction in [train]
    target_accuracy = 0.85      # optional: seconds to the first evaluation at or above it
    within_points = 0.5         # optional: the target "within 0.5 points of the baseline" (met / missed / unresolved)
    contrasts = ["pseudo-sync:local:1 - pseudo-sync:adaptive:1"]   # optional: more pairs, by seed
    report_metric = "test_accuracy"  # optional: reported next to a val_* metric (default: its test twin)

    [train]                     # passed as explicit flags to every run
    model = "convnet"
    data = "fashion-mnist-mini"
    epochs = 3
    batch-size = 32
    ...

    [lr.fixed]                  # one table per learning-rate setting
    lr = 0.05
    scale-lr = false
    warmup-epochs = 0.0

    [variants.rho99]            # options of the algorithm's options table (its Options.EXTRA:
                                # pseudo-sync's predictor options), selected by "@rho99" in algos
    rho = 0.99

    [env]                       # environment of every run (threads per rank)
    NUMBA_NUM_THREADS = "1"

With ``virtual = true`` in the grid (or ``--virtual-ranks P,...`` on the
command line, which also replaces the grid's ranks) every run is
``python -m minips train --virtual-ranks P ...``: P ranks as threads of one
process instead of ``mpiexec -n P`` (:mod:`minips.distributed.comm.virtual`),
in ``OUT/runs/P{P}-virtual/``. Their metrics and traffic are the MPI runs';
their measured times are not a cluster's, so the report marks them VIRTUAL
and times to the target use the cost model's projected step time.

``algos`` entries are algorithm specs as in ``compare``
(``NAME[:key=value]...[@LABEL]``, or the short ``NAME:PREDICTOR:K``); an
``@NAME`` that names a ``[variants.NAME]`` table selects those options (they
go to the algorithm's options table, ``Options.EXTRA``, e.g. pseudo-sync's
predictor options), any other ``@NAME`` is just the run's label.

Every run writes ``OUT/runs/P{P}/{lr}/{label}/seed{s}/`` (the train outputs);
a run whose ``summary.json`` exists is skipped, so an interrupted study
continues where it stopped. A run that stops with a non-finite loss is
recorded as *diverged* (it is a result, not an error). While a file
``OUT/PAUSE`` exists the driver waits between runs (to take timing
measurements on a quiet machine). At the end (and with ``--report-only``)
it writes, named after the grid file ``G.toml``: ``OUT/G.json`` (every run),
``OUT/G.md`` (mean, 95 % t interval and min-max over seeds, and each entry
against the registry's baseline algorithm paired by seed when the grid has
it) and
``OUT/G-<lr>.png`` (metric against P per algorithm), and the families
report: in ``G.md`` a table per learning-rate setting with one row per
algorithm entry (its family, and per P the test metric, MiB sent per rank per
step and its ratio to the baseline's, seconds to ``target_accuracy`` and the
consensus distance; :func:`families_report`), in ``G.json`` the same per
cell (``cells``), and ``OUT/G-<lr>-time.png``, ``-bytes.png``,
``-traffic.png`` (the test metric against wall seconds, against cumulative
MiB sent, and its final value against MiB per step, labelled; drawn by
:mod:`minips.plots` as ``compare``'s are). Several grids
may share one ``OUT`` (e.g. a tuning grid reusing the main grid's runs).

Statistics (:mod:`minips.stats`): every cell is reported as its mean and
95 % t interval over seeds; every entry is paired by seed with the baseline
entry (the registry's baseline, sync), and the report says **better** /
**worse** / **tie** from the 95 % t interval of the per-seed differences.
Grid keys ``within_points = X`` (a target "within X points of the baseline":
met / missed / unresolved, with the seeds that would resolve it) and
``contrasts = ["A - B", ...]`` (other pairs); flags ``--within``,
``--contrast``, and ``--add-records OLD.json`` (count the runs an earlier
study recorded, for seeds whose folders were not kept).

Choosing on a validation split: with ``val-fraction`` in ``[train]`` and
``metric = "val_accuracy"`` (or ``"val_bleu"``), the report's first tables
are the validation metric (what chooses defaults), then the same tables for
``report_metric`` (the test metric, reported, never used to choose), and a
line per (lr, P) saying which algorithm the validation metric chose and its
test value.
"""
from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..distributed.algorithms import BASELINE
from ..kernels.threads import cores_on_node
from .launch import MPIEXEC_MISSING, find_mpiexec, launch_env
from ..stats import CONFIDENCE, compare_with_baseline, fmt_diff, fmt_target, points_per_unit, t_interval

__all__ = ["Grid", "RunSpec", "load_grid", "expand", "train_command", "aggregate", "markdown_report", "family_cells",
           "families_report", "plot_families", "run"]

def _split_entry(entry: str, variants: dict, where: str = "") -> tuple[str, str | None]:
    """An ``algos`` entry -> (the algorithm spec to run, the variant it names or
    None). ``SPEC@NAME`` selects ``[variants.NAME]`` when the grid has that
    table; otherwise ``@NAME`` is only the run's label.

    Raises:
        StudyError: the spec is not valid (unknown algorithm or option, bad value).
    """
    from ..distributed.algorithms import resolve

    body, at, name = entry.partition("@")
    variant = name if at and name in variants else None
    try:
        spec = resolve(body if variant else entry)
    except ValueError as e:
        raise StudyError(f"{where}algos entry {entry!r}: {e}") from None
    if variant and getattr(spec.cls.Options, "EXTRA", None) is None:
        raise StudyError(f"{where}algos entry {entry!r}: [variants.{variant}] holds options for the algorithm's "
                         f"options table, but {spec.name} has none; drop @{variant} or use another label")
    return (body if variant else entry), variant


def _test_twin(metric: str) -> str | None:
    """The test metric reported next to a validation metric (val_accuracy ->
    test_accuracy, val_bleu -> bleu); None for a test metric."""
    if not metric.startswith("val_"):
        return None
    rest = metric.removeprefix("val_")
    return "test_" + rest if rest in ("accuracy", "loss") else rest


class StudyError(ValueError):
    """A bad grid file or option; the message names the fix."""


@dataclass
class Grid:
    """A parsed grid file (see the module docstring)."""
    ranks: list
    seeds: list
    algos: list
    train: dict
    lr: dict
    variants: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    timeout_s: float = 1800.0
    metric: str = "test_accuracy"
    chance: float | None = None
    source: str = ""
    report_metric: str | None = None
    target_accuracy: float | None = None
    virtual: bool = False
    within_points: float | None = None
    contrasts: list = field(default_factory=list)


@dataclass
class RunSpec:
    """One training run of the grid (``virtual``: P threads of one process, not mpiexec)."""
    P: int
    lr_name: str
    label: str
    seed: int
    flags: dict
    variant_options: dict
    virtual: bool = False

    def out(self, root) -> Path:
        ranks = f"P{self.P}-virtual" if self.virtual else f"P{self.P}"
        return Path(root) / "runs" / ranks / self.lr_name / _safe(self.label) / f"seed{self.seed}"


def _safe(label: str) -> str:
    return label.replace(":", "-").replace("@", "_")


def load_grid(path) -> Grid:
    """Read and check a grid TOML file.

    Raises:
        StudyError: missing file, bad TOML, a missing key, a malformed ``algos``
            entry, or an ``@variant`` that has no ``[variants.NAME]`` table.
    """
    from ..config import read_toml

    p = Path(path)
    raw = read_toml(p, StudyError, f"grid file {p} does not exist (see configs/study-*.toml for examples)")
    for key in ("ranks", "seeds", "algos", "train", "lr"):
        if key not in raw:
            raise StudyError(f"{p}: missing key {key!r} (needs ranks, seeds, algos, [train], [lr.NAME])")
    known = ("ranks", "seeds", "algos", "train", "lr", "variants", "env", "timeout_s", "metric", "chance",
             "report_metric", "target_accuracy", "within_points", "contrasts",
             "virtual")
    unknown = set(raw) - set(known)
    if unknown:
        raise StudyError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; a grid's keys are {', '.join(known)}")
    _check_target(p, raw)
    for key, kind in (("ranks", int), ("seeds", int), ("algos", str)):
        v = raw[key]
        if not isinstance(v, list) or not v or not all(isinstance(x, kind) and not isinstance(x, bool) for x in v):
            eg = {"ranks": "[2, 4]", "seeds": "[0, 1]", "algos": f'["{BASELINE}", ...]'}[key]
            raise StudyError(f"{p}: {key} = {v!r}: give a non-empty list of "
                             f"{'integers' if kind is int else 'algorithm specs'}, e.g. {key} = {eg}")
    g = Grid(ranks=[int(r) for r in raw["ranks"]], seeds=[int(s) for s in raw["seeds"]], algos=list(raw["algos"]),
             train=dict(raw["train"]), lr={k: dict(v) for k, v in raw["lr"].items()},
             variants={k: dict(v) for k, v in raw.get("variants", {}).items()},
             env={k: str(v) for k, v in raw.get("env", {}).items()},
             timeout_s=float(raw.get("timeout_s", 1800)), metric=raw.get("metric", "test_accuracy"),
             chance=raw.get("chance", 0.1 if raw.get("metric", "test_accuracy") == "test_accuracy" else None),
             source=str(p), report_metric=raw.get("report_metric", _test_twin(raw.get("metric", ""))),
             target_accuracy=float(raw["target_accuracy"]) if "target_accuracy" in raw else None,
             within_points=_within(p, raw.get("within_points")), virtual=raw.get("virtual", False))
    g.contrasts = _contrasts(p, raw.get("contrasts", []), g.algos)
    if not isinstance(g.virtual, bool):
        raise StudyError(f"{p}: virtual = {g.virtual!r}: give true (every run on virtual ranks, threads of one "
                         "process) or false (mpiexec, the default)")
    if g.metric.startswith("val_") and not g.train.get("val-fraction", g.train.get("val_fraction")):
        raise StudyError(f"{p}: metric {g.metric!r} is measured on a validation split: add val-fraction "
                         "(e.g. 0.1) to [train]")
    if g.chance is None and "accuracy" in g.metric and "token" not in g.metric:
        g.chance = 0.1
    if not g.ranks or min(g.ranks) < 1:
        raise StudyError(f"{p}: ranks must be a non-empty list of integers >= 1, got {raw['ranks']}")
    if not g.lr:
        raise StudyError(f"{p}: add at least one [lr.NAME] table (e.g. lr = 0.05)")
    for a in g.algos:
        _split_entry(a, g.variants, f"{p}: ")
    return g


def _contrasts(p, v, algos) -> list[tuple[str, str]]:
    """``["A - B", ...]`` -> [(A, B), ...], each an entry of ``algos``."""
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise StudyError(f"{p}: contrasts = {v!r}: give a list of strings \"A - B\" naming two algos entries")
    out = []
    for x in v:
        a, sep, b = (t.strip() for t in x.partition(" - "))
        if not sep or a not in algos or b not in algos:
            raise StudyError(f"{p}: contrast {x!r}: write \"A - B\" (spaces around the minus) with A and B "
                             f"entries of algos ({', '.join(algos)})")
        out.append((a, b))
    return out


def _within(p, v) -> float | None:
    """The grid's ``within_points`` (a target gap to the baseline in points), checked."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise StudyError(f"{p}: within_points = {v!r}: give the largest acceptable gap to the baseline in points "
                         "(accuracy: 0.5 means half a point, 0.005; BLEU: BLEU points), a number > 0")
    return float(v)


def _check_target(p: Path, raw: dict) -> None:
    """Refuse a ``target_accuracy`` that is not a number in the metric's range:
    (0, 1] for an accuracy, (0, 100] for BLEU (sacrebleu's scale)."""
    if "target_accuracy" not in raw:
        return
    t, metric = raw["target_accuracy"], str(raw.get("metric", "test_accuracy"))
    top = 100 if "bleu" in metric else 1 if "accuracy" in metric else None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0 or (top is not None and t > top):
        hint = f"; did you mean {t / 100:g}?" if top == 1 and isinstance(t, (int, float)) and 1 < t <= 100 else ""
        raise StudyError(f"{p}: target_accuracy = {t!r}: give the {metric} to reach as a number in "
                         f"(0, {top if top is not None else 'inf'}], e.g. "
                         f"{'30' if top == 100 else '0.85'}{hint}")


def expand(grid: Grid, ranks=None, seeds=None, lrs=None, algos=None, virtual: bool | None = None) -> list[RunSpec]:
    """All runs of the grid, seeds outermost (so a study cut short has every
    setting for the first seeds), then learning-rate setting, ranks, algorithm.
    ``ranks``/``seeds``/``lrs``/``algos`` restrict the grid (None = all);
    ``virtual`` overrides the grid's ``virtual`` key."""
    virtual = grid.virtual if virtual is None else virtual
    out = []
    for seed, lr_name, P, a in itertools.product(seeds or grid.seeds, lrs or list(grid.lr), ranks or grid.ranks,
                                                 algos or grid.algos):
        if lr_name not in grid.lr:
            raise StudyError(f"no learning-rate setting {lr_name!r}; the grid has {', '.join(grid.lr)}")
        algo, variant = _split_entry(a, grid.variants)
        flags = {**grid.train, **grid.lr[lr_name], "algo": algo, "seed": seed, "label": a}
        opts = dict(grid.variants[variant]) if variant else {}
        out.append(RunSpec(P, lr_name, a, seed, flags, opts, virtual))
    return out


def _flag_args(flags: dict) -> list[str]:
    args = []
    for k, v in flags.items():
        name = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            args.append(name if v else "--no-" + name[2:])
        else:
            args += [name, str(v)]
    return args


def train_command(spec: RunSpec, out: Path, mpiexec: str, python: str = sys.executable) -> list[str]:
    """The ``mpiexec -n P python -m minips train ...`` command of one run, or
    ``python -m minips train --virtual-ranks P ...`` for a virtual one (every
    option explicit; a variant's options through ``OUT/variant.toml``; ``--overwrite``: a
    finished run is skipped before this, so what is there is a failed attempt's leftovers)."""
    launch = [python] if spec.virtual else [mpiexec, "-n", str(spec.P), python]
    args = [*launch, "-m", "minips", "train", *_flag_args(spec.flags),
            "--out", str(out), "--quiet", "--overwrite", *(["--virtual-ranks", str(spec.P)] if spec.virtual else [])]
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
    """Run one grid point (unless its summary exists); returns its record."""
    out = spec.out(root)
    rec = {"P": spec.P, "lr": spec.lr_name, "label": spec.label, "seed": spec.seed, "virtual": spec.virtual}
    if (out / "summary.json").exists():
        return {**rec, **_record(out, grid.metric, grid.report_metric, grid.target_accuracy)}
    out.mkdir(parents=True, exist_ok=True)
    if spec.variant_options:  # a TOML table named as the algorithm's options table
        from ..distributed.algorithms import resolve
        table = resolve(spec.flags["algo"]).cls.Options.EXTRA
        (out / VARIANT_TOML).write_text(
            f"[{table}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in spec.variant_options.items()))
    cmd = train_command(spec, out, mpiexec)
    env = launch_env()
    env.update(grid.env)
    (out / "command.txt").write_text(" ".join(cmd) + "\n")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=grid.timeout_s)
        rc, stderr = r.returncode, r.stderr
    except subprocess.TimeoutExpired as e:
        rc, stderr = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    wall = time.perf_counter() - t0
    if rc == 0 and (out / "summary.json").exists():
        return {**rec, **_record(out, grid.metric, grid.report_metric, grid.target_accuracy)}
    status = "diverged" if "diverged" in stderr else ("timeout" if rc == "timeout" else "failed")
    result = {"status": status, "metric": None, "wall_s": wall, "returncode": rc,
              "message": stderr.strip().splitlines()[-3:] if stderr.strip() else []}
    if status == "diverged":  # keep the record so a rerun skips it
        (out / "summary.json").write_text(json.dumps({"status": "diverged", "stderr_tail": result["message"]}) + "\n")
    log(f"  {status}: {' '.join(result['message'])[-300:]}")
    return {**rec, **result}


def _record(out: Path, metric: str, report_metric: str | None = None, target: float | None = None) -> dict:
    """The record of a finished run: its metric (and ``reported`` twin), timing,
    traffic (``bytes_sent_per_step``: bytes per rank per step), ``family``,
    ``time_to_target`` (seconds to the first evaluation of the test metric at or
    above ``target``; None when never), ``consensus_distance`` (only for runs
    whose ranks differ), ``rank0_*`` (with ``eval-rank0``) and ``curve`` (the
    test metric, wall seconds and cumulative MiB sent per rank at each
    evaluation: :func:`minips.report.evaluation_curve`)."""
    from ..report import evaluation_curve, time_to_target
    from ..rundir import load_run

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
            "curve": evaluation_curve(s, load_run(out)["trace"], tm)}


def aggregate(records: list[dict], chance: float | None = None) -> dict:
    """Per (lr setting, label, P): ``n``, ``n_ok``, ``diverged``, ``mean``,
    ``std`` (sample standard deviation; 0 for one seed), ``ci`` (half-width of
    the 95 % t interval of the mean; None for one seed), ``min``, ``max`` of the
    metric over the seeds that finished (None when none finished), and
    ``at_chance``: finished runs whose metric is below ``chance + 0.01`` (the
    network collapsed to a constant prediction without a non-finite loss)."""
    groups: dict = {}
    for r in records:
        groups.setdefault((r["lr"], r["label"], r["P"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        vals = [r["metric"] for r in rs if r.get("status") == "ok" and r.get("metric") is not None]
        out[key] = {"n": len(rs), "n_ok": len(vals), "diverged": sum(r.get("status") == "diverged" for r in rs),
                    "failed": sum(r.get("status") in ("failed", "timeout") for r in rs),
                    "mean": statistics.fmean(vals) if vals else None,
                    "std": statistics.stdev(vals) if len(vals) > 1 else (0.0 if vals else None),
                    "ci": t_interval(vals).half_width if len(vals) > 1 else None,
                    "min": min(vals) if vals else None, "max": max(vals) if vals else None,
                    "at_chance": sum(v < chance + 0.01 for v in vals) if chance is not None else 0,
                    "values": vals}
    return out


def _cell(a: dict | None, digits: int) -> str:
    if not a:
        return "-"
    if a["mean"] is None:
        return f"div {a['diverged']}/{a['n']}" if a["diverged"] else f"failed {a['failed']}/{a['n']}"
    if a["n_ok"] == 1:  # no spread from one seed
        s = f"{a['mean']:.{digits}f} (1 seed)"
    else:
        s = (f"{a['mean']:.{digits}f} ± {a['ci']:.{digits}f} "
             f"({a['min']:.{digits}f}-{a['max']:.{digits}f}, {a['n_ok']} seeds)")
    notes = []
    if a["at_chance"]:
        notes.append(f"{a['at_chance']} at chance")
    if a["n_ok"] < a["n"]:
        notes.append(f"{a['diverged']} div" if a["diverged"] else f"{a['n'] - a['n_ok']} failed")
    return s + (f" [{', '.join(notes)}]" if notes else "")


def markdown_report(grid: Grid, records: list[dict], title: str = "") -> str:
    """Tables: per learning-rate setting, algorithm rows x P columns of
    ``mean ± std (min-max)`` over seeds, then the gap of each mean to the
    baseline's. With a validation metric and a ``report_metric``, the same
    tables for the reported (test) metric follow, and which algorithm the
    validation metric chose at each (lr, P), with its test value."""
    text = _metric_report(grid, records, grid.metric, title)
    if not grid.report_metric or grid.report_metric == grid.metric:
        return text + "\n" + paired_report(grid, records)
    reported = [{**r, "metric": r.get("reported")} for r in records]
    text += "\n" + _metric_report(grid, reported, grid.report_metric, title,
                                   heading=f"# reported: {grid.report_metric} of the same runs")
    return text + "\n" + paired_report(grid, records) + "\n" + _choices(grid, records)


def _by_seed(records: list[dict], lr_name: str, label: str, P: int, key: str) -> dict:
    """``{seed: value}`` of the finished runs of one cell (diverged runs have no value)."""
    return {r["seed"]: r.get(key) for r in records
            if (r["lr"], r["label"], r["P"]) == (lr_name, label, P) and r.get("status") == "ok"
            and r.get(key) is not None}


def paired_comparisons(grid: Grid, records: list[dict]) -> list[dict]:
    """Every (lr setting, P, algorithm entry) against the baseline entry at the
    same lr and P, paired by seed (:func:`minips.stats.compare_with_baseline`),
    for the grid's metric and, when there is one, its ``report_metric``. Each
    dict: ``lr``, ``P``, ``label``, ``baseline``, ``metric`` and ``reported``
    (None, or the comparison of ``label - baseline`` in the metric's units;
    the grid metric's carries ``target`` and ``seeds_to_resolve`` when the
    grid has ``within_points``)."""
    base = _baseline_label(grid, records)
    pairs = [(label, base) for label in grid.algos if label != base] if base else []
    return _pair_rows(grid, records, pairs, within=True)


def contrasts(grid: Grid, records: list[dict]) -> list[dict]:
    """The grid's ``contrasts`` (pairs "A - B" of algos entries), each paired
    by seed at every (lr setting, P) where both ran; rows as in
    :func:`paired_comparisons` (``baseline`` is B; no target)."""
    return _pair_rows(grid, records, grid.contrasts, within=False)


def _pair_rows(grid: Grid, records: list[dict], pairs, within: bool) -> list[dict]:
    out = []
    keys = ["metric"] + (["reported"] if grid.report_metric else [])
    gap = None if grid.within_points is None or not within else grid.within_points / points_per_unit(grid.metric)
    for lr_name in grid.lr:
        for P in sorted({r["P"] for r in records}):
            for label, base in pairs:
                if not all(any((r["lr"], r["label"], r["P"]) == (lr_name, x, P) for r in records)
                           for x in (label, base)):
                    continue
                row = {"lr": lr_name, "P": P, "label": label, "baseline": base}
                for key in keys:
                    row[key] = compare_with_baseline(_by_seed(records, lr_name, label, P, key),
                                                     _by_seed(records, lr_name, base, P, key),
                                                     gap if key == "metric" else None)
                out.append(row)
    return out


def paired_report(grid: Grid, records: list[dict], rows: list[dict] | None = None) -> str:
    """The paired comparison with the baseline as a markdown table (see
    :func:`paired_comparisons`): differences in points, 95 % t intervals,
    better / worse / tie, and the target's verdict with the seeds that would
    resolve it."""
    rows = paired_comparisons(grid, records) if rows is None else rows
    text = _pair_table(grid, rows, grid.within_points)
    more = contrasts(grid, records)
    if more:
        text += "\n" + _pair_table(grid, more, None, "contrasts")
    return text


def _pair_table(grid: Grid, rows: list[dict], within, kind: str = "baseline") -> str:
    if not rows:
        return ""
    m, rm = grid.metric, grid.report_metric
    base = rows[0]["baseline"] if kind == "baseline" else "B"
    unit = "BLEU points" if "bleu" in m else "points (1 point = 0.01)"
    if kind != "baseline":
        head = ["lr", "P", "A", "B", "seeds", f"{m}: A minus B"] + ([f"{rm}: A minus B"] if rm else [])
        lines = [f"## contrasts: A against B, paired by seed ({int(CONFIDENCE * 100)} % t intervals, {unit})", "",
                 "As above, for the pairs the grid's `contrasts` names.", "",
                 "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            seeds = r["metric"]["seeds"] if r["metric"] else []
            cells = [r["lr"], str(r["P"]), r["label"], r["baseline"], str(len(seeds)),
                     fmt_diff(r["metric"], points_per_unit(m))]
            if rm:
                cells.append(fmt_diff(r["reported"], points_per_unit(rm)))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    head = ["lr", "P", "algorithm", "seeds", f"{m} minus {base}'s"] + ([f"{rm} minus {base}'s"] if rm else [])
    if within is not None:
        head.append(f"within {within:g} of {base} ({m})")
    lines = [f"## paired by seed against {base} ({int(CONFIDENCE * 100)} % t intervals, {unit})", "",
             f"Per seed, the run's {m} minus {base}'s with the same seed (same initial weights, partition and data "
             "order), then the mean of those differences and its t interval (n - 1 degrees of freedom). "
             "**better**: the interval lies above 0; **worse**: below 0; **tie**: it holds 0 (the difference is "
             "inside the noise of this many seeds)."
             + (f" {m} chooses; {rm} is reported beside it and chooses nothing." if rm else "")
             + (f" Target: within {within:g} points of {base}: **met** when the interval's lower end is above "
                f"-{within:g}, **missed** when its upper end is below -{within:g}, else **unresolved** (with the "
                "seeds that would resolve it if the mean and spread stayed as observed)." if within is not None
                else ""), "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        seeds = r["metric"]["seeds"] if r["metric"] else []
        cells = [r["lr"], str(r["P"]), r["label"], str(len(seeds)), fmt_diff(r["metric"], points_per_unit(m))]
        if rm:
            cells.append(fmt_diff(r["reported"], points_per_unit(rm)))
        if within is not None:
            cells.append(fmt_target(r["metric"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _choices(grid: Grid, records: list[dict]) -> str:
    """Which algorithm the validation metric chose per (lr, P), its reported
    value, and whether the choice is resolved: the chosen entry against the
    runner-up, paired by seed (a tie means the data do not single it out)."""
    agg = aggregate(records, None)
    rep = aggregate([{**r, "metric": r.get("reported")} for r in records], None)
    lines = [f"## chosen by {grid.metric} (validation split); {grid.report_metric} reported", "",
             f"Defaults are chosen by the mean {grid.metric} over seeds, among all algorithms except "
             f"{BASELINE}; {grid.report_metric} is only reported (it chose nothing). The last column pairs the "
             "chosen entry with the runner-up by seed (95 % t interval of the difference, points): a **tie** "
             "means these seeds do not tell the two apart.", "",
             f"| lr | P | chosen by {grid.metric} | its {grid.metric} | its {grid.report_metric} | "
             f"{BASELINE}'s {grid.report_metric} | against the runner-up |", "|---|---|---|---|---|---|---|"]
    for (lr_name, P) in sorted({(k[0], k[2]) for k in agg}):
        cands = sorted(((a["mean"], k[1]) for k, a in agg.items()
                        if k[0] == lr_name and k[2] == P and k[1] != BASELINE and a["mean"] is not None),
                       reverse=True)
        if not cands:
            continue
        best = cands[0][1]
        r, s = rep.get((lr_name, best, P)), rep.get((lr_name, BASELINE, P))
        vs = "-"
        if len(cands) > 1:
            second = cands[1][1]
            d = compare_with_baseline(_by_seed(records, lr_name, best, P, "metric"),
                                      _by_seed(records, lr_name, second, P, "metric"))
            if d is not None:
                vs = f"{second}: {fmt_diff(d, points_per_unit(grid.metric))}"
        lines.append(f"| {lr_name} | {P} | {best} | {cands[0][0]:.4f} | {_fmt_mean(r)} | {_fmt_mean(s)} | {vs} |")
    return "\n".join(lines) + "\n"


def _fmt_mean(a: dict | None) -> str:
    return "-" if not a or a["mean"] is None else f"{a['mean']:.4f} ({a['n_ok']} seeds)"


def _metric_report(grid: Grid, records: list[dict], metric: str, title: str = "", heading: str = "") -> str:
    agg = aggregate(records, grid.chance if "accuracy" in metric else None)
    digits = 2 if "bleu" in metric else 4
    lines = [heading or f"# {title or 'study'}: {metric} (mean ± 95 % CI (min-max) over seeds)", "",
             "Cells: mean ± half-width of its 95 % t confidence interval (n - 1 degrees of freedom; min-max, "
             "number of seeds) over the seeds that finished; "
             "`div k/n`: k of n runs stopped on a non-finite loss; `[k at chance]`: k runs ended at chance "
             "level (collapsed, counted in the mean); `[k div]`: k diverged runs left out of the mean.", "",
             f"grid: `{grid.source}`; seeds in the grid {grid.seeds} (each cell counts the ones that ran); "
             "train options: "
             + ", ".join(f"{k}={v}" for k, v in grid.train.items()), ""]
    shared = [r for r in records if r.get("status") == "ok" and r.get("oversubscribed")]
    if shared:
        o = shared[0]["oversubscribed"]
        lines += [f"**Ranks shared cores** in {len(shared)} of {sum(r.get('status') == 'ok' for r in records)} "
                  f"finished runs (P = {', '.join(map(str, sorted({r['P'] for r in shared})))}; e.g. "
                  f"{o['ranks_on_node']} ranks on {o['cores']} core(s) of a node): their ranks took turns, so "
                  "their times are not comparable; the metrics above do not depend on it.", ""]
    ranks = sorted({r["P"] for r in records})
    labels = [a for a in grid.algos if any(r["label"] == a for r in records)]
    for lr_name, lr_opts in grid.lr.items():
        if not any(r["lr"] == lr_name for r in records):
            continue
        lines += [f"## lr setting `{lr_name}`: " + ", ".join(f"{k}={v}" for k, v in lr_opts.items()), ""]
        lines += ["| algorithm | " + " | ".join(f"P={P}" for P in ranks) + " |", "|---|" + "---|" * len(ranks)]
        for lab in labels:
            lines.append(f"| {lab} | " + " | ".join(_cell(agg.get((lr_name, lab, P)), digits) for P in ranks) + " |")
        lines.append("")
    return "\n".join(lines)


def _test_metric(grid: Grid) -> str:
    """The test metric of the grid's runs: ``metric``, or its ``report_metric``
    when ``metric`` is measured on a validation split."""
    return grid.report_metric or grid.metric


def _baseline_label(grid: Grid, records: list[dict]) -> str | None:
    """The grid entry the traffic is compared with: the entry named like the
    registry's baseline algorithm, else the first entry that runs it."""
    if BASELINE in grid.algos:
        return BASELINE
    return next((a for a in grid.algos for r in records if r["label"] == a and r.get("algo") == BASELINE), None)


def family_cells(grid: Grid, records: list[dict]) -> list[dict]:
    """One dict per (lr setting, algorithm entry, P) that has runs, over the
    seeds that finished: the test metric's ``mean``/``std``/``min``/``max``
    (of the model averaged over ranks when they differ), ``n``, ``n_ok``,
    ``diverged``, ``family``, ``ci`` (half-width of the 95 % t interval);
    ``bytes_sent_per_step`` (bytes per rank per
    step, mean over seeds) and ``bytes_ratio`` (over the baseline entry's at
    the same lr and P; None without one); ``reached`` (seeds whose test metric
    reached ``target_accuracy``) and ``time_to_target_s`` (mean wall seconds
    of those; None when none did or the grid has no target);
    ``step_time_s`` (seconds per step after the warm-up, slowest rank, mean over
    seeds); ``consensus_distance`` (mean at the end; None for methods whose
    ranks stay identical) and ``rank0_mean`` (rank 0's own model, with
    eval-rank0)."""
    from ..distributed.algorithms import resolve

    tm = _test_metric(grid)
    tested = [{**r, "metric": r.get("reported") if grid.report_metric else r.get("metric")} for r in records]
    agg = aggregate(tested, grid.chance if "accuracy" in tm else None)
    base = _baseline_label(grid, records)

    def ok(lr_name, label, P):
        return [r for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, label, P) and r.get("status") == "ok"]

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return statistics.fmean(xs) if xs else None

    cells = []
    for lr_name in grid.lr:
        for label in grid.algos:
            for P in sorted({r["P"] for r in records}):
                a = agg.get((lr_name, label, P))
                if a is None:
                    continue
                rs = ok(lr_name, label, P)
                family = next((r["family"] for r in rs if r.get("family")), None)
                if family is None:  # no finished run: the registry knows it
                    family = resolve(_split_entry(label, grid.variants)[0]).cls.family
                sent = mean(r.get("bytes_sent_per_step") for r in rs)
                ref = mean(r.get("bytes_sent_per_step") for r in ok(lr_name, base, P)) if base else None
                times = [r["time_to_target"] for r in rs if r.get("time_to_target") is not None]
                rank0 = f"rank0_{tm}"
                cells.append({"lr": lr_name, "label": label, "P": P, "family": family, "metric": tm,
                              **{k: a[k] for k in ("n", "n_ok", "diverged", "mean", "std", "ci", "min", "max")},
                              "bytes_sent_per_step": sent,
                              "bytes_ratio": sent / ref if sent is not None and ref else None,
                              "target": grid.target_accuracy, "reached": len(times),
                              "time_to_target_s": statistics.fmean(times) if times else None,
                              "step_time_s": mean(r.get("step_time_s") for r in rs),
                              "consensus_distance": mean(r.get("consensus_distance") for r in rs),
                              "rank0_mean": mean(r.get(rank0) for r in rs)})
    return cells


def _oversubscribed(records: list[dict]) -> list[int]:
    """The P whose runs shared cores: the run itself saw more ranks than cores
    on a node (summary.json's ``oversubscribed``), or its ranks times threads
    per rank outnumber this machine's cores."""
    cores = cores_on_node()
    return sorted({r["P"] for r in records
                   if r.get("status") == "ok" and not r.get("virtual") and (r.get("oversubscribed")
                                                   or r["P"] * (r.get("threads_per_rank") or 1) > cores)})


def _machines(records: list[dict]) -> str:
    """Where the times were taken: the CPUs and the range of end-of-run load averages the runs recorded."""
    ok = [r for r in records if r.get("status") == "ok"]
    cpus = sorted({r["cpu"] for r in ok if r.get("cpu")})
    loads = [r["load_average_end"][0] for r in ok if r.get("load_average_end")]
    if not cpus:
        return "Times taken on a CPU the runs did not record (runs made before summary.json recorded it)."
    load = f"; 1-minute load average at the runs' ends {min(loads):g}-{max(loads):g}" if loads else ""
    return f"Times taken on: {'; '.join(cpus)}{load}."


def families_report(grid: Grid, records: list[dict], cells: list[dict] | None = None) -> str:
    """The families table per learning-rate setting: one row per algorithm
    entry (with its family, rows grouped by family in the order the grid names
    them), per P the test metric (mean ± 95 % CI over seeds), MiB sent per rank
    per step and its ratio to the baseline's, milliseconds per step, seconds to
    the target and the consensus distance at the end; a caption says what each column is and
    which P were oversubscribed (their times not comparable)."""
    cells = family_cells(grid, records) if cells is None else cells
    tm = _test_metric(grid)
    digits = 2 if "bleu" in tm else 4
    base = _baseline_label(grid, records)
    ranks = sorted({c["P"] for c in cells})
    over = _oversubscribed(records)
    has_rank0 = any(c["rank0_mean"] is not None for c in cells)
    target = grid.target_accuracy
    lines = []
    for lr_name in grid.lr:
        cs = {(c["label"], c["P"]): c for c in cells if c["lr"] == lr_name}
        if not cs:
            continue
        labels = [a for a in grid.algos if any((a, P) in cs for P in ranks)]
        fam = {a: next(cs[(a, P)]["family"] for P in ranks if (a, P) in cs) for a in labels}
        order = list(dict.fromkeys(fam[a] for a in labels))
        labels.sort(key=lambda a: order.index(fam[a]))  # stable: the grid's order within a family
        head = ["family", "algorithm"]
        for P in ranks:
            head += [f"P={P} {tm.replace('_', ' ')}", *([f"P={P} rank 0"] if has_rank0 else []),
                     f"P={P} MiB/step" + (f" (vs {base})" if base else ""),
                     f"P={P} ms/step", *([f"P={P} s to {target:g}"] if target is not None else []),
                     f"P={P} consensus"]
        lines += [f"## families, lr setting `{lr_name}`: all methods side by side", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for a in labels:
            row = [fam[a], a]
            for P in ranks:
                c = cs.get((a, P))
                if c is None:
                    row += ["-"] * (4 + has_rank0 + (target is not None))
                    continue
                if c["mean"] is None:
                    acc = f"div {c['diverged']}/{c['n']}" if c["diverged"] else f"failed {c['n'] - c['n_ok']}/{c['n']}"
                else:
                    acc = (f"{c['mean']:.{digits}f} (1 seed)" if c["n_ok"] == 1
                           else f"{c['mean']:.{digits}f} ± {c['ci']:.{digits}f}")
                    if 1 < c["n_ok"] < c["n"]:
                        acc += f" ({c['n_ok']}/{c['n']} seeds)"
                row.append(acc)
                if has_rank0:
                    row.append("-" if c["rank0_mean"] is None else f"{c['rank0_mean']:.{digits}f}")
                b = c["bytes_sent_per_step"]
                row.append("n/a" if b is None else f"{b / 2**20:.3g}"
                           + ("" if c["bytes_ratio"] is None else f" ({c['bytes_ratio']:.3g}x)"))
                st = c["step_time_s"]
                row.append("n/a" if st is None else f"{1e3 * st:.2f}")
                if target is not None:
                    t = c["time_to_target_s"]
                    row.append("not reached" if t is None else f"{t:.1f}"
                               + ("" if c["reached"] == c["n_ok"] else f" ({c['reached']}/{c['n_ok']} seeds)"))
                row.append("-" if c["consensus_distance"] is None else f"{c['consensus_distance']:.3g}")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    cap = [f"{tm.replace('_', ' ')}: mean ± half-width of the 95 % t interval over the seeds that finished (of the "
           "model averaged over "
           "ranks for methods whose ranks hold different weights)"
           + ("; rank 0: the mean over seeds of rank 0's own model" if has_rank0 else "") + ". "
           "MiB/step: MiB each rank sent per training step (mean over ranks, steps and seeds)"
           + (f", in brackets over {base}'s at the same P" if base else "") + ". "
           "ms/step: milliseconds per training step after the warm-up, of the slowest rank (mean over seeds)"
           + (f", on an EMULATED {grid.train['network']} network" if grid.train.get("network") else "") + ". "]
    virt = sorted({r["P"] for r in records if r.get("virtual")})
    if virt:
        net = next((r["projected_network"] for r in records if r.get("projected_network")), "?")
        cap.append(f"VIRTUAL: the runs at P = {', '.join(map(str, virt))} ran as threads of one process: their "
                   f"ms/step are not cluster times; their s to the target are PROJECTED (steps x the algorithm's "
                   f"cost model on {net} from the compute measured per rank). ")
    if target is not None:
        cap.append(f"s to {target:g}: wall seconds from the start until the first evaluation (once per epoch) "
                   f"with {tm.replace('_', ' ')} at or above {target:g}, mean over the seeds that reached it "
                   "(k/n seeds when not all did); `not reached` when no seed did. ")
    else:
        cap.append("No seconds to a target: the grid has no target_accuracy (add e.g. target_accuracy = "
                   f"{'30' if 'bleu' in tm else '0.85'} and rerun with --report-only). ")
    if over:
        cap.append(f"Times at P = {', '.join(map(str, over))} are not comparable: those runs had more ranks "
                   f"(times threads per rank) than the {cores_on_node()} cores of the machine writing this report "
                   "(oversubscribed), so they measure the sharing of cores as much as the method. ")
    cap.append("consensus: (1/P) sum_i ||w_i - mean w||^2 at the last evaluation, mean over seeds; `-`: a method "
               "whose ranks stay identical. ")
    cap.append(_machines(records))
    return "\n".join(lines) + "\n" + "".join(cap) + "\n"


def _mean_curve(runs: list[dict], metric: str) -> list[dict]:
    """The evaluation curves of the seeds of one cell, averaged point by point
    (the first k evaluations, k the fewest any seed has); ``mib_sent`` None
    when a seed did not count its traffic."""
    curves = [r.get("curve") or [] for r in runs]
    k = min((len(c) for c in curves), default=0)
    out = []
    for i in range(k):
        pts = [c[i] for c in curves]
        mib = [p.get("mib_sent") for p in pts]
        proj = [p.get("projected_time_s") for p in pts]
        after = [p.get("wall_after_warmup_s") for p in pts]
        out.append({"wall_time_s": statistics.fmean(p["wall_time_s"] for p in pts),
                    "wall_after_warmup_s": None if None in after else statistics.fmean(after),
                    "mib_sent": None if None in mib else statistics.fmean(mib),
                    "projected_time_s": None if None in proj else statistics.fmean(proj),
                    metric: statistics.fmean(p[metric] for p in pts)})
    return out


def plot_families(grid: Grid, records: list[dict], out_dir: Path, stem: str = "study",
                  cells: list[dict] | None = None) -> list[Path]:
    """Per learning-rate setting, with one panel per P and one line or point
    per algorithm entry (means over seeds): ``{stem}-{lr}-time.png`` (the test
    metric against wall seconds), ``{stem}-{lr}-bytes.png`` (against the
    cumulative MiB each rank sent) and ``{stem}-{lr}-traffic.png`` (the final
    test metric against MiB per step, log scale, each point labelled, bars
    the 95 % t interval over seeds). The same drawing code as ``compare``'s figures
    (:mod:`minips.plots`)."""
    from ..plots import plot_accuracy_vs_traffic, plot_method_curves

    cells = family_cells(grid, records) if cells is None else cells
    tm = _test_metric(grid)
    over = _oversubscribed(records)
    paths = []
    for lr_name in grid.lr:
        cs = {(c["label"], c["P"]): c for c in cells if c["lr"] == lr_name}
        if not cs:
            continue
        panels, timed = [], []
        for P in sorted({c["P"] for c in cs.values()}):
            methods = []
            for a in grid.algos:
                c = cs.get((a, P))
                rs = [r for r in records if (r["lr"], r["label"], r["P"]) == (lr_name, a, P)
                      and r.get("status") == "ok"]
                if c is None or not rs:
                    continue
                b = c["bytes_sent_per_step"]
                methods.append({"name": a, "algo": rs[0].get("algo") or "", "curve": _mean_curve(rs, tm),
                                "final": c["mean"], "final_ci": c["ci"] if c["n_ok"] > 1 else None,
                                "mib_per_step": None if b is None else b / 2**20})
            panels.append((f"P={P}, lr setting {lr_name}, mean over seeds", methods))
            timed.append((f"P={P}, lr setting {lr_name}, mean over seeds"
                           + (f"\noversubscribed ({P} ranks on {cores_on_node()} cores): times not comparable"
                              if P in over else ""), methods))
        files = [out_dir / f"{stem}-{lr_name}-{suffix}.png" for suffix in ("time", "bytes", "traffic")]
        x_time = "projected_time_s" if any(r.get("virtual") for r in records) else "wall_time_s"
        drawn = [plot_method_curves(timed, files[0], x_time, tm),
                 plot_method_curves(panels, files[1], "mib_sent", tm), plot_accuracy_vs_traffic(panels, files[2], tm)]
        paths += [f for f, ok in zip(files, drawn) if ok]
    return paths


def plot_study(grid: Grid, records: list[dict], out_dir: Path, title: str = "", stem: str = "study") -> list[Path]:
    """One PNG per learning-rate setting: the metric against P per algorithm
    (mean over seeds, bars = the 95 % t interval of the mean; none for one seed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = aggregate(records, grid.chance)
    paths = []
    ranks = sorted({r["P"] for r in records})
    for lr_name in grid.lr:
        if not any(r["lr"] == lr_name for r in records):
            continue
        fig, ax = plt.subplots(figsize=(10, 4.5))
        labels = [a for a in grid.algos if any(r["label"] == a for r in records)]
        width = 0.8 / max(1, len(labels))
        colors = plt.get_cmap("tab20").colors  # tab10 repeats after ten algorithms
        markers = "osD^v<>p*hX"
        for i, lab in enumerate(labels):
            xs, ys, lo, hi = [], [], [], []
            for j, P in enumerate(ranks):
                a = agg.get((lr_name, lab, P))
                if a and a["mean"] is not None:
                    x = j + (i - (len(labels) - 1) / 2) * width
                    h = a["ci"] or 0.0  # the 95 % CI's half-width; no bar for one seed
                    xs.append(x), ys.append(a["mean"]), lo.append(h), hi.append(h)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=markers[i % len(markers)], ms=4, capsize=2, label=lab,
                            color=colors[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20])
        ax.set_xticks(range(len(ranks)), [f"P={P}" for P in ranks])
        ax.set_ylabel(grid.metric.replace("_", " "))
        ax.grid(alpha=0.3, axis="y")
        ax.set_title(f"{title} ({lr_name}): mean over seeds, bars: 95 % t interval of the mean")
        ax.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        p = out_dir / f"{stem}-{lr_name}.png"
        fig.savefig(p, dpi=120)
        plt.close(fig)
        paths.append(p)
    return paths


def _split(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else None


def _ints(flag: str, s):
    """``--ranks``/``--seeds`` "0,1" -> [0, 1] (None when not given)."""
    try:
        return [int(x) for x in _split(s)] if s else None
    except ValueError:
        raise StudyError(f"{flag} {s}: give comma-separated integers, e.g. {flag} 0,1") from None


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
        grid.within_points = _within("--within", args.within)
    if getattr(args, "contrast", None):
        grid.contrasts += _contrasts("--contrast", list(args.contrast), grid.algos)
    root = Path(args.out)
    ranks, seeds = _ints("--ranks", args.ranks), _ints("--seeds", args.seeds)
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
    root.mkdir(parents=True, exist_ok=True)
    logf = open(root / "study.log", "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    records = []
    if not args.report_only:
        log(f"study {grid.source}: {len(specs)} runs -> {root}")
        failures = 0
        for i, s in enumerate(specs):
            while (root / "PAUSE").exists():
                time.sleep(5)
            done = (s.out(root) / "summary.json").exists()
            rec = run_one(s, root, grid, mpiexec, log)
            records.append(rec)
            if not done:
                m = rec.get("metric")
                log(f"{i + 1}/{len(specs)} P={s.P} {s.lr_name} {s.label} seed {s.seed}: {rec['status']}"
                    + (f" {grid.metric} {m:.4f}" if m is not None else "")
                    + (f" ({rec['wall_s']:.0f} s)" if rec.get("wall_s") else ""))
                failures = failures + 1 if rec["status"] == "failed" else 0
                if failures >= 3:
                    raise StudyError(f"three runs in a row failed (see {root / 'study.log'} and the runs' "
                                     "command.txt); fix the grid and run the same command again")
    else:
        records = [{"P": s.P, "lr": s.lr_name, "label": s.label, "seed": s.seed,
                    **_record(s.out(root), grid.metric, grid.report_metric, grid.target_accuracy)}
                   for s in specs if (s.out(root) / "summary.json").exists()]
    if add_records:
        records = _add_records(records, add_records, specs)
    if not records:
        print(f"no finished runs yet in {root / 'runs'} for the {len(specs)} runs of this grid "
              "(check --out and the --ranks/--seeds/--lr/--algos selection)")
        return 1
    stem = Path(grid.source).stem
    cells = family_cells(grid, records)
    (root / f"{stem}.json").write_text(json.dumps({"grid": grid.__dict__, "runs": records, "cells": cells,
                                                   "paired": paired_comparisons(grid, records),
                                                   "contrasts": contrasts(grid, records)},
                                                  indent=2) + "\n")
    report = markdown_report(grid, records, args.title or stem) + "\n" + families_report(grid, records, cells)
    (root / f"{stem}.md").write_text(report + "\n")
    plot_study(grid, records, root, args.title or stem, stem)
    plot_families(grid, records, root, stem, cells)
    print("\n" + report)
    return 0


def add_arguments(p):
    p.add_argument("grid", help="grid TOML file (configs/study-*.toml)")
    p.add_argument("--out", required=True, help="study directory (runs/, GRID.json, GRID.md, figures)")
    p.add_argument("--ranks", help="these rank counts instead of the grid's (a subset, or others), e.g. 2,4")
    p.add_argument("--virtual-ranks", help="run these rank counts instead of the grid's as virtual ranks (threads "
                                           "of one process, no mpiexec), e.g. 16,64 (the grid key virtual = true "
                                           "runs the grid's own ranks so)")
    p.add_argument("--seeds", help="only these seeds, e.g. 0")
    p.add_argument("--lr", help="only these learning-rate settings (names of [lr.NAME] tables)")
    p.add_argument("--algos", help="only these algos entries")
    p.add_argument("--title", help="title of the report")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("--report-only", action="store_true", help="aggregate the finished runs, run nothing")
    p.add_argument("--within", type=float, metavar="POINTS",
                   help="target: within POINTS of the baseline (accuracy points, 0.5 = 0.005; BLEU points); the "
                        "report says met / missed / unresolved per cell (overrides the grid's within_points)")
    p.add_argument("--contrast", action="append", metavar='"A - B"',
                   help="also pair algos entry A with entry B by seed (repeatable; adds to the grid's contrasts)")
    p.add_argument("--add-records", metavar="G.json[,...]",
                   help="also count the runs recorded in earlier studies' JSON files (for seeds whose run folders "
                        "were not kept); a run with a folder under --out wins")
    p.set_defaults(func=run)
