"""``python -m minips bench train``: training throughput of minips side by side
with the same network in PyTorch, in one run.

Run it as one plain process. For each rank count P of ``--ranks`` it launches::

    mpiexec -n P [BINDING] python -m minips.bench.train_worker ...

with ``--threads`` Numba/BLAS/torch threads per rank (default 1; the
``*_NUM_THREADS`` variables are set for the ranks), ranks bound to cores when
they fit (T cores a rank of T threads; BINDING is that launcher's spelling:
MPICH ``-bind-to core[:T]``, Open MPI ``--bind-to core``, Intel MPI
``I_MPI_PIN_DOMAIN``, see :mod:`minips.bench.launch`). Each rank trains, for every workload (``convnet``, ``lstm``: the
captioner's LSTM step) and per-rank batch size, the minips network (the
registry's baseline algorithm: allreduce of the gradient, SGD momentum 0.9)
and, with ``--against torch`` when PyTorch is installed, the same layers in
PyTorch (one process: plain; several ranks: ``DistributedDataParallel`` over
gloo, in the *same* processes, so the launcher, threads and binding are the
same). The two take turns ``--chunk`` steps at a time for ``--steps`` timed
steps each, after ``--warmup`` untimed steps, so a load that drifts affects
both. A chunk's time is its slowest rank's; the table shows the median over
chunks of the step time (wall clock, and CPU time of the process), samples/s (images/s for the ConvNet, sequences/s for
the LSTM; global: P x batch / step time) and the ratio of step times.

Every result carries the CPU model, vector width, threads, the cores each
rank was bound to, the threading layer and the load average before and after
(``os.getloadavg``): on a shared machine the absolute numbers mean little,
the ratio of the interleaved pair is what holds.

Without PyTorch (or without ``--against torch``) minips is timed alone and
the output says so. The results go to ``OUT/bench-train.json`` (``--out``,
default ``runs/bench-train``; ``--json FILE`` instead), never into the
current directory unasked.
"""
from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ..kernels.threads import cores_on_node
from ..options import finite_float
from .launch import MpiexecNotFound, bind_args, binds_to_cores, launch_env, load_avg, mpiexec_command, require_mpiexec


__all__ = ["TrainBenchError", "parse_int_list", "run", "format_table", "json_path", "DEFAULT_OUT"]

WORKLOAD_NAMES = ("convnet", "lstm")
#: the results' folder when --out is not given (not the current directory)
DEFAULT_OUT = "runs/bench-train"


class TrainBenchError(ValueError):
    """A bad option or a failed run; the message names the fix."""


def parse_int_list(flag: str, spec: str) -> list[int]:
    """``"1,2"`` -> ``[1, 2]``.

    Raises:
        TrainBenchError: empty, not integers, or a value < 1 (naming ``flag``).
    """
    try:
        vals = [int(x) for x in str(spec).split(",") if x.strip()]
    except ValueError:
        raise TrainBenchError(f"{flag} {spec!r}: give comma-separated integers, e.g. {flag} 1,2") from None
    if not vals or min(vals) < 1:
        raise TrainBenchError(f"{flag} {spec!r}: give positive integers, e.g. {flag} 1,2")
    return vals


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def machine() -> dict:
    """CPU model, vector width, cores, versions: the JSON header."""
    import numba
    import numpy as np

    from ..kernels import cpuinfo
    info = cpuinfo.detect()
    out = {"cpu": cpuinfo.describe(), "cores": info.cores, "simd": info.simd, "vector_bits_isa": info.isa_bits,
           "vector_bits_datapath": info.vector_bits, "python": platform.python_version(),
           "numpy": np.__version__, "numba": numba.__version__, "torch": None}
    try:
        import torch
        out["torch"] = torch.__version__
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        pass
    return out


