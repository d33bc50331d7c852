"""The drawing of a gossip graph (``python -m minips topology --plot``): the
ranks in the graph's own layout, its edges, its spectral gap."""
from __future__ import annotations

from . import style
from .style import pyplot


def topology_layout(top):
    """Where :func:`plot_topology` draws each rank, and which edges wrap around.

    Returns:
        (xy, wrap): ``xy`` (P, 2) float64, the graph's own layout when it has
        one (the torus's grid, the random geometric graph's points), else the
        ranks on a circle; ``wrap`` the undirected edges (i, j), i < j, that
        close a torus's rows or columns (drawn as stubs leaving the grid, not
        as lines across it).
    """
    import numpy as np
    P = top.P
    if top.layout is not None:
        xy = np.asarray(top.layout, float)
    else:
        ang = 2 * np.pi * np.arange(P) / P
        xy = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    wrap = []
    if top.name == "torus" and top.layout is not None:
        wrap = [(j, i) for i in range(P) for j in top.in_neighbors(i)
                if j < i and np.abs(xy[i] - xy[j]).max() > 1.5]
    return xy, wrap


def plot_topology(top, path) -> None:
    """A gossip graph: ranks in the graph's own layout (the torus on its grid,
    the random geometric graph at its points; the others on a circle), an edge
    per nonzero off-diagonal weight (an arrow when the graph is directed), the
    spectral gap in the title."""
    import numpy as np
    plt = pyplot()
    P = top.P
    xy, wrap = topology_layout(top)
    wrapped = set(wrap)
    fig, ax = plt.subplots(figsize=(5, 5))
    for i in range(P):
        for j in top.in_neighbors(i):  # j sends to i
            if top.directed:
                ax.annotate("", xy=xy[i], xytext=xy[j], arrowprops={"arrowstyle": "->", "color": "#4C72B0",
                                                                       "shrinkA": 9, "shrinkB": 9})
            elif (j, i) in wrapped:  # a stub out of the grid at both ends, towards the other end's side
                out = -np.sign(np.where(np.abs(xy[i] - xy[j]) > 1.5, xy[i] - xy[j], 0.0))
                for a, s in ((j, 1.0), (i, -1.0)):
                    ax.plot(*np.stack([xy[a], xy[a] + 0.45 * s * out]).T, color="#4C72B0",
                            lw=0.8 + 2 * top.W[i, j], alpha=0.8, ls=(0, (2, 1.5)))
            elif j < i:
                ax.plot(*xy[[i, j]].T, color="#4C72B0", lw=0.8 + 2 * top.W[i, j], alpha=0.8)
    if top.name == "random-geometric" and top.layout is not None:  # the unit square the points are drawn from
        ax.plot([0, 1, 1, 0, 0], [0, 0, 1, 1, 0], color="grey", lw=0.6, ls=":")
    big = P <= 32
    ax.scatter(*xy.T, s=260 if big else 110, color="white", edgecolor="black", zorder=3)
    for i in range(P):
        ax.text(*xy[i], str(i), ha="center", va="center", fontsize=8 if big else 6, zorder=4)
    tv = f", time-varying (step 0 of {top.period})" if top.period else ""
    where = {"torus": "; dashed stubs: the edges that wrap around",
             "random-geometric": "; ranks at their points in the unit square"}.get(top.name, "")
    where = where if top.layout is not None else ""
    ax.set_title(f"{top.name}, P = {P}{tv}\nspectral gap 1 - |lambda_2| = {top.spectral_gap():.4f}{where}",
                 fontsize=9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    fig.tight_layout()
    style.save(fig, path)
