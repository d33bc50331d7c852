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

Because the clock is uncertain, the peak is also *measured*:

- :func:`measure_vector_peak` (the benchmark's %peak): for each vector width
  the CPU has (128, 256 and, with ``avx512f``, 512 bits) a loop of 12
  independent fused multiply-add chains on ``<lanes x float>`` vectors,
  written directly in LLVM IR, compiled by llvmlite (the compiler Numba uses)
  for this CPU and called through ctypes. Writing the vectors explicitly
  avoids the auto-vectoriser's choice: LLVM *prefers* 256-bit vectors on most
  AVX-512 CPUs (Skylake-X to Sapphire Rapids, Zen 4), so a Numba loop never
  touches the 512-bit units there. The function carries
  ``"min-legal-vector-width"`` so the backend keeps 512-bit types whole, and
  the generated assembly is checked: the FMA instructions must name ``zmm``
  (512), ``ymm`` (256) or ``xmm`` (128) registers, else that width is marked
  unverified. 12 chains cover the FMA latency (4 cycles) times 2 units with
  room to spare, and fit in 16 vector registers. The peak is the best width.
- :func:`measure_fma_gflops`: the same idea as a plain Numba loop, i.e. the
  most an auto-vectorised Numba kernel reaches (printed for reference).
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

__all__ = ["CPUInfo", "detect", "describe", "measure_fma_gflops",
           "measure_vector_peak", "fma_loop_ir", "measure_bandwidth_gbs"]


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


def describe() -> str:
    """This CPU in one line, for the header of every timing file, e.g.
    ``AMD EPYC, AuthenticAMD family 25 model 1, AVX2, 2 cores``.

    The model name alone does not tell the CPU generation inside a virtual
    machine ("AMD EPYC" was a Zen 3 in one session and a Zen 4 in another), so
    the vendor's family and model numbers and the widest vector instruction set
    go with it. Outside Linux the fields /proc/cpuinfo lacks are left out.
    The cores are the machine's; when this process may run on fewer (a rank
    bound by ``mpiexec -bind-to core``, taskset), it says how many, e.g.
    ``2 cores (1 usable by this process)``."""
    from .threads import cores_on_node
    fields = _cpuinfo_fields()
    info = detect()
    ident = " ".join(f"{k} {fields[f]}" for k, f in (("family", "cpu family"), ("model", "model")) if f in fields)
    vendor = fields.get("vendor_id", "")
    usable = cores_on_node()
    total = max(os.cpu_count() or usable, usable)
    cores = f"{total} cores" + ("" if usable == total else f" ({usable} usable by this process)")
    parts = [info.model, f"{vendor} {ident}".strip(), info.simd, cores]
    return ", ".join(p for p in parts if p)


@njit(fastmath=True, cache=True, nogil=True)
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
    (Numba, ``fastmath``): what the auto-vectoriser makes of a plain loop.
    Best of many runs of about 1 ms each (see :func:`measure_vector_peak`)."""
    a, b = np.float32(0.999), np.float32(0.001)
    _fma_chains(10, a, b)                       # compile / load
    n = 1000
    while n < 1 << 30:
        t = time.perf_counter()
        _fma_chains(n, a, b)
        if time.perf_counter() - t > 0.0005:
            break
        n *= 2
    n *= 2
    best = np.inf
    for _ in range(max(5, int(seconds / 0.001))):
        t = time.perf_counter()
        _fma_chains(n, a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * 64 * n / best / 1e9


#: independent FMA dependency chains in :func:`fma_loop_ir`
FMA_CHAINS = 12
_REGS = {128: "xmm", 256: "ymm", 512: "zmm"}
_KEEP_ALIVE: list = []   # compiled probes (their machine code must outlive the ctypes wrappers)


def fma_loop_ir(bits: int, chains: int = FMA_CHAINS) -> str:
    """LLVM IR of ``float fma_chains(i64 n, float a, float b)``: ``chains``
    accumulators of ``bits/32`` float lanes, each updated ``acc = fma(acc, a, b)``
    n times (2 x lanes x chains x n FLOPs); returns lane 0 of their sum."""
    lanes = bits // 32
    v = f"<{lanes} x float>"
    fma = f"@llvm.fma.v{lanes}f32"
    lines = [f"declare {v} {fma}({v}, {v}, {v})",
             "define float @fma_chains(i64 %n, float %a, float %b) #0 {", "entry:",
             f"  %a0 = insertelement {v} undef, float %a, i32 0",
             f"  %va = shufflevector {v} %a0, {v} undef, <{lanes} x i32> zeroinitializer",
             f"  %b0 = insertelement {v} undef, float %b, i32 0",
             f"  %vb = shufflevector {v} %b0, {v} undef, <{lanes} x i32> zeroinitializer",
             "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %x{c} = phi {v} [%vb, %entry], [%y{c}, %loop]" for c in range(chains)]
    lines += [f"  %y{c} = call {v} {fma}({v} %x{c}, {v} %va, {v} %vb)" for c in range(chains)]
    lines += ["  %i1 = add i64 %i, 1", "  %c = icmp ult i64 %i1, %n",
              "  br i1 %c, label %loop, label %exit", "exit:"]
    prev = "%y0"
    for c in range(1, chains):
        lines.append(f"  %s{c} = fadd {v} {prev}, %y{c}")
        prev = f"%s{c}"
    lines += [f"  %r = extractelement {v} {prev}, i32 0", "  ret float %r", "}",
              f'attributes #0 = {{ "min-legal-vector-width"="{bits}" "prefer-vector-width"="{bits}" }}']
    return "\n".join(lines)


def _compile_probe(bits: int):
    """(ctypes function, FMA instruction lines of its assembly) for one width."""
    import ctypes

    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3)
    mod = llvm.parse_assembly(fma_loop_ir(bits))
    mod.verify()
    fmas = [ln.strip() for ln in tm.emit_assembly(mod).splitlines()
            if ln.strip().lower().startswith(("vfmadd", "vfmsub", "fmla", "fmadd"))]
    ee = llvm.create_mcjit_compiler(mod, tm)
    ee.finalize_object()
    _KEEP_ALIVE.append(ee)
    proto = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)
    return proto(ee.get_function_address("fma_chains")), fmas


def measure_vector_peak(info: CPUInfo | None = None, seconds: float = 0.6) -> dict:
    """Measured float32 GFLOP/s of one core for each vector width this CPU has.

    The widths are run in turn, many short runs each (best of, about
    ``seconds`` in all). Each run lasts about 1 ms, shorter than a scheduler
    time slice: on a core shared with other processes some runs then have the
    core to themselves (measured on a 2-core machine at load 28: runs of
    1-2 ms reached 118 GFLOP/s, runs of 10 ms never more than 16).

    Returns:
        ``{"gflops": {bits: GFLOP/s}, "verified": {bits: bool}, "instruction":
        {bits: one FMA line of the assembly}, "best_bits": bits,
        "peak_gflops_per_core": max, "method": text}``; ``{}`` (and the
        caller falls back to :func:`measure_fma_gflops`) if llvmlite cannot
        compile for this machine.
    """
    info = info or detect()
    widths = [b for b in (128, 256, 512) if b <= max(info.isa_bits, 128)]
    try:
        probes = {b: _compile_probe(b) for b in widths}
    except Exception:   # noqa: BLE001 - an exotic target: no probe, the caller says so
        return {}
    a, b = 0.999, 0.001
    n = {}
    for bits, (f, _) in probes.items():   # size each run to about 1 ms (best of 5 tries per size)
        f(1000, a, b)
        k = 10_000
        while k < 1 << 28:
            dt = np.inf
            for _ in range(5):
                t = time.perf_counter()
                f(k, a, b)
                dt = min(dt, time.perf_counter() - t)
            if dt > 0.0005:
                break
            k *= 2
        n[bits] = 2 * k
    best = dict.fromkeys(probes, np.inf)
    rounds = max(5, int(seconds / 0.001 / len(probes)))
    for _ in range(rounds):
        for bits, (f, _) in probes.items():
            t = time.perf_counter()
            f(n[bits], a, b)
            best[bits] = min(best[bits], time.perf_counter() - t)
    gf = {bits: 2 * (bits // 32) * FMA_CHAINS * n[bits] / best[bits] / 1e9 for bits in probes}
    reg = {bits: any(_REGS[bits] in ln for ln in fmas) if platform.machine() in ("x86_64", "AMD64") else None
           for bits, (_, fmas) in probes.items()}
    top = max(gf, key=gf.get)
    return {"gflops": gf, "verified": reg, "instruction": {bits: (fm[0] if fm else None)
                                                             for bits, (_, fm) in probes.items()},
            "best_bits": top, "peak_gflops_per_core": gf[top],
            "method": (f"LLVM IR loop of {FMA_CHAINS} independent <lanes x float> FMA chains per width, compiled "
                       "by llvmlite for this CPU (assembly checked for the register width), best of "
                       f"{rounds} runs")}


@njit(parallel=True, cache=True, nogil=True)
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
