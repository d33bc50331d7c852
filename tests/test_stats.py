"""Confidence intervals paired by seed (minips.stats) and where they are
reported: bench study's tables and compare --seeds (issue 25, section 1).

Expected values are computed here by hand or from textbook tables (Student's
t quantiles), never by the code under test."""
import json
import math

import pytest

from minips import stats
from minips.bench import study
from minips.bench.study import cli as study_cli


@pytest.mark.parametrize("df,t", [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045)])
def test_t_quantiles_match_the_table(df, t):
    assert stats.t_quantile(df) == pytest.approx(t, abs=1e-3)


def test_t_interval_by_hand():
    # values 1, 2, 3, 4, 5: mean 3, sd sqrt(2.5), half-width 2.776 * sqrt(2.5) / sqrt(5)
    i = stats.t_interval([1, 2, 3, 4, 5])
    h = 2.7764451 * math.sqrt(2.5) / math.sqrt(5)
    assert (i.n, i.mean) == (5, 3.0) and i.sd == pytest.approx(math.sqrt(2.5))
    assert (i.lo, i.hi) == (pytest.approx(3 - h), pytest.approx(3 + h))
    one = stats.t_interval([0.8])
    assert not one.has_ci and one.lo == one.hi == 0.8 and one.fmt() == "0.8000 (1 seed)"
    with pytest.raises(ValueError, match="no values"):
        stats.t_interval([])
    with pytest.raises(ValueError, match="finite"):
        stats.t_interval([0.1, float("nan")])


def test_pairing_removes_the_shared_seed_spread():
    # B varies a lot across seeds; A = B + 0.01 + small noise: unpaired the gap drowns, paired it shows
    b = {0: 0.80, 1: 0.86, 2: 0.83, 3: 0.78, 4: 0.88}
    a = {s: v + 0.01 + (0.001 if s % 2 else -0.001) for s, v in b.items()}
    p = stats.paired(a, b)
    assert p.seeds == (0, 1, 2, 3, 4) and p.verdict == "better"
    assert p.diff.mean == pytest.approx(0.01 + (2 - 3) * 0.001 / 5)  # two seeds +0.001, three -0.001
    unpaired = stats.t_interval(list(a.values()))
    assert unpaired.lo < stats.t_interval(list(b.values())).mean  # the intervals of the means overlap


def test_verdicts_and_missing_seeds():
    b = {0: 0.8, 1: 0.8, 2: 0.8}
    assert stats.paired({0: 0.79, 1: 0.78, 2: 0.785}, b).verdict == "worse"
    assert stats.paired({0: 0.81, 1: 0.79, 2: 0.80}, b).verdict == "no difference shown"
    # a diverged seed (None) is left out of the pairing; one seed left: no interval
    p = stats.paired({0: 0.79, 1: None}, {0: 0.8, 1: 0.8, 2: 0.8})
    assert p.seeds == (0,) and p.verdict == "1 seed"
    assert stats.paired({5: 0.1}, b) is None


def test_a_collapse_is_left_out_of_the_pair_like_a_divergence():
    # study 1, P = 64, adaptive-local against sync (docs/results.md section 13): seed 0 trained (0.7995), seeds
    # 1 and 2 ended at chance; averaged in, they gave -54.34 [-155.80, +47.12] "tie"
    sync = {0: 0.8713, 1: 0.8767, 2: 0.8828}
    rule = {0: 0.7995, 1: 0.0990, 2: 0.1020}
    assert stats.collapsed(0.1009, 0.1) and not stats.collapsed(0.11, 0.1) and not stats.collapsed(0.1, None)
    p = stats.paired(rule, sync, chance=0.1)
    assert p.seeds == (0,) and p.left_out == {"A": {"collapsed": (1, 2)}, "B": {}} and p.verdict == "1 seed"
    assert p.diff.mean == pytest.approx(0.7995 - 0.8713)
    d = stats.compare_with_baseline(rule, sync, 0.005, chance=0.1)
    assert d["seeds"] == [0] and d["left_out"]["A"] == {"collapsed": [1, 2]}
    assert stats.fmt_diff(d) == "-7.18 (1 seed; left out: 2 of 3 collapsed)"
    assert stats.paired(rule, sync).seeds == (0, 1, 2)  # without a chance level every finished seed pairs
    # a collapse of the baseline leaves its seed out too; every seed collapsed: nothing to pair
    assert stats.paired(sync, rule, chance=0.1).seeds == (0,)
    assert stats.paired({1: 0.1}, {1: 0.9}, chance=0.1) is None


