"""``python -m minips bench kernels``: time every kernel against its NumPy twin
and (when importable) the same operation in PyTorch CPU at equal threads.

For each kernel and shape (the ConvNet's layer shapes at batch 64 and 128,
plus a 3->64 convolution on 32x32 images) the table shows milliseconds for
Numba, the NumPy twin and PyTorch, the ratios numba/torch and numpy/numba,
and what the kernel achieves: GFLOP/s and the fraction of this CPU's float32
peak for compute-bound kernels (convolutions), GB/s and the fraction of the
measured memory bandwidth for memory-bound ones (pooling, ReLU). How the
peak is computed: :mod:`minips.kernels.cpuinfo` and ``docs/kernels.md``.

Times are the *best* of several runs (a shared machine only ever adds time).

Adding cases: write a provider, a function ``provider(ctx) -> iterable of
:class:`~minips.bench.cases.Case```, and add it to the table :data:`KERNEL_CASES`
(the LSTM's provider lives in ``minips/bench/lstm.py``).
"""
from __future__ import annotations

import json
import os
import platform
import time

import numpy as np

from .cases import BenchContext, Case
from .lstm import lstm_cases

__all__ = ["Case", "BenchContext", "KERNEL_CASES", "time_call", "run_cases", "run"]


# --- the cases of this module -----------------------------------------------------
def _conv_shapes(batches):
    """(N, C, K, H) of the ConvNet's two convolutions, and 3->64 on 32x32."""
    for n in batches:
        yield n, 1, 32, 28
        yield n, 32, 64, 14
        yield n, 3, 64, 32


def conv_cases(ctx: BenchContext):
    from ..kernels import conv
    from ..kernels import reference as ref
    from ..kernels.arena import Arena
    torch = ctx.torch
    for N, C, K, H in _conv_shapes(ctx.batches):
        x, w, b = ctx.randn(N, C, H, H), ctx.randn(K, C, 3, 3), ctx.randn(K)
        gy = ctx.randn(N, K, H, H)
        # The ConvNet needs no gradient for its input images: the first layer
        # skips dL/dx, as PyTorch does when the input does not require grad.
        need_x = C > 3
        flops1 = conv.geometry(x.shape, w.shape, 1, 1).flops_forward
        shape = f"N{N} {C}->{K} {H}x{H} k3"

        # minips gets what its layers pass: channels-last activations and
        # gradients (kernels/layout.py), work buffers from the layer's arena
        # (kernels/arena.py); PyTorch below gets its default, NCHW tensors.
        xl, gyl = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, gy))
        arena = Arena()

        def numba_fwd(x=xl, w=w, b=b, arena=arena):
            return conv.conv2d_forward(x, w, b, 1, 1, arena=arena)

        def numba_fwd_bwd(x=xl, w=w, b=b, gy=gyl, need_x=need_x, arena=arena):
            _, saved = conv.conv2d_forward(x, w, b, 1, 1, arena=arena)
            return conv.conv2d_backward(gy, w, saved, need_x=need_x, arena=arena)

        def numpy_fwd(x=x, w=w, b=b):
            return ref.conv2d_forward(x, w, b, 1, 1)

        def numpy_fwd_bwd(x=x, w=w, b=b, gy=gy, need_x=need_x):
            ref.conv2d_forward(x, w, b, 1, 1)
            ref.conv2d_backward_weight(gy, x, w.shape, 1, 1)
            if need_x:
                ref.conv2d_backward_data(gy, w, x.shape, 1, 1)

        t_fwd = t_fwd_bwd = None
        if torch is not None:
            F = torch.nn.functional
            xt, wt, bt, gyt = (torch.from_numpy(a) for a in (x, w, b, gy))
            xg = xt.clone().requires_grad_(need_x)
            wg, bg = wt.clone().requires_grad_(), bt.clone().requires_grad_()

            def t_fwd(xt=xt, wt=wt, bt=bt, F=F):
                with torch.no_grad():
                    return F.conv2d(xt, wt, bt, padding=1)

            def t_fwd_bwd(xg=xg, wg=wg, bg=bg, gyt=gyt, F=F):
                F.conv2d(xg, wg, bg, padding=1).backward(gyt)
                xg.grad = wg.grad = bg.grad = None
        yield Case("conv2d fwd", shape, numba_fwd, numpy_fwd, t_fwd, flops=flops1)
        yield Case("conv2d fwd+bwd", shape, numba_fwd_bwd, numpy_fwd_bwd, t_fwd_bwd,
                   flops=flops1 * (3 if need_x else 2))


def _activation_shapes(batches):
    for n in batches:
        yield n, 32, 28
        yield n, 64, 14


