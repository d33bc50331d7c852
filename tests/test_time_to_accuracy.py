"""bench study's time to accuracy per network (issue 52, item 3), from synthetic
run records: the target (the baseline's final validation accuracy minus 0.5
points), seeds that never reach it counted, an interval only when every seed
did; the validation accuracy at the budget (the baseline's whole run); the grid
keys and their errors; the figure. The expected seconds are computed here:
steps x (compute + ring allreduce 2 (P-1) alpha + 2 (P-1)/P n beta)."""
import math

import pytest
from scipy import stats as sps

from minips.bench.study import StudyError, load_grid, plot_time_to_accuracy, time_cells, time_report

P, GRAD = 4, 1e6
NETS = {"1gbe": (50e-6, 8 / 1e9), "ib-edr": (1e-6, 8 / (4 * 25.78125 * 64 / 66 * 1e9))}
COMPUTE = {"sync": 0.030, "overlap-sync:bucket-mb=0": 0.015}  # seconds per step (forward + backward)

GRID = """
ranks = [4]
seeds = [0, 1]
algos = ["sync", "overlap-sync:bucket-mb=0"]
metric = "{metric}"
virtual = true
{extra}
[train]
model = "mlp"
val-fraction = 0.1
eval-every = 10
[lr.fixed]
lr = 0.05
"""

# (steps of the evaluations, values per seed); the baseline's finals 0.80 and 0.82: target 0.81 - 0.005
CURVES = {"sync": ([10, 20, 30], [[0.70, 0.81, 0.80], [0.72, 0.81, 0.82]]),
          "overlap-sync:bucket-mb=0": ([10, 20, 30, 40, 50, 60], [[0.75, 0.806, 0.81, 0.83, 0.84, 0.85],
                                                                  [0.74, 0.79, 0.795, 0.80, 0.801, 0.802]])}


def step_time(label, net):
    alpha, beta = NETS[net]
    return COMPUTE[label] + 2 * (P - 1) * alpha + 2 * (P - 1) / P * GRAD * beta


def records():
    out = []
    for label, (steps, per_seed) in CURVES.items():
        name, _, opt = label.partition(":")
        for seed, values in enumerate(per_seed):
            proj = {"algo": name, "algo_options": {"bucket_mb": 0.0} if opt else {}, "algo_spec": label,
                    "world_size": P, "projected_profile_s": {"forward": COMPUTE[label] / 3,
                                                             "backward": 2 * COMPUTE[label] / 3, "update": 0.0},
                    "projected_grad_bytes": GRAD}
            out.append({"P": P, "lr": "fixed", "label": label, "seed": seed, "status": "ok", "metric": values[-1],
                        "steps": steps[-1], "virtual": True, "projection": proj,
                        "val_curve": [{"step": s, "value": v} for s, v in zip(steps, values)]})
    return out


def grid(tmp_path, metric="val_accuracy", extra='networks = ["1gbe", "ib-edr"]\nphis = [0.0, 1.0]'):
    p = tmp_path / "g.toml"
    p.write_text(GRID.format(metric=metric, extra=extra))
    return load_grid(p)


