"""Every figure of ``plot`` (and the topology drawing) checked as a reader
would: one legend entry per run, runs told apart by what differs between
them, emulated runs marked per run, titles on every panel, integer epoch
ticks, one colour per algorithm in every figure, identical curves drawn with
different line styles and markers, the legend beside (not over) the bars,
the "other" phase drawn, and no text overlapping other text or running off
the figure (matplotlib's own text bounding boxes: plots.layout_problems)."""
from __future__ import annotations

import csv
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from minips import plots  # noqa: E402
from minips.timing import PHASES  # noqa: E402


def _run(d, algo, label, *, emulated=False, P=2, acc=(0.70, 0.80, 0.85), predictor=False, drift=False):
    d.mkdir(parents=True)
    bd = {p: 0.002 for p in PHASES}
    summary = {"label": label, "algo": algo, "algo_spec": label, "network_emulated": emulated,
               "network": "1 GbE (alpha=50 us, bandwidth=1 Gb/s)" if emulated else "real", "world_size": P,
               "model": "convnet", "data": "fashion-mnist-mini", "lr": 0.05, "batch_size_per_rank": 32, "seed": 0,
               "partition": {"spec": "iid"}, "epochs_planned": 3, "step_time_s": 0.015, "time_breakdown": bd,
               "history": [{"epoch": e + 1, "wall_time_s": 2.0 * (e + 1), "test_accuracy": a}
                           for e, a in enumerate(acc)],
               "test_accuracy": acc[-1], "bytes_sent_per_rank": [2**20 * (10 if drift else 50)] * P}
    if drift:
        summary["consensus_distance"] = 0.01
    (d / "summary.json").write_text(json.dumps(summary))
    rows = []
    for t in range(60):
        row = {"step": t, "loss": 2.0 / (1 + 0.05 * t)}
        if predictor:
            row.update({"lambda": 0.5, "cos_forecast": 0.3})
        if drift:
            row["consensus_distance"] = 0.01 * (1 + t % 5)
        rows.append(row)
    with open(d / "trace.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        w.writeheader()
        w.writerows(rows)


def _legend_texts(fig):
    out = []
    for lg in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]:
        out.append([t.get_text() for t in lg.get_texts()])
    return out


def test_runs_of_one_algorithm_are_told_apart(tmp_path, figures):
    # three runs of sync (two alike but for the folder, one on 4 ranks) and an emulated pseudo-sync
    _run(tmp_path / "a", "sync", "sync")
    _run(tmp_path / "b", "sync", "sync", acc=(0.70, 0.80, 0.85))  # the same curve as a
    _run(tmp_path / "c", "sync", "sync", P=4)
    _run(tmp_path / "d", "pseudo-sync", "pseudo-sync:adaptive", emulated=True, predictor=True)
    _run(tmp_path / "e", "local-sgd", "local-sgd:period=4", drift=True)
    files = plots.plot_runs([tmp_path / n for n in "abcde"], tmp_path / "figs")
    assert {f.name for f in files} == {"accuracy.png", "breakdown.png", "trace.png", "consensus.png"}
    acc = figures["accuracy.png"]
    (names,) = _legend_texts(acc)
    assert len(set(names)) == len(names) == 5
    assert names[0] != names[1] and "[a]" in names[0] and "[b]" in names[1]  # alike but for the folder
    assert "P=4" in names[2] and "P=2" in names[0]
    assert "emulated 1 GbE" in names[3] and not any("emulated" in n for n in names[:3])
    assert not any("EMULATED" in (ax.get_title() or "") for f in figures.values() for ax in f.axes)
    # identical curves (a, b) are both visible: different line style or marker
    la, lb = acc.axes[0].lines[:2]
    assert (la.get_linestyle(), la.get_marker()) != (lb.get_linestyle(), lb.get_marker())
    # epochs are whole numbers
    assert all(float(t).is_integer() for t in acc.axes[0].get_xticks())
    # one colour per algorithm, in every figure
    sync_c = {matplotlib.colors.to_hex(line.get_color()) for line in acc.axes[0].lines[:3]}
    assert sync_c == {plots.algo_color("sync")}
    tr = figures["trace.png"]
    for line in tr.axes[0].lines:
        algo = "pseudo-sync" if "pseudo-sync" in line.get_label() else (
            "local-sgd" if "local-sgd" in line.get_label() else "sync")
        assert matplotlib.colors.to_hex(line.get_color()) == plots.algo_color(algo)
    assert plots.algo_color("sync") != plots.algo_color("overlap-sync") != plots.algo_color("pseudo-sync")
    # every panel that shows something has a title; every figure a legend without repeats
    for name, fig in figures.items():
        for ax in fig.axes:
            if ax.axison:
                assert ax.get_title().strip(), (name, ax)
        assert _legend_texts(fig), name
        for entries in _legend_texts(fig):
            assert len(entries) == len(set(entries)), (name, entries)
        assert plots.layout_problems(fig) == [], name


