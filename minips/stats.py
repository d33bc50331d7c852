"""Confidence intervals over seeds, paired by seed: what tells a difference from the noise of seeds.

A study runs every algorithm with the same seeds; seed s fixes the initial
weights, the partition and the data order, so run (A, s) and run (B, s) differ
only by the algorithm. Comparing A with B per seed removes the seed-to-seed
spread they share (the *paired* design), which is usually most of it.

- :func:`t_interval`: mean and two-sided Student-t confidence interval of a
  sample (``n - 1`` degrees of freedom): ``mean +- t_{n-1} * sd / sqrt(n)``.
- :func:`paired`: the per-seed differences ``A_s - B_s`` over the seeds both
  finished, their t interval, and a verdict: **better** (the interval lies
  above 0), **worse** (below 0), **no difference shown** (it holds 0). The last
  is not parity: these seeds cannot tell the two apart, and an interval wider
  than a target cannot show parity (the difference inside the target on both
  sides).
- A run that failed has no value and is left out of every mean and pair, and
  counted: **diverged** (a non-finite loss stopped it; ``None`` or
  :class:`Failure`) or **collapsed** (it finished at chance level: with
  ``chance`` given, an accuracy below ``chance + COLLAPSE_MARGIN``, 0.11 for ten
  classes). A collapse is a failure, not an accuracy: averaging a 0.10 into a
  mean or a paired difference makes an interval 100 points wide that "holds 0".
  :func:`over_seeds` and :func:`fmt_over_seeds` give a mean over the runs that
  finished and say next to it which were left out.
- :func:`target_verdict`: a target "within X of B" is **met** when the
  interval's lower end is above ``-X``, **missed** when its upper end is below
  ``-X``, else **unresolved**; :func:`seeds_to_resolve` says how many seeds
  would resolve it if the mean and the spread stayed as observed.

Source: the paired t interval of any statistics text (e.g. Wasserman, *All of
Statistics*, 2004, ch. 10); its use for comparing training runs over seeds
follows Dror et al., "The Hitchhiker's Guide to Testing Statistical
Significance in NLP" (ACL 2018). Quantiles from :mod:`scipy.stats`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

__all__ = ["Interval", "Paired", "Failure", "t_interval", "paired", "target_verdict", "seeds_to_resolve",
           "t_quantile", "CONFIDENCE", "COLLAPSE_MARGIN", "NO_DIFFERENCE", "collapsed", "outcome", "failures",
           "over_seeds", "fmt_over_seeds", "compare_with_baseline", "fmt_diff", "fmt_target", "fmt_left_out"]

#: the confidence level of every interval minips reports
CONFIDENCE = 0.95

#: a run whose accuracy ends below chance + this margin collapsed (0.11 for ten classes)
COLLAPSE_MARGIN = 0.01

#: the verdict when the interval of a difference holds 0 (it shows no difference; it does not show parity)
NO_DIFFERENCE = "no difference shown"


@dataclass(frozen=True)
class Failure:
    """A run that has no value to average or pair: ``why`` is ``"diverged"``
    (a non-finite loss stopped it), ``"collapsed"`` (it ended at chance level)
    or ``"failed"`` (it crashed or timed out)."""
    why: str


def collapsed(value, chance: float | None) -> bool:
    """True when ``value`` (an accuracy, fraction in [0, 1]) ended at chance
    level: below ``chance + COLLAPSE_MARGIN`` (``chance`` 0.1 for ten classes,
    so below 0.11). Always False without ``chance`` (a metric with no chance
    level, such as BLEU) or without a value."""
    return chance is not None and isinstance(value, (int, float)) and value < chance + COLLAPSE_MARGIN


def outcome(value, chance: float | None = None) -> str:
    """``"ok"``, ``"diverged"`` (None, or ``Failure("diverged")``), ``"collapsed"``
    (see :func:`collapsed`, or ``Failure("collapsed")``) or ``"failed"``."""
    if value is None:
        return "diverged"
    if isinstance(value, Failure):
        return value.why
    return "collapsed" if collapsed(value, chance) else "ok"


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t critical value ``t`` with ``P(|T_df| <= t) = confidence``
    (12.706 for df = 1, 2.776 for df = 4 at 95 %).

    Raises:
        ValueError: df < 1 or confidence not in (0, 1).
    """
    if df < 1:
        raise ValueError(f"t_quantile: needs df >= 1 (two or more seeds), got {df}")
    if not 0 < confidence < 1:
        raise ValueError(f"t_quantile: confidence must be in (0, 1), got {confidence}")
    from scipy.stats import t
    return float(t.ppf(0.5 + confidence / 2, df))


