"""``python -m minips bench virtual``: what virtual ranks cost, in time and memory.

Two measurements, each a ``python -m minips train`` subprocess on this
machine's cores (run it as one plain process, not under mpiexec):

1. **Time per training sample.** Plain ``train`` (one process, one rank, its
   usual Numba and BLAS threads) against ``train --virtual-ranks P`` for each P
   of ``--ranks`` (default 16, 64, 128): the same model, data, batch per rank
   and algorithm (the registry's baseline unless ``--algo``). Each run takes
   ``--warmup`` + ``--steps`` steps; the steady time per step is the mean of
   rank 0's ``step_s`` (trace.csv) over the last ``--steps`` (the ranks of a
   synchronous algorithm move in step, so that is the job's time per step),
   and the time per sample divides it by the P x batch samples of the step.
   The table gives the ratio to plain ``train`` (the issue's target: at most
   1.3), and the same for CPU seconds (trace.csv's ``process_cpu_s``: what
   the whole process, all threads, spent in those steps): on a shared machine
   the wall clock depends on the other jobs, the CPU time much less.
2. **Peak memory.** The peak resident set (``VmHWM``, from ``wait4``'s
   ``ru_maxrss``) of ``--memory-ranks`` (default 128) virtual ranks training
   ``--memory-model`` on ``--memory-data`` (default the ConvNet on full
   Fashion-MNIST) for a few steps, with the registry's baseline and default
   algorithms (target: under 8 GB). The data set is loaded once per process
   and shared read-only by the ranks (:mod:`minips.data.shared`); every run's
   peak is recorded too.

The load average before and after each run is recorded (``os.getloadavg``):
on a loaded machine the ratios mean little; say so with any number quoted.
"""
from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..options import finite_float
from .launch import load_avg

__all__ = ["VirtualBenchError", "run", "format_table"]


class VirtualBenchError(ValueError):
    """A bad option or a failed run; the message names the fix."""




def _ints(flag: str, text: str) -> list[int]:
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise VirtualBenchError(f"{flag} {text!r}: give integers separated by commas, e.g. 16,64,128") from None
    if not out or min(out) < 1:
        raise VirtualBenchError(f"{flag} {text!r}: give integers >= 1, e.g. 16,64,128")
    return out


#: the child: ``minips.cli.main`` on its arguments, then its own resource use as JSON in the file argv[1]
_CHILD = ("import json, resource, sys; from minips.cli import main; rc = main(sys.argv[2:]); "
          "ru = resource.getrusage(resource.RUSAGE_SELF); "
          "hwm = [int(ln.split()[1]) * 1024 for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]; "
          "open(sys.argv[1], 'w').write(json.dumps({'cpu_s': ru.ru_utime + ru.ru_stime, "
          "'maxrss_bytes': hwm[0] if hwm else ru.ru_maxrss * 1024})); sys.exit(rc)")