def half_width(values):
    n = len(values)
    sd = math.sqrt(sum((v - sum(values) / n) ** 2 for v in values) / (n - 1))
    return sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def test_time_to_target_and_accuracy_at_the_budget_per_network(tmp_path):
    g = grid(tmp_path)
    assert g.target_below_baseline == 0.5 and g.phis == [0.0, 1.0]
    cells = time_cells(g, records())
    assert len(cells) == 2 * 2 * 2  # networks x phis x entries
    for net in NETS:
        tb, tf = step_time("sync", net), step_time("overlap-sync:bucket-mb=0", net)
        for phi in (0.0, 1.0):  # one bucket: nothing overlaps, phi changes nothing
            base, fast = (next(c for c in cells if (c["network"], c["phi"], c["label"]) == (net, phi, lab))
                          for lab in CURVES)
            assert base["target"] == pytest.approx(0.81 - 0.005)
            assert base["budget_s"] == pytest.approx(30 * tb)
            # the baseline: both seeds reach 0.805 at step 20
            assert base["reached"] == 2 and base["time_to_target"]["mean"] == pytest.approx(20 * tb)
            assert base["time_to_target"]["ci"] == pytest.approx(0.0)
            # the faster method: seed 0 at step 20, seed 1 never: counted, no interval
            assert fast["reached"] == 1 and fast["n"] == 2
            assert fast["time_to_target"]["mean"] == pytest.approx(20 * tf) and fast["time_to_target"]["ci"] is None
            # at the budget: the last evaluation at or before 30 x tb
            last = max(s for s in CURVES["overlap-sync:bucket-mb=0"][0] if s * tf <= 30 * tb)
            i = CURVES["overlap-sync:bucket-mb=0"][0].index(last)
            want = [v[i] for v in CURVES["overlap-sync:bucket-mb=0"][1]]
            assert fast["at_budget_values"] == want
            assert fast["at_budget"]["mean"] == pytest.approx(sum(want) / 2)
            assert fast["at_budget"]["ci"] == pytest.approx(half_width(want))
            assert base["at_budget_values"] == [0.80, 0.82]  # the baseline's own last evaluations
    # on 1 GbE the budget (30 x 0.0423 s) ends between the faster method's steps 40 and 50
    assert max(s for s in CURVES["overlap-sync:bucket-mb=0"][0]
               if s * step_time("overlap-sync:bucket-mb=0", "1gbe") <= 30 * step_time("sync", "1gbe")) == 40
    md = time_report(g, cells)
    assert "## lr setting `fixed`, P=4, network 1gbe" in md and "## lr setting `fixed`, P=4, network ib-edr" in md
    assert "(1/2 reached; no interval)" in md and "(2/2 reached)" in md
    assert f"{0.815:.4f} ± {half_width([0.83, 0.80]):.4f} (2 seeds)" in md


