"""The grid of a study: the TOML file read and checked (:func:`load_grid`) and expanded
into one :class:`RunSpec` per training run (:func:`expand`); the file's keys are in
:mod:`minips.bench.study`."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from ...distributed.algorithms import BASELINE

__all__ = ["StudyError", "Grid", "RunSpec", "load_grid", "expand", "split_entry", "parse_contrasts",
           "parse_within", "parse_time_axis", "tested_metric"]


def split_entry(entry: str, variants: dict, where: str = "") -> tuple[str, str | None]:
    """An ``algos`` entry -> (the algorithm spec to run, the variant it names or
    None). ``SPEC@NAME`` selects ``[variants.NAME]`` when the grid has that
    table; otherwise ``@NAME`` is only the run's label.

    Raises:
        StudyError: the spec is not valid (unknown algorithm or option, bad value).
    """
    from ...distributed.algorithms import resolve

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
    """A parsed grid file (its keys: :mod:`minips.bench.study`)."""
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
    networks: list = field(default_factory=list)
    phis: list = field(default_factory=lambda: [0.0])
    target_below_baseline: float = 0.5

    def __post_init__(self):
        # an accuracy over 10 classes has chance level 0.1: a run below 0.11 collapsed (minips.stats.collapsed)
        if self.chance is None and "accuracy" in self.metric and "token" not in self.metric:
            self.chance = 0.1


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
    from ...config import read_toml

    p = Path(path)
    raw = read_toml(p, StudyError, f"grid file {p} does not exist (see configs/study-*.toml for examples)")
    for key in ("ranks", "seeds", "algos", "train", "lr"):
        if key not in raw:
            raise StudyError(f"{p}: missing key {key!r} (needs ranks, seeds, algos, [train], [lr.NAME])")
    known = ("ranks", "seeds", "algos", "train", "lr", "variants", "env", "timeout_s", "metric", "chance",
             "report_metric", "target_accuracy", "within_points", "contrasts",
             "virtual", "networks", "phis", "target_below_baseline")
    unknown = set(raw) - set(known)
    if unknown:
        raise StudyError(f"{p}: unknown key(s) {', '.join(sorted(unknown))}; a grid's keys are {', '.join(known)}")
    _check_finite(p, raw)
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
             within_points=parse_within(p, raw.get("within_points")), virtual=raw.get("virtual", False))
    g.contrasts = parse_contrasts(p, raw.get("contrasts", []), g.algos)
    g.networks, g.phis, g.target_below_baseline = parse_time_axis(p, raw, g.metric)
    if not isinstance(g.virtual, bool):
        raise StudyError(f"{p}: virtual = {g.virtual!r}: give true (every run on virtual ranks, threads of one "
                         "process) or false (mpiexec, the default)")
    if g.metric.startswith("val_") and not g.train.get("val-fraction", g.train.get("val_fraction")):
        raise StudyError(f"{p}: metric {g.metric!r} is measured on a validation split: add val-fraction "
                         "(e.g. 0.1) to [train]")
    if not g.ranks or min(g.ranks) < 1:
        raise StudyError(f"{p}: ranks must be a non-empty list of integers >= 1, got {raw['ranks']}")
    if not g.lr:
        raise StudyError(f"{p}: add at least one [lr.NAME] table (e.g. lr = 0.05)")
    for a in g.algos:
        split_entry(a, g.variants, f"{p}: ")
    return g


def _check_finite(p, raw, where: str = "") -> None:
    """Refuse ``inf`` and ``nan`` anywhere in the grid (TOML has them; no key
    means them: ``lr = inf`` would make every run diverge at its first step).

    Raises:
        StudyError: naming the key (``lr.fixed.lr``).
    """
    import math
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for k, v in items:
        name = f"{where}.{k}" if where and isinstance(k, str) else f"{where}[{k}]" if where else str(k)
        if isinstance(v, float) and not math.isfinite(v):
            raise StudyError(f"{p}: {name} = {v}: give a finite number")
        _check_finite(p, v, name)


def parse_contrasts(p, v, algos) -> list[tuple[str, str]]:
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


def parse_time_axis(p, raw: dict, metric: str) -> tuple[list, list, float]:
    """The grid's ``networks`` (cost-model presets or ``alpha=..,beta=..``),
    ``phis`` (compute interference, each in [0, 1]; default [0.0]) and
    ``target_below_baseline`` (points below the baseline's final validation
    metric; default 0.5), checked; ``networks`` needs a validation ``metric``.

    Raises:
        StudyError: naming the key and the fix.
    """
    from ...distributed.costmodel import NETWORKS, parse_network

    nets, phis = raw.get("networks", []), raw.get("phis", [0.0])
    below = raw.get("target_below_baseline", 0.5)
    if not isinstance(nets, list) or not all(isinstance(x, str) for x in nets):
        raise StudyError(f"{p}: networks = {nets!r}: give a list of network presets, e.g. networks = "
                         f"[\"1gbe\", \"10gbe\", \"ib-edr\"] (presets: {', '.join(NETWORKS)})")
    for x in nets:
        try:
            parse_network(x)
        except ValueError as e:
            raise StudyError(f"{p}: networks: {e}") from None
    if not isinstance(phis, list) or not phis or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in phis):
        raise StudyError(f"{p}: phis = {phis!r}: give a non-empty list of compute interferences in [0, 1] "
                         "(0: overlapped communication is free, 1: it costs compute time), e.g. phis = [0.0, 1.0]")
    if isinstance(below, bool) or not isinstance(below, (int, float)) or below < 0:
        raise StudyError(f"{p}: target_below_baseline = {below!r}: give the points below the baseline's final "
                         "validation metric that the target is, a number >= 0 (0.5: half a point)")
    if nets and not metric.startswith("val_"):
        raise StudyError(f"{p}: networks reads time to accuracy on the validation split: set metric = "
                         "\"val_accuracy\" and val-fraction (e.g. 0.1) in [train]")
    return list(nets), [float(x) for x in phis], float(below)


def parse_within(p, v) -> float | None:
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
        algo, variant = split_entry(a, grid.variants)
        flags = {**grid.train, **grid.lr[lr_name], "algo": algo, "seed": seed, "label": a}
        opts = dict(grid.variants[variant]) if variant else {}
        out.append(RunSpec(P, lr_name, a, seed, flags, opts, virtual))
    return out



def tested_metric(grid: Grid) -> str:
    """The test metric of the grid's runs: ``metric``, or its ``report_metric``
    when ``metric`` is measured on a validation split."""
    return grid.report_metric or grid.metric