def run_point(P: int, args, use_torch: bool, mpiexec: str) -> dict:
    """Launch the worker on P ranks; returns its JSON plus the launch details."""
    binding = bind_args(P, args.threads, cores_on_node(), args.bind, mpiexec)
    bound = binds_to_cores(P, args.threads, cores_on_node(), args.bind)
    with tempfile.TemporaryDirectory(prefix="minips-bench-train-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = mpiexec_command(mpiexec, P) + binding
        cmd += [sys.executable, "-m", "minips.bench.train_worker", "--workloads", args.workloads,
                "--batch-sizes", args.batch_size, "--steps", str(args.steps), "--chunk", str(args.chunk),
                "--warmup", str(args.warmup), "--threads", str(args.threads), "--port", str(_free_port()),
                "--out", str(out)] + (["--torch"] if use_torch else [])
        load_before = load_avg()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=launch_env(args.threads), timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise TrainBenchError(f"--ranks {P}: no result after {args.timeout} s (raise --timeout or lower "
                                  f"--steps): {' '.join(cmd)}") from None
        if r.returncode != 0 or not out.exists():
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-6:])
            raise TrainBenchError(f"--ranks {P} failed (exit {r.returncode}): {' '.join(cmd)}\n{tail}")
        res = json.loads(out.read_text())
    res.update(ranks=P, bound_to_cores=bound, binding=" ".join(binding), load_before=load_before,
               load_after=load_avg(), command=" ".join(cmd[:cmd.index("--port")]))
    return res


def format_table(points: list) -> str:
    """One line per (workload, ranks, batch): step ms, samples/s, ratio."""
    head = (f"{'workload':<9}{'ranks':>6}{'batch':>6}{'minips ms':>11}{'torch ms':>10}{'minips/s':>10}"
            f"{'torch/s':>10}{'time ratio':>11}{'cpu ms':>15}{'cpu ratio':>10}  {'load 1 min'}")
    lines = [head, "-" * len(head)]
    for pt in points:
        load = (f"{pt['load_before'][0]:.2f}/{pt['load_after'][0]:.2f}"
                if pt.get("load_before") and pt.get("load_after") else "-")
        for r in pt["rows"]:
            t = r.get("torch")
            lines.append(f"{r['workload']:<9}{r['ranks']:>6}{r['batch_per_rank']:>6}"
                         f"{r['minips']['step_ms_median']:>11.2f}"
                         f"{(format(t['step_ms_median'], '10.2f') if t else '-'.rjust(10))}"
                         f"{r['minips']['samples_per_s']:>10.0f}"
                         f"{(format(t['samples_per_s'], '10.0f') if t else '-'.rjust(10))}"
                         f"{(format(r['ratio_minips_over_torch_time'], '10.2f') + 'x' if t else '-'.rjust(11))}"
                         + (f"{r['minips']['cpu_ms_median']:>8.1f}/{t['cpu_ms_median']:<6.1f}"
                            f"{r['minips']['cpu_ms_median'] / t['cpu_ms_median']:>9.2f}x"
                            if t else f"{r['minips']['cpu_ms_median']:>8.1f}{'-':>17}")
                         + f"  {load}")
    return "\n".join(lines)


def add_arguments(p):
    p.add_argument("--against", choices=["torch", "none"], default="none",
                   help="also train the same network in PyTorch (DDP over gloo for several ranks); "
                        "needs torch installed, otherwise minips runs alone with a note")
    p.add_argument("--ranks", default="1", help="rank counts, e.g. 1,2 (default 1)")
    p.add_argument("--batch-size", default="32", help="per-rank batch sizes, e.g. 32,64 (default 32)")
    p.add_argument("--workloads", default="convnet,lstm", help="convnet, lstm or both (default both)")
    p.add_argument("--steps", type=int, default=40, help="timed steps per implementation (default 40)")
    p.add_argument("--chunk", type=int, default=5, help="steps per turn when interleaving (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--threads", type=int, default=1, help="Numba/BLAS/torch threads per rank (default 1)")
    p.add_argument("--bind", action=argparse.BooleanOptionalAction, default=True,
                   help="bind each rank to a core (T cores for T threads a rank; the flag the mpiexec found spells: "
                        "MPICH -bind-to core[:T], Open MPI --bind-to core, Intel MPI I_MPI_PIN_DOMAIN) when ranks x "
                        "threads fit on the cores (default on)")
    p.add_argument("--timeout", type=finite_float, default=1800, help="seconds per rank count (default 1800)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"folder of the results: OUT/bench-train.json "
                                                      f"(default {DEFAULT_OUT})")
    p.add_argument("--json", metavar="FILE", help="write the results to this file instead (default "
                                                  "OUT/bench-train.json)")
    p.set_defaults(func=run)


def json_path(args) -> Path:
    """Where the results go: ``--json``, else ``OUT/bench-train.json``."""
    return Path(args.json) if getattr(args, "json", None) else \
        Path(getattr(args, "out", None) or DEFAULT_OUT) / "bench-train.json"


