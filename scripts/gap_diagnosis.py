"""Issue 31's diagnosis: where does ``local`` lose to sync? (run under mpiexec).

Trains one run of ``pseudo-sync:local:K`` exactly as the study does (the same
config, seed and trajectory: the diagnostics only read, and the extra gradient
below restores the dropout generator) and records, per parameter group
(a layer of the ConvNet; CNN / encoder LSTM / embedding / decoder LSTM /
output of the captioner) and per step:

- ``signal``  ||a_s||^2, a_s = G_s - G_{s-k}: the change of the averaged
  gradient, i.e. the error of the naive stale direction G_{s-k} against G_s.
- ``noise``   mean_i ||c^i_s - a_s||^2, c^i_s = g^i_s - g^i_{s-k}: the
  variance across ranks of the local correction, i.e. the error of rank i's
  ``local`` direction G_{s-k} + c^i_s against G_s. ratio = noise / signal:
  above 1, a rank's ``local`` direction is further from G_s than the stale one.
  When the local changes are pure batch noise (independent across ranks and
  steps) the ratio is P - 1: the noise is 2 sigma^2 (1 - 1/P), the change of
  the average 2 sigma^2 / P.
- ``grad_noise`` mean_i ||g^i_s - G_s||^2 (one rank's batch noise) and
  ``G2`` ||G_s||^2.
- ``consensus`` (1/P) sum_i ||w^i - mean w||^2 after the step, and ``w2``
  ||mean w||^2.
- every ``--drift-every`` steps, the gradient each rank's batch has at the
  averaged weights, g^i(w-bar) (same batch, same dropout mask), against the
  one it took at its own weights: ``drift_mean`` ||mean_i E_i||^2 with
  E_i = g^i(w^i) - g^i(w-bar) (what the ranks' drift changes in the averaged
  update: ``local``'s averaged direction is exactly sync's, evaluated at the
  ranks' weights instead of their mean), ``drift_rank`` mean_i ||E_i||^2, and
  ``sgd_noise`` = mean_i ||g^i(w-bar) - mean_j g^j(w-bar)||^2 / (P - 1), the
  unbiased estimate of the variance of the mean of P batch gradients: sync's
  own gradient noise at this step.

Writes OUT.json (per-step rows, per group) and prints a summary per third of
training. Example (the mini set at P = 8, seed 0)::

    mpiexec -n 8 python scripts/gap_diagnosis.py --task mini --seed 0 \\
        --out docs/bench/accuracy/gaps/diag-mini-P8-seed0
    python scripts/gap_diagnosis.py OUT.json                  (the summary again)
    python scripts/gap_diagnosis.py plot A.json B.json FIG.png   (the figure)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

for _v in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")   # as the study grids' [env] (before NumPy and Numba load)

import numpy as np  # noqa: E402

TASKS = {  # the study grids' [train] and [lr.fixed] tables (configs/study-accuracy*.toml)
    "mini": dict(model="convnet", data="fashion-mnist-mini", val_fraction=0.1, epochs=3, batch_size=32,
                 lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0, schedule="cosine", bucket_mb=1.0),
    "full": dict(model="convnet", data="fashion-mnist", val_fraction=0.1, epochs=3, batch_size=32,
                 lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.0, schedule="cosine", bucket_mb=1.0),
    "captioner": dict(model="captioner", data="moving-fmnist-captions", val_fraction=0.1, epochs=3,
                      batch_size=32, lr=0.2, momentum=0.9, nesterov=True, weight_decay=0.0, schedule="cosine",
                      bucket_mb=1.0),
}


def groups_of(model, flat):
    """{group name: [(start, stop), ...]} in the flat buffer: a layer (the
    parameter name without its last part) for the ConvNet, the first part of
    the name for the captioner (cnn, encoder, embed, decoder, out)."""
    out = {}
    named = list(model.named_parameters())
    captioner = any(n.startswith("encoder.") for n, _ in named)
    for i, (name, p) in enumerate(named):
        g = name.split(".")[0] if captioner else name.rsplit(".", 1)[0]
        o = flat.offsets[i]
        out.setdefault(g, []).append((o, o + p.size))
    return out


def per_group(v, groups):
    """float64 (L,) sums of squares of v over each group's slices."""
    v = v.astype(np.float64)
    return np.array([sum(float(v[a:b] @ v[a:b]) for a, b in sl) for sl in groups.values()])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=TASKS, default="mini")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--algo", default=None, help="spec to diagnose (default pseudo-sync:local:K)")
    ap.add_argument("--drift-every", type=int, default=1, help="steps between drift gradients (0: none)")
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--out", required=True, help="OUT.json is written, and the run folder OUT/")
    args = ap.parse_args()

    from mpi4py import MPI

    from minips import random as mrandom
    from minips.train import TrainConfig, Trainer

    k = args.staleness
    diag = MPI.COMM_WORLD.Dup()          # the diagnostics' own collectives
    P, rank = diag.Get_size(), diag.Get_rank()
    rows, drift_rows = [], []

    def pooled(x):                        # mean over ranks of a float64 array
        y = np.empty_like(x)
        diag.Allreduce(x, y)
        return y / P

    class Diag(Trainer):
        def build(self):
            super().build()
            self.groups = groups_of(self.model, self.algo.flat)
            self.hist_G, self.hist_g = [], []   # G_s and g^i_s, the last 2k + 1 steps

        def _drift(self, group):
            """g^i at the averaged weights, same batch and dropout mask (restored after)."""
            flat, n = self.algo.flat, self.algo.flat.numel
            wbar = np.empty(n, np.float32)
            diag.Allreduce(flat.weights, wbar)
            wbar /= P
            state, w = mrandom.get_state(), flat.weights.copy()
            saved = flat.grads[flat.current].copy()
            flat.weights[...] = wbar
            flat.grads[flat.current].fill(0)
            self.model.loss(group[0]).backward()
            gbar = flat.grads[flat.current][:n].copy()
            flat.weights[...] = w
            flat.grads[flat.current][...] = saved
            mrandom.set_state(state)
            return gbar

        def _train_step(self, group, epoch=0):
            t = self.global_step
            gbar = self._drift(group) if args.drift_every and t % args.drift_every == 0 else None
            loss = super()._train_step(group, epoch)
            p, flat = self.algo.predictor, self.algo.flat
            g = p.ring[(p.t - 1) % (p.k + 1)].copy()      # g^i_t, this rank's gradient at its weights
            if gbar is not None:
                Gbar = pooled(gbar.astype(np.float64))
                E = (g.astype(np.float64) - gbar)
                Emean = pooled(E)
                drift_rows.append({"step": t, **{f"{name}:{key}": float(v) for key, arr in (
                    ("drift_mean", per_group(Emean, self.groups)),
                    ("drift_rank", pooled(per_group(E, self.groups))),
                    # the variance of the mean of P batch gradients (sync's noise), unbiased
                    ("sgd_noise", pooled(per_group(gbar - Gbar, self.groups)) / (P - 1)),
                    ("G2bar", per_group(Gbar, self.groups))) for name, v in zip(self.groups, arr)}})
            G = pooled(g.astype(np.float64))                # G_t (the same sum the allreduce makes)
            self.hist_G.append(G)
            self.hist_g.append(g.astype(np.float64))
            del self.hist_G[:-(2 * k + 1)], self.hist_g[:-(2 * k + 1)]
            row = {"step": t, "lr": self.optimizer.lr}
            if len(self.hist_G) >= k + 1:
                a = self.hist_G[-1] - self.hist_G[-1 - k]
                c = self.hist_g[-1] - self.hist_g[-1 - k]
                vals = {"signal": per_group(a, self.groups),
                        "noise": pooled(per_group(c - a, self.groups)),
                        "grad_noise": pooled(per_group(self.hist_g[-1] - G, self.groups)),
                        "G2": per_group(G, self.groups)}
            else:
                vals = {}
            wbar = pooled(flat.weights.astype(np.float64))
            vals["consensus"] = pooled(per_group(flat.weights - wbar, self.groups))
            vals["w2"] = per_group(wbar, self.groups)
            row.update({f"{name}:{key}": float(v) for key, arr in vals.items() for name, v in zip(self.groups, arr)})
            rows.append(row)
            return loss

    cfg = TrainConfig(**TASKS[args.task], seed=args.seed, algo=args.algo or f"pseudo-sync:local:{k}",
                      out=args.out, max_steps=args.max_steps, overwrite=True, quiet=rank != 0)
    tr = Diag(cfg)
    summary = tr.run()
    if rank == 0:
        out = {"task": args.task, "seed": args.seed, "P": P, "staleness": k, "algo": cfg.algo,
               "groups": {g: int(sum(b - a for a, b in sl)) for g, sl in tr.groups.items()},
               "final": {key: summary.get(key) for key in ("val_accuracy", "test_accuracy", "val_bleu", "bleu",
                                                             "consensus_distance")},
               "command": "mpiexec -n %d python %s" % (P, " ".join(sys.argv)), "rows": rows, "drift": drift_rows}
        Path(args.out + ".json").write_text(json.dumps(out))
        print(report(out))


