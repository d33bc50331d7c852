"""LSTM benchmark: ``python -m minips bench lstm``.

Times the whole-sequence LSTM forward and forward+backward of

- ``numba``: :mod:`minips.kernels.lstm` (BLAS GEMMs + fused Numba step kernels),
- ``gemm-only``: the same BLAS calls with the step kernels left out, a lower
  bound that shows what the fused elementwise kernels add,
- ``twin``: the NumPy twin in :mod:`minips.kernels.reference`,
- ``torch``: ``torch.nn.LSTM`` on CPU, when torch is importable (optional),

at the issue's size (T=16, N=64, F=128, H=256) and the captioner's own
encoder and decoder sizes, float32, with the same number of threads for
everyone (``--threads``, default 1). The numba, twin and torch rows also
appear in ``python -m minips bench kernels`` (:func:`lstm_cases`, a row of its case table).

Each entry is the best of ``--repeat`` timed runs after two warm-up runs,
the implementations taking turns run by run: on a shared machine the minimum
is the least noisy estimate of what the code costs, and taking turns exposes
all of them to the same load, so their ratios are fair.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from .cases import Case

__all__ = ["CASES", "run", "format_table", "flops", "lstm_cases"]

#: name -> (T, N, F, H)
CASES = {
    "issue T16 N64 F128 H256": (16, 64, 128, 256),
    "captioner encoder": (10, 32, 128, 256),
    "captioner decoder": (10, 32, 32, 256),
}


def flops(T: int, N: int, F: int, H: int, backward: bool) -> float:
    """Floating-point operations of the GEMMs: forward ``2 T N 4H (F + H)``;
    backward twice that (gradients w.r.t. inputs and weights)."""
    fwd = 2.0 * T * N * 4 * H * (F + H)
    return 3 * fwd if backward else fwd


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _best_interleaved(fns: dict, repeat: int, clock: str = "wall") -> dict:
    """Best time in seconds of each ``fns[key]()``: two warm-up calls each
    (JIT compilation, caches, thread pools), then ``repeat`` rounds that call
    every function once in turn, so all see the same machine load.

    ``clock="cpu"`` measures this process's CPU time instead of wall time: with
    one thread, time spent waiting for a core that another process holds is
    not counted (use it on a loaded machine; with several threads it adds the
    threads' times up, so it is only meaningful for one thread).
    """
    now = CLOCKS[clock]
    for fn in fns.values():
        fn()
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for key, fn in fns.items():
            t = now()
            fn()
            best[key] = min(best[key], now() - t)
    return best


def _arrays(T, N, F, H, seed=0):
    """float32 inputs x (T, N, F) in [-1, 1], weights and bias in [-1/sqrt(H),
    1/sqrt(H)] (PyTorch's initial scale), output gradient (T, N, H)."""
    r = np.random.default_rng(seed)
    k = 1 / np.sqrt(H)
    return tuple(a.astype(np.float32) for a in (
        r.uniform(-1, 1, (T, N, F)), r.uniform(-k, k, (4 * H, F)), r.uniform(-k, k, (4 * H, H)),
        r.uniform(-k, k, 4 * H), r.standard_normal((T, N, H))))


def _kernel_fns(module, x, w_ih, w_hh, b, dh):
    def fwd():
        module.lstm_forward(x, w_ih, w_hh, b)

    def fwd_bwd():
        out = module.lstm_forward(x, w_ih, w_hh, b)
        module.lstm_backward(dh, None, None, x, w_ih, w_hh, None, None, *out)
    return fwd, fwd_bwd


def _gemm_only_fns(x, w_ih, w_hh, b, dh):
    """Exactly the BLAS calls of minips.kernels.lstm, without the step kernels."""
    T, N, F = x.shape
    four_h, H = w_hh.shape
    gates = np.empty((T, N, four_h), np.float32)
    zh = np.empty((N, four_h), np.float32)
    h = np.zeros((T, N, H), np.float32)
    dhr = np.empty((N, H), np.float32)

    def fwd():
        np.matmul(x.reshape(T * N, F), w_ih.T, out=gates.reshape(T * N, four_h))
        for t in range(T):
            np.matmul(h[t], w_hh.T, out=zh)

    def fwd_bwd():
        fwd()
        for t in range(T - 1, -1, -1):
            np.matmul(gates[t], w_hh, out=dhr)
        dz = gates.reshape(T * N, four_h)
        dz @ w_ih
        dz.T @ x.reshape(T * N, F)
        dz.T @ h.reshape(T * N, H)
        dz.sum(axis=0)
    return fwd, fwd_bwd


def _torch_fns(x, w_ih, w_hh, b, dh):
    import torch
    T, N, F = x.shape
    H = w_hh.shape[1]
    m = torch.nn.LSTM(F, H)
    with torch.no_grad():
        m.weight_ih_l0.copy_(torch.from_numpy(w_ih))
        m.weight_hh_l0.copy_(torch.from_numpy(w_hh))
        m.bias_ih_l0.copy_(torch.from_numpy(b))
        m.bias_hh_l0.zero_()
    xt, dht = torch.from_numpy(x), torch.from_numpy(dh)

    def fwd():
        with torch.no_grad():
            m(xt)

    def fwd_bwd():
        xg = xt.detach().requires_grad_(True)
        out, _ = m(xg)
        out.backward(dht)
    return fwd, fwd_bwd


def _set_threads(n: int, torch: bool) -> str:
    """Give Numba, BLAS (through threadpoolctl, if installed) and, if asked,
    torch ``n`` threads; returns a note on what BLAS was told."""
    import numba
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    if torch:
        try:
            import torch as _torch
            _torch.set_num_threads(n)
        except ImportError:
            pass
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
        return f"BLAS {n} thread(s) via threadpoolctl"
    except ImportError:
        env = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
        return (f"BLAS threads from OPENBLAS_NUM_THREADS={env}" if env else
                "BLAS threads not limited (install threadpoolctl or set OPENBLAS_NUM_THREADS)")


def run(cases=None, threads: int = 1, repeat: int = 20, impls=("numba", "gemm-only", "twin", "torch"),
        clock: str = "wall"):
    """Time every implementation on every case.

    Args:
        cases: names from :data:`CASES` (default all).
        threads: threads for Numba, BLAS and torch.
        repeat: timed runs per entry (the best is kept).
        impls: which implementations; ``torch`` is skipped when not importable.
        clock: ``"wall"`` or ``"cpu"`` (process CPU time; see :func:`_best_interleaved`).

    Returns:
        ``(rows, note)``: rows are dicts with case, T, N, F, H, impl, pass
        ("forward" / "forward+backward"), ms, gflops; note says how BLAS
        threads were set.
    """
    from ..kernels import lstm as klstm
    from ..kernels import reference as ref
    note = _set_threads(threads, "torch" in impls)
    builders = {"numba": lambda *a: _kernel_fns(klstm, *a), "gemm-only": _gemm_only_fns,
                "twin": lambda *a: _kernel_fns(ref, *a), "torch": _torch_fns}
    rows = []
    for name in cases or CASES:
        T, N, F, H = CASES[name]
        arrays = _arrays(T, N, F, H)
        fns = {}
        for impl in impls:
            if impl == "torch":
                try:
                    import torch  # noqa: F401
                except ImportError:
                    continue
            fwd, fwd_bwd = builders[impl](*arrays)
            fns[impl, "forward"], fns[impl, "forward+backward"] = fwd, fwd_bwd
        for (impl, label), sec in _best_interleaved(fns, repeat, clock).items():
            rows.append({"case": name, "T": T, "N": N, "F": F, "H": H, "impl": impl, "pass": label, "ms": sec * 1e3,
                         "gflops": flops(T, N, F, H, label == "forward+backward") / sec / 1e9})
    return rows, note


def format_table(rows) -> str:
    """Rows as a text table, with each time's ratio to torch (or to numba when
    torch is absent) for the same case and pass."""
    base_impl = "torch" if any(r["impl"] == "torch" for r in rows) else "numba"
    base = {(r["case"], r["pass"]): r["ms"] for r in rows if r["impl"] == base_impl}
    lines = [f"{'case':<26}{'pass':<18}{'impl':<11}{'ms':>9}{'GFLOP/s':>9}{'x ' + base_impl:>10}"]
    for r in rows:
        ratio = r["ms"] / base[(r["case"], r["pass"])] if (r["case"], r["pass"]) in base else float("nan")
        lines.append(f"{r['case']:<26}{r['pass']:<18}{r['impl']:<11}{r['ms']:9.2f}{r['gflops']:9.1f}{ratio:10.2f}")
    return "\n".join(lines)


# --- rows of ``python -m minips bench kernels`` ----------------------------------------------------
def lstm_cases(ctx):
    """The LSTM's rows of the kernels benchmark (a provider in :data:`minips.bench.kernels.providers.KERNEL_CASES`)."""
    from ..kernels import lstm as klstm
    from ..kernels import reference as ref
    for T, N, F, H in dict.fromkeys(CASES.values()):
        arrays = _arrays(T, N, F, H)
        shape = f"T{T} N{N} F{F} H{H}"
        nb, tw = _kernel_fns(klstm, *arrays), _kernel_fns(ref, *arrays)
        th = _torch_fns(*arrays) if ctx.torch is not None else (None, None)
        yield Case("lstm fwd", shape, nb[0], tw[0], th[0], flops(T, N, F, H, False))
        yield Case("lstm fwd+bwd", shape, nb[1], tw[1], th[1], flops(T, N, F, H, True))


def add_arguments(p):
    p.add_argument("--threads", type=int, default=1, help="threads for Numba, BLAS and torch (default 1)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per entry; the best is reported")
    p.add_argument("--case", action="append", choices=list(CASES), help="only this case (repeatable)")
    p.add_argument("--clock", choices=list(CLOCKS), default="wall",
                   help="wall time (default) or this process's CPU time (robust on a loaded machine, "
                        "with --threads 1 only)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=main)


def main(args) -> int:
    if args.clock == "cpu" and args.threads != 1:
        raise ValueError("--clock cpu adds up the time of all threads; use it with --threads 1")
    rows, note = run(args.case, args.threads, args.repeat, clock=args.clock)
    print(f"LSTM float32, {args.threads} thread(s); {note}; best of {args.repeat}, {args.clock} clock")
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "clock": args.clock, "note": note, "rows": rows}, f, indent=2)
    return 0