def run(args) -> int:
    """Run the benchmark, print the table, write the JSON. Returns 0.

    Raises:
        TrainBenchError: bad option, run under mpiexec, mpiexec missing, or a rank count failed.
    """
    from ..distributed.comm import launched_by_mpi
    if launched_by_mpi():
        raise TrainBenchError("bench train launches mpiexec itself: run it as one plain process, not under mpiexec")
    ranks = parse_int_list("--ranks", args.ranks)
    parse_int_list("--batch-size", args.batch_size)
    bad = [w for w in args.workloads.split(",") if w not in WORKLOAD_NAMES]
    if bad or not args.workloads:
        raise TrainBenchError(f"--workloads {args.workloads!r}: choose from {', '.join(WORKLOAD_NAMES)}")
    for flag, v in (("--steps", args.steps), ("--chunk", args.chunk), ("--threads", args.threads)):
        if v < 1:
            raise TrainBenchError(f"{flag} must be >= 1, got {v}")
    if args.warmup < 0:
        raise TrainBenchError(f"--warmup must be >= 0, got {args.warmup}")
    path = json_path(args)
    try:  # before any timing: a folder that cannot be written must not cost the benchmark
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TrainBenchError(f"cannot create {path.parent} ({e.strerror}); give --out a folder you can "
                              "write") from None
    try:
        mpiexec = require_mpiexec()
    except MpiexecNotFound as e:
        raise TrainBenchError(str(e)) from None
    use_torch = args.against == "torch" and _torch_available()
    note = None
    if args.against == "torch" and not use_torch:
        note = "PyTorch is not installed: minips timed alone (pip install torch for the comparison)"
    elif args.against == "none":
        note = "minips alone (add --against torch for the PyTorch comparison)"
    m = machine()
    print(f"CPU: {m['cpu']}; {args.threads} thread(s) per rank "
          f"(Numba, BLAS{', torch' if use_torch else ''}); torch {m['torch'] or 'not installed'}")
    points = []
    for P in ranks:
        pt = run_point(P, args, use_torch, mpiexec)
        points.append(pt)
        how = f"mpiexec {pt['binding']}" if pt["bound_to_cores"] else "not bound"
        print(f"ranks {P}: cores per rank {pt['affinity_per_rank']} ({how}), "
              f"{pt['threading_layer']} threading layer, load {pt['load_before']} -> {pt['load_after']}",
              flush=True)
    print(format_table(points))
    from .kernels.machine import sgemm_rates
    from .kernels.timing import set_threads
    torch_mod = None
    if use_torch:
        import torch as torch_mod
    set_threads(1, torch_mod)
    sg = sgemm_rates(torch_mod, clock="cpu")
    m["sgemm_1thread"] = sg
    for pt in points:
        for r in pt["rows"]:
            for k in ("minips", "torch"):
                if k in r:
                    gf = r["flops_per_sample"] * r["batch_per_rank"] / r[k]["cpu_ms_median"] / 1e6
                    r[k]["gflops_per_rank_cpu"] = gf
                    r[k]["fraction_of_sgemm"] = gf / sg[sg["fastest"]]
    print(f"single-thread sgemm {sg['n']}^3 (CPU time): "
          + ", ".join(f"{k} {sg[k]:.1f}" for k in ("numpy", "torch") if k in sg)
          + f" GFLOP/s; fastest BLAS: {sg['fastest']}")
    for pt in points:
        for r in pt["rows"]:
            if r["ranks"] == 1:
                print(f"  {r['workload']} batch {r['batch_per_rank']}: training step at "
                      + ", ".join(f"{k} {r[k]['gflops_per_rank_cpu']:.1f} GFLOP/s "
                                  f"({100 * r[k]['fraction_of_sgemm']:.0f}% of sgemm)"
                                  for k in ("minips", "torch") if k in r)
                      + f" ({r['flops_per_sample'] / 1e6:.1f} MFLOP/sample, per CPU second)")
    if use_torch:
        print("time ratio = minips step time / PyTorch step time (below 1: minips faster); medians over chunks "
              "of interleaved steps; several ranks: PyTorch DDP over gloo; cpu ms: the process's CPU time per "
              "step (minips/torch; time waiting for a core that other processes hold is not in it)")
    if note:
        print("note: " + note)
    res = {"machine": m, "options": {k: getattr(args, k) for k in ("against", "ranks", "batch_size", "workloads",
                                                                    "steps", "chunk", "warmup", "threads", "bind")},
           "torch_compared": use_torch, "note": note, "points": points}
    from ..rundir import write_json
    write_json(path, res)
    print(f"wrote {path}")
    return 0