def test_study1_table_rebuilds_with_its_collapses_left_out():
    # scripts/scale_study.py rebuilds docs/bench/scale/study1/accuracy-vs-P.md from the committed per-seed accuracies
    from pathlib import Path

    from .conftest import load_script
    root = Path(__file__).resolve().parents[1]
    mod = load_script("scale_study")
    md, rows = mod.tables(mod.load_runs())
    assert md + "\n" == (root / "docs" / "bench" / "scale" / "study1" / "accuracy-vs-P.md").read_text()
    row = next(r for r in rows if (r["policy"], r["P"], r["rule"]) == ("fixed", 64, "pseudo-sync:adaptive-local:1"))
    assert row["at_chance"] == 2 and row["val"]["n"] == 1 and row["val_vs_sync"]["seeds"] == [0]
    assert "-54.34" not in md


def test_target_met_missed_unresolved_and_seeds_to_resolve():
    gap = 0.005  # half a point
    met = stats.t_interval([-0.001, 0.0, 0.001, -0.002, 0.002])
    missed = stats.t_interval([-0.02, -0.021, -0.019])
    wide = stats.t_interval([-0.0107 + d for d in (-0.0091, 0.0, 0.0091)])  # mean -1.07 points, sd 0.91 points
    assert stats.target_verdict(met, gap) == "met"
    assert stats.target_verdict(missed, gap) == "missed"
    assert stats.target_verdict(wide, gap) == "unresolved"
    # by hand: margin |mean + gap| = 0.0057, sd 0.0091: the least n with t_{n-1} sd / sqrt(n) < 0.0057
    n = stats.seeds_to_resolve(wide, gap)
    assert n == next(m for m in range(2, 100) if stats.t_quantile(m - 1) * 0.0091 / math.sqrt(m) < 0.0057)
    assert 10 <= n <= 14
    assert stats.seeds_to_resolve(stats.t_interval([-0.005, -0.004, -0.006]), gap) is None  # mean on -gap
    with pytest.raises(ValueError, match="gap must be > 0"):
        stats.target_verdict(met, 0)


def _records():
    """Hand-made study records: P = 2, 5 seeds; A ties with sync, B is worse."""
    val = {"sync": [0.86, 0.88, 0.85, 0.87, 0.84],
           "A": [0.865, 0.875, 0.845, 0.872, 0.846],
           "B": [0.84, 0.86, 0.83, 0.85, 0.82]}
    return [{"P": 2, "lr": "fixed", "label": lab, "seed": s, "status": "ok", "metric": v, "reported": v - 0.01}
            for lab, vs in val.items() for s, v in enumerate(vs)]


def _grid(**kw):
    return study.Grid(ranks=[2], seeds=list(range(5)), algos=["sync", "A", "B"], train={"val-fraction": 0.1},
                      lr={"fixed": {"lr": 0.05}}, metric="val_accuracy", report_metric="test_accuracy", **kw)


