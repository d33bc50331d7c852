"""Where compression stops paying: the cost models of the compression methods
against sync's, for the mini set's ConvNet (d = 421642 floats; its layer
shapes go into the profile, so PowerSGD's factor sizes are exact).

    python scripts/breakeven_compression.py [--out FILE.json]

Compute cancels between a method and sync (both models charge the same
forward + backward), so a method pays when

    compression(d, P) + X_method(alpha, beta) < A_sync(alpha, beta)

with the measured per-entry compression costs (Compressor.compress_ns /
decompress_ns) and the alpha-beta model of each exchange. Both sides are
linear in beta, so at the preset latency alpha the break-even inverse
bandwidth is found by bisection: below that bandwidth the method is faster.
Prints, per method and P, the modelled times on 10 GbE and the break-even
link speed in Gb/s. ssd-sgd is left out: what it saves is overlap with
compute (it sends the whole gradient every k steps), which this
compute-free comparison cannot show.
"""
import argparse
import json

import numpy as np

from minips.distributed.algorithms import resolve
from minips.distributed.costmodel import NETWORKS, NetworkModel
from minips.labs.projection import StepProfile
from minips.models import build_model
from minips.tasks import make_task

SHAPES = tuple(tuple(p.shape) for p in build_model("convnet", make_task("fashion-mnist-mini")).parameters())
D = sum(int(np.prod(s)) for s in SHAPES)
SPECS = ["topk-sgd:ratio=0.01", "topk-sgd:compressor=randomk:ratio=0.01", "qsgd:s=15", "powersgd:rank=2",
         "gs-sgd:ratio=0.01", "gaussian-avg:ratio=0.05", "gaussian-avg:kernel:period=8",
         "pqasgd", "qprsgd", "qprsgd:mode=gossip", "choco-sgd"]


def profile():
    """No compute (it cancels), the ConvNet's gradient and layer shapes."""
    return StepProfile(forward=0.0, backward=0.0, grad_bytes=4 * D, shapes=SHAPES)


def gain(spec, P, net):
    """sync's modelled step minus the method's (seconds; > 0: compression pays)."""
    prof = profile()
    return resolve("sync").step_time(prof, P, net) - resolve(spec).step_time(prof, P, net)


def breakeven_gbit(spec, P, alpha):
    """Link speed (Gb/s) at which the method and sync take the same time (inf: pays
    at any speed; 0: never pays)."""
    lo, hi = 1e-13, 1e-5            # beta in s/byte: 80 Tb/s ... 0.8 Mb/s
    f = lambda b: gain(spec, P, NetworkModel(alpha, b))  # noqa: E731
    if f(lo) > 0:
        return float("inf")
    if f(hi) <= 0:
        return 0.0
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if f(mid) > 0 else (mid, hi)
    return 8 / hi / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    net = NETWORKS["10gbe"]
    prof0 = profile()
    rows = []
    print(f"d = {D} floats; network 10 GbE (alpha {net.alpha * 1e6:.0f} us); times in ms per step, compute excluded")
    print(f"{'method':42s} {'P':>3s} {'sync comm':>10s} {'method':>9s} {'of which compression':>21s} "
          f"{'pays on 10GbE':>14s} {'break-even Gb/s':>16s}")
    for spec in SPECS:
        for P in (2, 4, 8, 16, 64):
            s = resolve(spec)
            t_sync = resolve("sync").step_time(prof0, P, net)
            t = s.step_time(prof0, P, net)
            t_free = s.step_time(prof0, P, NetworkModel(0.0, 0.0))  # compression compute only
            be = breakeven_gbit(spec, P, net.alpha)
            rows.append({"method": spec, "P": P, "sync_ms": 1e3 * t_sync, "method_ms": 1e3 * t,
                         "compression_ms": 1e3 * t_free, "pays_on_10gbe": bool(t < t_sync),
                         "breakeven_gbit_s": be if be != float("inf") else None})  # None: pays at any speed
            print(f"{spec:42s} {P:3d} {1e3 * t_sync:10.2f} {1e3 * t:9.2f} {1e3 * t_free:21.2f} "
                  f"{str(t < t_sync):>14s} {be:16.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": "python scripts/breakeven_compression.py --out " + args.out, "d": D,
                       "network": "10gbe", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