def test_breakdown_draws_other_and_keeps_the_legend_off_the_bars(tmp_path, figures):
    for n, algo in (("s", "sync"), ("o", "overlap-sync"), ("p", "pseudo-sync")):
        _run(tmp_path / n, algo, algo)
    plots.plot_runs([tmp_path / n for n in "sop"], tmp_path / "figs")
    fig = figures["breakdown.png"]
    ax = fig.axes[0]
    (entries,) = _legend_texts(fig)
    assert "other (data, logging)" in entries
    # the other segment: step 15 ms - 6 phases x 2 ms = 3 ms on top of each bar
    tops = sorted({round(p.get_x() + p.get_width(), 6) for p in ax.patches})
    assert tops[-1] == pytest.approx(15.0)
    assert plots.layout_problems(fig) == []
    # the tick labels are the runs' labels
    assert [t.get_text() for t in ax.get_yticklabels()] == ["sync", "overlap-sync", "pseudo-sync"]


def test_one_epoch_runs_get_integer_epoch_ticks(tmp_path, figures):
    """The README's headline command trains 1 epoch: the epoch axis then spans
    less than one unit, and must still show whole epochs only."""
    _run(tmp_path / "s", "sync", "sync", acc=(0.82,))
    _run(tmp_path / "p", "pseudo-sync", "pseudo-sync:adaptive", acc=(0.79,), predictor=True)
    plots.plot_runs([tmp_path / "s", tmp_path / "p"], tmp_path / "figs")
    ax = figures["accuracy.png"].axes[0]
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_labels_can_be_given(tmp_path, figures):
    _run(tmp_path / "a", "sync", "sync")
    _run(tmp_path / "b", "sync", "sync")
    plots.plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "figs", labels=["before", "after"])
    assert _legend_texts(figures["accuracy.png"]) == [["before", "after"]]
    with pytest.raises(ValueError, match="--labels gives 1 label"):
        plots.plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "figs", labels=["x"])


def test_layout_problems_sees_what_a_reader_sees():
    """The checker itself: overlapping texts, text off the figure, a legend over
    bars, a repeated legend entry and a title over another panel's image are found."""
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1], [1, 1], label="x")
    ax.bar([0, 1], [0.5, 0.5], label="x")
    ax.legend(loc="center")
    ax.text(0.5, 0.5, "hello there", transform=ax.transAxes)
    ax.text(0.52, 0.52, "overlapping", transform=ax.transAxes)
    ax.text(1.4, 0.5, "far off to the right of it all", transform=ax.transAxes)
    found = " | ".join(plots.layout_problems(fig))
    assert "'hello there' overlaps" in found and "runs off the figure" in found
    assert "covers its bars" in found and "legend names 'x' more than once" in found
    fig, axes = plt.subplots(2, 1, figsize=(2, 2))
    for a in axes:
        a.imshow(np.zeros((28, 28)))
        a.axis("off")
    axes[1].set_title("a long\ntwo-line\ntitle", fontsize=12)
    assert any("lies over another panel" in p for p in plots.layout_problems(fig))
    plt.close("all")


def test_topology_figure(tmp_path, monkeypatch):
    from minips.distributed.topology import make_topology
    got = []
    monkeypatch.setattr(plots.style, "save", lambda fig, path: got.append(fig))
    plots.plot_topology(make_topology("ring", 8), tmp_path / "t.png")
    assert got[0].axes[0].get_title() and plots.layout_problems(got[0]) == []


