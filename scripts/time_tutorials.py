"""Time every tutorial step as tutorials/README.md's table states it: the whole
step run as a script in normal mode with MINIPS_TUTORIAL_SOLUTIONS=1 (the
reference answers fill the exercises), one Numba/BLAS thread per process, MPI
steps under ``mpiexec -n N``. Prints, per step, the load average before it, its
wall-clock seconds and the CPU seconds (user + system) of all its processes;
the header names the CPU. The raw file of the table:

    python scripts/time_tutorials.py > docs/bench/tutorials-time.txt
    python scripts/time_tutorials.py 12_gossip 13_compression     # some steps only

Outputs go to a temporary folder (MINIPS_TUTORIAL_OUT), not runs/tutorials.
"""
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: step -> processes (as tests/test_tutorials.py runs them)
STEPS = {"01_tensors_and_autograd": 1, "02_layers_and_kernels": 1, "03_train_a_convnet": 1, "04_mpi_basics": 2,
         "05_sync_sgd": 2, "06_overlap_buckets": 2, "07_pseudo_sync": 2, "08_predictors": 1,
         "09_video_captioning": 2, "10_scaling_and_clusters": 1, "11_local_sgd": 1, "12_gossip": 1,
         "13_compression": 1}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(steps) -> int:
    from minips.kernels import cpuinfo
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise SystemExit(f"unknown step(s) {unknown}; the steps: {', '.join(STEPS)}")
    print(f"# tutorials, normal mode, MINIPS_TUTORIAL_SOLUTIONS=1, 1 thread per process; cpu: {cpuinfo.describe()}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S')}; load average (1, 5, 15 min) before each step")
    print(f"{'step':<26} {'processes':>9} {'load before':>18} {'wall s':>8} {'cpu s':>8} {'exit':>5}")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="minips-tutorials-") as tmp:
        env = {**os.environ, "MINIPS_TUTORIAL_SOLUTIONS": "1", "MINIPS_TUTORIAL_OUT": tmp, "MPLBACKEND": "Agg",
               "NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        env.pop("MINIPS_TUTORIAL_FAST", None)
        for step in steps:
            n = STEPS[step]
            cmd = [sys.executable, str(ROOT / "tutorials" / f"{step}.py")]
            if n > 1:
                cmd = ["mpiexec", "-n", str(n), *cmd]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            lb, t0 = load(), time.perf_counter()
            r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            print(f"{step:<26} {n:>9} {lb:>18} {wall:8.1f} {cpu:8.1f} {r.returncode:>5}", flush=True)
            if r.returncode:
                failed += 1
                print("# its output's end:\n# " + "\n# ".join((r.stdout + r.stderr)[-2000:].splitlines()))
    print(f"# load average after: {load()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or list(STEPS)))