def pool_cases(ctx: BenchContext):
    from ..kernels import pool
    from ..kernels import reference as ref
    from ..kernels.arena import Arena
    torch = ctx.torch
    for N, C, H in _activation_shapes(ctx.batches):
        x = ctx.randn(N, C, H, H)
        y, argmax = pool.maxpool2d_forward(x, 2, 2)
        gy = ctx.randn(*y.shape)
        shape = f"N{N} C{C} {H}x{H} k2"
        # least traffic: read x, write y and argmax (int32) / read gy, argmax, write gx
        fwd_bytes = x.nbytes + y.nbytes + argmax.nbytes
        bwd_bytes = gy.nbytes + argmax.nbytes + x.nbytes
        t_fwd = t_fwd_bwd = None
        if torch is not None:
            F = torch.nn.functional
            xt, gyt = torch.from_numpy(x), torch.from_numpy(gy)
            xg = xt.clone().requires_grad_()

            def t_fwd(xt=xt, F=F):
                with torch.no_grad():
                    return F.max_pool2d(xt, 2)

            def t_fwd_bwd(xg=xg, gyt=gyt, F=F):
                F.max_pool2d(xg, 2).backward(gyt)
                xg.grad = None
        # minips gets channels-last inputs and an arena, as its layers do (see conv_cases)
        xl, gyl = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, gy))
        arena = Arena()
        yield Case("maxpool2d fwd", shape, lambda x=xl, arena=arena: pool.maxpool2d_forward(x, 2, 2, arena=arena),
                   lambda x=x: ref.maxpool2d_forward(x, 2, 2), t_fwd, bytes=fwd_bytes)

        def numba_mp(x=xl, gy=gyl, arena=arena):
            _, am = pool.maxpool2d_forward(x, 2, 2, arena=arena)
            return pool.maxpool2d_backward(gy, am, x.shape, arena=arena)

        def numpy_mp(x=x, gy=gy):
            _, am = ref.maxpool2d_forward(x, 2, 2)
            return ref.maxpool2d_backward(gy, am, x.shape)
        yield Case("maxpool2d fwd+bwd", shape, numba_mp, numpy_mp, t_fwd_bwd, bytes=fwd_bytes + bwd_bytes)
        t_avg = None
        if torch is not None:
            def t_avg(xt=xt, F=F):
                with torch.no_grad():
                    return F.avg_pool2d(xt, 2)
        yield Case("avgpool2d fwd", shape, lambda x=xl, arena=arena: pool.avgpool2d_forward(x, 2, 2, arena=arena),
                   lambda x=x: ref.avgpool2d_forward(x, 2, 2), t_avg, bytes=x.nbytes + y.nbytes)


def elementwise_cases(ctx: BenchContext):
    from ..kernels import elementwise as ew
    from ..kernels import reference as ref
    torch = ctx.torch
    for N, C, H in _activation_shapes(ctx.batches):
        x = ctx.randn(N, C, H, H)
        gy = ctx.randn(N, C, H, H)
        y = ew.relu_forward(x)
        shape = f"N{N} C{C} {H}x{H}"
        t_fwd = t_bwd = None
        if torch is not None:
            xt, gyt, yt = (torch.from_numpy(a) for a in (x, gy, y))

            def t_fwd(xt=xt):
                return torch.relu(xt)

            def t_bwd(yt=yt, gyt=gyt):
                # what autograd's ReLU backward computes
                return torch.ops.aten.threshold_backward(gyt, yt, 0)
        yield Case("relu fwd", shape, lambda x=x: ew.relu_forward(x), lambda x=x: ref.relu_forward(x),
                   t_fwd, bytes=2 * x.nbytes)
        yield Case("relu bwd", shape, lambda y=y, gy=gy: ew.relu_backward(y, gy),
                   lambda y=y, gy=gy: ref.relu_backward(y, gy), t_bwd, bytes=3 * x.nbytes)


def loss_cases(ctx: BenchContext):
    from ..kernels import loss
    from ..kernels import reference as ref
    torch = ctx.torch
    for N in ctx.batches:
        z = ctx.randn(N, 10)
        y = ctx.rng.integers(0, 10, N)

        def numba_fb(z=z, y=y):
            _, p = loss.softmax_xent_forward(z, y)
            return loss.softmax_xent_backward(p, y, 1.0)

        def numpy_fb(z=z, y=y):
            _, p = ref.softmax_xent_forward(z, y)
            return ref.softmax_xent_backward(p, y, 1.0)
        t_fb = None
        if torch is not None:
            zg, yt = torch.from_numpy(z).requires_grad_(), torch.from_numpy(y)

            def t_fb(zg=zg, yt=yt):
                torch.nn.functional.cross_entropy(zg, yt).backward()
                zg.grad = None
        yield Case("softmax-xent fwd+bwd", f"N{N} C10", numba_fb, numpy_fb, t_fb)


