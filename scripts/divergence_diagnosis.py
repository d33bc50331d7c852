"""Issue 42's diagnosis: why pseudo-sync's default ``local`` diverges at 32 ranks under the linear
scaling rule where sync trains (docs/accuracy.md section 10.1).

``run`` trains one run exactly as the stability map does (full Fashion-MNIST, ConvNet, per-rank batch
16, Nesterov 0.9, cosine schedule, half-epoch warm-up; virtual ranks) and logs, per rank and per step
up to the blow-up (the diagnostics only read: the trajectory is the run's own):

- ``loss``      the rank's batch loss; ``lr`` the step's learning rate;
- ``w_norm``    ||w^i|| before the step; ``dw_norm`` ||w^i_{t+1} - w^i_t||, the update's norm
  (compare with sync's run at the same step: ``report``);
- ``g_norm``    ||g^i_t||, the rank's fresh gradient; ``gnoise`` ||g^i_t - G_t||^2, its batch noise
  (G_t the mean over ranks, what the allreduce returns);
- ``corr_norm`` ||g^i_t - g^i_{t-1}||, the correction ``local`` adds to the delayed average
  (d^i_t = G_{t-1} + (g^i_t - g^i_{t-1}));
- ``dir_err``   ||d^i_t - G_t||: how far the rank's applied direction is from sync's at the same
  weights (for ``local`` it is the correction's deviation from the average's change);
- ``v_norm``    ||v^i||, the momentum buffer after the step; ``v_dev`` ||v^i - mean_j v^j||;
- ``cons``      ||w^i - mean_j w^j||^2 after the step (the consensus distance is its mean over ranks);
- ``dw_dev``    ||dw^i - mean_j dw^j||, the part of the update that differs between ranks.

Per step (rank 0; pooled over the ranks): ``G_norm``, ``wbar_norm``, ``dwbar_norm`` (the averaged
model's update), ``consensus`` (mean of ``cons``), ``vdev2`` (mean ||v^i - v-bar||^2) and, with
``--drift-every``, ``drift_mean`` ||mean_i (g^i(w^i) - g^i(w-bar))||^2 against ``sgd_noise`` (the
variance of the mean of P batch gradients at w-bar, sync's own noise), as in
``scripts/gap_diagnosis.py``. Every ``--snapshot-every`` steps the averaged weights are saved
(``OUT/snapshots/``, not committed) for ``sharpness``.

``sharpness`` measures, at each snapshot, the largest eigenvalue of the loss's Hessian (power
iteration on Hessian-vector products by central differences of gradients, eval mode: no dropout):
``lam_global`` on a fixed sample of 16 P training images (one global batch), and ``lam_rank``, the
mean over 8 batches of 16 images (one rank's batch). The stability analysis (minips/labs/staleness.py,
:func:`~minips.labs.staleness.largest_stable_steps`) says: sync is stable while lr * lambda < 1.357
(Nesterov 0.9); under ``local`` the ranks' mean is sync's, but the ranks' *differences* obey a rule
that is stable only while lr * lambda < 0.679, half of sync's; per-rank gradient noise excites them,
so above that they grow geometrically.

``report`` prints the tables of section 10.1 and draws the figure.

    python scripts/divergence_diagnosis.py run --algo pseudo-sync:local:1 \\
        --out docs/bench/scale/diagnosis/local-P32-lr0.32
    python scripts/divergence_diagnosis.py run --algo sync --max-steps 80 \\
        --out docs/bench/scale/diagnosis/sync-P32-lr0.32
    python scripts/divergence_diagnosis.py sharpness docs/bench/scale/diagnosis/local-P32-lr0.32
    python scripts/divergence_diagnosis.py report docs/bench/scale/diagnosis
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import threading
from pathlib import Path

for _v in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")   # as the map's [env] (before NumPy and Numba load)

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the stability map's [train] table (configs/stability-map.toml)
TRAIN = dict(model="convnet", data="fashion-mnist", val_fraction=0.1, epochs=3, batch_size=16, momentum=0.9,
             nesterov=True, weight_decay=0.0, schedule="cosine", warmup_epochs=0.5, progress="poll")
RANK_FIELDS = ("step", "rank", "lr", "loss", "w_norm", "dw_norm", "g_norm", "gnoise", "corr_norm", "dir_err",
               "v_norm", "v_dev", "cons", "dw_dev")


def _norm(x) -> float:
    x = np.asarray(x, np.float64).ravel()
    return float(np.sqrt(x @ x))


def cmd_run(args) -> int:
    from minips import random as mrandom
    from minips.train import TrainConfig, Trainer
    from minips.distributed.comm import virtual

    P = args.ranks
    out = Path(args.out)
    snaps = Path(args.snapshots or (ROOT / "runs" / "diagnosis" / out.name))
    snaps.mkdir(parents=True, exist_ok=True)
    rank_rows: list[dict] = []       # every rank appends its own rows (the ranks are threads of this process)
    step_rows: list[dict] = []
    lock = threading.Lock()

    class Diag(Trainer):
        def build(self):
            super().build()
            self.diag = self.comm.mpi.Split(0, self.comm.rank)   # the diagnostics' own communicator
            self.g_prev = None

        def pooled(self, x: np.ndarray) -> np.ndarray:
            y = np.empty_like(x)
            self.diag.Allreduce(x, y)
            return y / P

        def _grad_at_mean(self, group, wbar):
            """g^i at the averaged weights, same batch and dropout mask (restored after)."""
            flat = self.algo.flat
            n = flat.numel
            state, w = mrandom.get_state(), flat.weights.copy()
            saved = flat.grads[flat.current].copy()
            flat.weights[...] = wbar
            flat.grads[flat.current].fill(0)
            self.model.loss(group[0]).backward()
            g = flat.grads[flat.current][:n].astype(np.float64)
            flat.weights[...] = w
            flat.grads[flat.current][...] = saved
            mrandom.set_state(state)
            return g

        def _train_step(self, group, epoch=0):
            t, flat, algo = self.global_step, self.algo.flat, self.algo
            n = flat.numel
            w_before = flat.weights[:n].astype(np.float64)
            drift = args.drift_every and t % args.drift_every == 0 and algo.replicated is False
            if drift:
                wbar0 = self.pooled(w_before).astype(np.float32)
                gbar = self._grad_at_mean(group, wbar0)
            captured = {}
            step = algo.step

            def spy():     # this step's local gradient and direction, read where the algorithm reads them
                captured["g"] = flat.grads[flat.current][:n].astype(np.float64)
                step()
            algo.step = spy
            try:
                loss = super()._train_step(group, epoch)
            finally:
                algo.step = step
            g = captured["g"]
            w_after = flat.weights[:n].astype(np.float64)
            dw = w_after - w_before
            v = self.optimizer.buffers[0]
            v = np.zeros(n) if v is None else v[:n].astype(np.float64)
            # the applied direction, read back from Nesterov's step w_{t+1} = w_t - lr (d + mu v')
            mu = self.optimizer.momentum
            d = -dw / self.optimizer.lr - mu * v
            G, wbar, vbar, dwbar = self.pooled(np.stack([g, w_after, v, dw]))
            corr = None if self.g_prev is None else g - self.g_prev
            self.g_prev = g
            row = {"step": t, "rank": self.comm.rank, "lr": self.optimizer.lr, "loss": loss,
                   "w_norm": _norm(w_before), "dw_norm": _norm(dw), "g_norm": _norm(g),
                   "gnoise": _norm(g - G) ** 2, "corr_norm": None if corr is None else _norm(corr),
                   "dir_err": _norm(d - G), "v_norm": _norm(v), "v_dev": _norm(v - vbar),
                   "cons": _norm(w_after - wbar) ** 2, "dw_dev": _norm(dw - dwbar)}
            pooled = self.pooled(np.array([row["cons"], row["v_dev"] ** 2, row["gnoise"]]))
            srow = None
            if self.comm.rank == 0:
                srow = {"step": t, "lr": self.optimizer.lr, "G_norm": _norm(G), "wbar_norm": _norm(wbar),
                        "dwbar_norm": _norm(dwbar), "consensus": float(pooled[0]), "vdev2": float(pooled[1]),
                        "gnoise": float(pooled[2])}
            if drift:
                E = g - gbar
                Gbar = self.pooled(gbar)
                Emean = self.pooled(E)
                sg = self.pooled(np.array([_norm(gbar - Gbar) ** 2])) / (P - 1)
                if srow is not None:
                    srow.update({"drift_mean": _norm(Emean) ** 2, "sgd_noise": float(sg[0])})
            if srow is not None:
                with lock:
                    step_rows.append(srow)
                if args.snapshot_every and t % args.snapshot_every == 0:
                    np.save(snaps / f"wbar-step{t:05d}.npy", wbar.astype(np.float32))
            with lock:
                rank_rows.append(row)
            return loss

    cfg = TrainConfig(**TRAIN, lr=args.lr, scale_lr=args.scale_lr, seed=args.seed, algo=args.algo,
                      out=str(ROOT / "runs" / "diagnosis" / (out.name + "-run")), max_steps=args.max_steps,
                      overwrite=True, quiet=True, virtual_ranks=P)
    cfg.validate()
    if not cfg.nesterov:
        raise SystemExit("run: the direction is read back from Nesterov's step; keep nesterov = True")
    error = None
    try:
        summary = virtual.run(P, lambda: Diag(cfg).run(), progress=cfg.progress)[0]
    except (FloatingPointError, SystemExit, Exception) as e:  # noqa: BLE001 - a divergence is the point
        summary, error = None, f"{type(e).__name__}: {e}".splitlines()[0][:400]
    out.mkdir(parents=True, exist_ok=True)
    rank_rows.sort(key=lambda r: (r["step"], r["rank"]))
    with open(out / "ranks.csv", "w", newline="") as f:
        w = csv.DictWriter(f, RANK_FIELDS)
        w.writeheader()
        w.writerows(rank_rows)
    step_rows.sort(key=lambda r: r["step"])
    meta = {"algo": args.algo, "P": P, "seed": args.seed, "lr": args.lr, "scale_lr": args.scale_lr,
            "lr_after_warmup": args.lr * (P if args.scale_lr else 1), "train": TRAIN, "max_steps": args.max_steps,
            "steps_logged": len(step_rows), "error": error,
            "final": None if summary is None else {k: summary.get(k) for k in ("val_accuracy", "test_accuracy")},
            "command": "python " + " ".join(sys.argv), "snapshots": str(snaps), "steps": step_rows}
    (out / "steps.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}/ranks.csv ({len(rank_rows)} rows), {out}/steps.json ({len(step_rows)} steps); "
          f"{error or 'finished'}")
    return 0


# ----------------------------------------------------------------------------- sharpness

def top_eigenvalue(grad, w: np.ndarray, iters: int = 20, eps: float = 1e-3, seed: int = 0) -> float:
    """The largest-magnitude eigenvalue of the Hessian at ``w`` by power iteration,
    the product H v by central differences ``(grad(w + e v) - grad(w - e v)) / 2e``
    (v of unit norm, float64 arithmetic on float32 gradients); the Rayleigh
    quotient of the last iterate."""
    r = np.random.default_rng(seed)
    v = r.standard_normal(w.size)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        hv = (grad(w + eps * v) - grad(w - eps * v)) / (2 * eps)
        lam = float(v @ hv)
        v = hv / np.linalg.norm(hv)
    return lam


def cmd_sharpness(args) -> int:
    from minips.models import build_model
    from minips.tasks import make_task

    out = Path(args.diag)
    meta = json.loads((out / "steps.json").read_text())
    P = meta["P"]
    task = make_task(meta["train"]["data"])
    task.hold_out(meta["train"]["val_fraction"])
    x, y = task.train_arrays
    model = build_model(meta["train"]["model"], task)
    model.eval()
    params = list(model.parameters())
    sizes = [p.data.size for p in params]

    def grad_on(idx):
        xb, yb = np.ascontiguousarray(x[idx], dtype=np.float32), np.asarray(y[idx])

        def g(w):
            o = 0
            for p, s in zip(params, sizes):
                p.data[...] = w[o:o + s].reshape(p.data.shape).astype(np.float32)
                p.grad = None
                o += s
            model.loss((xb, yb)).backward()
            return np.concatenate([p.grad.ravel() for p in params]).astype(np.float64)
        return g

    r = np.random.default_rng(12345)
    global_idx = r.choice(len(x), 16 * P, replace=False)
    rank_idx = [r.choice(len(x), 16, replace=False) for _ in range(args.rank_batches)]
    snaps = sorted(Path(meta["snapshots"]).glob("wbar-step*.npy"))
    rows = []
    for s in snaps:
        t = int(s.stem.split("step")[1])
        if (args.steps and t not in args.steps) or (not args.steps and args.every and t % args.every):
            continue
        w = np.load(s).astype(np.float64)
        lg = top_eigenvalue(grad_on(global_idx), w, args.iters)
        lr_ = [top_eigenvalue(grad_on(ix), w, args.iters, seed=j) for j, ix in enumerate(rank_idx)]
        row = {"step": t, "lam_global": lg, "lam_rank": float(np.mean(lr_)), "lam_rank_each": lr_}
        rows.append(row)
        print(f"step {t}: lambda_max global batch {lg:.2f}, one rank's batch {row['lam_rank']:.2f} "
              f"({', '.join(f'{v:.1f}' for v in lr_)})", flush=True)
    (out / "sharpness.json").write_text(json.dumps({"global_batch": 16 * P, "rank_batch": 16,
                                                    "iters": args.iters, "rows": rows}, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--algo", default="pseudo-sync:local:1")
    r.add_argument("--ranks", type=int, default=32)
    r.add_argument("--lr", type=float, default=0.01, help="base learning rate (default 0.01)")
    r.add_argument("--scale-lr", action=argparse.BooleanOptionalAction, default=True,
                   help="lr x P, the linear scaling rule (default on: 0.32 at P = 32)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--max-steps", type=int, default=0)
    r.add_argument("--drift-every", type=int, default=1, help="steps between drift gradients (0: none)")
    r.add_argument("--snapshot-every", type=int, default=2)
    r.add_argument("--snapshots", help="where the averaged weights go (default runs/diagnosis/NAME)")
    r.add_argument("--out", required=True)
    s = sub.add_parser("sharpness")
    s.add_argument("diag", help="a folder written by run")
    s.add_argument("--iters", type=int, default=20)
    s.add_argument("--every", type=int, default=4, help="use the snapshots of every N-th step")
    s.add_argument("--steps", type=lambda v: [int(x) for x in v.split(",")], help="these steps' snapshots only")
    s.add_argument("--rank-batches", type=int, default=8)
    q = sub.add_parser("report")
    q.add_argument("folder")
    q.add_argument("--local", default="local-P32-lr0.32", help="the diagnosed run's folder in FOLDER")
    q.add_argument("--sync", default="sync-P32-lr0.32", help="sync's run's folder in FOLDER")
    q.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "divergence-diagnosis.png"))
    args = p.parse_args(argv)
    return {"run": cmd_run, "sharpness": cmd_sharpness, "report": cmd_report}[args.cmd](args)


def _load(folder: Path) -> dict:
    meta = json.loads((folder / "steps.json").read_text())
    rows = list(csv.DictReader(open(folder / "ranks.csv")))
    ranks: dict = {}
    for r in rows:
        ranks.setdefault(int(r["step"]), []).append({k: (float(v) if v not in ("", None) else float("nan"))
                                                      for k, v in r.items()})
    meta["ranks"] = ranks
    sh = folder / "sharpness.json"
    meta["sharpness"] = json.loads(sh.read_text())["rows"] if sh.exists() else []
    return meta


def first_to_blow_up(d: dict) -> int:
    """The rank whose consensus term ||w^i - w-bar||^2 is largest at the last logged step."""
    last = max(d["ranks"])
    return int(max(d["ranks"][last], key=lambda r: r["cons"])["rank"])


def report_text(local: dict, sync: dict) -> str:
    from minips.labs.staleness import largest_stable_steps

    th = largest_stable_steps(1)
    bad = first_to_blow_up(local)
    last = max(local["ranks"])
    lines = [f"`{local['algo']}` against `{sync['algo']}` at P = {local['P']}, lr {local['lr']:g} x P "
             f"= {local['lr_after_warmup']:g} after a warm-up of half an epoch, seed {local['seed']}: "
             f"{local['error'] or 'finished'}; the rank whose weights leave first: {bad}", "",
             "| step | lr | consensus | rank %d: loss / ‖g‖ / ‖correction‖ / ‖v‖ / ‖Δw‖ | other ranks (median): "
             "loss / ‖g‖ / ‖correction‖ / ‖v‖ / ‖Δw‖ | sync: ‖Δw‖ (median) / ‖g‖ (median) |" % bad,
             "|---:|---:|---:|---|---|---|"]
    steps = sorted(local["ranks"])
    show = [t for t in steps if t % 8 == 0 or t >= last - 9]

    def med(rs, k):
        v = [r[k] for r in rs if np.isfinite(r[k])]
        return float(np.median(v)) if v else float("nan")

    for t in show:
        rs = local["ranks"][t]
        b = next(r for r in rs if int(r["rank"]) == bad)
        others = [r for r in rs if int(r["rank"]) != bad]
        srow = next((s for s in local["steps"] if s["step"] == t), {})
        sy = sync["ranks"].get(t)
        syn = f"{med(sy, 'dw_norm'):.3g} / {med(sy, 'g_norm'):.3g}" if sy else "-"
        lines.append(f"| {t} | {rs[0]['lr']:.4f} | {srow.get('consensus', float('nan')):.3g} "
                     f"| {b['loss']:.3g} / {b['g_norm']:.3g} / {b['corr_norm']:.3g} / {b['v_norm']:.3g} / "
                     f"{b['dw_norm']:.3g} | {med(others, 'loss'):.3g} / {med(others, 'g_norm'):.3g} / "
                     f"{med(others, 'corr_norm'):.3g} / {med(others, 'v_norm'):.3g} / {med(others, 'dw_norm'):.3g} "
                     f"| {syn} |")
    if local["sharpness"]:
        lines += ["", f"Largest Hessian eigenvalue at the averaged weights (power iteration, eval mode) on one "
                  f"global batch ({16 * local['P']} images) and on one rank's batch (16 images, mean of 8), "
                  f"times the step's learning rate, against the thresholds {th['local_deviation']:.3f} "
                  f"(a rank's difference under local) and {th['synchronous']:.3f} (sync):", "",
                  "| step | lr | λ global batch | λ rank batch | lr λ global | lr λ rank |",
                  "|---:|---:|---:|---:|---:|---:|"]
        lrs = {s["step"]: s["lr"] for s in local["steps"]}
        for r in local["sharpness"]:
            lr = lrs[r["step"]]
            lines.append(f"| {r['step']} | {lr:.4f} | {r['lam_global']:.3g} | {r['lam_rank']:.3g} "
                         f"| {lr * r['lam_global']:.3f} | {lr * r['lam_rank']:.3f} |")
    return "\n".join(lines) + "\n"


def figure(local: dict, sync: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from minips.labs.staleness import largest_stable_steps

    th = largest_stable_steps(1)
    bad = first_to_blow_up(local)
    steps = sorted(local["ranks"])
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    top = 1e4   # the panels stop here: past it every rank is on its way to overflow (the table has the numbers)

    def series(d, rank, key):
        return [next((r[key] for r in d["ranks"][t] if int(r["rank"]) == rank), np.nan) for t in sorted(d["ranks"])]

    panels = [(axes[0, 0], "cons", "‖w^i - mean w‖² after the step (each rank)"),
              (axes[0, 1], "dw_norm", "update norm ‖Δw^i‖"),
              (axes[1, 0], "corr_norm", "correction ‖g^i_t - g^i_{t-1}‖ (local); ‖g^i_t‖ (sync)"),
              (axes[1, 1], "v_norm", "momentum buffer ‖v^i‖")]
    for ax, key, title in panels:
        for rank in range(local["P"]):
            ys = series(local, rank, key)
            ax.plot(steps, ys, color="#d62728" if rank == bad else "#1f77b4", lw=2 if rank == bad else 0.5,
                    alpha=1 if rank == bad else 0.35, zorder=3 if rank == bad else 2)
        if key != "cons":
            sk = "g_norm" if key == "corr_norm" else key
            ss = sorted(sync["ranks"])
            ax.plot(ss, [np.median([r[sk] for r in sync["ranks"][t]]) for t in ss], color="black", lw=1.8,
                    label=f"sync (median over ranks{', ‖g^i‖' if key == 'corr_norm' else ''})")
        ax.plot([], [], color="#d62728", lw=2, label=f"local, rank {bad} (leaves first)")
        ax.plot([], [], color="#1f77b4", lw=0.8, label="local, the other ranks")
        ax.set_yscale("log")
        ax.set_ylim(top=top)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[0, 2]     # per-rank noise against the average's size, and sync's
    ls = local["steps"]
    ax.plot([s["step"] for s in ls], [s["gnoise"] for s in ls], color="#1f77b4", label="local: mean_i ‖g^i - G‖²")
    ax.plot([s["step"] for s in ls], [s["G_norm"] ** 2 for s in ls], color="#1f77b4", ls="--", label="local: ‖G‖²")
    ss = sync["steps"]
    ax.plot([s["step"] for s in ss], [s["gnoise"] for s in ss], color="black", label="sync: mean_i ‖g^i - G‖²")
    ax.plot([s["step"] for s in ss], [s["G_norm"] ** 2 for s in ss], color="black", ls="--", label="sync: ‖G‖²")
    ax.set_yscale("log")
    ax.set_ylim(top=top)
    ax.set_xlabel("step")
    ax.set_title("one rank's gradient noise against the averaged gradient", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax = axes[1, 2]
    lrs = {s["step"]: s["lr"] for s in local["steps"]}
    if local["sharpness"]:
        sh = local["sharpness"]
        ax.plot([r["step"] for r in sh], [lrs[r["step"]] * r["lam_rank"] for r in sh], "o-", color="#d62728",
                label="lr × λ_max, one rank's batch (16)")
        ax.plot([r["step"] for r in sh], [lrs[r["step"]] * r["lam_global"] for r in sh], "s-", color="#1f77b4",
                label=f"lr × λ_max, a global batch ({16 * local['P']})")
    ax.axhline(th["local_deviation"], color="#d62728", ls=":", label=f"{th['local_deviation']:.3f}: local's ranks' "
               "differences unstable above")
    ax.axhline(th["synchronous"], color="black", ls=":", label=f"{th['synchronous']:.3f}: sync unstable above")
    ax.set_xlabel("step")
    ax.set_title("learning rate × largest Hessian eigenvalue (at the averaged weights)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(f"{local['algo']} against sync, P = {local['P']}, lr {local['lr']:g} × P with a half-epoch "
                 f"warm-up, seed {local['seed']}", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cmd_report(args) -> int:
    folder = Path(args.folder)
    local, sync = _load(folder / args.local), _load(folder / args.sync)
    text = report_text(local, sync)
    (folder / "diagnosis.md").write_text(text)
    figure(local, sync, Path(args.figure))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