def test_study_report_pairs_by_seed_and_judges_the_target():
    g = _grid(within_points=0.5, contrasts=[("A", "B")])
    rows = study.paired_comparisons(g, _records())
    by = {r["label"]: r for r in rows}
    assert by["A"]["metric"]["verdict"] == "no difference shown" and by["B"]["metric"]["verdict"] == "worse"
    assert by["B"]["metric"]["mean"] == pytest.approx(-0.02)
    assert by["B"]["metric"]["target"] == "missed"  # every seed 2 points below: the interval is a point at -2
    text = study.markdown_report(g, _records(), "t")
    assert "## paired by seed against sync" in text and "-2.00 [-2.00, -2.00] **worse**" in text
    assert "## contrasts" in text and "| fixed | 2 | A | B | 5 |" in text
    assert "against the runner-up" in text  # the choice says whether it is resolved
    # cells: mean ± CI half-width; sync's val over 5 seeds: sd 0.01581, half-width 2.776 * 0.01581 / sqrt(5)
    assert f"0.8600 ± {2.7764451 * 0.0158114 / math.sqrt(5):.4f}" in text


def test_a_study_never_averages_a_collapse():
    # B collapses (validation at chance) on seeds 1 and 3: counted like divergences, out of every mean and pair
    recs = [{**r, "family": "test"} for r in _records()]
    recs = [{**r, "metric": 0.1, "reported": 0.1} if r["label"] == "B" and r["seed"] in (1, 3) else r
            for r in recs]
    g = _grid(within_points=0.5)
    a = study.aggregate(recs, g.chance)[("fixed", "B", 2)]
    assert (a["n"], a["n_ok"], a["at_chance"], a["diverged"]) == (5, 3, 2, 0)
    assert a["mean"] == pytest.approx((0.84 + 0.83 + 0.82) / 3) and a["min"] == 0.82
    b = {r["label"]: r for r in study.paired_comparisons(g, recs)}["B"]
    assert b["metric"]["seeds"] == [0, 2, 4] and b["metric"]["mean"] == pytest.approx(-0.02)
    assert b["reported"]["seeds"] == [0, 2, 4]  # the test metric's pairs leave the same seeds out
    cell = next(c for c in study.family_cells(g, recs) if c["label"] == "B")
    assert cell["n_ok"] == 3 and cell["collapsed"] == 2 and cell["mean"] == pytest.approx((0.83 + 0.82 + 0.81) / 3)
    assert "(3/5 seeds; 2 collapsed: not in the mean)" in study.families_report(g, recs)
    text = study.markdown_report(g, recs, "t")
    assert "[2 collapsed: not in the mean]" in text
    assert "| fixed | 2 | B | 3 | -2.00 [-2.00, -2.00] **worse**; left out: 2 of 5 collapsed |" in text
    # every seed at chance: the cell says so, like a divergence
    every = [{**r, "metric": 0.1, "reported": 0.1} if r["label"] == "B" else r for r in _records()]
    assert "| B | collapsed 5/5 |" in study.markdown_report(g, every, "t")
    assert study.mark_collapsed(recs, None) == recs  # no chance level (BLEU): nothing collapses


def test_grid_keys_and_flags_are_checked(tmp_path):
    base = 'ranks = [2]\nseeds = [0]\nalgos = ["sync", "pseudo-sync"]\n[train]\nmodel = "mlp"\n[lr.a]\nlr = 0.1\n'
    for extra, msg in (('within_points = -1\n', "within_points = -1"),
                       ('contrasts = ["sync-pseudo-sync"]\n', "spaces around the minus"),
                       ('contrasts = ["sync - local"]\n', "entries of algos")):
        p = tmp_path / "g.toml"
        p.write_text(extra + base)
        with pytest.raises(study.StudyError, match=msg):
            study.load_grid(p)
    p.write_text('within_points = 0.5\ncontrasts = ["pseudo-sync - sync"]\n' + base)
    g = study.load_grid(p)
    assert g.within_points == 0.5 and g.contrasts == [("pseudo-sync", "sync")]


def test_add_records_counts_earlier_seeds_and_prefers_folders(tmp_path):
    old = tmp_path / "old.json"
    recs = _records()
    old.write_text(json.dumps({"runs": recs}))
    spec = study.RunSpec(2, "fixed", "A", 7, {}, {})
    here = [{**recs[5], "metric": 0.5}]  # A seed 0 from a folder here wins over the old record
    out = study_cli._add_records(here, str(old), [spec])
    assert sorted(r["seed"] for r in out) == [0, 1, 2, 3, 4]  # only cell (2, fixed, A), any seed
    assert next(r for r in out if r["seed"] == 0)["metric"] == 0.5
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(study.StudyError, match="not a study's JSON"):
        study_cli._add_records([], str(tmp_path / "bad.json"), [spec])