@dataclass(frozen=True)
class Interval:
    """``mean`` with the t interval ``[lo, hi]`` over ``n`` values of sample
    standard deviation ``sd`` (``lo = hi = mean`` and ``sd = 0`` when n = 1:
    one seed has no spread, and :attr:`has_ci` is False)."""
    n: int
    mean: float
    sd: float
    lo: float
    hi: float

    @property
    def has_ci(self) -> bool:
        return self.n >= 2

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2

    def fmt(self, digits: int = 4, scale: float = 1.0) -> str:
        """``0.8470 ± 0.0082`` (mean ± half-width of the CI), or ``0.8470 (1 seed)``."""
        if not self.has_ci:
            return f"{self.mean * scale:.{digits}f} (1 seed)"
        return f"{self.mean * scale:.{digits}f} ± {self.half_width * scale:.{digits}f}"


def t_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """Mean and t confidence interval of ``values`` (floats, one per seed).

    Raises:
        ValueError: no values, or a value that is not finite.
    """
    vals = [float(v) for v in values]
    if not vals:
        raise ValueError("t_interval: no values")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"t_interval: values must be finite, got {vals}")
    n, mean = len(vals), statistics.fmean(vals)
    if n == 1:
        return Interval(1, mean, 0.0, mean, mean)
    sd = statistics.stdev(vals)
    h = t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    return Interval(n, mean, sd, mean - h, mean + h)


@dataclass(frozen=True)
class Paired:
    """A against B, paired by seed: ``seeds`` both finished, ``diff`` the t
    interval of ``A_s - B_s``, ``verdict`` ``better`` / ``worse`` /
    :data:`NO_DIFFERENCE` (or ``1 seed`` when there is no interval);
    ``left_out``: the seeds whose run failed, ``{"A": {"diverged": (seeds),
    "collapsed": (seeds), ...}, "B": {...}}`` (empty dicts when none did)."""
    seeds: tuple
    diff: Interval
    verdict: str
    left_out: dict = field(default_factory=lambda: {"A": {}, "B": {}})


def failures(values: dict, chance: float | None = None) -> dict:
    """``{why: (seeds)}`` of the runs in ``{seed: value}`` that have no value to
    use (see :func:`outcome`); empty when every run finished above chance."""
    out: dict = {}
    for s in sorted(values):
        why = outcome(values[s], chance)
        if why != "ok":
            out.setdefault(why, []).append(s)
    return {k: tuple(v) for k, v in out.items()}


def over_seeds(values: dict, chance: float | None = None) -> tuple[Interval | None, dict]:
    """The t interval over the runs of ``{seed: value}`` that finished above
    chance (None when none did) and :func:`failures` (the runs left out)."""
    ok = [v for v in values.values() if outcome(v, chance) == "ok"]
    return (t_interval(ok) if ok else None), failures(values, chance)


def fmt_over_seeds(values: dict, chance: float | None = None, digits: int = 4, scale: float = 1.0) -> str:
    """``0.8835 ± 0.0184``; when runs failed, what the mean is over, next to it:
    ``0.8835 ± 0.0184 (3 of 5 seeds; 2 diverged, not in the mean)``; ``no value: 3
    of 3 diverged`` when every run failed; ``-`` for no runs."""
    iv, left = over_seeds(values, chance)
    if not values:
        return "-"
    why = ", ".join(f"{len(seeds)} {w}" for w, seeds in sorted(left.items()))
    if iv is None:
        return "no value: " + ", ".join(f"{len(seeds)} of {len(values)} {w}" for w, seeds in sorted(left.items()))
    if not left:
        return iv.fmt(digits, scale)
    mean = iv.fmt(digits, scale).removesuffix(" (1 seed)")
    return f"{mean} ({iv.n} of {len(values)} seeds; {why}, not in the mean)"


