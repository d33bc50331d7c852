"""``python -m minips gossip-lab``: watch n nodes average their values.

Runs one or more averaging methods (:data:`minips.averaging.METHODS`) on a
graph (:mod:`minips.distributed.topology`) for a number of rounds, on the vectorised
cluster (all nodes in this process, rows of one array) or, under ``mpiexec -n P``, on the MPI
engine (one node per rank), and reports per method: the error
``||x(t) - mean||`` per round (Frobenius norm over nodes and dimensions; its
ratio to round 0 is the *relative error*), the rounds and messages to reach a
relative error of 1e-6, the contraction per round measured and predicted by
the spectrum (``|lambda_2|^t`` and its relatives), a figure (error vs round,
log scale, one line per method, predictions dashed) and optional frames of
the values on the graph. ``--table`` runs the methods x topologies x sizes
grid and writes its JSON (docs/gossip.md).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ..averaging import METHODS, make_method
from ..averaging.engines import MPICluster, VectorisedCluster
from ..distributed.topology import GRAPHS, Topology, make_topology

__all__ = ["simulate", "initial_values", "lab_graph", "rounds_to", "run_table"]

TOL = 1e-6
INITS = ("normal", "uniform", "spike")


def initial_values(n: int, d: int, seed: int, init: str = "normal") -> np.ndarray:
    """Every node's starting value, (n, d) float64, the same on every rank:
    standard normal, uniform on [0, 1), or ``spike`` (node 0 holds n, the rest 0: mean 1).

    Raises:
        ValueError: unknown ``init`` or d < 1.
    """
    if init not in INITS:
        raise ValueError(f"unknown --init {init!r}; choose one of {', '.join(INITS)}")
    if d < 1:
        raise ValueError(f"--dim {d}: give at least 1 value per node")
    rng = np.random.default_rng(seed)
    if init == "normal":
        return rng.standard_normal((n, d))
    if init == "uniform":
        return rng.random((n, d))
    x = np.zeros((n, d))
    x[0] = n
    return x


def rounds_to(rel: np.ndarray, tol: float = TOL) -> int | None:
    """First round whose relative error is <= tol (None if none)."""
    hit = np.flatnonzero(rel <= tol)
    return int(hit[0]) if len(hit) else None


def measured_rate(rel: np.ndarray) -> float | None:
    """Contraction per round between relative errors 1e-2 and 1e-6 (or over the
    second half of the run if 1e-6 is not reached)."""
    a, b = rounds_to(rel, 1e-2), rounds_to(rel, TOL)
    if a is not None and b is not None and b <= a:  # both in one round: from round 0
        a = 0
    if a is None or b is None or b <= a:
        a, b = len(rel) // 2, len(rel) - 1
        if b <= a or not (np.isfinite(rel[a]) and rel[a] > 0 and rel[b] > 0):
            return None
    return float((rel[b] / rel[a]) ** (1.0 / (b - a)))


def _error(method, values, est, t) -> float:
    """``||est - target||`` over live nodes (est: every node's estimate, (n, d))."""
    a = method.alive(t)
    diff = est[a] - method.target(values, t)
    return float(np.sqrt(np.sum(diff * diff))) if np.all(np.isfinite(diff)) else math.inf


def lab_graph(topology: str, n: int, radius: float | None = None, seed: int = 0) -> Topology:
    """The graph ``topology`` (a key of :data:`~minips.distributed.topology.GRAPHS`)
    on ``n >= 2`` nodes (:func:`~minips.distributed.topology.make_topology`).

    Raises:
        ValueError: n < 2, or the graph's own errors (unknown name, not connected, ...).
    """
    if n < 2:
        raise ValueError(f"-n {n}: averaging needs at least 2 nodes (with one node the mean is its value)")
    return make_topology(topology, n, radius=radius, seed=seed)


def simulate(method_name: str, topology: str = "ring", n: int = 64, rounds: int = 500, seed: int = 0,
             d: int = 1, init: str = "normal", engine=None, radius: float | None = None, graph_seed: int = 0,
             keep_history: bool = False, stop_at: float | None = None, options: dict | None = None,
             method=None) -> dict | None:
    """Run one averaging method and measure it.

    Args:
        method_name: a key of :data:`~minips.averaging.METHODS`.
        topology, n, radius, graph_seed: the graph (:func:`lab_graph`).
        rounds: rounds to run; seed: seed of the starting values and of the method's choices.
        d: values per node; init: ``normal``, ``uniform`` or ``spike``.
        engine: a :class:`VectorisedCluster` (default) or :class:`MPICluster`.
        keep_history: return every node's estimate per round, ``history`` (n, rounds + 1, d).
        stop_at: vectorised cluster only: stop once the relative error is below this.
        options: the method's options (``alpha``, ``order_seed``, ``rho``, ``estimate``, ``join``, ``leave``).
        method: an already built method (then method_name/options are ignored).

    Returns:
        On rank 0 (always for the vectorised cluster) a dict: ``error`` and
        ``relative_error`` (lists, one per round 0..rounds), ``rounds_to_1e-6``,
        ``messages`` (cumulative per round), ``messages_to_1e-6``,
        ``control_ints``, ``rate_measured``, ``rate_predicted`` (+ ``prediction``
        text), ``lambda2``, ``seconds``; None on the other ranks.

    Raises:
        ValueError: bad graph, method or options (one-line messages).
    """
    graph = lab_graph(topology, n, radius=radius, seed=graph_seed)
    if method is None:
        method = make_method(method_name, graph, seed=seed, **(options or {}))
    engine = engine or VectorisedCluster(n)
    vectorised = engine.kind == "vectorised"
    values = initial_values(n, d, seed, init)
    method.start(engine, values[engine.ids])
    kind = getattr(method, "kind", "average")
    t0 = time.perf_counter()
    hist, err, msgs = [method.estimate().copy()], [], [0]
    if vectorised:
        err.append(_error(method, values, hist[0], 0))
    for t in range(rounds):
        method.step(t)
        msgs.append(engine.messages)
        est = method.estimate()
        if vectorised:
            err.append(_error(method, values, est, t + 1))
            if stop_at is not None and err[0] > 0 and err[-1] <= stop_at * _scale(kind, values, method, err[0]):
                break
        if keep_history or not vectorised:
            hist.append(est.copy())
    seconds = time.perf_counter() - t0
    history = engine.gather(np.stack(hist, axis=1)) if (keep_history or not vectorised) else None
    msg_rows = engine.gather(np.array(msgs)[None])
    control = engine.total(engine.control_ints)
    bytes_sent = engine.total(engine.bytes_sent)
    if msg_rows is None:
        return None
    if not vectorised:
        err = [_error(method, values, history[:, t], t) for t in range(history.shape[1])]
    err = np.array(err)
    rel = err / _scale(kind, values, method, err[0])
    rate, how = method.prediction()
    l2 = graph.lambda2()
    out = {
        "method": method.name, "topology": topology, "n": n, "d": d, "init": init, "seed": seed,
        "rounds": len(err) - 1, "engine": engine.kind, "ranks": 1 if vectorised else engine.n,
        "lambda2": l2, "spectral_gap": None if l2 is None else 1.0 - l2,
        "error": err.tolist(), "relative_error": rel.tolist(),
        "rounds_to_1e-6": rounds_to(rel), "messages": msg_rows.sum(axis=0).tolist(),
        "control_ints": int(control), "bytes_sent": int(bytes_sent),
        "rate_measured": measured_rate(rel), "rate_predicted": rate, "prediction": how,
        "rounds_to_1e-6_predicted": (None if rate is None or rate >= 1 else _exact_after(method, graph)
                                     if rate < 1e-12 else math.ceil(math.log(TOL) / math.log(rate))),
        "seconds": seconds,
    }
    r = out["rounds_to_1e-6"]
    out["messages_to_1e-6"] = out["messages"][r] if r is not None else None
    for k in ("alpha", "join", "leave"):
        if hasattr(method, k):
            out[k] = getattr(method, k)
    if hasattr(method, "schedule"):
        out["rounds_per_period"] = len(method.schedule)
    if history is not None and keep_history:
        out["history"] = history
    return out


def _exact_after(method, graph) -> int:
    """Rounds to the exact mean when the predicted rate is 0 (below 1e-12: eigenvalue round-off): one period of
    the schedule or of the time-varying graph, else one round."""
    return len(method.schedule) if hasattr(method, "schedule") else (graph.period or 1)


def _scale(kind, values, method, err0) -> float:
    """What the relative error divides by: the round-0 error for averages;
    for push-sum's sum and count (whose round-0 estimates are infinite),
    ``sqrt(n) * ||target||``."""
    if kind == "average":
        return err0 if err0 > 0 else 1.0
    return math.sqrt(values.shape[0]) * max(float(np.linalg.norm(method.target(values, 0))), 1e-300)


# --- output ----------------------------------------------------------------------------------------

def _fmt(v, spec="d"):
    return "-" if v is None else format(v, spec)


def report_lines(results: list[dict], tol: float = TOL) -> list[str]:
    """A plain-text table, one row per method."""
    r0 = results[0]
    l2 = r0["lambda2"]
    head = (f"{r0['topology']}, n = {r0['n']}, d = {r0['d']}, {r0['engine']} engine"
            + (f" ({r0['ranks']} ranks)" if r0["engine"] == "mpi" else "")
            + (f", |lambda_2(W)| = {l2:.6f}" if l2 is not None else ""))
    # two header rows, one column under each pair of words, columns separated by ' | '
    cols = [("", "method", 12), ("rounds to 1e-6", "measured", 14), ("rounds to 1e-6", "predicted", 14),
            ("rate per round", "measured", 14), ("rate per round", "predicted", 14),
            ("messages", "to 1e-6", 10), ("final", "rel. error", 10)]
    def row(cells):
        return " | ".join(f"{c:<{w}}" if k == 0 else f"{c:>{w}}" for k, (c, (_, _, w)) in enumerate(zip(cells, cols)))
    lines = [head, row([c[0] for c in cols]), row([c[1] for c in cols]), "-+-".join("-" * c[2] for c in cols)]
    for r in results:
        lines.append(row([r["method"], _fmt(r["rounds_to_1e-6"]), _fmt(r["rounds_to_1e-6_predicted"]),
                          _fmt(r["rate_measured"], ".5f"), _fmt(r["rate_predicted"], ".5f"),
                          _fmt(r["messages_to_1e-6"]), f"{r['relative_error'][-1]:.3e}"]))
    lines.append("rounds to 1e-6: first round with ||x - mean|| <= 1e-6 ||x(0) - mean||; predicted: from the rate "
                 "predicted by the spectrum; rate per round measured between relative errors 1e-2 and 1e-6 (over the "
                 "second half of the run when 1e-6 is not reached); "
                 "'-': not reached / not computable")
    return lines


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


def _jsonable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "history"}


