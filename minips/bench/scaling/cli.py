"""The ``bench scaling`` command: its flags (:func:`add_arguments`) and the driver (:func:`run`)
that measures (or reads ``--from-json``), runs the model, prints the tables and writes the JSON,
text and figures (what it does: :mod:`minips.bench.scaling`)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ...distributed.algorithms import DEFAULT_ALGOS
from ...kernels import cpuinfo
from ...kernels.threads import cores_on_node
from ...options import finite_float
from .figures import plot_projection, plot_scaling
from .measure import ScalingError, load_avg, measure, option_flags, parse_algos, parse_ranks, read_json_file
from .model import (PROJECT_NODES, PROJECT_RANKS_PER_NODE, comm_fit, grad_layout, model_check, node_projection,
                    project_also, projection, reported_points)
from .tables import print_check, print_measured, print_node_projection, print_projection

__all__ = ["run", "add_arguments"]


def run(args) -> int:
    from ...distributed.comm import launched_by_mpi

    if launched_by_mpi() and os.environ.get("MINIPS_MPI") != "1":
        raise ScalingError("bench scaling launches mpiexec itself: run it as one plain process, "
                           "not under mpiexec")
    lines: list[str] = []

    def say(*a):  # print, and keep for the report file
        text = " ".join(map(str, a))
        lines.append(text)
        print(text, flush=True)
    if args.from_json:
        result = read_json_file(args.from_json, "--from-json", "measured", "bench scaling (its scaling.json)")
        rows = result["measured"]
    else:
        ranks = parse_ranks(args.ranks)
        entries = parse_algos(args.algos)
        if args.steps < 8:
            raise ScalingError("--steps must be >= 8 (the first 5 steps are JIT warm-up and are not timed)")
        if args.repeats < 1:
            raise ScalingError("--repeats must be >= 1")
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        cores = cores_on_node()
        over = [P for P in ranks if P * args.threads > cores]
        say(f"bench scaling: {args.model} on {args.data}, batch {args.batch_size}/rank, {args.steps} steps, "
            f"{args.threads} thread(s)/rank, {args.repeats} repeat(s); {cores} cores; load {load_avg()}; "
            f"cpu: {cpuinfo.describe()}"
            + (f"; NOTE P={over} oversubscribe the cores: their times are not meaningful" if over else ""))
        load_start = load_avg()
        t0 = time.time()
        rows = measure(args, entries, ranks, out_dir, say)
        result = {"config": {**{k: getattr(args, k) for k in ("model", "data", "batch_size", "steps", "lr",
                                                              "threads", "repeats", "progress", "network", "algos",
                                                              "ranks")},
                             **option_flags(vars(args))},
                  "host": {"name": os.uname().nodename, "cores": cores, "cpu": cpuinfo.describe(),
                           "load_start": load_start,
                           "load_end": load_avg(), "seconds": time.time() - t0, "python": sys.version.split()[0]},
                  "measured": rows}
    cfg = result["config"]
    flags = option_flags(cfg)
    grad_bytes, shapes = grad_layout(cfg["model"], cfg["data"])
    result["grad_bytes"], result["shapes"] = grad_bytes, shapes
    fit_net, phi_fit = (None, None)
    if args.comm_json:
        fit_net, phi_fit = comm_fit(args.comm_json)
    if args.interference == "auto":
        phi = phi_fit if phi_fit is not None else 1.0
    else:
        phi = float(args.interference)
    result["model_check"] = model_check(rows, grad_bytes, shapes, fit_net, phi, flags)
    result["comm_json"] = args.comm_json
    Ps = [2**i for i in range(0, int(args.project_max).bit_length()) if 2**i <= args.project_max]
    nets = [n for n in args.project_networks.split(",") if n.strip()]
    result["project_interference"] = args.project_interference
    also = project_also(args.project_also, rows)
    result["project_also"] = also
    result["projection"] = projection(rows, grad_bytes, shapes, nets, Ps, args.project_interference,
                                      also, flags) if nets else {}
    result["paper_points"] = reported_points()
    if args.project:
        from ...distributed.costmodel import SharedMemoryModel
        shm = SharedMemoryModel(args.intra_latency * 1e-6, args.intra_bandwidth * 1e9)
        rpn = [int(x) for x in str(args.project_ranks_per_node).split(",") if x.strip()]
        nodes = [n for n in PROJECT_NODES if n <= args.project_nodes]
        result["node_projection"] = node_projection(rows, grad_bytes, shapes, nets, nodes, rpn,
                                                    args.project_interference, also, flags, shm)
    print_measured(rows, say)
    print_check(result["model_check"], say)
    print_projection(result["projection"], say)
    if args.project:
        print_node_projection(result["node_projection"], say, show=tuple(n for n in (8, 64, 128) if n in nodes))
    # with --json the tables go beside it (OUT may hold another run's scaling.txt)
    json_path = Path(args.json) if args.json else Path(args.out) / "scaling.json"
    txt_path = json_path.with_suffix(".txt") if args.json else Path(args.out) / "scaling.txt"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    say(f"\nwrote {json_path} (everything) and {txt_path} (these tables)")
    txt_path.write_text("\n".join(lines) + "\n")
    if args.plot:
        plot_scaling(result, args.plot)
        say(f"wrote {args.plot}")
    if args.plot_projection and result["projection"]:
        plot_projection(result, args.plot_projection)
        say(f"wrote {args.plot_projection}")
    return 0


def add_arguments(p):
    p.add_argument("--algos", default=",".join(DEFAULT_ALGOS),
                   help="comma-separated algorithm specs NAME[:key=value]...[@LABEL] "
                        f"(default {','.join(DEFAULT_ALGOS)}; python -m minips algorithms lists them)")
    p.add_argument("--ranks", default="1,2", help="rank counts, e.g. 1,2,4 (default 1,2)")
    p.add_argument("--model", default="convnet", help="model (default convnet)")
    p.add_argument("--data", default="fashion-mnist-mini", help="data set (default fashion-mnist-mini)")
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch (default 32)")
    p.add_argument("--steps", type=int, default=60, help="steps per run; the first 5 are not timed (default 60)")
    p.add_argument("--lr", type=finite_float, default=0.05, help="learning rate (timing does not depend on it)")
    p.add_argument("--threads", type=int, default=1, help="Numba/BLAS threads per rank (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="runs per point; the median step time is reported")
    p.add_argument("--progress", default="poll", choices=["none", "poll", "thread"], help="progress mode")
    from ...distributed.algorithms.option_flags import OPTION_FLAGS
    for name, flag in OPTION_FLAGS.items():  # the older per-option flags, passed to every run as train takes them
        if flag.type != "dict":
            p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=flag.python_type,
                           help=flag.help + "; given to every run")
    p.add_argument("--network", help="emulate an interconnect in the measured runs (as in train)")
    p.add_argument("--bind", action=argparse.BooleanOptionalAction, default=True,
                   help="bind each rank to a core (T cores for T threads a rank; the flag the mpiexec found spells: "
                        "MPICH -bind-to core[:T], Open MPI --bind-to core, Intel MPI I_MPI_PIN_DOMAIN) when the "
                        "ranks fit on the cores (default on)")
    p.add_argument("--timeout", type=finite_float, default=900, help="seconds per run before giving up")
    p.add_argument("--out", default="runs/scaling", help="directory of the runs' outputs and of the report: "
                                                         "scaling.txt (the tables) and scaling.json (unless --json: "
                                                         "then both beside it)")
    p.add_argument("--comm-json", help="bench comm --json output: its alpha-beta fit (and poll-mode overlap) "
                                       "for the predicted-vs-measured check")
    p.add_argument("--interference", default="auto",
                   help="phi in [0,1] for the check at the measured P (auto: from --comm-json, else 1)")
    p.add_argument("--project-networks", default="ib-edr,ib-fdr,10gbe,1gbe",
                   help="interconnects for the projection (presets or alpha=..,beta=..; empty = none)")
    p.add_argument("--project-max", type=int, default=1024, help="largest node count projected (default 1024)")
    p.add_argument("--project-interference", type=finite_float, default=0.0,
                   help="phi of the projection (default 0: offloaded, ideal overlap)")
    p.add_argument("--project-also", help="further algorithm specs (comma-separated) to project from the "
                                          "baseline's P = 1 profile, without measuring them; 'all' = every "
                                          "registered algorithm not measured, at its default options")
    p.add_argument("--project", action="store_true",
                   help="also project over nodes of many ranks (--project-ranks-per-node, a rank per core) with the "
                        "flat and the hierarchical allreduce, up to --project-nodes nodes")
    p.add_argument("--project-nodes", type=int, default=128, help="largest node count of --project (default 128)")
    p.add_argument("--project-ranks-per-node", default=",".join(map(str, PROJECT_RANKS_PER_NODE)),
                   help="ranks per node of --project, comma-separated (default 24,48,96)")
    p.add_argument("--intra-bandwidth", type=finite_float, default=100.0,
                   help="GB/s of a node's memory, shared by its ranks, for --project (default 100: an assumption)")
    p.add_argument("--intra-latency", type=finite_float, default=1.0,
                   help="microseconds per node barrier for --project (default 1: an assumption)")
    p.add_argument("--from-json", help="redo the model and plots from an earlier --json, run nothing")
    p.add_argument("--json", help="write everything to this JSON file (default OUT/scaling.json)")
    p.add_argument("--plot", help="PNG of the measured breakdown and E(P)")
    p.add_argument("--plot-projection", help="PNG of the projected E(P)")
    p.set_defaults(func=run)