def paired(a: dict, b: dict, confidence: float = CONFIDENCE, chance: float | None = None) -> Paired | None:
    """Compare A with B seed by seed.

    Args:
        a, b: ``{seed: value}``; a value that is None or a :class:`Failure`
            is a run that failed (None: it diverged) and is left out, as is a
            seed missing from either side.
        chance: the metric's chance level (0.1 for ten classes), or None; with
            it, a value below ``chance + COLLAPSE_MARGIN`` is a collapse, left
            out and counted like a divergence.

    Returns:
        :class:`Paired`, or None when no seed has both values (after leaving
        out the collapsed ones).
    """
    seeds = tuple(sorted(s for s in a if s in b and outcome(a[s], chance) == "ok"
                         and outcome(b[s], chance) == "ok"))
    if not seeds:
        return None
    d = t_interval([a[s] - b[s] for s in seeds], confidence)
    if not d.has_ci:
        verdict = "1 seed"
    elif d.lo > 0:
        verdict = "better"
    elif d.hi < 0:
        verdict = "worse"
    else:
        verdict = NO_DIFFERENCE
    return Paired(seeds, d, verdict, {"A": failures(a, chance), "B": failures(b, chance)})


def target_verdict(diff: Interval, gap: float) -> str:
    """``met`` / ``missed`` / ``unresolved`` for the target "A within ``gap`` of
    B" given the interval of ``A - B`` (gap > 0, in the metric's units: 0.005
    is half a point of accuracy). One seed: ``unresolved``.

    Raises:
        ValueError: gap <= 0.
    """
    if not gap > 0:
        raise ValueError(f"target_verdict: gap must be > 0, got {gap}")
    if not diff.has_ci:
        return "unresolved"
    if diff.lo > -gap:
        return "met"
    if diff.hi < -gap:
        return "missed"
    return "unresolved"


def seeds_to_resolve(diff: Interval, gap: float, confidence: float = CONFIDENCE, limit: int = 1000) -> int | None:
    """How many seeds would make :func:`target_verdict` met or missed **if the
    mean difference and its spread stayed as observed** (they will not exactly:
    the number is a guide, not a promise): the least n >= 2 with
    ``t_{n-1} * sd / sqrt(n) < |mean + gap|``. None when the observed mean sits
    on ``-gap`` (no number of seeds resolves it), the spread is unknown (one
    seed), or more than ``limit`` seeds would be needed."""
    if not diff.has_ci:
        return None
    margin = abs(diff.mean + gap)
    if margin == 0:
        return None
    if diff.sd == 0:
        return 2
    for n in range(2, limit + 1):
        if t_quantile(n - 1, confidence) * diff.sd / math.sqrt(n) < margin:
            return n
    return None


def points_per_unit(metric: str) -> float:
    """Points per unit of a metric: 100 for a fraction such as an accuracy
    (0.005 = half a point), 1 for BLEU (already in points)."""
    return 1.0 if "bleu" in metric else 100.0