# --- the rounds-to-1e-6 table -----------------------------------------------------------------------

TABLE_METHODS = ("plain", "accelerated", "pairwise", "periodic", "aco-local", "aco-global", "push-sum")


def run_table(methods, topologies, sizes, max_rounds: int, seed: int = 0, progress=print) -> dict:
    """Rounds (and messages) to 1e-6 for every method x topology x size on the
    vectorised cluster, each run stopped at 1e-6 or after ``max_rounds``."""
    rows = []
    for n in sizes:
        for top in topologies:
            for m in methods:
                r = simulate(m, top, n, max_rounds, seed=seed, stop_at=TOL)
                row = {k: r[k] for k in ("method", "topology", "n", "rounds_to_1e-6", "rounds_to_1e-6_predicted",
                                         "messages_to_1e-6", "rate_measured", "rate_predicted", "prediction",
                                         "lambda2", "rounds", "seconds")}
                rows.append(row)
                progress(f"  n={n:<5} {top:<12} {m:<12} rounds to 1e-6: {_fmt(row['rounds_to_1e-6']):>6} "
                         f"(predicted {_fmt(row['rounds_to_1e-6_predicted'])}), {row['seconds']:.1f} s")
    return {"methods": list(methods), "topologies": list(topologies), "sizes": list(sizes), "max_rounds": max_rounds,
            "seed": seed, "tol": TOL, "rows": rows}


