"""The training loop: data -> model (forward, backward) -> algorithm -> metrics.

:class:`TrainConfig` holds every option (the CLI flags and TOML keys are its
field names); :class:`Trainer` runs it on one process or under ``mpiexec``.
Outputs (rank 0) in ``out``: ``metrics.csv`` (one row per epoch),
``summary.json`` (final numbers, timing breakdown) and ``trace.csv`` (one row
per step: phases in seconds, loss, learning rate, predictor diagnostics).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import random as mrandom
from .timing import PHASES

__all__ = ["TrainConfig", "Trainer", "ConfigError", "load_config", "train"]


class ConfigError(ValueError):
    """A bad option value or config file; the message says how to fix it."""


@dataclass
class TrainConfig:
    """Every option of a training run (defaults are the README's main job).

    Sizes: ``batch_size`` is per rank (weak scaling: the global batch is
    ``batch_size * P``). ``lr`` is the base learning rate; with ``scale_lr``
    it is multiplied by P (linear scaling rule, Goyal et al. 2017) and warmed
    up linearly over ``warmup_epochs``.
    """
    model: str = "convnet"
    data: str = "fashion-mnist-mini"
    epochs: int = 3
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    schedule: str = "cosine"
    warmup_epochs: float = 0.0
    scale_lr: bool = False
    seed: int = 0
    out: str = "runs/latest"
    algo: str = "pseudo-sync"
    predictor: str = "adaptive"
    staleness: int = 1
    bucket_mb: float = 1.0
    network: str | None = None
    progress: str = "poll"
    check_replicas: int = 0
    checkpoint_every: int = 0
    resume: str | None = None
    max_steps: int = 0
    eval_batch_size: int = 500
    quiet: bool = False
    trace: bool = True
    predictor_options: dict = field(default_factory=dict)

    def validate(self) -> None:
        """Raise :class:`ConfigError` on an impossible value (naming the flag)."""
        def need(cond, msg):
            if not cond:
                raise ConfigError(msg)
        need(self.epochs >= 1, f"--epochs must be >= 1, got {self.epochs}")
        need(self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}")
        need(self.lr > 0, f"--lr must be > 0, got {self.lr}")
        need(0 <= self.momentum < 1, f"--momentum must be in [0, 1), got {self.momentum}")
        need(self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}")
        need(self.staleness >= 1, f"--staleness must be >= 1 (1 = use the previous step's "
                                  f"gradient), got {self.staleness}")
        need(self.warmup_epochs >= 0, f"--warmup-epochs must be >= 0, got {self.warmup_epochs}")
        need(self.check_replicas >= 0, "--check-replicas must be >= 0 (0 = off)")
        need(self.checkpoint_every >= 0, "--checkpoint-every must be >= 0 (0 = off)")
        need(self.max_steps >= 0, "--max-steps must be >= 0 (0 = no limit)")
        need(self.bucket_mb >= 0, "--bucket-mb must be >= 0")
        need(self.progress in ("none", "poll", "thread"),
             f"--progress must be none, poll or thread, got {self.progress!r}")


def config_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainConfig)]


def load_config(path) -> dict:
    """Read a TOML run configuration into a dict of TrainConfig fields.

    Keys may use dashes or underscores; a ``[predictor]`` table becomes
    ``predictor_options``.

    Raises:
        ConfigError: missing file, TOML syntax error, or an unknown key (the
            valid keys are listed).
    """
    import tomllib

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    try:
        raw = tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    valid = set(config_fields())
    out = {}
    for k, v in raw.items():
        key = k.replace("-", "_")
        if key == "predictor" and isinstance(v, dict):
            out["predictor_options"] = v
            continue
        if key not in valid:
            raise ConfigError(f"{p}: unknown key {k!r}; valid keys: {', '.join(sorted(valid))}")
        out[key] = v
    return out


class _NullBar:
    def update(self, n=1):
        pass

    def set_postfix(self, **kw):
        pass

    def close(self):
        pass


class Trainer:
    """Run one training job described by a :class:`TrainConfig`.

    Call :meth:`run`; it returns the summary dict (also written to
    ``out/summary.json`` by rank 0). Errors a user can cause raise
    :class:`ConfigError` / ``FileNotFoundError`` / ``ValueError`` with a message
    naming the fix; under MPI the CLI turns any exception into a job abort.
    """

    def __init__(self, cfg: TrainConfig, comm=None):
        cfg.validate()
        self.cfg = cfg
        from .dist.comm import get_comm
        self.comm = comm if comm is not None else get_comm(cfg.network, cfg.progress)
        from .kernels import configure_threads
        self.threads = configure_threads(self.comm.local_size)

    # --- building blocks ----------------------------------------------------------
    def build(self):
        cfg, comm = self.cfg, self.comm
        from .data import BatchLoader, DistributedSampler
        from .dist.algorithms import make_algorithm
        from .models import build_model
        from .optim import SGD, make_schedule
        from .tasks import make_task

        self.task = make_task(cfg.data)
        mrandom.seed(cfg.seed)  # same initial weights everywhere (rank 0's are broadcast anyway)
        self.model = build_model(cfg.model, self.task)
        x, y = self.task.train_arrays
        self.sampler = DistributedSampler(len(x), comm.rank, comm.size, seed=cfg.seed)
        self.loader = BatchLoader(x, y, cfg.batch_size, self.sampler, drop_last=True)
        self.steps_per_epoch = len(self.loader)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        if cfg.max_steps:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        lr = cfg.lr * (comm.size if cfg.scale_lr else 1)
        self.schedule = make_schedule(cfg.schedule, lr, self.total_steps,
                                      warmup_steps=int(round(cfg.warmup_epochs * self.steps_per_epoch)))
        self.optimizer = SGD(self.model.parameters(), lr=lr, momentum=cfg.momentum,
                             nesterov=cfg.nesterov, weight_decay=cfg.weight_decay)
        opts = {"bucket_mb": cfg.bucket_mb if cfg.algo == "overlap-sync" else None}
        if cfg.algo == "pseudo-sync":
            opts.update(staleness=cfg.staleness, predictor=cfg.predictor,
                        predictor_options=cfg.predictor_options or None)
        self.algo = make_algorithm(cfg.algo, self.model.parameters(), self.optimizer, comm, **opts)
        # Dropout masks differ per rank (different data), but are fixed by the seed.
        mrandom.seed(cfg.seed * 100003 + 7919 * comm.rank + 1)

    def _progress_bar(self):
        if self.comm.rank != 0 or self.cfg.quiet or not sys.stderr.isatty():
            return _NullBar()
        from tqdm import tqdm
        return tqdm(total=self.total_steps, desc=f"{self.cfg.algo} x{self.comm.size}", unit="step",
                    dynamic_ncols=True, initial=self.global_step)

    def _say(self, msg: str) -> None:
        if self.comm.rank == 0 and not self.cfg.quiet:
            print(msg, flush=True)

    # --- the loop -------------------------------------------------------------------
    def run(self) -> dict:
        cfg, comm = self.cfg, self.comm
        self.build()
        out = Path(cfg.out)
        if comm.rank == 0:
            out.mkdir(parents=True, exist_ok=True)
        self.global_step, start_epoch, start_batch = 0, 0, 0
        self.history: list[dict] = []
        self._say(f"minips: {cfg.model} on {cfg.data}, algo={cfg.algo}"
                  + (f" predictor={cfg.predictor} staleness={cfg.staleness}" if cfg.algo == "pseudo-sync" else "")
                  + f"; {comm.describe()}; {self.threads} thread(s)/rank; "
                  f"batch {cfg.batch_size}/rank x {comm.size} = {cfg.batch_size * comm.size}")
        self.algo.start()
        trace_rows = []
        t_start = time.perf_counter()
        bar = self._progress_bar()
        samples = 0
        done = False
        for epoch in range(start_epoch, cfg.epochs):
            self.loader.set_epoch(epoch)
            t_epoch = time.perf_counter()
            losses = []
            for batch in self.loader.batches(start_batch):
                loss = self._train_step(batch)
                losses.append(loss)
                samples += self.task.samples(batch)
                row = {"step": self.global_step, "epoch": epoch, "loss": loss,
                       "lr": self.optimizer.lr, **self._last_phases, **self.algo.log}
                if cfg.trace:
                    trace_rows.append(row)
                self.global_step += 1
                bar.update(1)
                if self.global_step % 20 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                if cfg.check_replicas and self.global_step % cfg.check_replicas == 0:
                    self.check_replicas()
                if cfg.max_steps and self.global_step >= self.total_steps:
                    done = True
                    break
            start_batch = 0
            self.algo.finish()  # drain the pipeline before evaluating the weights
            metrics = self.task.evaluate(self.model, comm, cfg.eval_batch_size)
            row = {"epoch": epoch + 1, "step": self.global_step,
                   "train_loss": float(np.mean(losses)) if losses else float("nan"),
                   **metrics, "seconds": time.perf_counter() - t_epoch,
                   "wall_time_s": time.perf_counter() - t_start}
            self.history.append(row)
            bar.close() if done or epoch == cfg.epochs - 1 else None
            self._say(f"epoch {epoch + 1}/{cfg.epochs}: train loss {row['train_loss']:.4f}, "
                      + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
                      + f", {row['seconds']:.1f} s")
            if done:
                break
        bar.close()
        wall = time.perf_counter() - t_start
        summary = self._summary(wall, samples)
        if comm.rank == 0:
            self._write_outputs(out, summary, trace_rows)
            self._say(self.format_breakdown(summary))
        return summary

    def _train_step(self, batch) -> float:
        cfg, algo = self.cfg, self.algo
        lr = self.schedule(self.global_step)
        self.optimizer.lr = lr
        timer = algo.timer
        with timer.phase("forward"):
            loss = self.model.loss(batch)
        value = float(loss.data)
        if not math.isfinite(value):
            raise FloatingPointError(
                f"loss is {value} at step {self.global_step} (rank {self.comm.rank}); training diverged. "
                "Lower --lr, or check the data; the last checkpoint (if any) is kept")
        algo.before_backward()
        with timer.phase("backward"):
            loss.backward()
        algo.step()
        self._last_phases = dict(timer.rows[-1]) if timer.rows else {}
        return value

    def check_replicas(self) -> None:
        """Compare a hash of the weights across ranks; raise if any differ.

        Raises:
            RuntimeError: naming the ranks whose weights differ from rank 0's.
        """
        sums = self.comm.allgather(self.algo.flat.checksum())
        bad = [r for r, s in enumerate(sums) if s != sums[0]]
        if bad:
            raise RuntimeError(f"replicas diverged at step {self.global_step}: ranks {bad} hold different "
                               "weights from rank 0 (an algorithm applied different updates on different ranks)")

    # --- results ------------------------------------------------------------------------
    def _summary(self, wall: float, samples: int) -> dict:
        cfg, comm = self.cfg, self.comm
        skip = min(5, max(0, len(self.algo.timer.rows) - 1))  # JIT warm-up steps
        local = self.algo.timer.mean(skip)
        breakdown = {k: comm.allreduce_scalar(v) / comm.size for k, v in local.items()}
        step_time = sum(breakdown.values())
        last = self.history[-1] if self.history else {}
        summary = {
            "model": cfg.model, "data": cfg.data, "algo": cfg.algo,
            "predictor": cfg.predictor if cfg.algo == "pseudo-sync" else None,
            "staleness": cfg.staleness if cfg.algo == "pseudo-sync" else None,
            "world_size": comm.size, "seed": cfg.seed, "epochs": len(self.history),
            "steps": self.global_step, "batch_size_per_rank": cfg.batch_size,
            "global_batch_size": cfg.batch_size * comm.size, "lr": cfg.lr,
            "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
            "wall_time_s": wall,
            "images_per_s": comm.allreduce_scalar(float(samples)) / wall if wall > 0 else None,
            "time_breakdown": breakdown, "step_time_s": step_time,
            "network": str(comm.network) if comm.network else "real",
            "network_emulated": comm.emulated, "progress": comm.progress_mode,
            "threads_per_rank": self.threads,
            "history": self.history,
        }
        for k, v in last.items():
            if k.startswith("test_") or k in ("bleu", "exact_match", "token_accuracy"):
                summary.setdefault(k, v)
                summary[k] = v
        return summary

    @staticmethod
    def format_breakdown(summary: dict) -> str:
        """A small text table of the mean per-step timing breakdown."""
        b = summary["time_breakdown"]
        total = sum(b.values()) or 1.0
        lines = [f"timing per step (mean over steps and ranks){' [EMULATED network]' if summary['network_emulated'] else ''}:"]
        for k in PHASES:
            lines.append(f"  {k:<9}{b[k] * 1e3:9.2f} ms  {100 * b[k] / total:5.1f}%")
        lines.append(f"  {'total':<9}{total * 1e3:9.2f} ms; {summary['images_per_s']:.0f} images/s; "
                     f"test accuracy {summary['test_accuracy']}")
        return "\n".join(lines)

    def _write_outputs(self, out: Path, summary: dict, trace_rows: list) -> None:
        keys = list(self.history[0].keys()) if self.history else []
        _atomic_write(out / "metrics.csv", _csv_text(keys, self.history))
        _atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
        if trace_rows:
            keys = list(dict.fromkeys(k for r in trace_rows for k in r))
            _atomic_write(out / "trace.csv", _csv_text(keys, trace_rows))


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _csv_text(keys, rows) -> str:
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue()


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def train(**options) -> dict:
    """Convenience: ``train(model="mlp", epochs=1, ...)`` builds a TrainConfig and runs it."""
    return Trainer(TrainConfig(**options)).run()