def run_train(P: int, args, model: str, data: str, algo: str, steps: int, out: Path, timeout: float) -> dict:
    """One ``python -m minips train`` (``--virtual-ranks P``, or plain for P = 0)
    in a child process that then reports its CPU seconds (user + system, all
    threads) and peak resident set (``VmHWM``); returns its timing, memory and
    load. Raises VirtualBenchError if it fails."""
    argv = ["train", "--model", model, "--data", data, "--algo", algo, "--batch-size", str(args.batch_size),
            "--epochs", "1000", "--max-steps", str(steps), "--quiet", "--overwrite", "--out", str(out), "--seed", "0"]
    if P:
        argv += ["--virtual-ranks", str(P)]
    usage_file = out.with_suffix(".usage.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    load_before, t0 = load_avg(), time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(usage_file), *argv], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise VirtualBenchError(f"minips {' '.join(argv)} took more than {timeout:.0f} s; give --timeout") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise VirtualBenchError(f"minips {' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    usage = json.loads(usage_file.read_text())
    rows = list(csv.DictReader(open(out / "trace.csv")))
    steady = rows[-args.steps:]
    summary = json.loads((out / "summary.json").read_text())
    ranks = max(P, 1)
    samples = ranks * args.batch_size
    step_s = sum(float(r["step_s"]) for r in steady) / len(steady)
    cpu_s = sum(float(r["process_cpu_s"]) for r in steady) / len(steady)
    return {"ranks": ranks, "virtual": bool(P), "model": model, "data": data, "algo": algo, "steps": len(rows),
            "steady_steps": len(steady), "step_s": step_s, "s_per_sample": step_s / samples,
            "cpu_s_per_step": cpu_s, "cpu_s_per_sample": cpu_s / samples, "process_cpu_s": usage["cpu_s"],
            "peak_rss_bytes": usage["maxrss_bytes"],
            "threads_per_rank": summary.get("threads_per_rank"), "test_accuracy": summary.get("test_accuracy"),
            "wall_s": wall, "load_before": load_before, "load_after": load_avg(),
            "command": "python -m minips " + " ".join(argv)}


def format_table(res: dict) -> str:
    """The cost table and the memory table, as text."""
    lines = []
    base = next((r for r in res["time"] if not r["virtual"]), None)
    if res["time"]:
        lines.append(f"time per training sample: {res['options']['model']} on {res['options']['data']}, "
                     f"{res['options']['algo']}, batch {res['options']['batch_size']}/rank, steady mean over the "
                     f"last {res['options']['steps']} of {res['options']['steps'] + res['options']['warmup']} steps")
        lines.append(f"{'run':<22}{'ranks':>6}{'step ms':>10}{'ms/sample':>11}{'ratio':>7}{'CPU ms/sample':>15}"
                     f"{'CPU ratio':>10}{'peak RSS':>10}  load 1 min")
        for r in res["time"]:
            ratio = r["s_per_sample"] / base["s_per_sample"] if base else None
            cratio = (r["cpu_s_per_sample"] / base["cpu_s_per_sample"]
                      if base and r["cpu_s_per_sample"] and base["cpu_s_per_sample"] else None)
            name = f"VIRTUAL x{r['ranks']}" if r["virtual"] else f"plain train ({r['threads_per_rank']} thr)"
            ratio_s = "" if ratio is None else f"{ratio:.2f}x"
            cratio_s = "" if cratio is None else f"{cratio:.2f}x"
            lines.append(f"{name:<22}{r['ranks']:>6}{1e3 * r['step_s']:>10.1f}{1e3 * r['s_per_sample']:>11.3f}"
                         f"{ratio_s:>7}{1e3 * r['cpu_s_per_sample']:>15.3f}{cratio_s:>10}"
                         f"{_gb(r['peak_rss_bytes']):>10}  {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}")
    if res["memory"]:
        m0 = res["memory"][0]
        lines.append(f"peak memory (VmHWM) of {m0['ranks']} VIRTUAL ranks: {m0['model']} on {m0['data']}, "
                     f"{m0['steps']} steps")
        for r in res["memory"]:
            lines.append(f"  {r['algo']:<28}{_gb(r['peak_rss_bytes']):>10}  (wall {r['wall_s']:.0f} s, load "
                         f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f})")
    lines.append(f"cpu: {res['machine']['cpu']}; ratio = per-sample time over plain "
                 "train's; CPU = CPU seconds of the whole process (all threads) in the same steps, per sample")
    return "\n".join(lines)


def _gb(b) -> str:
    return "" if b is None else f"{b / 2**30:.2f} GiB"


def add_arguments(p):
    p.add_argument("--ranks", default="16,64,128", help="virtual rank counts to time (default 16,64,128)")
    p.add_argument("--model", default="convnet", help="model of the time runs (default convnet)")
    p.add_argument("--data", default="fashion-mnist-mini", help="data of the time runs (default fashion-mnist-mini)")
    p.add_argument("--algo", help="algorithm spec of the time runs (default: the registry's baseline)")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument("--steps", type=int, default=50, help="steady steps timed per run (default 50)")
    p.add_argument("--warmup", type=int, default=10, help="steps before them, not timed (default 10)")
    p.add_argument("--memory-ranks", type=int, default=128, help="virtual ranks of the memory runs (default 128; "
                                                                  "0 = no memory runs)")
    p.add_argument("--memory-model", default="convnet", help="model of the memory runs (default convnet)")
    p.add_argument("--memory-data", default="fashion-mnist", help="data of the memory runs (default fashion-mnist)")
    p.add_argument("--memory-algos", help="comma-separated specs of the memory runs (default: the registry's "
                                          "baseline and default algorithms)")
    p.add_argument("--memory-steps", type=int, default=5, help="steps of each memory run (default 5)")
    p.add_argument("--timeout", type=finite_float, default=7200, help="seconds per run (default 7200)")
    p.add_argument("--json", metavar="OUT", default="bench-virtual.json",
                   help="write the results here, and the table beside it as OUT.txt (default bench-virtual.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    """Run the benchmark, print the tables, write the JSON (and the text). Returns 0.

    Raises:
        VirtualBenchError: bad option, run under mpiexec, or a run failed.
    """
    from ..distributed.algorithms import BASELINE, DEFAULT
    from ..distributed.comm import launched_by_mpi
    from ..kernels import cpuinfo
    from ..kernels.threads import cores_on_node

    if launched_by_mpi():
        raise VirtualBenchError("bench virtual runs its ranks as threads of one process: start it without mpiexec")
    ranks = _ints("--ranks", args.ranks) if args.ranks else []
    for flag, v in (("--steps", args.steps), ("--batch-size", args.batch_size), ("--memory-steps", args.memory_steps)):
        if v < 1:
            raise VirtualBenchError(f"{flag} must be >= 1, got {v}")
    if args.warmup < 0 or args.memory_ranks < 0:
        raise VirtualBenchError("--warmup and --memory-ranks must be >= 0")
    algo = args.algo or BASELINE
    mem_algos = [a for a in (args.memory_algos or f"{BASELINE},{DEFAULT}").split(",") if a]
    machine = {"cpu": cpuinfo.describe(), "cores": cores_on_node(), "python": platform.python_version(),
               "host": platform.node()}
    res = {"machine": machine, "options": {"model": args.model, "data": args.data, "algo": algo,
                                           "batch_size": args.batch_size, "steps": args.steps, "warmup": args.warmup,
                                           "ranks": ranks, "memory_ranks": args.memory_ranks,
                                           "memory_model": args.memory_model, "memory_data": args.memory_data,
                                           "memory_algos": mem_algos, "memory_steps": args.memory_steps},
           "time": [], "memory": [], "load_start": load_avg()}
    with tempfile.TemporaryDirectory(prefix="minips-bench-virtual-") as tmp:
        for P in [0, *ranks]:
            r = run_train(P, args, args.model, args.data, algo, args.warmup + args.steps, Path(tmp) / f"t{P}",
                          args.timeout)
            res["time"].append(r)
            print(f"{'VIRTUAL x' + str(P) if P else 'plain train'}: {1e3 * r['s_per_sample']:.3f} ms/sample, "
                  f"peak {_gb(r['peak_rss_bytes'])}, load {r['load_before'][0]} -> {r['load_after'][0]}",
                  flush=True)
        if args.memory_ranks:
            for a in mem_algos:
                r = run_train(args.memory_ranks, args, args.memory_model, args.memory_data, a, args.memory_steps,
                              Path(tmp) / f"m-{a.replace(':', '-')}", args.timeout)
                res["memory"].append(r)
                print(f"memory, {a} x{args.memory_ranks}: peak {_gb(r['peak_rss_bytes'])}", flush=True)
    res["load_end"] = load_avg()
    text = format_table(res)
    print(text)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1))
        out.with_suffix(".txt").write_text(text + "\n")
        print(f"wrote {out} and {out.with_suffix('.txt')}")
    return 0