def table_markdown(table: dict) -> str:
    """Rows: methods; columns: topology x n; cells: measured rounds to 1e-6
    (``> max`` if not reached) with the spectral prediction in parentheses."""
    cols = [(t, n) for n in table["sizes"] for t in table["topologies"]]
    cell = {(r["method"], r["topology"], r["n"]): r for r in table["rows"]}
    lines = ["| method | " + " | ".join(f"{t} {n}" for t, n in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for m in table["methods"]:
        out = []
        for t, n in cols:
            r = cell[(m, t, n)]
            got = r["rounds_to_1e-6"]
            s = str(got) if got is not None else f"> {table['max_rounds']}"
            if r["rounds_to_1e-6_predicted"] is not None:
                s += f" ({r['rounds_to_1e-6_predicted']})"
            out.append(s)
        lines.append(f"| {m} | " + " | ".join(out) + " |")
    return "\n".join(lines)


# --- command line -----------------------------------------------------------------------------------

def add_arguments(p):
    """The flags of ``python -m minips gossip-lab`` (a row of :data:`minips.cli.SUBCOMMANDS`)."""
    p.add_argument("--topology", default="ring", help=f"graph: {', '.join(GRAPHS)} (default ring)")
    p.add_argument("-n", type=int, help="nodes (default 64; under mpiexec: the number of ranks)")
    p.add_argument("--method", help=f"comma-separated methods, or all: {', '.join(METHODS)} "
                                    "(default plain; with --table: all)")
    p.add_argument("--rounds", type=int, default=500, help="rounds to run (default 500)")
    p.add_argument("--out", help="directory for lab.json, error.png (and frames/)")
    p.add_argument("--seed", type=int, default=0, help="seed of the starting values and the random choices")
    p.add_argument("--dim", type=int, default=1, help="values per node (default 1)")
    p.add_argument("--init", default="normal", choices=INITS, help="starting values (spike: node 0 holds n)")
    p.add_argument("--radius", type=float, help="random-geometric: link distance (default 1.5 sqrt(ln n / n))")
    p.add_argument("--graph-seed", type=int, default=0, help="random-geometric / tree: seed of the graph")
    p.add_argument("--alpha", type=float, help="accelerated: weight in (0, 2) (default the optimal alpha*)")
    p.add_argument("--order-seed", type=int, help="periodic: random edge order from this seed "
                                                         "(default: grouped by an edge colouring)")
    p.add_argument("--orders", type=int, default=0, help="periodic: also print |lambda_2(Phi)| for this many "
                                                         "random edge orders (same on a tree)")
    p.add_argument("--rho", type=float, help="aco-*: pheromone evaporation in (0, 1] (default 0.1)")
    p.add_argument("--estimate", choices=["average", "sum", "count"], help="push-sum: what to estimate")
    p.add_argument("--join", type=int, help="push-sum: node n-1 joins at this round (vectorised cluster)")
    p.add_argument("--leave", type=int, help="push-sum: node n/2 leaves at this round (vectorised cluster)")
    p.add_argument("--frames", type=int, default=0, help="write this many PNG frames of the first method's "
                                                        "values on the graph into OUT/frames/ (n <= 1024)")
    p.add_argument("--table", action="store_true", help="instead: rounds to 1e-6 for methods x topologies x "
                                                        "sizes, written to OUT/table.json and table.md")
    p.add_argument("--topologies", default="ring,torus,exponential", help="--table: topologies")
    p.add_argument("--sizes", default="64,1024", help="--table: node counts")
    p.add_argument("--max-rounds", type=int, default=20000, help="--table: give up after this many rounds")
    p.set_defaults(func=cmd_gossip_lab)


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s]
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated integers, got {text!r}") from None


def cmd_gossip_lab(args) -> int:
    from ..distributed.comm import get_comm, launched_by_mpi
    spec = args.method or ("all" if args.table else "plain")
    methods = list(TABLE_METHODS) if spec == "all" else [m.strip() for m in spec.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown --method {m!r}; choose one of {', '.join(METHODS)} (or all)")
    if args.rounds < 1:
        raise ValueError(f"--rounds {args.rounds}: give at least 1")
    if args.table:
        return _cmd_table(args, methods)
    comm = get_comm() if launched_by_mpi() else None
    n = args.n if args.n is not None else (comm.size if comm is not None else 64)
    if comm is not None and comm.size == 1:
        raise ValueError("mpiexec -n 1: the MPI engine runs one node per rank and needs P >= 2 ranks; "
                         "use mpiexec -n 4, or run without mpiexec for the vectorised cluster")
    options = {"alpha": args.alpha, "order_seed": args.order_seed, "rho": args.rho, "estimate": args.estimate,
               "join": args.join, "leave": args.leave}
    results, root = [], comm is None or comm.rank == 0
    for k, m in enumerate(methods):
        mine = {key: v for key, v in options.items() if key in _accepts(m)}
        ignored = sorted(key for key, v in options.items() if v is not None and key not in _accepts_any(methods))
        if ignored:
            raise ValueError(f"--{ignored[0].replace('_', '-')} is not an option of {', '.join(methods)}")
        engine = MPICluster(comm, n) if comm is not None else VectorisedCluster(n)
        r = simulate(m, args.topology, n, args.rounds, seed=args.seed, d=args.dim, init=args.init, engine=engine,
                     radius=args.radius, graph_seed=args.graph_seed, keep_history=(k == 0 and args.frames > 0),
                     options=mine)
        if root:
            results.append(r)
    if not root:
        return 0
    print("\n".join(report_lines(results)))
    if args.orders:
        _print_orders(args)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "lab.json").write_text(json.dumps([_jsonable(r) for r in results], indent=1))
        plot_errors(results, out / "error.png", f"{args.topology}, n = {n}, {results[0]['engine']} engine")
        print(f"wrote {out / 'lab.json'}, {out / 'error.png'}")
        if args.frames:
            if n > 1024:
                raise ValueError(f"--frames draws at most 1024 nodes, got -n {n}")
            g = lab_graph(args.topology, n, radius=args.radius, seed=args.graph_seed)
            files = write_frames(results[0], g, node_positions(g),
                                 out / "frames", args.frames)
            print(f"wrote {len(files)} frames to {out / 'frames'}")
    elif args.frames:
        raise ValueError("--frames needs --out DIR to write the PNGs into")
    return 0


def _accepts(m: str):
    from ..averaging import method_options
    return tuple(method_options(m))


def _accepts_any(methods):
    return {k for m in methods for k in _accepts(m)}


def _print_orders(args) -> None:
    from ..averaging.periodic import edge_order, period_lambda2
    g = lab_graph(args.topology, args.n or 64, radius=args.radius, seed=args.graph_seed)
    vals = [period_lambda2(edge_order(g, s), g.n) for s in range(args.orders)]
    print(f"periodic gossip on {g.name} (n = {g.n}): |lambda_2(Phi)| over {args.orders} random edge orders: "
          f"min {min(vals):.6f}, max {max(vals):.6f}, {len(set(np.round(vals, 9)))} distinct value(s)")


def _cmd_table(args, methods) -> int:
    from ..distributed.comm import launched_by_mpi
    if launched_by_mpi():
        raise ValueError("--table runs on the vectorised cluster: run it without mpiexec")
    tops = [t for t in args.topologies.split(",") if t]
    for t in tops:
        if t not in GRAPHS:
            raise ValueError(f"unknown topology {t!r} in --topologies; choose from {', '.join(GRAPHS)}")
    sizes = _ints(args.sizes, "--sizes")
    table = run_table(methods, tops, sizes, args.max_rounds, seed=args.seed)
    md = table_markdown(table)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.json").write_text(json.dumps(table, indent=1))
        (out / "table.md").write_text(md + "\n")
        print(f"wrote {out / 'table.json'}, {out / 'table.md'}")
    return 0