def test_consensus_figure_only_when_ranks_differ_and_with_the_end_of_run_value(tmp_path, figures):
    """consensus.png is not written when every run kept its ranks identical (it used to be half a blank
    figure beside a copy of accuracy-traffic.png), and it shows compare.md's end-of-run value, at the
    last step, next to the values logged during training."""
    _run(tmp_path / "s", "sync", "sync")
    files = plots.plot_runs([tmp_path / "s"], tmp_path / "same")
    assert "consensus.png" not in {f.name for f in files} and "traffic.png" not in {f.name for f in files}
    _run(tmp_path / "l", "local-sgd", "local-sgd:period=4", drift=True)   # trace: 0.01 x (1 + t % 5); end 0.01
    summary = json.loads((tmp_path / "l" / "summary.json").read_text())
    summary.update(steps=60, consensus_distance=2e-5)
    (tmp_path / "l" / "summary.json").write_text(json.dumps(summary))
    plots.plot_runs([tmp_path / "s", tmp_path / "l"], tmp_path / "figs")
    ax = figures["consensus.png"].axes[0]
    run_line = next(li for li in ax.lines if li.get_label().startswith("local-sgd"))
    assert list(run_line.get_xdata())[-1] == 59 and list(run_line.get_ydata())[-1] == pytest.approx(2e-5)
    star = [li for li in ax.lines if li.get_marker() == "*"]
    assert len(star) == 1 and list(star[0].get_xdata()) == [59]
    assert "end of training" in ax.get_title() and plots.layout_problems(figures["consensus.png"]) == []
    # a short run (fewer steps than --consensus-every) that ends on an average: only a 0, nothing to draw
    _run(tmp_path / "short", "local-sgd", "local-sgd:period=4")
    summary = json.loads((tmp_path / "short" / "summary.json").read_text())
    summary.update(steps=4, consensus_distance=0.0)
    (tmp_path / "short" / "summary.json").write_text(json.dumps(summary))
    files = plots.plot_runs([tmp_path / "s", tmp_path / "short"], tmp_path / "figs-short")
    assert "consensus.png" not in {f.name for f in files}


def test_wall_time_axes_start_after_the_warm_up_steps(tmp_path, figures):
    """A process's first run compiles the kernels in its first steps: the accuracy-against-wall-time
    panel starts every run after its warm-up steps (summary.json's warmup_time_s, else the trace's
    warm-up rows) and says so; without either it says the compile is included."""
    _run(tmp_path / "first", "sync", "sync")          # history at 2, 4, 6 s
    _run(tmp_path / "second", "pseudo-sync", "pseudo-sync:adaptive")
    for name, warm in (("first", 1.5), ("second", 0.25)):
        s = json.loads((tmp_path / name / "summary.json").read_text())
        s["warmup_time_s"] = warm
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    plots.plot_runs([tmp_path / "first", tmp_path / "second"], tmp_path / "figs")
    ax = figures["accuracy.png"].axes[1]
    xs = {li.get_label(): list(li.get_xdata()) for li in ax.lines}
    assert xs["sync"] == pytest.approx([0.5, 2.5, 4.5])
    assert xs["pseudo-sync:adaptive"] == pytest.approx([1.75, 3.75, 5.75])
    assert "after the warm-up steps" in ax.get_xlabel()
    from minips.report import warmup_seconds
    assert warmup_seconds({}, [{"warmup": "1", "step_s": "20.0"}, {"warmup": "1", "step_s": "0.5"},
                               {"warmup": "0", "step_s": "0.5"}]) == pytest.approx(20.5)
    old_trace = [{"step": str(t), "step_s": "9.0" if t == 0 else "1.0"} for t in range(6)]  # no warmup column
    assert warmup_seconds({"warmup_steps": 2}, old_trace) == pytest.approx(10.0)
    _run(tmp_path / "old", "sync", "sync")            # neither warmup_time_s nor warm-up rows
    plots.plot_runs([tmp_path / "old"], tmp_path / "figs-old")
    ax = figures["accuracy.png"].axes[1]
    assert [list(li.get_xdata()) for li in ax.lines] == [[2.0, 4.0, 6.0]] and "includes" in ax.get_xlabel()
