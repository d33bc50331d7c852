"""How fast could this CPU go? Peak float32 FLOP/s, stated and measured.

The arithmetic (for one core)::

    peak = SIMD lanes  x  2 (a fused multiply-add is 2 FLOPs)  x  FMA units  x  clock
         = (vector bits / 32) x 2 x units x GHz            [GFLOP/s]

e.g. AVX2 (256 bits = 8 float32 lanes), 2 FMA units, 2.45 GHz:
8 x 2 x 2 x 2.45 = 78.4 GFLOP/s per core. Multiply by the cores used.

What each factor comes from:

- vector bits: the CPU flags in ``/proc/cpuinfo`` (``avx512f`` -> 512,
  ``avx2``/``fma`` -> 256, otherwise 128: SSE or ARM NEON). AMD Zen 4 runs
  AVX-512 on 256-bit units (two passes), so for AMD CPUs with AVX-512 before
  Zen 5 (family 25) we count 256 bits: the same FLOPs per cycle.
- FMA units per core: 2 on current x86 server and desktop cores (Intel since
  Haswell, AMD since Zen 2); some AVX-512 Xeons have only one 512-bit unit.
  Not visible from software: override with ``MINIPS_FMA_UNITS``.
- clock: ``cpuinfo_max_freq`` from sysfs when the kernel exposes it (the turbo
  clock), otherwise ``cpu MHz`` from /proc/cpuinfo, which in a virtual machine
  is often the *nominal* clock while the core runs faster. Override with
  ``MINIPS_CPU_GHZ``.

Because the clock is uncertain, :func:`measure_fma_gflops` also *measures* the
rate of a loop of independent multiply-adds compiled by Numba (the most any
Numba kernel can reach on one core); the benchmark reports both.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

__all__ = ["CPUInfo", "detect", "measure_fma_gflops", "measure_bandwidth_gbs"]


@dataclass
class CPUInfo:
    """What :func:`detect` found (see the module docstring for the formula)."""
    model: str
    vendor: str
    cores: int
    simd: str
    vector_bits: int
    fma_units: int
    ghz: float
    ghz_source: str
    isa_bits: int = 0

    @property
    def lanes(self) -> int:
        """float32 values per vector register."""
        return self.vector_bits // 32

    @property
    def flops_per_cycle(self) -> int:
        """float32 FLOPs one core can start per cycle."""
        return self.lanes * 2 * self.fma_units

    @property
    def peak_gflops_per_core(self) -> float:
        return self.flops_per_cycle * self.ghz

    def peak_gflops(self, threads: int = 1) -> float:
        """Peak float32 GFLOP/s of ``threads`` cores."""
        return self.peak_gflops_per_core * threads

    def arithmetic(self) -> str:
        """The formula with this CPU's numbers, as one line of text."""
        return (f"{self.lanes} lanes ({self.simd}, {self.vector_bits} bit) x 2 (FMA) x "
                f"{self.fma_units} FMA units x {self.ghz:.2f} GHz ({self.ghz_source}) = "
                f"{self.peak_gflops_per_core:.1f} GFLOP/s float32 per core")


def _cpuinfo_fields() -> dict:
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, v = line.split(":", 1)
                    fields.setdefault(k.strip(), v.strip())   # the first CPU's values
    except OSError:
        pass
    return fields


def _vector_width(flags: set, vendor: str, family: int) -> tuple[str, int]:
    if "avx512f" in flags:
        if vendor == "AuthenticAMD" and family <= 25:    # Zen 4: 2 x 256-bit passes
            return "AVX-512 on 256-bit units", 256
        return "AVX-512", 512
    if "avx2" in flags or "fma" in flags:
        return "AVX2", 256
    if "avx" in flags:
        return "AVX", 256
    if platform.machine() in ("aarch64", "arm64"):
        return "NEON", 128
    return "SSE", 128


def _clock_ghz(fields: dict) -> tuple[float, str]:
    if os.environ.get("MINIPS_CPU_GHZ"):
        return float(os.environ["MINIPS_CPU_GHZ"]), "MINIPS_CPU_GHZ"
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as f:
            return int(f.read()) / 1e6, "cpufreq max"
    except (OSError, ValueError):
        pass
    try:
        return float(fields["cpu MHz"]) / 1e3, "/proc/cpuinfo 'cpu MHz', maybe nominal"
    except (KeyError, ValueError):
        return 2.0, "unknown, assumed"


def detect() -> CPUInfo:
    """Inspect this machine (Linux; elsewhere falls back to assumptions that
    :meth:`CPUInfo.arithmetic` prints, so they are visible)."""
    from .threads import cores_on_node
    fields = _cpuinfo_fields()
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    vendor = fields.get("vendor_id", platform.machine())
    try:
        family = int(fields.get("cpu family", "0"))
    except ValueError:
        family = 0
    simd, bits = _vector_width(flags, vendor, family)
    units = int(os.environ.get("MINIPS_FMA_UNITS", "2"))
    ghz, source = _clock_ghz(fields)
    model = fields.get("model name", platform.processor() or platform.machine())
    isa = 512 if "avx512f" in flags else (256 if flags & {"avx", "avx2", "fma"} else 128)
    return CPUInfo(model, vendor, cores_on_node(), simd, bits, units, ghz, source, isa)


@njit(fastmath=True, cache=True)
def _fma_chains(n, a, b):
    # 64 independent accumulators: enough vector registers' worth of separate
    # dependency chains to keep every FMA unit busy despite its latency.
    acc = np.zeros(64, np.float32)
    for _ in range(n):
        for j in range(64):
            acc[j] = acc[j] * a + b
    return acc.sum()


def measure_fma_gflops(seconds: float = 0.2) -> float:
    """Measured float32 GFLOP/s of one core running independent multiply-adds
    (Numba, ``fastmath``). Best of a few runs of about ``seconds`` each."""
    a, b = np.float32(0.999), np.float32(0.001)
    _fma_chains(10, a, b)                       # compile / load
    n = 100_000
    while True:
        t = time.perf_counter()
        _fma_chains(n, a, b)
        dt = time.perf_counter() - t
        if dt > seconds / 4 or n > 1 << 30:
            break
        n *= 4
    best = dt
    for _ in range(3):
        t = time.perf_counter()
        _fma_chains(n, a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * 64 * n / best / 1e9


@njit(parallel=True, cache=True)
def _copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


def measure_bandwidth_gbs(mbytes: int = 128) -> float:
    """Measured memory bandwidth in GB/s (1e9 bytes/s) of a parallel copy of
    ``mbytes`` MB (bytes read + bytes written), using Numba's current thread
    count. Use an array much larger than the last-level cache. Best of 5."""
    n = mbytes * 1_000_000 // 4
    src = np.ones(n, np.float32)
    dst = np.empty_like(src)
    _copy(src, dst)                              # compile, and touch every page
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        _copy(src, dst)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9
