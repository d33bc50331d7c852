"""The families report of ``bench study`` (and the figures it shares with
``compare``), from hand-made run folders: every expected number below is
worked out by hand from the fixtures, not by the code under test."""
from __future__ import annotations

import csv
import json
from argparse import Namespace

import matplotlib
import pytest

matplotlib.use("Agg")

from minips import plots  # noqa: E402
from minips.bench import study  # noqa: E402
from minips.bench.study import grid as study_grid  # noqa: E402
from minips.report import evaluation_curve, time_to_target  # noqa: E402

MiB = 2**20
STEPS_PER_EPOCH = 8

GRID = """
ranks = [4]
seeds = [0, 1]
algos = ["sync", "local-sgd:period=4", "topk-sgd:ratio=0.01"]
metric = "test_accuracy"
target_accuracy = 0.8

[train]
model = "mlp"
data = "fashion-mnist-mini"
epochs = 3

[lr.fixed]
lr = 0.05
"""

# label -> (algo, family, replicated, MiB sent per step, {seed: (accuracies per epoch, wall s per epoch,
# consensus distance at the end)})
RUNS = {
    "sync": ("sync", "gradient averaging", True, 4.0,
             {0: ((0.78, 0.81, 0.83), 10.0, None), 1: ((0.79, 0.80, 0.82), 10.0, None)}),
    "local-sgd:period=4": ("local-sgd", "model averaging", False, 1.0,
                           {0: ((0.80, 0.81, 0.84), 6.0, 0.002), 1: ((0.70, 0.75, 0.79), 6.0, 0.004)}),
    "topk-sgd:ratio=0.01": ("topk-sgd", "compression", True, 0.04,
                            {0: ((0.60, 0.70, 0.75), 5.0, None), 1: ((0.61, 0.72, 0.77), 5.0, None)}),
}