def test_compare_seeds_report_and_refusals(tmp_path, capsys):
    from minips.cli import main
    out = tmp_path / "cmp"
    assert main(["compare", "--model", "mlp", "--epochs", "1", "--batch-size", "500", "--val-fraction", "0.1",
                 "--algos", "sync,pseudo-sync:adaptive", "--seeds", "0,1", "--within", "0.5", "--quiet",
                 "--no-figures", "--out", str(out)]) == 0
    assert not list(out.glob("*.png")), "compare --no-figures drew figures"
    text = (out / "compare.md").read_text()
    assert "seeds 0, 1" in text and "## over seeds" in text and "## against sync, paired by seed" in text
    assert "## seed 0" in text and "## seed 1" in text
    assert (out / "sync-seed1" / "summary.json").exists()
    runs = json.loads((out / "compare.json").read_text())
    assert sorted((r["label"], r["seed"]) for r in runs) == [("pseudo-sync:adaptive", 0), ("pseudo-sync:adaptive", 1),
                                                             ("sync", 0), ("sync", 1)]
    # the row of pseudo-sync: its differences, recomputed here from the summaries
    d = [next(r["val_accuracy"] for r in runs if r["label"] == "pseudo-sync:adaptive" and r["seed"] == s)
         - next(r["val_accuracy"] for r in runs if r["label"] == "sync" and r["seed"] == s) for s in (0, 1)]
    assert f"| pseudo-sync:adaptive | {100 * sum(d) / 2:+.2f} [" in text
    for argv, msg in ((["--seeds", "0,x"], "comma-separated integers"), (["--seeds", "1,1"], "distinct"),
                      (["--within", "0.5"], "needs --seeds"), (["--seeds", "0,1", "--within", "0"], "> 0")):
        capsys.readouterr()
        assert main(["compare", "--model", "mlp", "--algos", "sync", "--out", str(tmp_path / "x"), *argv]) != 0
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "x").exists()


def test_a_collapse_is_a_failure_not_an_accuracy():
    """Issue 42.1: a run that ends at chance (validation below 0.11 for ten classes) is left out of every
    mean and paired interval and counted like a divergence. Study 1's table printed
    `-54.34 [-155.80, +47.12] **tie**` for a rule that collapsed on 2 of 3 seeds."""
    sync = {0: 0.905, 1: 0.910, 2: 0.900}
    rule = {0: 0.100, 1: 0.1099, 2: 0.880}  # seeds 0 and 1 collapsed (below 0.11), seed 2 trained
    assert [stats.collapsed(v, 0.1) for v in (0.1, 0.1099, 0.11, 0.88)] == [True, True, False, False]
    d = stats.compare_with_baseline(rule, sync, 0.005, chance=0.1)
    assert d["seeds"] == [2] and d["verdict"] == "1 seed"
    assert d["mean"] == pytest.approx(0.880 - 0.900)  # seed 2 alone, by hand
    assert d["left_out"] == {"A": {"collapsed": [0, 1]}, "B": {}}
    assert stats.fmt_diff(d) == "-2.00 (1 seed; left out: 2 of 3 collapsed)"
    # diverged (None) and collapsed runs are counted apart; the mean is over the others and says so
    assert stats.fmt_over_seeds({0: 0.88, 1: None, 2: 0.10, 3: 0.86}, chance=0.1) == \
        f"0.8700 ± {12.7062047 * math.sqrt(0.0002) / math.sqrt(2):.4f} (2 of 4 seeds; 1 collapsed, 1 diverged, " \
        "not in the mean)"
    assert stats.fmt_over_seeds({0: 0.1, 1: 0.1}, chance=0.1) == "no value: 2 of 2 collapsed"


