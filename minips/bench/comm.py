"""``mpiexec -n P python -m minips bench comm``: allreduce latency/bandwidth and
the overlap a nonblocking allreduce really gets while the rank computes.

Part 1, like the OSU micro-benchmarks (osu_allreduce, osu_iallreduce): for each
message size from 8 B to 64 MB (float32), the mean time of a blocking
``Allreduce`` and of ``Iallreduce`` + ``Wait``, the algorithm bandwidth n/t and
the bus bandwidth ``2(P-1)/P * n / t`` (the bytes each rank must move in a ring
allreduce, NCCL-tests' convention). An alpha-beta ring model is fitted to the
blocking times (:func:`minips.distributed.costmodel.fit_ring_allreduce`).

Part 2, overlap: post an ``Iallreduce`` of ``--overlap-mb`` MB, compute for
about 1.5x the time the allreduce takes alone (float32 GEMMs, as in a forward
pass), then ``Wait``. For each progress mode:

- ``none``: no MPI call during compute;
- ``poll``: ``comm.progress()`` between GEMMs (as between layers);
- ``thread``: a background thread waits on the request;

and, if the job was started with ``MPIR_CVAR_ASYNC_PROGRESS=1``, MPICH's own
progress thread is active in all of them (the table says so). Reported:
compute time with and without the allreduce in flight (slowdown), the wait
left after compute, overlap efficiency ``1 - wait / allreduce_alone``, and the
total against doing the two one after the other.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from ..options import finite_float


__all__ = ["measure_allreduce", "measure_overlap", "run"]


def _sizes(lo: int, hi: int) -> list[int]:
    out, n = [], lo
    while n <= hi:
        out.append(n)
        n *= 2
    return out


def measure_allreduce(comm, nbytes: int, iters: int) -> dict:
    """Mean seconds of blocking Allreduce and of Iallreduce+Wait for ``nbytes``
    (float32), max over ranks of each rank's mean (the slowest rank decides)."""
    buf = np.ones(max(1, nbytes // 4), np.float32)
    for _ in range(max(2, iters // 10)):  # warm-up: connection set-up, page faults
        comm.allreduce(buf)
    res = {}
    for kind in ("blocking", "nonblocking"):
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            if kind == "blocking":
                comm.allreduce(buf)
            else:
                comm.iallreduce(buf).wait()
        res[kind] = comm.allreduce_scalar((time.perf_counter() - t0) / iters, "max")
    return res


def _gemm_chunk(a):
    return a @ a


def _compute(a, chunks: int, poll_comm=None) -> float:
    t0 = time.perf_counter()
    for _ in range(chunks):
        _gemm_chunk(a)
        if poll_comm is not None:
            poll_comm.progress()
    return time.perf_counter() - t0


def measure_overlap(comm, nbytes: int, mode: str, repeats: int = 5) -> dict:
    """Overlap of one Iallreduce of ``nbytes`` with ~1.5x its duration of GEMMs.

    Returns seconds (medians over ``repeats``): ``allreduce_alone``,
    ``compute_alone``, ``compute_with_comm``, ``wait_after``, and
    ``overlap_efficiency``, ``compute_slowdown``, ``speedup_vs_serial``.
    """

    buf = np.ones(nbytes // 4, np.float32)
    a = np.random.default_rng(comm.rank).standard_normal((128, 128)).astype(np.float32)
    alone = []
    for _ in range(repeats):
        comm.barrier()
        alone.append(comm.allreduce(buf))
    t_alone = comm.allreduce_scalar(float(np.median(alone)), "max")
    # Calibrate the number of GEMM chunks to ~1.5x the allreduce time.
    per_chunk = _compute(a, 50) / 50
    chunks = max(10, int(1.5 * t_alone / max(per_chunk, 1e-7)))
    chunks = int(comm.allreduce_scalar(chunks, "max"))
    compute_alone = [_compute(a, chunks) for _ in range(repeats)]
    with_comm, waits = [], []
    for _ in range(repeats):
        comm.barrier()
        req = comm.iallreduce(buf)
        with_comm.append(_compute(a, chunks, comm if mode == "poll" else None))
        waits.append(req.wait())
    med = {k: comm.allreduce_scalar(float(np.median(v)), "max")
           for k, v in (("compute_alone", compute_alone), ("compute_with_comm", with_comm), ("wait_after", waits))}
    serial = med["compute_alone"] + t_alone
    return {"mode": mode, "nbytes": nbytes, "allreduce_alone": t_alone, **med,
            "overlap_efficiency": max(0.0, 1 - med["wait_after"] / t_alone) if t_alone > 0 else None,
            "compute_slowdown": med["compute_with_comm"] / med["compute_alone"],
            "speedup_vs_serial": serial / (med["compute_with_comm"] + med["wait_after"])}


def _sweep(comm, args, say) -> tuple[list, dict | None]:
    """Part 1 for the current allreduce mode: rows per size and the ring fit (flat only)."""
    from ..distributed.costmodel import fit_ring_allreduce

    P, rows = comm.size, []
    say(f"\n{'size':>10} {'allreduce us':>13} {'iallreduce+wait us':>19} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for n in _sizes(args.min_bytes, args.max_bytes):
        iters = max(5, min(args.iters, int(2e8 // max(n, 1)) + 5))
        r = measure_allreduce(comm, n, iters)
        t = r["blocking"]
        algbw = n / t / 1e9 if t > 0 else float("nan")
        busbw = algbw * 2 * (P - 1) / P if P > 1 else float("nan")
        rows.append({"nbytes": n, "allreduce_s": t, "iallreduce_wait_s": r["nonblocking"],
                     "algbw_GBps": algbw, "busbw_GBps": busbw, "iters": iters})
        say(f"{_fmt_bytes(n):>10} {t * 1e6:13.2f} {r['nonblocking'] * 1e6:19.2f} {algbw:11.3f} {busbw:11.3f}")
    if P < 2 or not rows or comm.hierarchical:  # the ring model describes the flat allreduce only
        return rows, None
    f = fit_ring_allreduce([r["nbytes"] for r in rows], [r["allreduce_s"] for r in rows], P)
    fit = {"alpha_s": f.model.alpha, "beta_s_per_byte": f.model.beta,
           "bandwidth_GBps": (1 / f.model.beta / 1e9) if f.model.beta else None,
           "r2": f.r2, "max_rel_error": f.max_rel_error, "points": f.points}
    for r in rows:
        r["model_s"] = f.model.allreduce_time(r["nbytes"], P)
    say(f"\nring model fit: alpha = {f.model.alpha * 1e6:.2f} us, beta = {f.model.beta * 1e9:.4f} ns/B "
        f"({fit['bandwidth_GBps'] or float('inf'):.2f} GB/s); R^2 = {f.r2:.4f}, "
        f"max relative error {100 * f.max_rel_error:.0f}% over {f.points} sizes")
    return rows, fit


def _overlap(comm, args, mpich_async, say, setup) -> list:
    from ..distributed.comm import get_comm

    nbytes = int(args.overlap_mb * 2**20)
    say(f"\noverlap of one {args.overlap_mb:g} MB Iallreduce with GEMM compute (~1.5x its duration):")
    say(f"{'progress':>9} {'allreduce ms':>13} {'compute ms':>11} {'compute+comm ms':>16} "
        f"{'wait after ms':>14} {'overlap eff':>12} {'slowdown':>9} {'vs serial':>10}")
    overlap = []
    for mode in args.modes.split(","):
        get_comm(args.network, mode, *setup)
        o = measure_overlap(comm, nbytes, mode)
        o["mpich_async_progress"] = mpich_async
        overlap.append(o)
        say(f"{mode + ('+async' if mpich_async else ''):>9} {o['allreduce_alone'] * 1e3:13.2f} "
            f"{o['compute_alone'] * 1e3:11.2f} {o['compute_with_comm'] * 1e3:16.2f} "
            f"{o['wait_after'] * 1e3:14.2f} {o['overlap_efficiency']:12.2f} {o['compute_slowdown']:9.2f} "
            f"{o['speedup_vs_serial']:10.2f}")
    say("  progress: how the request advances during compute (none: only inside MPI calls; poll: the "
        "compute calls MPI_Test between chunks; thread: a thread blocks in MPI_Wait)\n"
        "  allreduce ms: the Iallreduce with nothing else running; compute ms: the GEMMs alone; "
        "compute+comm ms: the GEMMs with the Iallreduce in flight\n"
        "  wait after ms: blocked in Wait once the compute is done; overlap eff = 1 - wait after / allreduce\n"
        "  slowdown = compute+comm / compute (what the communication in flight costs the compute: polling, "
        "memory bandwidth, a spinning thread)\n"
        "  vs serial = (compute + allreduce) / (compute+comm + wait after): the speed-up over computing, then "
        "communicating (> 1: the overlap pays)")
    get_comm(args.network, "none", *setup)
    return overlap


def run(args) -> int:
    from ..distributed.comm import get_comm
    from ..kernels import cpuinfo

    modes = [m.strip() for m in args.allreduce.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("flat", "hierarchical", "auto")]
    if bad or not modes:
        raise ValueError(f"--allreduce {args.allreduce!r}: give a comma-separated list of flat, hierarchical, auto")
    rpn = args.ranks_per_node or None
    comm = get_comm(args.network, "none", modes[0], rpn)
    P = comm.size
    mpich_async = os.environ.get("MPIR_CVAR_ASYNC_PROGRESS", "0") not in ("", "0")
    say = print if comm.rank == 0 else (lambda *a, **k: None)
    load_start = [round(x, 2) for x in os.getloadavg()]
    if P < 2:
        say("note: one rank: allreduce is a no-op; run under mpiexec -n 2 or more for meaningful numbers")
    results = {}
    for mode in modes:
        setup = (mode, rpn)
        comm = get_comm(args.network, "none", *setup)
        # the size table uses blocking calls (no progress mode); the overlap table names its mode per row
        desc = comm.describe().replace(f"; progress={comm.progress_mode}", "")
        say(("" if not results else "\n") + "bench comm: " + (f"[--allreduce {mode}] " if len(modes) > 1 else "")
            + desc
            + ("; MPICH async progress thread ON (MPIR_CVAR_ASYNC_PROGRESS=1)" if mpich_async else "")
            + f"; load average {[round(x, 2) for x in os.getloadavg()]}; cpu: {cpuinfo.describe()}")
        rows, fit = ([], None) if args.overlap_only else _sweep(comm, args, say)
        overlap = _overlap(comm, args, mpich_async, say, setup) if not args.no_overlap and P > 1 else []
        results[mode] = {"allreduce": rows, "fit": fit, "overlap": overlap, "library": comm.describe(),
                         "hierarchical": comm.hierarchical, "nodes": comm.nodes,
                         "bytes_intra_node": comm.bytes_intra_node, "bytes_inter_node": comm.bytes_inter_node}
    if len(modes) > 1 and not args.overlap_only:
        _print_modes(results, say)
    first = results[modes[0]]
    result = {"world_size": P, "local_size": comm.local_size, "library": first["library"],
              "network_emulated": comm.emulated, "network": str(comm.network) if comm.network else "real",
              "ranks_per_node": rpn, "nodes": comm.nodes, "allreduce_modes": modes,
              "mpich_async_progress": mpich_async, "allreduce": first["allreduce"], "fit": first["fit"],
              "overlap": first["overlap"], "modes": results,
              "host": os.uname().nodename, "cores": len(os.sched_getaffinity(0)), "cpu": cpuinfo.describe(),
              "load_avg_start": load_start, "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
    if comm.rank == 0:
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(result, fh, indent=2)
            say(f"\nwrote {args.json}")
        if args.plot and first["allreduce"]:
            plot_comm(result, args.plot)
            say(f"wrote {args.plot}")
    comm.close()
    return 0


def _print_modes(results: dict, say) -> None:
    """The allreduce modes side by side: time per size and the ratio to the first."""
    names = list(results)
    say("\nallreduce time per size, blocking (us), by --allreduce:")
    say(f"{'size':>10}" + "".join(f"{m:>14}" for m in names) + "".join(f"{m + '/' + names[0]:>26}" for m in names[1:]))
    for i, row in enumerate(results[names[0]]["allreduce"]):
        ts = [results[m]["allreduce"][i]["allreduce_s"] for m in names]
        say(f"{_fmt_bytes(row['nbytes']):>10}" + "".join(f"{t * 1e6:14.2f}" for t in ts)
            + "".join(f"{t / ts[0]:26.2f}" for t in ts[1:]))


def _fmt_bytes(n: int) -> str:
    for unit, k in (("MB", 2**20), ("KB", 2**10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n} B"


def plot_comm(result: dict, path) -> None:
    """Latency and bus bandwidth against message size, with the fitted model;
    and, if the overlap test ran, time per progress mode: compute with the
    allreduce in flight plus the wait after it, against the serial sum."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["allreduce"]
    overlap = result.get("overlap") or []
    n = [r["nbytes"] for r in rows]
    fig, axes = plt.subplots(1, 3 if overlap else 2, figsize=(16 if overlap else 11, 4))
    a, b = axes[0], axes[1]
    a.loglog(n, [r["allreduce_s"] * 1e6 for r in rows], "o-", label="Allreduce")
    a.loglog(n, [r["iallreduce_wait_s"] * 1e6 for r in rows], "s--", label="Iallreduce+Wait")
    if result["fit"]:
        a.loglog(n, [r["model_s"] * 1e6 for r in rows], "k:", label="ring model fit")
    a.set_xlabel("message size (bytes)")
    a.set_ylabel("time (us)")
    a.legend()
    a.grid(alpha=0.3, which="both")
    b.semilogx(n, [r["busbw_GBps"] for r in rows], "o-")
    b.set_xlabel("message size (bytes)")
    b.set_ylabel("bus bandwidth (GB/s)")
    b.grid(alpha=0.3, which="both")
    if overlap:
        c = axes[2]
        names = [o["mode"] + ("+async" if o.get("mpich_async_progress") else "") for o in overlap]
        comp = [1e3 * o["compute_with_comm"] for o in overlap]
        wait = [1e3 * o["wait_after"] for o in overlap]
        c.bar(names, comp, label="compute (allreduce in flight)", color="#4C72B0")
        c.bar(names, wait, bottom=comp, label="wait after compute", color="#C44E52")
        serial = [1e3 * (o["compute_alone"] + o["allreduce_alone"]) for o in overlap]
        alone = [1e3 * o["compute_alone"] for o in overlap]
        c.plot(names, serial, "k_", ms=30, mew=2, label="compute + allreduce, serial")
        c.plot(names, alone, "g_", ms=30, mew=2, label="compute alone")
        c.set_ylabel("ms")
        c.set_title(f"overlap of a {overlap[0]['nbytes'] / 2**20:g} MB Iallreduce", fontsize=9)
        c.legend(fontsize=7)
    title = f"allreduce, {result['world_size']} ranks"
    if result["network_emulated"]:
        title += f" (EMULATED {result['network']})"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def add_arguments(p):
    p.add_argument("--min-bytes", type=int, default=8, help="smallest message (default 8 B)")
    p.add_argument("--max-bytes", type=int, default=64 * 2**20, help="largest message (default 64 MB)")
    p.add_argument("--iters", type=int, default=200, help="repetitions for small messages (fewer for large)")
    p.add_argument("--overlap-mb", type=finite_float, default=16.0, help="message size of the overlap test (MB)")
    p.add_argument("--modes", default="none,poll,thread", help="progress modes to test for overlap")
    p.add_argument("--overlap-only", action="store_true", help="skip the size sweep")
    p.add_argument("--no-overlap", action="store_true", help="skip the overlap test")
    p.add_argument("--network", help="emulate an interconnect (as in train)")
    p.add_argument("--allreduce", default="auto", help="comma-separated allreduce modes to measure, one table "
                                                       "each: flat, hierarchical, auto (default auto)")
    p.add_argument("--ranks-per-node", type=int, default=0, metavar="N",
                   help="ranks 0..N-1 form node 0, and so on (as in train; default: the machine's nodes, or one "
                        "rank per node under --network)")
    p.add_argument("--json", help="write results to this JSON file")
    p.add_argument("--plot", help="write a PNG of latency and bandwidth")
    p.set_defaults(func=run)
