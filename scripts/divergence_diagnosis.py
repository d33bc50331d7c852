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
model's update), ``consensus`` (mean of ``cons``), ``vdev2`` (mean ||v^i - v-bar||^2), ``gnoise``
(mean of the ranks' ``gnoise``) and, with ``--drift-every``, ``drift_mean``
||mean_i (g^i(w^i) - g^i(w-bar))||^2 against ``sgd_noise`` (the variance of the mean of P batch
gradients at w-bar, sync's own noise), as in ``scripts/gap_diagnosis.py`` (the extra gradient restores
the dropout generator, so the run is the run).

What to compare it with (minips/labs/staleness.py, :func:`~minips.labs.staleness.largest_stable_steps`):
sync is stable while lr * h < 1.357 (Nesterov 0.9, h a curvature); under ``local`` the ranks' mean is
sync's, but a rank's *difference* from the mean obeys a rule that is stable only while lr * h < 0.679,
half of sync's, and per-rank gradient noise excites it. ``--warmup-epochs 1 --lr 0.02`` ramps the
learning rate at the same slope as the map's half-epoch warm-up to 0.32, on to 0.64: the rate at which
each rule leaves on one ramp (a learning-rate range test) compares their thresholds at the same point
of training.

``report`` writes ``diagnosis.md`` (the table of docs/accuracy.md section 10.1) and draws the figure.

    python scripts/divergence_diagnosis.py run --algo pseudo-sync:local:1 \\
        --out docs/bench/scale/diagnosis/local-P32-lr0.32
    python scripts/divergence_diagnosis.py run --algo sync --max-steps 56 \\
        --out docs/bench/scale/diagnosis/sync-P32-lr0.32
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
            with lock:
                rank_rows.append(row)
            return loss

    train = {**TRAIN, "warmup_epochs": args.warmup_epochs, "schedule": args.schedule}
    cfg = TrainConfig(**train, lr=args.lr, scale_lr=args.scale_lr,
                      seed=args.seed, algo=args.algo,
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
            "lr_after_warmup": args.lr * (P if args.scale_lr else 1),
            "train": train, "max_steps": args.max_steps,
            "steps_logged": len(step_rows), "error": error,
            "final": None if summary is None else {k: summary.get(k) for k in ("val_accuracy", "test_accuracy")},
            "command": "python " + " ".join(sys.argv), "steps": step_rows}
    (out / "steps.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {out}/ranks.csv ({len(rank_rows)} rows), {out}/steps.json ({len(step_rows)} steps); "
          f"{error or 'finished'}")
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
    r.add_argument("--warmup-epochs", type=float, default=TRAIN["warmup_epochs"],
                   help="linear warm-up (default 0.5, the map's); 1.0 with lr 0.02 x P ramps at the same slope to 0.64")
    r.add_argument("--schedule", default=TRAIN["schedule"], choices=("cosine", "constant"),
                   help="cosine (the map's) or constant: with --warmup-epochs W the rate then rises linearly to "
                        "lr x P at step W epochs, a learning-rate range test")
    r.add_argument("--out", required=True)
    q = sub.add_parser("report")
    q.add_argument("folder")
    q.add_argument("--local", default="local-P32-lr0.32", help="the diagnosed run's folder in FOLDER")
    q.add_argument("--sync", default="sync-P32-lr0.32", help="sync's run's folder in FOLDER")
    q.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "divergence-diagnosis.png"))
    args = p.parse_args(argv)
    return {"run": cmd_run, "report": cmd_report}[args.cmd](args)


def _load(folder: Path) -> dict:
    meta = json.loads((folder / "steps.json").read_text())
    rows = list(csv.DictReader(open(folder / "ranks.csv")))
    ranks: dict = {}
    for r in rows:
        ranks.setdefault(int(r["step"]), []).append({k: (float(v) if v not in ("", None) else float("nan"))
                                                      for k, v in r.items()})
    meta["ranks"] = ranks
    return meta


def first_to_blow_up(d: dict) -> int:
    """The rank whose consensus term ||w^i - w-bar||^2 is largest at the last logged step."""
    last = max(d["ranks"])
    return int(max(d["ranks"][last], key=lambda r: r["cons"])["rank"])