def compare_with_baseline(a: dict, b: dict, within: float | None = None, chance: float | None = None) -> dict | None:
    """A against the baseline B, paired by seed, as a plain dict (for JSON and
    reports): ``seeds``, ``mean``, ``lo``, ``hi``, ``sd`` of ``A - B`` (the
    metric's units), ``verdict``, ``runs`` (``{"A": n, "B": n}``: the runs
    given), ``left_out`` (``{"A": {why: [seeds]}, "B": {...}}``: the failed
    runs, see :func:`paired`, whose ``chance`` this takes);
    with ``within`` (a gap in the metric's units, > 0): ``within``, ``target``
    (met / missed / unresolved) and ``seeds_to_resolve``. None when no seed
    has both values (``left_out`` then says why, when runs failed: see
    :func:`fmt_diff`, which takes None)."""
    pr = paired(a, b, chance=chance)
    if pr is None:
        return None
    out = {"seeds": list(pr.seeds), "mean": pr.diff.mean, "lo": pr.diff.lo, "hi": pr.diff.hi, "sd": pr.diff.sd,
           "verdict": pr.verdict,
           "left_out": {side: {why: list(seeds) for why, seeds in f.items()} for side, f in pr.left_out.items()},
           "runs": {"A": len(a), "B": len(b)}}
    if within is not None:
        out["within"] = within
        out["target"] = target_verdict(pr.diff, within)
        out["seeds_to_resolve"] = seeds_to_resolve(pr.diff, within) if out["target"] == "unresolved" else None
    return out


def fmt_left_out(d: dict | None, a: dict | None = None, chance: float | None = None) -> str:
    """``2 of 3 collapsed`` / ``1 of 5 diverged; baseline 1 of 5 collapsed``: the
    failed runs left out of a comparison (from a :func:`compare_with_baseline`
    dict, or, when it is None because nothing was left to pair, from A's values
    ``a`` themselves); ``""`` when none failed."""
    if d is not None:
        left, runs = d["left_out"], d.get("runs", {})
    elif a:
        left, runs = {"A": {k: list(v) for k, v in failures(a, chance).items()}, "B": {}}, {"A": len(a)}
    else:
        return ""
    parts = []
    for side in ("A", "B"):
        n = runs.get(side)
        whys = [f"{len(seeds)}{f' of {n}' if n else ''} {why}" for why, seeds in sorted(left.get(side, {}).items())]
        if whys:
            parts.append(("" if side == "A" else "baseline ") + ", ".join(whys))
    return "; ".join(parts)


def fmt_diff(d: dict | None, scale: float = 100.0, a: dict | None = None, chance: float | None = None) -> str:
    """``-1.07 [-2.20, +0.06] **no difference shown**`` (a
    :func:`compare_with_baseline` dict times ``scale``: points), ``+0.40 (1
    seed)``, or ``-``; the failed runs left out follow it (``; 2 collapsed, left
    out``). With ``d`` None and A's values ``a``: ``no value: 3 of 3 diverged``
    when every run of A failed."""
    if d is None:
        why = fmt_left_out(None, a, chance)
        return f"no value: {why}" if why else "-"
    left = fmt_left_out(d)
    tail = f"; left out: {left}" if left else ""
    if d["verdict"] == "1 seed":
        return f"{scale * d['mean']:+.2f} (1 seed{tail})"
    return f"{scale * d['mean']:+.2f} [{scale * d['lo']:+.2f}, {scale * d['hi']:+.2f}] **{d['verdict']}**{tail}"


def fmt_target(d: dict | None, scale: float = 100.0) -> str:
    """The target column: ``met``, ``missed``, ``unresolved``, or ``-``. An
    unresolved target says when the interval's half-width is at least the
    target (such an interval cannot show parity, the difference inside
    ``[-X, +X]``) and how many seeds would resolve it if the mean and the
    spread stayed as observed."""
    if d is None or d.get("target") is None:
        return "-"
    t = d["target"]
    if t != "unresolved":
        return t
    if len(d["seeds"]) < 2:
        return "unresolved (one seed: no interval)"
    notes = []
    within, half = d.get("within"), (d["hi"] - d["lo"]) / 2
    if within is not None and half >= within:
        notes.append(f"interval ±{scale * half:.2f}, wider than the {scale * within:g}-point target: it cannot "
                     "show parity")
    n = d.get("seeds_to_resolve")
    notes.append(f"{n} seeds would resolve it if the mean and spread stayed as observed" if n
                 else "no number of seeds resolves it at this mean")
    return f"unresolved ({'; '.join(notes)})"
