"""The figures of ``bench scaling``: the measured breakdown and E(P) (:func:`plot_scaling`) and
the projected E(P) per interconnect (:func:`plot_projection`)."""
from __future__ import annotations

from .model import family_of, reported_points

__all__ = ["plot_scaling", "plot_projection"]


def plot_scaling(result: dict, path) -> None:
    """Left: measured step-time breakdown per (algorithm, P). Middle: measured
    and predicted E(P). Right: projected E(P) to many nodes with the paper's points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...plots import PHASE_COLORS
    from ...timing import PHASES

    rows = result["measured"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    ax = axes[0]
    names = [f"{r['label']}\nP={r['P']}" for r in rows]
    bottom = [0.0] * len(rows)
    for ph in PHASES:
        vals = [1e3 * r["time_breakdown"][ph] for r in rows]
        ax.bar(names, vals, bottom=bottom, label=ph, color=PHASE_COLORS.get(ph))
        bottom = [b + v for b, v in zip(bottom, vals)]
    other = [1e3 * r["step_time_s"] - b for r, b in zip(rows, bottom)]
    ax.bar(names, other, bottom=bottom, label="other", color="#BBBBBB")
    ax.set_ylabel("ms per step (slowest rank)")
    ax.tick_params(axis="x", labelsize=7, labelrotation=60)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), reverse=True)  # beside, not over, the bars
    emu = " (EMULATED " + rows[0]["network"] + ")" if rows and rows[0].get("network_emulated") else ""
    ax.set_title(f"measured step, {result['config']['model']}, batch {result['config']['batch_size']}/rank{emu}",
                 fontsize=9)
    ax = axes[1]
    from ...plots import algo_color, run_styles
    labels = list(dict.fromkeys(r["label"] for r in rows))
    for label, st in zip(labels, run_styles(len(labels))):
        color = algo_color(_algo_name(label))  # the algorithm's colour in every minips figure
        rs = [r for r in rows if r["label"] == label and r["efficiency"] is not None]
        ax.plot([r["P"] for r in rs], [r["efficiency"] for r in rs], marker=st["marker"], linestyle="-", color=color,
                label=f"{label} measured")
        cs = [c for c in result.get("model_check", []) if c["label"] == label and c.get("predicted_measured_comm_s")]
        if cs:
            t1 = next(r["step_time_s"] for r in rows if r["label"] == label and r["P"] == 1)
            ax.plot([1] + [c["P"] for c in cs], [1.0] + [t1 / c["predicted_measured_comm_s"] for c in cs], "x--",
                    color=color, label=f"{label} model")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("E(P) = T(1) / T(P)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"weak scaling on this machine ({result['host']['cores']} cores, load "
                 f"{result['host']['load_start']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _algo_name(label: str) -> str:
    """The registered algorithm of a spec or label ("pseudo-sync:adaptive@x" -> "pseudo-sync")."""
    return label.split("@")[0].split(":")[0].strip()


def plot_projection(result: dict, path) -> None:
    """E(P) against nodes (log scale) per interconnect and algorithm, with the
    seed paper's 93.4 % at 64 nodes and 90.5 % at 128."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...plots import algo_color
    proj = result["projection"]
    algos = list(next(iter(proj.values()))["algos"]) if proj else []
    if len(algos) > 6:  # one row of panels per family, or the lines cannot be told apart
        return _plot_projection_by_family(result, path, plt)
    fig, axes = plt.subplots(1, len(proj), figsize=(4.2 * len(proj), 4), sharey=True, squeeze=False)
    styles = {k: ("-", "--", "-.", (0, (5, 1, 1, 1)))[i % 4] for i, k in enumerate(algos)}
    for ax, p in zip(axes[0], proj.values()):
        base = p.get("baseline")
        for algo, rows in p["algos"].items():
            line, = ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], linestyle=styles.get(algo, "-"),
                                base=2, label=f"{algo}: E(P)", lw=2, color=algo_color(_algo_name(algo)))
            if algo != base and "vs_baseline_1" in rows:
                ax.semilogx(rows["P"], [100 * e for e in rows["vs_baseline_1"]], ":", base=2,
                            color=line.get_color(), lw=1, label=f"{algo}: T_{base}(1)/T(P)")
        for algo_name, pts in reported_points().items():
            ax.plot(list(pts), [100 * v for v in pts.values()], "k*", ms=11, label=f"paper ({algo_name})")
        ax.set_title(p["network"], fontsize=9)
        ax.set_xlabel("nodes P (one rank each)")
        ax.grid(alpha=0.3, which="both")
        ax.set_ylim(0, 105)
    axes[0][0].set_ylabel("projected weak-scaling efficiency E(P) %")
    axes[0][0].legend(fontsize=7, loc="lower left")
    cfg = result["config"]
    fig.suptitle(f"projection: {cfg['model']}, {result['grad_bytes'] / 1e6:.2f} MB gradient, per-node step measured "
                 f"at P=1 here; ring allreduce, phi = {result['project_interference']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_projection_by_family(result: dict, path, plt) -> None:
    """E(P) against nodes: one row of panels per algorithm family, one column
    per interconnect; the baseline (grey) is drawn in every panel. An
    algorithm whose one-node step is more than 1 % longer than the baseline's
    (its own compute: a predictor, a compressor) also gets a thin dotted line
    of its throughput per node relative to the baseline on one node,
    ``T_base(1) / T(P)``, which E(P) hides."""
    from matplotlib.lines import Line2D

    proj = result["projection"]
    first = next(iter(proj.values()))
    base = first.get("baseline")
    families = {}
    for algo in first["algos"]:
        if algo != base:
            families.setdefault(family_of(algo), []).append(algo)
    fig, axes = plt.subplots(len(families), len(proj), figsize=(4.4 * len(proj) + 1.6, 3.1 * len(families)),
                             sharey=True, sharex=True, squeeze=False)
    styles = ("-", "--", "-.", ":")
    colors = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]  # grey is the baseline's
    for r, (fam, members) in enumerate(families.items()):
        dotted = False
        for c, p in enumerate(proj.values()):
            ax = axes[r][c]
            if base in p["algos"]:
                rows = p["algos"][base]
                ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], color="0.55", lw=3, base=2,
                            label=f"{base} (baseline)")
            for i, algo in enumerate(members):
                rows = p["algos"][algo]
                color = colors[i % len(colors)]
                ax.semilogx(rows["P"], [100 * e for e in rows["efficiency"]], base=2, lw=1.6,
                            color=color, linestyle=styles[(i // len(colors)) % len(styles)],
                            marker="os^vD<>ph*"[i % 10], ms=3, label=algo)
                vs = rows.get("vs_baseline_1")
                if vs and vs[0] < 1 / 1.01:  # T(1) more than 1 % above the baseline's
                    ax.semilogx(rows["P"], [100 * v for v in vs], base=2, lw=0.9, color=color, linestyle=":")
                    dotted = True
            ax.set_ylim(0, 105)
            ax.grid(alpha=0.3, which="both")
            if r == 0:
                ax.set_title(p["network"], fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{fam}\nE(P) %", fontsize=8)
            if r == len(families) - 1:
                ax.set_xlabel("nodes P (one rank each)")
        handles, labels = axes[r][-1].get_legend_handles_labels()
        if dotted:
            handles.append(Line2D([], [], color="k", lw=0.9, linestyle=":"))
            labels.append(f"dotted: T_{base}(1) / T(P)")
        axes[r][-1].legend(handles, labels, fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5))
    cfg = result["config"]
    fig.suptitle(f"projected weak-scaling efficiency E(P) = T(1) / T(P) of every family: {cfg['model']}, "
                 f"{result['grad_bytes'] / 1e6:.2f} MB gradient, per-node step measured at P=1 here; "
                 f"phi = {result['project_interference']}; options as labelled (a bare name: its defaults)", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)
