"""``python -m minips gossip-lab``: watch n nodes average their values (the
flags, their checks, and what the command prints and writes: ``lab.json``,
``error.png``, ``frames/``, or with ``--table`` ``table.json`` and
``table.md``). The engine is :mod:`minips.labs.averaging`, the figures
:mod:`minips.labs.averaging_figures`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..averaging import METHODS
from ..averaging.engines import MPICluster, VectorisedCluster
from ..distributed.topology import GRAPHS
from ..options import finite_float
from .averaging import INITS, TABLE_METHODS, lab_graph, report_lines, run_table, simulate, table_markdown
from .averaging_figures import node_positions, plot_errors, write_frames


def _jsonable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "history"}


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
    p.add_argument("--radius", type=finite_float, help="random-geometric: link distance (default 1.5 sqrt(ln n / n))")
    p.add_argument("--graph-seed", type=int, default=0, help="random-geometric / tree: seed of the graph")
    p.add_argument("--alpha", type=finite_float, help="accelerated: weight in (0, 2) (default the optimal alpha*)")
    p.add_argument("--order-seed", type=int, help="periodic: random edge order from this seed "
                                                         "(default: grouped by an edge colouring)")
    p.add_argument("--orders", type=int, default=0, help="periodic: also print |lambda_2(Phi)| for this many "
                                                         "random edge orders (same on a tree)")
    p.add_argument("--rho", type=finite_float, help="aco-*: pheromone evaporation in (0, 1] (default 0.1)")
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
