"""The per-stage breakdown of the training path's convolution (``bench kernels --breakdown``):
each stage timed against the bandwidth and sgemm roofs, and the result as text."""
from __future__ import annotations

import numpy as np

from .providers import conv_shapes
from .timing import CLOCKS

__all__ = ["STAGE_ORDER", "conv_breakdown", "format_breakdown"]


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
    from ...kernels import conv
    rng = np.random.default_rng(0)
    now = CLOCKS[clock]
    out = []
    for N, C, K, H in conv_shapes(batches):
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
    from ...kernels.arena import Arena
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
