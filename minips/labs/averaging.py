"""The gossip lab's engine: n nodes average their values.

Runs an averaging method (:data:`minips.averaging.METHODS`) on a graph
(:mod:`minips.distributed.topology`) for a number of rounds, on the
vectorised cluster (all nodes in this process, rows of one array) or, under
``mpiexec -n P``, on the MPI engine (one node per rank) (:func:`simulate`),
and measures: the error ``||x(t) - mean||`` per round (Frobenius norm over
nodes and dimensions; its ratio to round 0 is the *relative error*), the
rounds and messages to reach a relative error of 1e-6, the contraction per
round measured and predicted by the spectrum (``|lambda_2|^t`` and its
relatives); :func:`report_lines` prints them, one row per method.
:func:`run_table` runs the methods x topologies x sizes grid
(docs/gossip.md). The lab's figures (error against round, frames of the
values on the graph) are in :mod:`minips.labs.averaging_figures`, its command
line (``python -m minips gossip-lab``) in :mod:`minips.labs.averaging_cli`.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ..averaging import make_method
from ..averaging.engines import VectorisedCluster
from ..distributed.topology import Topology, make_topology

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