def _write_run(d, label, seed):
    algo, family, replicated, mib, seeds = RUNS[label]
    accs, epoch_s, consensus = seeds[seed]
    steps = STEPS_PER_EPOCH * len(accs)
    # local SGD sends four steps' worth every fourth step; the others the same every step
    per_step = [(4 * mib if t % 4 == 3 else 0.0) if algo == "local-sgd" else mib for t in range(steps)]
    total = sum(per_step) * MiB
    summary = {"label": label, "algo": algo, "algo_spec": label, "family": family, "replicated": replicated,
               "world_size": 4, "seed": seed, "threads_per_rank": 1, "network_emulated": False, "network": "real",
               "test_accuracy": accs[-1], "test_loss": 0.5, "wall_time_s": epoch_s * len(accs),
               "step_time_s": 0.01, "time_breakdown": {"forward": 0.004, "backward": 0.004}, "lr": 0.05,
               "steps": steps, "bytes_sent_per_rank": [int(total)] * 4,
               "bytes_sent_per_step": total / steps,
               "history": [{"epoch": e + 1, "step": STEPS_PER_EPOCH * (e + 1), "test_accuracy": a,
                            "wall_time_s": epoch_s * (e + 1), "partial": 0} for e, a in enumerate(accs)]}
    if consensus is not None:
        summary["consensus_distance"] = consensus
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(summary))
    with open(d / "trace.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "bytes_sent"])
        w.writerows([t, 1.0, int(b * MiB)] for t, b in enumerate(per_step))


@pytest.fixture
def study_dir(tmp_path):
    (tmp_path / "fam.toml").write_text(GRID)
    out = tmp_path / "study"
    for label in RUNS:
        for seed in (0, 1):
            _write_run(out / "runs" / "P4" / "fixed" / study_grid._safe(label) / f"seed{seed}", label, seed)
    return tmp_path / "fam.toml", out


def _report(grid, out, monkeypatch, cores):
    monkeypatch.setattr("minips.kernels.threads.cores_on_node", lambda: cores)
    args = Namespace(grid=str(grid), out=str(out), ranks=None, seeds=None, lr=None, algos=None, title=None,
                     dry_run=False, report_only=True, virtual_ranks=None, figures=True)
    assert study.run(args) == 0
    return (out / "fam.md").read_text(), json.loads((out / "fam.json").read_text())


def _rows(md):
    """The families table's rows: algorithm -> its cells."""
    table = md[md.index("## families"):].splitlines()
    head = [c.strip() for c in table[2].strip("|").split("|")]
    rows = {}
    for line in table[4:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[1]] = dict(zip(head, cells))
    return head, rows


def test_families_table_numbers_worked_by_hand(study_dir, monkeypatch):
    grid, out = study_dir
    md, js = _report(grid, out, monkeypatch, cores=2)
    head, rows = _rows(md)
    sync = rows["sync"]
    assert head == ["family", "algorithm", "P=4 test accuracy", "P=4 MiB/step (vs sync)", "P=4 ms/step",
                    "P=4 s to 0.8", "P=4 consensus"]
    assert sync["P=4 ms/step"] == "10.00"  # step_time_s 0.01 in every fixture
    sync, local, topk = rows["sync"], rows["local-sgd:period=4"], rows["topk-sgd:ratio=0.01"]
    # accuracy: mean of the two seeds' last evaluation, sample std (0.83, 0.82 -> 0.825 ± 0.00707)
    # 0.82, 0.83: sd 0.00707; half-width of the 95 % t interval 12.706 (t, 1 df) * 0.00707 / sqrt(2)
    assert sync["P=4 test accuracy"] == "0.8250 ± 0.0635"
    assert local["P=4 test accuracy"] == "0.8150 ± 0.3177"    # 0.84, 0.79: sd 0.0354, 12.706 * 0.0354 / sqrt(2)
    # bytes per step: 4 MiB; 1 MiB = 1/4 of sync's; 0.04 MiB = 1/100
    assert sync["P=4 MiB/step (vs sync)"] == "4 (1x)"
    assert local["P=4 MiB/step (vs sync)"] == "1 (0.25x)"
    assert topk["P=4 MiB/step (vs sync)"] == "0.04 (0.01x)"
    # time to 0.8: sync reaches 0.81 / 0.80 ("at or above") at epoch 2 of 10 s -> 20 s both seeds;
    # local SGD seed 0 at epoch 1 (0.80 at 6 s), seed 1 never (0.79 at best); top-k never
    assert sync["P=4 s to 0.8"] == "20.0"
    assert local["P=4 s to 0.8"] == "6.0 (1/2 seeds)"
    assert topk["P=4 s to 0.8"] == "not reached"
    # consensus: the mean of 0.002 and 0.004 for local SGD; "-" for methods whose ranks stay identical
    assert local["P=4 consensus"] == "0.003"
    assert sync["P=4 consensus"] == "-" and topk["P=4 consensus"] == "-"
    assert [rows[a]["family"] for a in RUNS] == ["gradient averaging", "model averaging", "compression"]
    # 4 ranks on 2 cores: the caption says the times are not comparable
    assert "Times at P = 4 are not comparable" in md and "oversubscribed" in md
    cells = {c["label"]: c for c in js["cells"]}
    assert cells["local-sgd:period=4"]["bytes_ratio"] == pytest.approx(0.25)
    assert cells["local-sgd:period=4"]["time_to_target_s"] == pytest.approx(6.0)
    assert cells["local-sgd:period=4"]["reached"] == 1 and cells["topk-sgd:ratio=0.01"]["reached"] == 0
    assert cells["topk-sgd:ratio=0.01"]["time_to_target_s"] is None
    assert cells["sync"]["consensus_distance"] is None
    assert cells["local-sgd:period=4"]["consensus_distance"] == pytest.approx(0.003)
    # every run's record carries its own numbers too
    run = next(r for r in js["runs"] if r["label"] == "local-sgd:period=4" and r["seed"] == 0)
    assert run["time_to_target"] == 6.0 and run["bytes_sent_per_step"] == pytest.approx(MiB)


def test_no_oversubscription_note_with_enough_cores(study_dir, monkeypatch):
    grid, out = study_dir
    md, _ = _report(grid, out, monkeypatch, cores=8)
    assert "not comparable" not in md


def test_without_a_target_the_report_says_how_to_get_the_seconds_to_it(study_dir, monkeypatch):
    grid, out = study_dir
    grid.write_text(GRID.replace("target_accuracy = 0.8\n", ""))
    md, _ = _report(grid, out, monkeypatch, cores=8)
    head, _ = _rows(md)
    assert not any(h.startswith("P=4 s to") for h in head)
    assert "the grid has no target_accuracy (add e.g. target_accuracy = 0.85 and rerun with --report-only)" in md


def test_a_cell_without_the_baseline_has_no_ratio(study_dir, monkeypatch):
    grid, out = study_dir
    import shutil
    shutil.rmtree(out / "runs" / "P4" / "fixed" / "sync")
    md, js = _report(grid, out, monkeypatch, cores=8)
    head, rows = _rows(md)
    assert rows["local-sgd:period=4"]["P=4 MiB/step (vs sync)"] == "1"  # no sync run: no bracket
    assert all(c["bytes_ratio"] is None for c in js["cells"])


def test_evaluation_curve_and_time_to_target_by_hand(tmp_path):
    d = tmp_path / "r"
    _write_run(d, "local-sgd:period=4", 0)
    from minips.rundir import load_run
    run = load_run(d)
    curve = evaluation_curve(run["summary"], run["trace"])
    # 4 MiB at steps 3 and 7 of each 8-step epoch: 8, 16, 24 MiB by the ends of epochs 1-3
    assert [p["mib_sent"] for p in curve] == [8.0, 16.0, 24.0]
    assert [p["wall_time_s"] for p in curve] == [6.0, 12.0, 18.0]
    assert [p["test_accuracy"] for p in curve] == [0.80, 0.81, 0.84]
    # rank 0 sent half of the mean over ranks: its running sum is scaled to the mean
    s = dict(run["summary"], bytes_sent_per_rank=[24 * MiB, 72 * MiB, 48 * MiB, 48 * MiB])
    assert [p["mib_sent"] for p in evaluation_curve(s, run["trace"])] == [16.0, 32.0, 48.0]
    # without a trace: steps x the mean bytes per step (1 MiB)
    assert [p["mib_sent"] for p in evaluation_curve(run["summary"], [])] == [8.0, 16.0, 24.0]
    assert time_to_target(run["summary"], 0.81) == 12.0 and time_to_target(run["summary"], 0.85) is None


def test_study_writes_the_three_figures_and_they_read_well(study_dir, monkeypatch, figures):
    grid, out = study_dir
    _report(grid, out, monkeypatch, cores=2)
    for name in ("fam-fixed-time.png", "fam-fixed-bytes.png", "fam-fixed-traffic.png"):
        assert (out / name).stat().st_size > 0
        assert plots.layout_problems(figures[name]) == [], name
    scatter = figures["fam-fixed-traffic.png"].axes[0]
    assert scatter.get_xscale() == "log"
    assert sorted(t.get_text() for t in scatter.texts if t.get_text()) == sorted(RUNS)
    # the curves: one line per method, the bytes one at the hand-computed cumulative MiB (mean over seeds)
    lines = {ln.get_label(): ln for ln in figures["fam-fixed-bytes.png"].axes[0].lines}
    assert set(lines) == set(RUNS)
    assert list(lines["local-sgd:period=4"].get_xdata()) == [8.0, 16.0, 24.0]
    assert list(lines["local-sgd:period=4"].get_ydata()) == pytest.approx([0.75, 0.78, 0.815])
    assert "not comparable" in figures["fam-fixed-time.png"].axes[0].get_title()


def test_scatter_labels_thirty_crowded_methods_legibly(tmp_path, figures):
    from minips.distributed.algorithms import ALGORITHMS
    names = list(ALGORITHMS)[:30]
    assert len(names) >= 25
    # most methods in two tight clusters (as the mini set gives), a few apart
    methods = [{"name": f"{n}:opt={i}", "algo": n, "curve": [], "final_ci": 0.003,
                "final": 0.83 + 0.01 * ((i * 7) % 5) / 5 if i % 6 else 0.70 + 0.02 * i / 6,
                "mib_per_step": (0.3 if i % 2 else 1.2) * (1 + 0.05 * (i % 3)) if i % 6 else 0.02 * (i + 1)}
               for i, n in enumerate(names)]
    assert plots.plot_accuracy_vs_traffic([("P=4", methods), ("P=8", methods)], tmp_path / "s.png")
    fig = figures["s.png"]
    assert plots.layout_problems(fig) == []
    for ax in fig.axes:
        assert sorted(t.get_text() for t in ax.texts if t.get_text()) == sorted(m["name"] for m in methods)


def test_compare_figures_include_bytes_and_the_labelled_scatter(tmp_path, figures):
    for label in RUNS:
        _write_run(tmp_path / "cmp" / study_grid._safe(label), label, 0)
    files = {f.name for f in plots.plot_runs([tmp_path / "cmp"], tmp_path / "figs")}
    assert {"accuracy.png", "accuracy-bytes.png", "accuracy-traffic.png"} <= files
    for name in ("accuracy.png", "accuracy-bytes.png", "accuracy-traffic.png"):
        assert plots.layout_problems(figures[name]) == [], name
    lines = {ln.get_label(): ln for ln in figures["accuracy-bytes.png"].axes[0].lines}
    assert list(lines["local-sgd:period=4"].get_xdata()) == [8.0, 16.0, 24.0]
    assert list(lines["sync"].get_xdata()) == [32.0, 64.0, 96.0]  # 4 MiB x 8 steps per epoch


def test_rank0_accuracy_column_when_the_runs_evaluated_rank0(study_dir, monkeypatch):
    grid, out = study_dir
    for seed, acc in ((0, 0.82), (1, 0.78)):  # local SGD with eval-rank0: rank 0's own model
        p = out / "runs" / "P4" / "fixed" / study_grid._safe("local-sgd:period=4") / f"seed{seed}" / "summary.json"
        s = json.loads(p.read_text())
        s["rank0_test_accuracy"] = acc
        p.write_text(json.dumps(s))
    md, _ = _report(grid, out, monkeypatch, cores=8)
    head, rows = _rows(md)
    assert "P=4 rank 0" in head
    assert rows["local-sgd:period=4"]["P=4 rank 0"] == "0.8000"   # (0.82 + 0.78) / 2
    assert rows["sync"]["P=4 rank 0"] == "-"
    # still the averaged model's: 0.84, 0.79 (sd 0.0354), 95 % t half-width 12.706 * 0.0354 / sqrt(2)
    assert rows["local-sgd:period=4"]["P=4 test accuracy"] == "0.8150 ± 0.3177"


def test_rows_are_grouped_by_family_in_the_order_the_grid_names_them(tmp_path, monkeypatch):
    monkeypatch.setattr("minips.kernels.threads.cores_on_node", lambda: 64)
    (tmp_path / "g.toml").write_text(GRID.replace('algos = ["sync", "local-sgd:period=4", "topk-sgd:ratio=0.01"]',
                                                  'algos = ["sync", "topk-sgd:ratio=0.01", "overlap-sync"]'))
    g = study.load_grid(tmp_path / "g.toml")
    fam = {"sync": "gradient averaging", "overlap-sync": "gradient averaging", "topk-sgd:ratio=0.01": "compression"}
    recs = [{"P": 4, "lr": "fixed", "label": a, "seed": 0, "status": "ok", "metric": 0.8, "algo": a.split(":")[0],
             "family": f, "bytes_sent_per_step": MiB, "time_to_target": None} for a, f in fam.items()]
    _, rows = _rows(study.families_report(g, recs))
    assert list(rows) == ["sync", "overlap-sync", "topk-sgd:ratio=0.01"]
    assert rows["sync"]["P=4 test accuracy"] == "0.8000 (1 seed)"  # no made-up spread from one seed
    assert "EMULATED" not in study.families_report(g, recs)
    g.train["network"] = "1gbe"   # a timing grid on an emulated network says so under the table
    assert "ms/step: milliseconds per training step" in study.families_report(g, recs)
    assert "on an EMULATED 1gbe network" in study.families_report(g, recs)


def test_methods_of_one_colour_get_different_line_styles(tmp_path, figures):
    curve = [{"wall_time_s": 1.0, "mib_sent": 1.0, "test_accuracy": 0.8},
             {"wall_time_s": 2.0, "mib_sent": 2.0, "test_accuracy": 0.82}]
    methods = [{"name": n, "algo": n.split(":")[0], "curve": curve, "final": 0.82, "mib_per_step": 0.1}
               for n in ("pseudo-sync:predictor=last", "sync", "pseudo-sync:predictor=adaptive")]
    assert plots.plot_method_curves([("P=4", methods)], tmp_path / "c.png", "wall_time_s")
    lines = {ln.get_label(): ln for ln in figures["c.png"].axes[0].lines}
    a, b = lines["pseudo-sync:predictor=last"], lines["pseudo-sync:predictor=adaptive"]
    assert a.get_color() == b.get_color() == plots.algo_color("pseudo-sync")
    assert a.get_linestyle() != b.get_linestyle()
    assert plots.layout_problems(figures["c.png"]) == []
    with pytest.raises(ValueError, match="x must be one of"):
        plots.plot_method_curves([("P=4", methods)], tmp_path / "d.png", "seconds")


def test_no_accuracy_against_bytes_figure_when_no_run_sent_anything(tmp_path, figures):
    """A 1-process compare sends no bytes: accuracy against MiB sent would be
    one point at 0 on a degenerate axis, so that figure is not drawn; a
    method that sent bytes is drawn beside one that did not."""
    nothing = [{"wall_time_s": 1.0, "mib_sent": 0.0, "test_accuracy": 0.83}]
    some = [{"wall_time_s": 1.0, "mib_sent": 2.0, "test_accuracy": 0.83}]
    one = [{"name": "sync", "algo": "sync", "curve": nothing, "final": 0.83, "mib_per_step": 0.0}]
    assert not plots.plot_method_curves([("P=1", one)], tmp_path / "b.png", "mib_sent")
    assert not (tmp_path / "b.png").exists() and "b.png" not in figures
    assert plots.plot_method_curves([("P=1", one)], tmp_path / "t.png", "wall_time_s")  # time: still drawn
    two = one + [{"name": "local-sgd", "algo": "local-sgd", "curve": some, "final": 0.83, "mib_per_step": 0.5}]
    assert plots.plot_method_curves([("P=2", two)], tmp_path / "c.png", "mib_sent")
    assert [ln.get_label() for ln in figures["c.png"].axes[0].lines] == ["local-sgd"]