def report(d) -> str:
    """Per group, medians over each third of training of the ratios that decide."""
    rows, drift, groups = d["rows"], d["drift"], list(d["groups"])
    T = rows[-1]["step"] + 1
    thirds = [(0, T // 3), (T // 3, 2 * T // 3), (2 * T // 3, T)]
    lines = [f"{d['algo']} on {d['task']}, P = {d['P']}, seed {d['seed']}; final {d['final']}",
             "medians per third of training (steps); ratio = noise / signal = mean_i ||c^i - a||^2 / ||a||^2; "
             "grad_noise / G2 = one rank's batch noise over the averaged gradient's square; "
             "cons / w2 = consensus distance / ||w-bar||^2; drift_mean / sgd_noise = what the drift changes in the "
             "averaged gradient, over sync's own gradient noise; drift_rank / sgd_noise the same per rank",
             "| group (size) | steps | noise/signal | grad_noise/G2 | cons/w2 | cons/(lr^2 grad_noise) "
             "| drift_mean/sgd_noise | drift_rank/sgd_noise |", "|---|---|---|---|---|---|---|---|"]

    def med(rs, f):
        v = [f(r) for r in rs]
        v = [x for x in v if x is not None and np.isfinite(x)]
        return f"{np.median(v):.3g}" if v else "-"

    def ratio(a, b):
        return lambda r: (r[a] / r[b]) if a in r and b in r and r[b] > 0 else None

    def per_lr2(a, b):   # r[a] / (lr^2 r[b]): the consensus distance in units of lr^2 times a rank's noise
        return lambda r: (r[a] / (r["lr"] ** 2 * r[b])) if a in r and b in r and r[b] > 0 else None

    for g in groups + ["all"]:
        def key(x, g=g):
            return f"{g}:{x}"
        for lo, hi in thirds:
            rs = [r for r in rows if lo <= r["step"] < hi]
            ds = [r for r in drift if lo <= r["step"] < hi]
            if g == "all":  # sums over groups
                rs = [{**r, **{f"all:{x}": sum(r.get(f"{h}:{x}", 0.0) for h in groups)
                               for x in ("signal", "noise", "grad_noise", "G2", "consensus", "w2")}} for r in rs]
                ds = [{**r, **{f"all:{x}": sum(r[f"{h}:{x}"] for h in groups)
                               for x in ("drift_mean", "drift_rank", "sgd_noise", "G2bar")}} for r in ds]
            size = sum(d["groups"].values()) if g == "all" else d["groups"][g]
            lines.append(f"| {g} ({size}) | {lo}-{hi - 1} | {med(rs, ratio(key('noise'), key('signal')))} "
                         f"| {med(rs, ratio(key('grad_noise'), key('G2')))} "
                         f"| {med(rs, ratio(key('consensus'), key('w2')))} "
                         f"| {med(rs, per_lr2(key('consensus'), key('grad_noise')))} "
                         f"| {med(ds, ratio(key('drift_mean'), key('sgd_noise')))} "
                         f"| {med(ds, ratio(key('drift_rank'), key('sgd_noise')))} |")
    return "\n".join(lines)


def plot(paths, png) -> None:
    """One column per diagnosis JSON: per group over training, noise / signal
    (top) and drift_mean / sgd_noise (bottom), running medians over 5 points."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = [json.loads(Path(p).read_text()) for p in paths]
    fig, axes = plt.subplots(2, len(runs), figsize=(6 * len(runs), 7.5), squeeze=False)

    def smooth(v):
        return [np.median(v[max(0, i - 2):i + 3]) for i in range(len(v))]

    for col, d in enumerate(runs):
        top, bottom = axes[0, col], axes[1, col]
        for g in d["groups"]:
            rs = [r for r in d["rows"] if f"{g}:signal" in r and r[f"{g}:signal"] > 0]
            top.plot([r["step"] for r in rs], smooth([r[f"{g}:noise"] / r[f"{g}:signal"] for r in rs]), label=g)
            ds = [r for r in d["drift"] if r[f"{g}:sgd_noise"] > 0]
            bottom.plot([r["step"] for r in ds], smooth([r[f"{g}:drift_mean"] / r[f"{g}:sgd_noise"] for r in ds]),
                        label=g)
        top.axhline(d["P"] - 1, color="grey", ls=":", lw=1.5,       # the value when the local change is pure noise
                    label=f"P - 1 = {d['P'] - 1}: pure batch noise")
        bottom.axhline(1, color="grey", ls=":", lw=1.5, label="as large as sync's own noise")
        top.set_title(f"{d['algo']}, {d['task']}, P = {d['P']}, seed {d['seed']}", fontsize=10)
        top.set_ylabel("noise / signal = mean_i ||c^i - a||^2 / ||a||^2")
        bottom.set_ylabel("drift's change of the averaged gradient\n/ sync's gradient noise")
        bottom.set_xlabel("step")
        for ax in (top, bottom):
            ax.set_yscale("log")
            ax.legend(fontsize=7, ncol=2)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):   # re-print a report
        print(report(json.loads(Path(sys.argv[1]).read_text())))
    elif len(sys.argv) > 2 and sys.argv[1] == "plot":         # plot JSON... PNG
        plot(sys.argv[2:-1], sys.argv[-1])
    else:
        main()
