"""Compress / decompress time per entry of every compressor (one thread).

    python scripts/bench_compression.py [--d D] [--reps N] [--out FILE.json]
    python scripts/bench_compression.py --only SPEC [--loops N]   (time the process from outside)

For each compressor at a sensible setting: median CPU time (this thread) over ``reps`` of one
``compress`` of a Gaussian float32 vector of d entries (default: the mini
set's ConvNet, d = 421642) and of one ``decompress`` of its payload, in
seconds and nanoseconds per entry. Prints a table, writes JSON (with uptime).
These are the per-entry costs of the cost models
(``Compressor.compress_ns``/``decompress_ns``).
"""
import argparse
import json
import os
import subprocess
import time

import numpy as np

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

SETTINGS = ["identity", "fp16", "topk:ratio=0.01", "randomk:ratio=0.01", "sign", "qsgd-quant:s=15",
            "qsgd-quant:s=1", "countsketch:rows=5:ratio=0.05", "gaussian:ratio=0.05"]


def median_time(fn, reps):
    """Median CPU seconds of this thread over ``reps`` calls (CPU time, not wall:
    on a shared, loaded machine the wall clock also counts other processes' turns)."""
    fn()  # warm-up (Numba compilation, caches)
    ts = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        ts.append(time.thread_time() - t0)
    return float(np.median(ts))


def powersgd_row(d, reps):
    """PowerSGD's compute for a d-float model taken as one square matrix (as its
    cost model does), rank 2: M Q, Gram-Schmidt, M^T P, P Q^T and the error."""
    from minips.distributed.algorithms.powersgd import orthogonalize
    n = int(round(d ** 0.5))
    rng = np.random.default_rng(0)
    M = rng.standard_normal((n, n)).astype(np.float32)
    Q = rng.standard_normal((n, 2)).astype(np.float32)

    def once():
        P = orthogonalize(M @ Q)
        Qn = M.T @ P
        return M - P @ Qn.T
    t = median_time(once, reps)
    return {"compressor": f"powersgd rank 2 ({n}x{n})", "d": n * n, "payload_bytes": 4 * 2 * 2 * n,
            "ratio": 4 * n / (n * n), "compress_s": t, "decompress_s": 0.0, "compress_ns": t / (n * n) * 1e9,
            "decompress_ns": 0.0, "flops_per_s": 4 * n * n * 2 / t}


def main():
    from minips.distributed.compression import make_compressor
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=421642)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="just compress + decompress this compressor --loops times "
                    "(for timing the whole process from outside, against --only identity)")
    ap.add_argument("--loops", type=int, default=20)
    args = ap.parse_args()
    v = np.random.default_rng(0).standard_normal(args.d).astype(np.float32)
    if args.only:
        c = make_compressor(args.only)
        c.decompress(c.compress(v, 0))  # compile / warm
        for t in range(args.loops):
            c.decompress(c.compress(v, t))
        return
    rows = []
    for spec in SETTINGS:
        c = make_compressor(spec)
        p = c.compress(v, 1)
        tc = median_time(lambda c=c: c.compress(v, 1), args.reps)
        td = median_time(lambda c=c, p=p: c.decompress(p), args.reps)
        rows.append({"compressor": spec, "d": args.d, "payload_bytes": c.nbytes(p), "ratio": c.nbytes(p) / (4 * args.d),
                     "compress_s": tc, "decompress_s": td, "compress_ns": tc / args.d * 1e9,
                     "decompress_ns": td / args.d * 1e9})
    rows.append(powersgd_row(args.d, args.reps))
    print(f"{'compressor':32s} {'bytes':>9s} {'ratio':>7s} {'compress ms':>12s} {'decompress ms':>14s} "
          f"{'ns/entry c':>11s} {'ns/entry d':>11s}")
    for r in rows:
        print(f"{r['compressor']:32s} {r['payload_bytes']:9d} {r['ratio']:7.4f} {1e3 * r['compress_s']:12.3f} "
              f"{1e3 * r['decompress_s']:14.3f} {r['compress_ns']:11.2f} {r['decompress_ns']:11.2f}")
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print("uptime:", up)
    print("times: median CPU seconds of the one thread (time.thread_time), not wall")
    if args.out:
        cmd = " ".join(f"--{k} {v}" for k, v in vars(args).items() if v is not None and k in ("d", "reps", "out"))
        with open(args.out, "w") as f:
            json.dump({"command": "python scripts/bench_compression.py " + cmd, "uptime": up, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