# --- the per-stage breakdown of the convolutions (--breakdown) ---------------------------
#: The table of case providers, called in order: ``provider(ctx) -> iterable of Case``
#: (a new kernel's cases: a provider function and one entry here).
KERNEL_CASES: list = [conv_cases, pool_cases, elementwise_cases, loss_cases, lstm_cases]


def _stage_work(g, stage: str, pooled: bool, itemsize: int):
    """(bytes, flops) of one call of a conv stage (:class:`minips.kernels.conv.Stages`):
    the least traffic, each array read or written once (elements x itemsize; the
    int32 pool code, 4 bytes), and the multiply-adds x 2 of the products."""
    X = g.N * g.H * g.W * g.C
    Y = g.N * g.P * g.Q * g.K
    Z = g.N * (g.P // 2) * (g.Q // 2) * g.K if pooled else Y
    cols = g.N * g.P * g.Q * g.R * g.S * g.C
    wt = g.K * g.R * g.S * g.C
    gemm = 2 * Y * g.R * g.S * g.C
    e = itemsize
    return {
        "layout in": (2 * X * e, 0),
        "weights": (2 * wt * e, 0),
        "patch build": ((X + cols) * e, 0),
        "direct conv": ((X + wt + Y) * e, gemm),
        "GEMM fwd": ((cols + wt + Y) * e, gemm),
        "epilogue fwd": ((Y + Z) * e + (4 * Z if pooled else 0), 0),        # y read, z (+ code) written
        "epilogue bwd": ((Z + Y) * e + 4 * Z if pooled else 3 * Y * e, 0),  # gz (+ code) or out, gz read; G written
        "GEMM dW": ((Y + cols + wt) * e, gemm),
        "GEMM dX": ((Y + wt + cols) * e, gemm),
        "col2im": ((cols + X) * e, 0),
    }[stage]


#: stage order in the table: forward, then backward
STAGE_ORDER = ["layout in", "weights", "direct conv", "patch build", "GEMM fwd", "epilogue fwd",
               "epilogue bwd", "GEMM dW", "GEMM dX", "col2im"]


def conv_breakdown(batches, bandwidth_gbs: float, sgemm_gflops: float, clock: str = "wall",
                   reps: int = 20, dtype=np.float32) -> list:
    """Time each stage of the training path's convolution (forward with bias, ReLU
    and 2x2 max pooling fused, backward), on the shapes of the kernel table.

    Inputs are channels-last, as a layer receives them from the layer before;
    work buffers come from one arena (the steady state of training). Each stage's
    time is its best over ``reps`` forward+backward passes; ``total`` is the
    best whole pass. Per stage: bytes moved (:func:`_stage_work`) against
    ``bandwidth_gbs``, FLOP/s against ``sgemm_gflops``, and the *floor*, the
    time at the slower of the two roofs.

    Returns one dict per shape (and for C*R*S <= 27 a second one with the direct
    forward, labelled "direct fwd"): ``{"shape", "need_x", "total_ms", "stages": [...]}``.
    """
    from ..kernels import conv
    rng = np.random.default_rng(0)
    now = CLOCKS[clock]
    out = []
    for N, C, K, H in _conv_shapes(batches):
        x = np.ascontiguousarray(rng.standard_normal((N, H, H, C)).astype(dtype)).transpose(0, 3, 1, 2)
        w, b = rng.standard_normal((K, C, 3, 3)).astype(dtype), rng.standard_normal(K).astype(dtype)
        gz = np.ascontiguousarray(rng.standard_normal((N, H // 2, H // 2, K)).astype(dtype)).transpose(0, 3, 1, 2)
        g = conv.geometry(x.shape, w.shape, 1, 1)
        need_x = C > 3                  # as in the table: the first layer needs no dL/dx
        # the default path, and for few input channels also the direct forward, to compare
        for direct in [None] + ([True] if C * 9 <= 27 else []):
            out.append(_breakdown_one(conv, g, x, w, b, gz, need_x, direct, now, reps, bandwidth_gbs,
                                      sgemm_gflops, dtype, f"N{N} {C}->{K} {H}x{H} k3 +ReLU+pool2"
                                      + (" direct fwd" if direct else "")))
    return out


def _breakdown_one(conv, g, x, w, b, gz, need_x, direct, now, reps, bandwidth_gbs, sgemm_gflops, dtype, label):
    from ..kernels.arena import Arena
    arena = Arena()
    best, calls, total = {}, {}, np.inf
    for i in range(reps + 3):       # 3 warm-up passes: compilation, the arena fills
        st = conv.Stages(clock=now)
        t = now()
        _, saved = conv.conv2d_forward(x, w, b, 1, 1, relu=True, pool=2, arena=arena, stages=st, direct=direct)
        conv.conv2d_backward(gz, w, saved, need_x=need_x, arena=arena, stages=st)
        dt = now() - t
        if i < 3:
            continue
        total = min(total, dt)
        for k, v in st.seconds.items():
            best[k] = min(best.get(k, np.inf), v)
            calls[k] = st.work[k]       # how many times the stage's whole work was done
    stages = []
    for k in [s for s in STAGE_ORDER if s in best]:
        nbytes, flops = _stage_work(g, k, True, np.dtype(dtype).itemsize)
        if k == "layout in":
            nbytes = 0                      # channels-last inputs: views, nothing copied
        nbytes, flops = nbytes * calls[k], flops * calls[k]
        sec = best[k]
        floor = max(nbytes / (bandwidth_gbs * 1e9), flops / (sgemm_gflops * 1e9))
        stages.append({"stage": k, "passes": calls[k], "ms": sec * 1e3, "mbytes": nbytes / 1e6,
                       "gbs": nbytes / sec / 1e9 if sec > 0 else None,
                       "bandwidth_fraction": nbytes / sec / 1e9 / bandwidth_gbs if sec > 0 else None,
                       "gflops": flops / sec / 1e9 if flops and sec > 0 else None,
                       "sgemm_fraction": flops / sec / 1e9 / sgemm_gflops if flops and sec > 0 else None,
                       "floor_ms": floor * 1e3})
    return {"shape": label, "need_x": need_x, "total_ms": total * 1e3, "stages": stages}


def format_breakdown(blocks, bandwidth_gbs: float, sgemm_gflops: float) -> str:
    """The breakdown as text: one block per shape, one line per stage."""
    def f(v, fmt):
        return format(v, fmt) if v is not None else "-".rjust(int(fmt.split(".")[0]))
    head = (f"{'stage':<14}{'passes':>6}{'ms':>9}{'share':>7}{'MB':>9}{'GB/s':>8}{'%bw':>6}"
            f"{'GFLOP/s':>9}{'%sgemm':>8}{'floor ms':>10}")
    lines = [f"per-stage breakdown (best of the passes; roofs: bandwidth {bandwidth_gbs:.1f} GB/s, "
             f"sgemm {sgemm_gflops:.1f} GFLOP/s; floor = the time at the slower roof)"]
    for blk in blocks:
        lines += ["", f"{blk['shape']}{'' if blk['need_x'] else ' (no dL/dx)'}: "
                  f"whole pass {blk['total_ms']:.3f} ms", head, "-" * len(head)]
        staged = sum(s["ms"] for s in blk["stages"])
        for s in blk["stages"]:
            lines.append(f"{s['stage']:<14}{s['passes']:>6.0f}{s['ms']:9.3f}{100 * s['ms'] / blk['total_ms']:6.0f}%"
                         f"{s['mbytes']:9.2f}{f(s['gbs'], '8.1f')}"
                         f"{f(s['bandwidth_fraction'] and 100 * s['bandwidth_fraction'], '6.0f')}"
                         f"{f(s['gflops'], '9.1f')}{f(s['sgemm_fraction'] and 100 * s['sgemm_fraction'], '8.0f')}"
                         f"{s['floor_ms']:10.3f}")
        floor = sum(s["floor_ms"] for s in blk["stages"])
        lines.append(f"{'sum of stages':<20}{staged:9.3f}{100 * staged / blk['total_ms']:6.0f}%"
                     f"{'':>40}{floor:10.3f}")
        lines.append(f"  (the rest of the pass, {blk['total_ms'] - staged:.3f} ms, is Python between the stages; "
                     f"whole pass / floor = {blk['total_ms'] / floor:.2f})")
    return "\n".join(lines)


# --- timing -------------------------------------------------------------------------
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
    from ..kernels.threads import set_threads as set_kernel_threads
    n = set_kernel_threads(n)
    if torch is not None:
        torch.set_num_threads(n)
    return n


def _import_torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def collect_cases(ctx: BenchContext, only: str | None = None) -> list:
    """Every provider's cases (:data:`KERNEL_CASES`), optionally only those
    whose kernel or shape contains ``only``."""
    cases = [c for provider in KERNEL_CASES for c in provider(ctx)]
    if only:
        cases = [c for c in cases if only in c.kernel or only in c.shape]
    return cases


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


def machine_report(threads: int, torch, clock: str = "wall") -> dict:
    """CPU, peak (stated and measured), bandwidth, versions: the JSON header."""
    import numba

    from ..kernels import cpuinfo
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


# --- the command ----------------------------------------------------------------------
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
        ValueError: ``--only`` matches no case (the kernel names are listed).
    """
    from ..kernels import threads as kthreads
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
    print(f"CPU: {machine['cpu']}, {machine['cores']} cores; {n} thread(s) for Numba, BLAS"
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