def test_bench_study_counts_collapses_like_divergences():
    """Issue 42.1 in bench study: records that finished ("ok") with val_accuracy at chance are left out
    of the cell's mean, of the paired rows (val and test alike) and of the families table, and counted."""
    sync = {0: 0.905, 1: 0.910, 2: 0.900}
    rule = {0: 0.100, 1: 0.1099, 2: 0.880}
    recs = [{"P": 32, "lr": "scaled", "label": lab, "seed": s, "status": "ok", "metric": v, "reported": v - 0.005}
            for lab, vals in (("sync", sync), ("pseudo-sync", rule)) for s, v in vals.items()]
    aesp = "pseudo-sync:adaptive"  # diverged on seed 0, collapsed on seeds 1 and 2: no value at all
    recs.append({"P": 32, "lr": "scaled", "label": aesp, "seed": 0, "status": "diverged", "metric": None})
    recs += [{"P": 32, "lr": "scaled", "label": aesp, "seed": s, "status": "ok", "metric": 0.1, "reported": 0.1}
             for s in (1, 2)]
    g = study.Grid(ranks=[32], seeds=[0, 1, 2], algos=["sync", "pseudo-sync", aesp], train={"val-fraction": 0.1},
                   lr={"scaled": {"lr": 0.32}}, metric="val_accuracy", report_metric="test_accuracy",
                   within_points=0.5, chance=0.1)
    by = {r["label"]: r for r in study.paired_comparisons(g, recs)}
    assert by["pseudo-sync"]["metric"]["seeds"] == [2]
    assert by["pseudo-sync"]["reported"]["seeds"] == [2]  # the collapsed runs' test values are left out with them
    assert by["pseudo-sync"]["metric"]["left_out"]["A"] == {"collapsed": [0, 1]}
    assert by[aesp]["metric"] is None and by[aesp]["no_value"]["metric"] == "2 of 3 collapsed, 1 of 3 diverged"
    agg = study.aggregate(recs, 0.1)
    cell = agg[("scaled", "pseudo-sync", 32)]
    assert (cell["n"], cell["n_ok"], cell["collapsed"], cell["mean"]) == (3, 1, 2, 0.880)
    text = study.markdown_report(g, recs, "t")
    assert "-54" not in text and "0.3660" not in text  # no mean or difference with the collapses in it
    assert "| scaled | 32 | pseudo-sync | 1 | -2.00 (1 seed; left out: 2 of 3 collapsed) |" in text
    assert "0.8800 (1 seed) [2 collapsed: not in the mean]" in text
    assert "div 1/3, collapsed 2/3" in text and "no value: 2 of 3 collapsed, 1 of 3 diverged" in text
    fam = {c["label"]: c for c in study.family_cells(g, recs)}
    assert fam["pseudo-sync"]["mean"] == pytest.approx(0.875) and fam["pseudo-sync"]["collapsed"] == 2


def test_compare_seeds_says_when_the_test_split_decided_and_leaves_collapses_out():
    from minips.compare import seeds_report
    runs = [{"label": lab, "algo": algo, "seed": s, "test_accuracy": v}
            for lab, algo, vals in (("sync", "sync", (0.86, 0.87, 0.85)),
                                    ("pseudo-sync", "pseudo-sync", (0.855, 0.10, 0.848)))
            for s, v in enumerate(vals)]
    text = seeds_report(runs, within=0.5)
    assert "**Decided on the test split**" in text and "--val-fraction 0.1" in text
    assert "test_accuracy decides: no validation split" in text
    # seed 1 collapsed (0.10): left out of pseudo-sync's mean and of the pair; by hand, seeds 0 and 2:
    # differences -0.5 and -0.2 points, mean -0.35
    assert "0.8515 ± " in text and "(2 of 3 seeds; 1 collapsed, not in the mean)" in text
    assert "| pseudo-sync | -0.35 [" in text and "left out: 1 of 3 collapsed" in text
    with_val = [{**r, "val_accuracy": r["test_accuracy"]} for r in runs]
    assert "Decided on the test split" not in seeds_report(with_val)
