"""Confidence intervals over seeds, paired by seed: what tells a tie from a win.

A study runs every algorithm with the same seeds; seed s fixes the initial
weights, the partition and the data order, so run (A, s) and run (B, s) differ
only by the algorithm. Comparing A with B per seed removes the seed-to-seed
spread they share (the *paired* design), which is usually most of it.

- :func:`t_interval`: mean and two-sided Student-t confidence interval of a
  sample (``n - 1`` degrees of freedom): ``mean +- t_{n-1} * sd / sqrt(n)``.
- :func:`paired`: the per-seed differences ``A_s - B_s`` over the seeds both
  finished, their t interval, and a verdict: **better** (the interval lies
  above 0), **worse** (below 0), **tie** (it holds 0).
- :func:`collapsed`: a run that finished with its accuracy at chance level
  (the network predicts one class) **collapsed**. A collapse is a failure
  like a divergence: :func:`paired` and :func:`compare_with_baseline` given
  ``chance`` leave such a seed out of the interval (and say which), so that a
  rule that collapsed on 2 of 3 seeds is reported as failing on 2, never as
  a mean of 0.33 and an interval 200 points wide.
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
from dataclasses import dataclass

__all__ = ["Interval", "Paired", "t_interval", "paired", "target_verdict", "seeds_to_resolve", "t_quantile",
           "CONFIDENCE", "COLLAPSE_MARGIN", "collapsed"]

#: the confidence level of every interval minips reports
CONFIDENCE = 0.95

#: a finished run whose accuracy is below ``chance + COLLAPSE_MARGIN`` collapsed (10 classes: below 0.11)
COLLAPSE_MARGIN = 0.01


def collapsed(value: float | None, chance: float | None) -> bool:
    """Whether a finished run's accuracy ``value`` (a fraction) is at chance
    level: below ``chance + COLLAPSE_MARGIN`` (0.11 for 10 classes, chance
    0.1). False when either is None (a diverged run has no value; a metric
    without a chance level, such as BLEU, never collapses)."""
    return value is not None and chance is not None and value < chance + COLLAPSE_MARGIN


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
    interval of ``A_s - B_s``, ``verdict`` ``better`` / ``worse`` / ``tie`` (or
    ``1 seed`` when there is no interval); ``collapsed``: the seeds left out
    because A's or B's run ended at chance."""
    seeds: tuple
    diff: Interval
    verdict: str
    collapsed: tuple = ()


def paired(a: dict, b: dict, confidence: float = CONFIDENCE, chance: float | None = None) -> Paired | None:
    """Compare A with B seed by seed.

    Args:
        a, b: ``{seed: value}`` (a seed missing or None in either is left out:
            a diverged run has no value to pair).
        chance: the metric's chance level (0.1 for accuracy on 10 classes), or
            None: a seed whose A or B value is at chance (:func:`collapsed`) is
            left out like a diverged one and listed in ``Paired.collapsed``.

    Returns:
        :class:`Paired`, or None when no seed has both values (after leaving
        out the collapsed ones).
    """
    both = sorted(s for s in a if s in b and a[s] is not None and b[s] is not None)
    gone = tuple(s for s in both if collapsed(a[s], chance) or collapsed(b[s], chance))
    seeds = tuple(s for s in both if s not in gone)
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
        verdict = "tie"
    return Paired(seeds, d, verdict, gone)


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
    """How many seeds would make :func:`target_verdict` met or missed if the
    mean difference and its spread stayed as observed: the least n >= 2 with
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
    metric's units), ``verdict``; with ``within`` (a gap in the metric's units,
    > 0): ``target`` (met / missed / unresolved) and ``seeds_to_resolve``;
    with ``chance``: seeds where either run collapsed are left out
    (:func:`paired`) and listed in ``collapsed``.
    None when no seed has both values."""
    pr = paired(a, b, chance=chance)
    if pr is None:
        return None
    out = {"seeds": list(pr.seeds), "mean": pr.diff.mean, "lo": pr.diff.lo, "hi": pr.diff.hi, "sd": pr.diff.sd,
           "verdict": pr.verdict}
    if pr.collapsed:
        out["collapsed"] = list(pr.collapsed)
    if within is not None:
        out["target"] = target_verdict(pr.diff, within)
        out["seeds_to_resolve"] = seeds_to_resolve(pr.diff, within) if out["target"] == "unresolved" else None
    return out


def fmt_diff(d: dict | None, scale: float = 100.0) -> str:
    """``-1.07 [-2.20, +0.06] **tie**`` (a :func:`compare_with_baseline` dict
    times ``scale``: points), ``+0.40 (1 seed)``, or ``-``; followed by
    ``(k collapsed left out)`` when seeds were left out at chance."""
    if d is None:
        return "-"
    gone = f" ({len(d['collapsed'])} collapsed left out)" if d.get("collapsed") else ""
    if d["verdict"] == "1 seed":
        return f"{scale * d['mean']:+.2f} (1 seed){gone}"
    return f"{scale * d['mean']:+.2f} [{scale * d['lo']:+.2f}, {scale * d['hi']:+.2f}] **{d['verdict']}**{gone}"


def fmt_target(d: dict | None) -> str:
    """The target column: ``met``, ``missed``, ``unresolved (14 seeds would resolve it)``, or ``-``."""
    if d is None or d.get("target") is None:
        return "-"
    t = d["target"]
    if t != "unresolved":
        return t
    n = d.get("seeds_to_resolve")
    if len(d["seeds"]) < 2:
        return "unresolved (one seed: no interval)"
    return f"unresolved ({n} seeds would resolve it)" if n else "unresolved (no number of seeds at this mean)"