LEAVES = 2.0  # a rank has left when its update stays above this many times the other ranks' median


def leaves(d: dict) -> tuple[int, int, float] | None:
    """(rank, step, lr): the first step from which the rank that blows up
    (:func:`first_to_blow_up`) updates by more than ``LEAVES`` times the other
    ranks' median ``||dw||`` at every later logged step; None when no rank left."""
    bad = first_to_blow_up(d)
    steps = sorted(d["ranks"])
    apart = {}
    for t in steps:
        rs = d["ranks"][t]
        b = next(r for r in rs if int(r["rank"]) == bad)
        others = float(np.median([r["dw_norm"] for r in rs if int(r["rank"]) != bad]))
        apart[t] = b["dw_norm"] > LEAVES * others
    t = next((t for t in steps if all(apart[u] for u in steps if u >= t)), None)
    return None if t is None or d["error"] is None else (bad, t, d["ranks"][t][0]["lr"])


def outcome_row(d: dict) -> str:
    """One row of the thresholds table: the rule, its schedule, the step and
    learning rate at which a rank leaves and at which the loss is NaN, or the
    steps it ran and the largest learning rate it reached."""
    steps = d["steps"]
    warm = d["train"]["warmup_epochs"]
    sched = f"{d['lr']:g} x {d['P']} = {d['lr_after_warmup']:g}, warm-up {warm:g} epoch{'s' if warm != 1 else ''}"
    top = max(s["lr"] for s in steps)
    if d["error"] is None:
        return (f"| `{d['algo']}` | {sched} | no rank left | none in {len(steps)} steps "
                f"(lr up to {top:.3f}; val {d['final']['val_accuracy']:.4f} there) |")
    left = leaves(d)
    nan = int(d["error"].split(" at step ")[1].split()[0]) if " at step " in d["error"] else len(steps)
    lr_nan = steps[-1]["lr"]
    where = f"rank {left[0]} at step {left[1]} (lr {left[2]:.3f})" if left else "-"
    return f"| `{d['algo']}` | {sched} | {where} | step {nan} (lr {lr_nan:.3f}) |"


def thresholds_text(folder: Path) -> str:
    """Every run in FOLDER (sub-folders with a steps.json): where it broke."""
    runs = [_load(f.parent) for f in sorted(folder.glob("*/steps.json"))]
    lines = ["Where each logged run broke: the rank whose update stays above "
             f"{LEAVES:g} times the other ranks' median from that step on, and the step whose loss is NaN "
             "(the learning rate logged at the last finished step before it); a run that did not break ran "
             "to its `--max-steps`.", "",
             "| rule | lr schedule | a rank leaves | loss NaN |", "|---|---|---|---|"]
    lines += [outcome_row(d) for d in runs]
    return "\n".join(lines) + "\n"


def report_text(local: dict, sync: dict) -> str:
    bad = first_to_blow_up(local)
    last = max(local["ranks"])
    warm = local["train"]["warmup_epochs"]
    lines = [f"`{local['algo']}` against `{sync['algo']}` at P = {local['P']}, lr {local['lr']:g} x P "
             f"= {local['lr_after_warmup']:g} after a warm-up of {warm:g} epoch{'s' if warm != 1 else ''}, "
             f"seed {local['seed']}: "
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
    return "\n".join(lines) + "\n"


def figure(local: dict, sync: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    ax = axes[1, 2]     # what the ranks' drift changes in the averaged gradient, against sync's own noise
    ds = [s for s in local["steps"] if s.get("sgd_noise")]
    ax.plot([s["step"] for s in ds], [s["drift_mean"] / s["sgd_noise"] for s in ds], color="#1f77b4",
            label="local: ‖mean_i (g^i(w^i) - g^i(mean w))‖² / sync's noise")
    ax.axhline(1, color="black", ls=":", label="as large as sync's own gradient noise")
    ax.set_yscale("log")
    ax.set_ylim(top=top)
    ax.set_xlabel("step")
    ax.set_title("the ranks' drift in the averaged gradient", fontsize=10)
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
    text = report_text(local, sync) + "\n" + thresholds_text(folder)
    (folder / "diagnosis.md").write_text(text)
    figure(local, sync, Path(args.figure))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
