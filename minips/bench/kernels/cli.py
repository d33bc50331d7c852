"""The ``bench kernels`` command: its flags (:func:`add_arguments`) and the driver (:func:`run`)
that times the cases, prints the machine and the table, and writes the JSON (what it measures:
:mod:`minips.bench.kernels`)."""
from __future__ import annotations

import json
import os

from ..cases import BenchContext
from .breakdown import conv_breakdown, format_breakdown
from .machine import info_fpc, machine_report
from .providers import collect_cases
from .timing import CLOCKS, format_table, run_cases, set_threads

__all__ = ["add_arguments", "run"]


def _import_torch():
    try:
        import torch
        return torch
    except ImportError:
        return None



def add_arguments(p):
    p.add_argument("--threads", type=int, help="threads for Numba, BLAS and torch "
                   "(default: cores / ranks on the node, or NUMBA_NUM_THREADS)")
    p.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    p.add_argument("--batch", type=int, nargs="+", default=[64, 128], help="batch sizes (default 64 128)")
    p.add_argument("--only", help="run only cases whose kernel or shape contains this text, e.g. conv2d")
    p.add_argument("--no-torch", action="store_true", help="do not time PyTorch even if installed")
    p.add_argument("--quick", action="store_true", help="two timed runs per case (a smoke test, noisy)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall time (default) or this process's CPU time (on a shared machine, 1 thread)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time each stage of the convolutions (patch build, GEMMs, epilogues with "
                        "ReLU and pooling, col2im) against the measured bandwidth and sgemm rate")
    p.set_defaults(func=run)


def _warn_if_busy(load: float, cores: int, threads: int) -> None:
    """Say so when other programs occupy the cores: the kernels then share them,
    GFLOP/s and %peak come out low and vary, and threads wait for descheduled peers."""
    if load >= cores - 0.5:
        print(f"warning: this machine is busy (load average {load:.1f} on {cores} cores): these timings are "
              f"lower and noisier than on idle cores{'' if threads < 2 else ', and with several threads much lower'}"
              "; rerun when it is idle (uptime) before quoting them", flush=True)


def run(args) -> int:
    """Run the kernel benchmark; print the table; write JSON if asked. Returns 0.

    Raises:
        ValueError: ``--only`` matches no case (the kernel names are listed), or
            ``--threads`` is below 1.
    """
    from ...kernels import threads as kthreads
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads {args.threads}: give 1 or more threads, e.g. --threads 1")
    torch = None if args.no_torch else _import_torch()
    n = set_threads(args.threads or kthreads.threads_per_rank(1), torch)
    ctx = BenchContext(batches=tuple(args.batch), torch=torch)
    cases = collect_cases(ctx, args.only)
    if not cases:
        names = list(dict.fromkeys(c.kernel for c in collect_cases(ctx)))
        raise ValueError(f"--only {args.only!r} matches no benchmark case; give part of a kernel name or "
                         f"shape, e.g. --only conv2d; the kernels: {', '.join(names)}")
    load_start = [round(x, 2) for x in os.getloadavg()]
    _warn_if_busy(load_start[0], kthreads.cores_on_node(), n)
    machine = machine_report(n, torch, args.clock)
    machine["clock"] = args.clock
    rows = run_cases(cases, n, machine["peak_gflops"], machine["bandwidth_gbs"], quick=args.quick, clock=args.clock)
    import numba
    machine["threading_layer"] = numba.threading_layer()
    machine["load_avg_start"], machine["load_avg_end"] = load_start, [round(x, 2) for x in os.getloadavg()]
    print(f"CPU: {machine['cpu']}; {n} thread(s) for Numba, BLAS"
          + (" and torch" if torch else "") + f"; {machine['threading_layer']} threading layer")
    print(f"peak (stated): {machine['peak_arithmetic']}")
    if machine["peak_by_vector_bits"]:
        per = ", ".join(f"{b} bit {g:.1f}" + ("" if machine["peak_asm_verified"][b] is not False else " (unverified)")
                        for b, g in machine["peak_by_vector_bits"].items())
        print(f"peak (measured per vector width, GFLOP/s per core): {per}; FMA instruction of the widest: "
              f"{machine['peak_fma_instruction'][max(machine['peak_by_vector_bits'])]!r}")
    print(f"peak used: {machine['peak_gflops_per_core_measured']:.1f} GFLOP/s per core "
          f"(implies {machine['implied_ghz']:.2f} GHz at {info_fpc(machine)} FLOP/cycle) -> "
          f"{machine['peak_gflops']:.1f} GFLOP/s for {n} thread(s), the %peak column; method: {machine['peak_method']}")
    print(f"Numba auto-vectorised FMA loop (what a Numba kernel can reach): {machine['numba_fma_loop_gflops']:.1f} "
          "GFLOP/s per core")
    sg = machine["sgemm"]
    print(f"sgemm {sg['n']}x{sg['n']}, {n} thread(s): " + ", ".join(f"{k} {sg[k]:.1f}" for k in ("numpy", "torch")
                                                                    if k in sg)
          + f" GFLOP/s; fastest BLAS here: {sg['fastest']}")
    print(f"clock: {args.clock} time")
    print(f"memory bandwidth (measured, parallel copy): {machine['bandwidth_gbs']:.1f} GB/s, the %bw column "
          "(above 100%: the data stayed in cache; docs/kernels.md)")
    print(format_table(rows))
    if any(r["peak_fraction"] and r["peak_fraction"] > 1 for r in rows):
        print("* above 100% of the measured peak: the peak probe's best run was slowed by other processes "
              "(compare the per-width figures with the stated peak above), or the FLOP count of that row "
              "overstates the work; the GFLOP/s figure itself is what was measured")
    print(f"load average {machine['load_avg_start'][0]:.2f} at the start, {machine['load_avg_end'][0]:.2f} at the end "
          f"({kthreads.cores_on_node()} cores)")
    _warn_if_busy(machine["load_avg_end"][0], kthreads.cores_on_node(), n)
    result = {"machine": machine, "rows": rows}
    if getattr(args, "breakdown", False):
        sg = machine["sgemm"]["numpy"]
        result["breakdown"] = conv_breakdown(tuple(args.batch), machine["bandwidth_gbs"], sg, clock=args.clock,
                                             reps=3 if args.quick else 20)
        machine["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
        print()
        print(format_breakdown(result["breakdown"], machine["bandwidth_gbs"], sg))
        print(f"load average {machine['load_avg_end'][0]:.2f} after the breakdown")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    return 0
