"""Compress / decompress time per entry of every compressor (one thread).

    python scripts/bench_compression.py [--d D] [--reps N] [--out FILE.json]

For each compressor at a sensible setting: median over ``reps`` of one
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
    fn()  # warm-up (Numba compilation, caches)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    from minips.distributed.compression import make_compressor
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=421642)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    v = np.random.default_rng(0).standard_normal(args.d).astype(np.float32)
    rows = []
    for spec in SETTINGS:
        c = make_compressor(spec)
        p = c.compress(v, 1)
        tc = median_time(lambda: c.compress(v, 1), args.reps)
        td = median_time(lambda: c.decompress(p), args.reps)
        rows.append({"compressor": spec, "d": args.d, "payload_bytes": c.nbytes(p), "ratio": c.nbytes(p) / (4 * args.d),
                     "compress_s": tc, "decompress_s": td, "compress_ns": tc / args.d * 1e9,
                     "decompress_ns": td / args.d * 1e9})
    print(f"{'compressor':32s} {'bytes':>9s} {'ratio':>7s} {'compress ms':>12s} {'decompress ms':>14s} "
          f"{'ns/entry c':>11s} {'ns/entry d':>11s}")
    for r in rows:
        print(f"{r['compressor']:32s} {r['payload_bytes']:9d} {r['ratio']:7.4f} {1e3 * r['compress_s']:12.3f} "
              f"{1e3 * r['decompress_s']:14.3f} {r['compress_ns']:11.2f} {r['decompress_ns']:11.2f}")
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print("uptime:", up)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": "python scripts/bench_compression.py " + " ".join(
                f"--{k} {v}" for k, v in vars(args).items() if v is not None), "uptime": up, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