def test_a_failed_seed_is_not_reached_and_the_figure_is_drawn(tmp_path):
    g = grid(tmp_path)
    recs = records()
    recs[-1] = {**recs[-1], "status": "diverged", "val_curve": None, "projection": None}
    cells = time_cells(g, recs)
    c = next(c for c in cells if c["label"] == "overlap-sync:bucket-mb=0" and c["network"] == "1gbe")
    assert (c["n"], c["reached"], c["failed"], c["at_budget_n"]) == (2, 1, 1, 1)
    assert "1 failed" in time_report(g, cells)
    paths = plot_time_to_accuracy(g, records(), time_cells(g, records()), tmp_path, "g")
    assert [p.name for p in paths] == ["g-fixed-tta-1gbe.png", "g-fixed-tta-ib-edr.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_without_networks_there_is_no_time_axis(tmp_path):
    g = grid(tmp_path, extra="")
    assert g.networks == [] and g.phis == [0.0] and time_cells(g, records()) == []
    assert time_report(g, []) == ""


@pytest.mark.parametrize("metric,extra,message", [
    ("val_accuracy", 'networks = ["1gbe", "2gbe"]', "unknown network '2gbe'; use one of 1gbe"),
    ("val_accuracy", 'networks = ["1gbe"]\nphis = [1.5]', "phis = [1.5]: give a non-empty list"),
    ("val_accuracy", 'networks = "1gbe"', "networks = '1gbe': give a list of network presets"),
    ("val_accuracy", "target_below_baseline = -1", "target_below_baseline = -1: give the points"),
    ("test_accuracy", 'networks = ["1gbe"]', 'set metric = "val_accuracy"'),
])
def test_bad_time_axis_keys_are_refused_in_one_line(tmp_path, metric, extra, message):
    with pytest.raises(StudyError) as e:
        grid(tmp_path, metric, extra)
    assert message in str(e.value) and "\n" not in str(e.value)


def _map_script():
    from .conftest import load_script
    return load_script("time_to_accuracy_map")


def _tcell(label, by_seed, n=3, P=16, network="1gbe"):
    times = list(by_seed.values())
    mean = sum(times) / len(times) if times else None
    return {"lr": "fixed", "network": network, "phi": 0.0, "P": P, "label": label, "n": n, "reached": len(times),
            "time_to_target": None if mean is None else {"mean": mean}, "time_to_target_by_seed": by_seed}


def test_the_map_names_the_first_method_to_the_target_paired_by_seed_with_sync():
    """scripts/time_to_accuracy_map.py's rule (issue 52, item 6), on hand-made cells: a method
    counts only if every seed reached the target; the fastest such method is compared with sync
    seed by seed (95 % t interval of the differences); sync fastest, or nothing else on every seed,
    is "none"."""
    m = _map_script()
    base = {"0": 10.0, "1": 11.0, "2": 12.0}
    # A is faster on every seed (differences -5, -5, -5: no spread, the interval is the point);
    # B is faster still on the seeds it reached, but one seed never did: B is not a candidate
    rows = m.winners([_tcell("sync", base), _tcell("A", {"0": 5.0, "1": 6.0, "2": 7.0}),
                      _tcell("B", {"0": 1.0, "1": 1.0})], "sync")
    (r,) = rows
    assert r["winner"] == "A" and r["verdict"] == "faster" and r["speedup"] == 11.0 / 6.0
    assert r["diff"]["mean"] == -5.0 and r["reached"]["B"] == "2/3"
    # differences -1, +1, -1.5: the interval holds 0, a tie however A's mean compares
    (r,) = m.winners([_tcell("sync", base), _tcell("A", {"0": 9.0, "1": 12.0, "2": 10.5})], "sync")
    assert r["winner"] == "A" and r["verdict"] == "no difference shown"
    # sync fastest: none
    (r,) = m.winners([_tcell("sync", base), _tcell("A", {"0": 20.0, "1": 21.0, "2": 22.0})], "sync")
    assert r["winner"] is None and r["verdict"] == "none" and r["baseline_s"] == 11.0
    # nothing but sync reached it on every seed: none
    (r,) = m.winners([_tcell("sync", base), _tcell("A", {"0": 1.0})], "sync")
    assert r["winner"] is None
    # one seed: reported, not judged
    (r,) = m.winners([_tcell("sync", {"0": 10.0}, n=1), _tcell("A", {"0": 4.0}, n=1)], "sync")
    assert r["winner"] == "A" and r["verdict"] == "one seed" and r["diff"]["ci"] is None
    assert "| fixed | 1gbe | 0 | 16 | A | 4 | 10 | 2.50x | -6 | one seed |" in m.table([r], "sync")
    # a partial study: A ran seeds 0-1 only, slower than sync on both; sync's slow seed 2 puts sync's
    # mean above A's, but A is compared with sync on the seeds both ran: none
    (r,) = m.winners([_tcell("sync", {"0": 10.0, "1": 11.0, "2": 30.0}), _tcell("A", {"0": 10.5, "1": 11.5}, n=2)],
                     "sync")
    assert r["winner"] is None and r["verdict"] == "none"
    # and the speed-up is over those seeds too: (10 + 11) / (5 + 6)
    (r,) = m.winners([_tcell("sync", {"0": 10.0, "1": 11.0, "2": 30.0}), _tcell("A", {"0": 5.0, "1": 6.0}, n=2)],
                     "sync")
    assert r["winner"] == "A" and r["speedup"] == 21.0 / 11.0 and r["baseline_s"] == 10.5
    # sync itself missed the target on a seed: the fastest method is named, not paired
    (r,) = m.winners([_tcell("sync", {"0": 10.0, "1": 11.0}), _tcell("A", {"0": 5.0, "1": 6.0, "2": 7.0})], "sync")
    assert r["winner"] == "A" and r["verdict"] == "sync 2/3 reached" and r["diff"] is None and r["speedup"] is None


def test_the_maps_contrasts_pair_two_methods_and_a_gap_under_one_evaluation_is_no_win():
    """The map's contrast tables (grid key contrasts, "A - B"): per cell both methods' times to the
    target and their difference paired by seed; a method that missed the target on a seed is named,
    not paired; and a difference smaller than one evaluation interval (eval_every steps x the larger
    step time) is "within one evaluation", in the contrasts and in the map's own verdict alike."""
    m = _map_script()

    def cell(label, by_seed, step_time_s=0.01):
        return {**_tcell(label, by_seed), "step_time_s": step_time_s}
    a, b = cell("A", {"0": 5.0, "1": 6.0, "2": 7.0}), cell("B", {"0": 10.0, "1": 11.0, "2": 12.0})
    (r,) = m.contrast_rows([a, b], "A", "B", eval_every=13)
    assert r["verdict"] == "A first" and r["diff"]["mean"] == -5.0 and (r["a_s"], r["b_s"]) == (6.0, 11.0)
    assert "| fixed | 1gbe | 0 | 16 | 6 (3/3) | 11 (3/3) | -5 [-5, -5] | A first |" in m.contrast_table([r])
    (r,) = m.contrast_rows([a, b], "B", "A", eval_every=13)
    assert r["verdict"] == "A first" and r["diff"]["mean"] == 5.0
    # the same 5 s, but an evaluation every 13 steps of 0.5 s (6.5 s): the curves cannot resolve it
    (r,) = m.contrast_rows([a, cell("B", b["time_to_target_by_seed"], 0.5)], "A", "B", eval_every=13)
    assert r["verdict"] == "within one evaluation"
    (r,) = m.contrast_rows([cell("C", {"0": 9.0, "1": 12.0, "2": 10.5}), b], "C", "B", eval_every=13)
    assert r["verdict"] == "no difference shown"
    (r,) = m.contrast_rows([cell("D", {"0": 1.0}), b], "D", "B", eval_every=13)
    assert r["verdict"] == "D 1/3 reached" and r["diff"] is None and r["a_s"] is None and r["a_reached"] == "1/3"
    assert m.contrast_rows([a], "A", "B") == []  # B has no cell there: no row
    (r,) = m.winners([cell("sync", b["time_to_target_by_seed"], 0.5), cell("A", a["time_to_target_by_seed"], 0.5)],
                     "sync", eval_every=13)
    assert r["winner"] == "A" and r["verdict"] == "within one evaluation"
    (r,) = m.winners([cell("sync", b["time_to_target_by_seed"]), a], "sync", eval_every=13)
    assert r["verdict"] == "faster"


def test_a_seed_timed_over_a_few_steps_does_not_set_its_cells_step_time():
    """A run resumed near its end measured its compute over its last process's few steps (the first
    loading kernels): below MIN_PROFILE_STEPS it is left out of the cell's mean step time, which the
    other seeds then set alone; when every seed is short, all count."""
    from minips.bench.study.timeaxis import MIN_PROFILE_STEPS, seed_curves
    recs = [r for r in records() if r["label"] == "sync"]
    slow = {**recs[1], "profile_steps": 3, "projection": {
        **recs[1]["projection"], "projected_profile_s": {"forward": 1.0, "backward": 2.0, "update": 0.0}}}
    runs = seed_curves([{**recs[0], "profile_steps": 200}, slow], "fixed", "sync", P, "1gbe", 0.0)
    assert [r["short_profile"] for r in runs] == [False, True]
    assert all(r["step_time_s"] == pytest.approx(step_time("sync", "1gbe")) for r in runs)  # seed 0's alone
    both_short = seed_curves([{**recs[0], "profile_steps": MIN_PROFILE_STEPS - 1}, slow], "fixed", "sync", P,
                             "1gbe", 0.0)
    assert both_short[0]["step_time_s"] == pytest.approx((step_time("sync", "1gbe") + 3.0 + step_time("sync", "1gbe")
                                                          - COMPUTE["sync"]) / 2)
