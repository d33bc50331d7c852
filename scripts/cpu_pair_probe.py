"""Do two ranks on this machine compute as fast as one? A float32 GEMM
(256x256, one BLAS thread) for 4 s on core 0 alone, then on cores 0 and 1 at
the same time (one process each, pinned). On a machine whose cores are
independent, each of the pair runs at the single-core speed; if they share a
physical core (SMT siblings under a hypervisor), a power or thermal budget, or
other users' work, each gets less.

    python scripts/cpu_pair_probe.py          (prints GFLOP/s; run on a quiet machine)
"""
import os
import subprocess
import sys

CHILD = """
import time, numpy as np
a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
for _ in range(20): a @ a
t = time.perf_counter(); n = 0
while time.perf_counter() - t < 4: a @ a; n += 1
print(2 * 256**3 * n / (time.perf_counter() - t) / 1e9)
"""


def run(cores):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                              text=True, env=env) for c in cores]
    return [float(p.communicate()[0]) for p in procs]


if __name__ == "__main__":
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    alone = run([0])[0]
    pair = run([0, 1])
    print(f"one process on core 0:            {alone:6.1f} GFLOP/s")
    print(f"two processes on cores 0 and 1:   {pair[0]:6.1f} + {pair[1]:6.1f} GFLOP/s "
          f"(each {100 * sum(pair) / 2 / alone:.0f}% of alone)")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
