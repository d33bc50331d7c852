"""The gossip lab's figures: the relative error against the round, one line
per method with its spectral prediction dashed (:func:`plot_errors`), and a
flip-book of the values on the graph (:func:`write_frames`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..distributed.topology import Topology
from .averaging import TOL


def error_ylim(results: list[dict], tol: float = TOL) -> tuple[float, float]:
    """The y-range of :func:`plot_errors`: from a third of the smallest
    measured relative error (or of ``tol``, when some curve comes within a
    factor 100 of it) to three times the largest (at least 3): the measured
    curves fill the plot whatever their range; the dashed predictions are cut
    where they leave it."""
    vals = np.concatenate([np.asarray(r["relative_error"], float) for r in results])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    if vals.size == 0:
        return tol / 3, 3.0
    lo, hi = float(vals.min()), float(vals.max())
    if lo <= 100 * tol:
        lo = min(lo, tol)
    return max(lo / 3, 1e-300), max(hi, 1.0) * 3


def plot_errors(results: list[dict], path, title: str) -> None:
    """Relative error vs round (log y), one solid line per method, its
    spectral prediction ``rate^t`` dashed in the same colour."""
    from ..plots import pyplot
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    for k, r in enumerate(results):
        c = f"C{k}"
        rel = np.array(r["relative_error"])
        rel = np.where(rel > 0, rel, np.nan)
        ax.semilogy(np.arange(len(rel)), rel, color=c, lw=1.6, label=r["method"])
        if r["rate_predicted"] is not None and r["rate_predicted"] > 0:
            t = np.arange(len(rel))
            ax.semilogy(t, r["rate_predicted"] ** t, color=c, lw=1, ls="--", alpha=0.8)
    ymin, ymax = error_ylim(results)
    shows_tol = ymin <= TOL
    if shows_tol:
        ax.axhline(TOL, color="grey", lw=0.8, ls=":")
    for r in results:  # push-sum churn: the target moves at these rounds
        for what in ("join", "leave"):
            if r.get(what) is not None:
                ax.axvline(r[what], color="grey", lw=0.8, ls="-.")
                ax.text(r[what], 1.5, f" node {what}s", fontsize=7, color="grey")
    ax.set_ylim(ymin, ymax)
    ax.set_xlabel("round")
    ax.set_ylabel("||x(t) - mean|| / ||x(0) - mean||")
    ax.set_title(title + "\nsolid: measured; dashed: spectral prediction rate^t; "
                 + ("dotted: 1e-6" if shows_tol else f"1e-6 not approached (lowest {ymin * 3:.2g})"), fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3, which="both", lw=0.4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def node_positions(graph: Topology) -> np.ndarray:
    """(n, 2) drawing positions: the graph's own layout (the torus's grid, the
    random geometric graph's points), else a circle."""
    if graph.layout is not None:
        return np.asarray(graph.layout, float)
    ang = 2 * np.pi * np.arange(graph.n) / graph.n
    return np.stack([np.cos(ang), np.sin(ang)], 1)


def write_frames(result: dict, graph, pos: np.ndarray, out_dir: Path, frames: int) -> list[Path]:
    """``frames`` PNGs of the values (first dimension) on the graph, rounds spread
    evenly over the run (a flip-book: ``frame_000.png``, ...)."""
    from ..plots import pyplot
    plt = pyplot()
    H = result["history"][:, :, 0]
    T = H.shape[1] - 1
    out_dir.mkdir(parents=True, exist_ok=True)
    lo, hi = np.nanmin(H[:, 0]), np.nanmax(H[:, 0])
    edges = graph.undirected_edges()
    files = []
    for k, t in enumerate(np.unique(np.linspace(0, T, frames).round().astype(int))):
        fig, ax = plt.subplots(figsize=(5, 5))
        for i, j in edges:
            ax.plot(*pos[[i, j]].T, color="0.85", lw=0.5, zorder=1)
        sc = ax.scatter(*pos.T, c=H[:, t], cmap="coolwarm", vmin=lo, vmax=hi, s=max(8, 4000 / graph.n), zorder=2)
        fig.colorbar(sc, ax=ax, shrink=0.7, label="value")
        ax.set_title(f"{result['method']} on {result['topology']} (n = {graph.n}): round {t}, "
                     f"rel. error {result['relative_error'][t]:.1e}", fontsize=9)
        ax.set_aspect("equal")
        ax.set_axis_off()
        fig.tight_layout()
        f = out_dir / f"frame_{k:03d}.png"
        fig.savefig(f, dpi=90)
        plt.close(fig)
        files.append(f)
    return files
