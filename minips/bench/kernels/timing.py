"""Timing the benchmark's cases: the best of several calls (:func:`time_call`), the thread
count of Numba, BLAS and torch (:func:`set_threads`), the rows of the table and the table as text."""
from __future__ import annotations

import time

import numpy as np

__all__ = ["CLOCKS", "time_call", "set_threads", "run_cases", "format_table"]

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def time_call(fn, min_reps: int = 5, min_seconds: float = 0.2, max_reps: int = 200, clock: str = "wall") -> float:
    """Best time of ``fn()`` in milliseconds, after two warm-up calls
    (compilation, first-touch page faults). Runs at least ``min_reps`` times and
    until ``min_seconds`` have passed (or ``max_reps``). ``clock="cpu"``: this
    process's CPU time (time descheduled by other processes is not counted;
    meaningful with one thread only)."""
    now = CLOCKS[clock]
    fn()
    fn()
    best, total, reps = np.inf, 0.0, 0
    while reps < min_reps or (total < min_seconds and reps < max_reps):
        t = now()
        fn()
        dt = now() - t
        best, total, reps = min(best, dt), total + dt, reps + 1
    return best * 1e3


def set_threads(n: int, torch=None) -> int:
    """Use ``n`` threads in Numba, BLAS (through threadpoolctl) and torch; returns n
    (capped at Numba's pool size)."""
    from ...kernels.threads import set_threads as set_kernel_threads
    n = set_kernel_threads(n)
    if torch is not None:
        torch.set_num_threads(n)
    return n



def run_cases(cases, threads: int, peak_gflops: float, bandwidth_gbs: float, quick: bool = False,
              clock: str = "wall") -> list:
    """Time each case; returns one dict per case (the JSON rows)."""
    reps = dict(min_reps=2, min_seconds=0.0) if quick else {}
    reps["clock"] = clock
    rows = []
    for c in cases:
        ms = {k: (time_call(f, **reps) if f is not None else None)
              for k, f in (("numba", c.numba), ("numpy", c.numpy), ("torch", c.torch))}
        row = {"kernel": c.kernel, "shape": c.shape, "threads": threads,
               "numba_ms": ms["numba"], "numpy_ms": ms["numpy"], "torch_ms": ms["torch"],
               "numba_over_torch": ms["numba"] / ms["torch"] if ms["torch"] else None,
               "numpy_over_numba": ms["numpy"] / ms["numba"] if ms["numpy"] else None,
               "gflops": c.flops / ms["numba"] / 1e6 if c.flops else None,
               "gbs": c.bytes / ms["numba"] / 1e6 if c.bytes else None}
        row["peak_fraction"] = row["gflops"] / peak_gflops if row["gflops"] else None
        row["bandwidth_fraction"] = row["gbs"] / bandwidth_gbs if row["gbs"] else None
        rows.append(row)
    return rows


def format_table(rows) -> str:
    """The rows as a fixed-width text table."""
    def f(v, fmt):
        return format(v, fmt) if v is not None else "-".rjust(int(fmt.split(".")[0]))
    head = (f"{'kernel':<22}{'shape':<24}{'numba ms':>9}{'numpy ms':>10}{'torch ms':>9}"
            f"{'nb/torch':>9}{'np/nb':>7}{'GFLOP/s':>9}{'%peak':>7}{'GB/s':>7}{'%bw':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        over = r["peak_fraction"] is not None and r["peak_fraction"] > 1
        lines.append(("*" if over else "")
                     + f"{r['kernel']:<22}{r['shape']:<24}{f(r['numba_ms'], '9.3f')}{f(r['numpy_ms'], '10.2f')}"
                     f"{f(r['torch_ms'], '9.3f')}{f(r['numba_over_torch'], '9.2f')}{f(r['numpy_over_numba'], '7.1f')}"
                     f"{f(r['gflops'], '9.1f')}"
                     f"{f(r['peak_fraction'] and 100 * r['peak_fraction'], '7.0f')}"
                     f"{f(r['gbs'], '7.1f')}{f(r['bandwidth_fraction'] and 100 * r['bandwidth_fraction'], '6.0f')}")
    return "\n".join(lines)
