"""The machine the kernels benchmark ran on: CPU, stated and measured peak, memory bandwidth,
sgemm rates and versions (the JSON header, :func:`machine_report`)."""
from __future__ import annotations

import platform

import numpy as np

from .timing import CLOCKS

__all__ = ["machine_report", "sgemm_rates", "info_fpc"]


def machine_report(threads: int, torch, clock: str = "wall") -> dict:
    """CPU, peak (stated and measured), bandwidth, versions: the JSON header."""
    import numba

    from ...kernels import cpuinfo
    info = cpuinfo.detect()
    numba_core = cpuinfo.measure_fma_gflops()
    vec = cpuinfo.measure_vector_peak(info)
    measured_core = vec.get("peak_gflops_per_core", numba_core)
    return {
        "cpu": cpuinfo.describe(), "cores": info.cores, "simd": info.simd, "vector_bits": info.vector_bits,
        "fma_units": info.fma_units, "ghz": info.ghz, "ghz_source": info.ghz_source,
        "peak_arithmetic": info.arithmetic(),
        "peak_gflops_per_core_stated": info.peak_gflops_per_core,
        "peak_gflops_per_core_measured": measured_core,
        "peak_method": vec.get("method", "Numba FMA loop (llvmlite probe unavailable)"),
        "peak_by_vector_bits": vec.get("gflops"), "peak_asm_verified": vec.get("verified"),
        "peak_fma_instruction": vec.get("instruction"), "peak_best_bits": vec.get("best_bits"),
        "numba_fma_loop_gflops": numba_core,
        "implied_ghz": measured_core / info.flops_per_cycle,
        "sgemm": sgemm_rates(torch, clock=clock),
        "threads": threads, "peak_gflops": measured_core * threads,
        "bandwidth_gbs": cpuinfo.measure_bandwidth_gbs(),
        "numpy": np.__version__, "numba": numba.__version__,
        "torch": getattr(torch, "__version__", None), "python": platform.python_version(),
        "threading_layer": None,
    }


def sgemm_rates(torch=None, n: int = 1024, reps: int = 30, clock: str = "wall") -> dict:
    """GFLOP/s of an n x n float32 matrix product with the current thread
    settings, by NumPy's BLAS and (if given) PyTorch; best of ``reps`` runs
    taken in turn, timed by ``clock`` (see :func:`time_call`).
    Returns ``{"numpy": ..., "torch": ..., "fastest": name, "n": n}``."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    fns = {"numpy": lambda: a @ b}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch"] = lambda: ta @ tb
    best = dict.fromkeys(fns, np.inf)
    for f in fns.values():
        f()
    now = CLOCKS[clock]
    for _ in range(reps):
        for k, f in fns.items():
            t = now()
            f()
            best[k] = min(best[k], now() - t)
    out = {k: 2.0 * n ** 3 / v / 1e9 for k, v in best.items()}
    out["fastest"] = max(fns, key=lambda k: out[k])
    out["n"] = n
    return out


def info_fpc(machine: dict) -> float:
    """FLOPs per cycle per core the stated peak assumes."""
    return machine["peak_gflops_per_core_stated"] / machine["ghz"]
