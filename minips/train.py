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

__all__ = ["TrainConfig", "Trainer", "ConfigError", "load_config", "check_out_dir", "train"]


def read_toml(path, error: type[Exception], missing: str) -> dict:
    """Parse the TOML file ``path`` (tomllib). Raises ``error(missing)`` when
    the file does not exist and ``error`` naming the file and the parse error
    when it is not valid TOML."""
    import tomllib

    p = Path(path)
    if not p.exists():
        raise error(missing)
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as e:
        raise error(f"{p}: not valid TOML: {e}") from None


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
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = True
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
    label: str | None = None

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
    """Names of the TrainConfig fields: the valid TOML keys and ``--flag`` names."""
    return [f.name for f in dataclasses.fields(TrainConfig)]


def load_config(path) -> dict:
    """Read a TOML run configuration into a dict of TrainConfig fields.

    Keys may use dashes or underscores; predictor options go in a
    ``[predictor_options]`` table (e.g. ``adapt_lambda = false``).

    Raises:
        ConfigError: missing file, TOML syntax error, or an unknown key (the
            valid keys are listed).
    """
    p = Path(path)
    raw = read_toml(p, ConfigError, f"config file {p} does not exist")
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    out = {}
    for k, v in raw.items():
        key = k.replace("-", "_")
        if key not in types:
            shown = sorted("[predictor_options]" if n == "predictor_options" else n.replace("_", "-")
                           for n in types)
            raise ConfigError(f"{p}: unknown key {k!r}; valid keys (dashes or underscores): {', '.join(shown)}")
        _check_config_type(p, k, v, types[key])
        out[key] = v
    return out


# TrainConfig field type (its annotation text) -> (accepts(value), what to write)
_CONFIG_TYPES = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "dict": (lambda v: isinstance(v, dict), "a table"),
}


def _toml_kind(v) -> str:
    """How TOML calls the type of a parsed value ("a string", "a boolean", ...)."""
    if isinstance(v, bool):
        return "a boolean"
    for t, name in ((int, "an integer"), (float, "a float"), (str, "a string"), (dict, "a table"),
                    (list, "an array")):
        if isinstance(v, t):
            return name
    return "a date/time"


def _toml_repr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v)


def _parses_as(text: str, base: str) -> bool:
    """Whether ``text`` (a quoted TOML value) is a valid unquoted value of type ``base``."""
    if base == "bool":
        return text in ("true", "false")
    if base in ("int", "float"):
        try:
            (int if base == "int" else float)(text)
            return True
        except ValueError:
            return False
    return False


def _check_config_type(path: Path, key: str, value, ftype: str) -> None:
    """Raise ConfigError unless the TOML ``value`` fits the TrainConfig field
    type ``ftype`` (int: integers only, not booleans; float: integers or
    floats; bool: true/false only; str: strings; ``X | None``: as X)."""
    base = ftype.replace(" | None", "").strip()
    if base not in _CONFIG_TYPES:
        return
    accepts, want = _CONFIG_TYPES[base]
    if accepts(value):
        return
    hint = ""
    if base == "dict":
        hint = f"; write it as a table: [{key}] on its own line, then one option = value per line"
    elif isinstance(value, str):  # a quoted number or boolean: say how to write it unquoted
        text = value.strip()
        if _parses_as(text, base):
            hint = f"; write {key} = {text} without quotes"
    elif base == "str":
        hint = f'; put it in quotes: {key} = "{_toml_repr(value)}"'
    if not hint and base == "bool":
        hint = f"; write {key} = true or {key} = false (no quotes)"
    raise ConfigError(f"{path}: {key!r} must be {want}, got {_toml_repr(value)} ({_toml_kind(value)}){hint}")


def check_out_dir(out) -> Path:
    """``Path(out)``, after checking that it can be a run directory: neither it
    nor any existing folder above it may be a file.

    Raises:
        ConfigError: naming the file in the way.
    """
    out = Path(out)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                what = "is" if p == out else f"is inside {p}, which is"
                raise ConfigError(f"--out {out} {what} a file, not a directory; give --out a directory "
                                  "(it is created if missing), e.g. --out runs/NAME")
            break
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
        from .distributed.comm import get_comm
        self.comm = comm if comm is not None else get_comm(cfg.network, cfg.progress)
        from .kernels import configure_threads
        self.threads = configure_threads(self.comm.local_size)

    # --- building blocks ----------------------------------------------------------
    def build(self):
        """Make the task, model, sampler/loader, schedule, optimizer and algorithm
        from the config (the same initial weights on every rank: seeded, then
        broadcast from rank 0 by ``algo.start()``)."""
        cfg, comm = self.cfg, self.comm
        from .data import BatchLoader, DistributedSampler
        from .distributed.algorithms import make_algorithm
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
        # The schedule spans all epochs; --max-steps only stops early (so a run
        # cut short and resumed follows the same learning rates).
        planned = self.steps_per_epoch * cfg.epochs
        self.total_steps = min(planned, cfg.max_steps) if cfg.max_steps else planned
        lr = cfg.lr * (comm.size if cfg.scale_lr else 1)
        self.schedule = make_schedule(cfg.schedule, lr, planned,
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

    def _warn_if_busy(self) -> None:
        """Parallel Numba loops wait for their slowest thread; when other jobs
        already occupy the cores, a descheduled thread stalls every loop (seen:
        a ConvNet step 8x slower with 2 threads than with 1 under load 7 on 2
        cores). Say so, once, on rank 0."""
        if self.threads < 2 or "NUMBA_NUM_THREADS" in os.environ:
            return
        from .kernels.threads import cores_on_node
        load = os.getloadavg()[0]
        if load >= cores_on_node():
            self._say(f"warning: this machine is busy (load average {load:.1f} on {cores_on_node()} cores); "
                      f"{self.threads} Numba threads per rank may run much slower than 1: "
                      "set NUMBA_NUM_THREADS=1 if steps are slow")

    def _say(self, msg: str) -> None:
        if self.comm.rank == 0 and not self.cfg.quiet:
            print(msg, flush=True)

    # --- the loop -------------------------------------------------------------------
    def run(self) -> dict:
        """Train, evaluate after every epoch, write the outputs; returns the summary."""
        cfg, comm = self.cfg, self.comm
        out = check_out_dir(cfg.out)  # on every rank, before any work
        self.build()
        if comm.rank == 0:
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ConfigError(f"cannot create the output directory {out}: {e.strerror}; "
                                  "give --out a directory you can write") from None
        self.global_step = 0
        self.history: list[dict] = []
        self.last_eval: dict = {}
        self.trace_rows: list[dict] = []
        self.step_times: list[float] = []
        if cfg.resume:
            self.restore(cfg.resume)
        self._warn_if_busy()
        self._say(f"minips: {cfg.model} on {cfg.data}, {self.algo.describe()}; {comm.describe()}; "
                  f"{self.threads} thread(s)/rank; batch {cfg.batch_size}/rank x {comm.size} = "
                  f"{cfg.batch_size * comm.size}; {self.total_steps} steps"
                  + (f"; resumed at step {self.global_step}" if cfg.resume else ""))
        self.algo.start()
        stopper = StopAgreement(comm)
        bar = self._progress_bar()
        t_start = time.perf_counter()
        try:
            self.comm_alone_s = self.measure_comm_alone()
            samples, stopped = self._train_epochs(stopper, bar, out, t_start)
        except BaseException:
            self._abandon(stopper, bar)
            raise
        bar.close()
        self.algo.finish()  # drain the pipeline: no request left pending
        stopper.close()
        if stopped == "signal" or cfg.checkpoint_every:  # the final state, to continue or inspect
            self.save_checkpoint(out / "checkpoint.h5")
            if stopped == "signal":
                self._say(f"stopped by signal at step {self.global_step}; checkpoint {out / 'checkpoint.h5'} "
                          f"(continue with --resume {out / 'checkpoint.h5'})")
        wall = time.perf_counter() - t_start
        summary = self._summary(wall, samples, stopped)
        if comm.rank == 0:
            self._write_outputs(out, summary)
            self._say(self.format_breakdown(summary))
        return summary

    def _train_epochs(self, stopper, bar, out: Path, t_start: float):
        """The epoch/step loop; returns (samples trained on by this rank, why it stopped early or None)."""
        cfg = self.cfg
        samples, stopped = 0, None
        start_epoch, start_batch = divmod(self.global_step, self.steps_per_epoch)
        for epoch in range(start_epoch, cfg.epochs):
            self.loader.set_epoch(epoch)
            t_epoch = time.perf_counter()
            losses = []
            t_step = time.perf_counter()
            for batch in self.loader.batches(start_batch):
                loss = self._train_step(batch)
                now = time.perf_counter()
                self.step_times.append(now - t_step)  # whole iteration, data slicing included
                t_step = now
                losses.append(loss)
                samples += self.task.samples(batch)
                if cfg.trace:
                    self.trace_rows.append({"step": self.global_step, "epoch": epoch, "loss": loss,
                                            "lr": self.optimizer.lr, "step_s": self.step_times[-1],
                                            **self._last_phases, **self.algo.log})
                self.global_step += 1
                bar.update(1)
                if self.global_step % 20 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                if cfg.check_replicas and self.global_step % cfg.check_replicas == 0:
                    self.check_replicas()
                if cfg.checkpoint_every and self.global_step % cfg.checkpoint_every == 0:
                    self.save_checkpoint(out / "checkpoint.h5")
                if self.global_step >= self.total_steps:
                    stopped = "max_steps" if self.global_step < self.steps_per_epoch * cfg.epochs else None
                    break
                if stopper.should_stop():
                    stopped = "signal"
                    break
            start_batch = 0
            if stopped == "signal":
                break
            if losses:
                self._end_epoch(epoch, losses, t_epoch, t_start, partial=stopped == "max_steps")
            if stopped:
                break
        return samples, stopped

    def _abandon(self, stopper, bar) -> None:
        """Clean up after an exception (a NaN loss, Ctrl-C in a notebook): restore
        the signal handlers and disarm progress polling. On one rank also complete
        what is in flight; with several, the other ranks may be gone, so waiting
        could hang (the CLI aborts the job instead)."""
        bar.close()
        stopper.close(wait=self.comm.size == 1)
        if self.comm.size == 1:
            self.algo.finish()
        else:
            self.algo.disarm()

    def measure_comm_alone(self, repeats: int = 5) -> float | None:
        """Median seconds of a blocking allreduce of the whole gradient with
        nothing else running: the denominator of the overlap efficiency.
        None on one rank (there is no communication)."""
        if self.comm.size == 1:
            return None
        buf = np.zeros(self.algo.flat.numel, np.float32)
        times = []
        for _ in range(repeats):
            self.comm.barrier()
            times.append(self.comm.allreduce(buf))
        return float(self.comm.allreduce_scalar(float(np.median(times)), "max"))

    def _end_epoch(self, epoch, losses, t_epoch, t_start, partial=False) -> None:
        """Evaluate; a complete epoch adds a row to the history (metrics.csv), a
        partial one (--max-steps) only sets the final numbers of the summary."""
        metrics = self.task.evaluate(self.model, self.comm, self.cfg.eval_batch_size)
        row = {"epoch": epoch + 1, "step": self.global_step,
               "train_loss": float(np.mean(losses)),
               **metrics, "seconds": time.perf_counter() - t_epoch,
               "wall_time_s": time.perf_counter() - t_start}
        self.last_eval = row
        if not partial:
            self.history.append(row)
        self._say(f"{'partial ' if partial else ''}epoch {epoch + 1}/{self.cfg.epochs}: train loss {row['train_loss']:.4f}, "
                  + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()) + f", {row['seconds']:.1f} s")

    # --- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, path) -> None:
        """Write a checkpoint of this step (collective: every rank must call it).

        In-flight gradients are completed first and stored averaged, which does
        not change the trajectory. Rank 0 writes; the outcome is broadcast, so
        a failed write raises on every rank instead of leaving them hanging.
        """
        from . import checkpoint

        self.algo.drain()
        rng_states = self.comm.allgather(json.dumps(mrandom.get_state()))
        error = None
        if self.comm.rank == 0:
            state = {
                "step": self.global_step, "world_size": self.comm.size,
                "config": json.dumps(dataclasses.asdict(self.cfg)),
                "weights": self.algo.flat.weights,
                "optimizer": self.optimizer.state_dict(),
                "algorithm": self.algo.state_dict(),
                "rng": rng_states,
                "history": json.dumps(self.history),
                "trace": json.dumps(self.trace_rows, default=_json_default),
            }
            try:
                checkpoint.save(path, state)
            except OSError as e:
                error = f"could not write checkpoint {path}: {e}"
        error = self.comm.bcast_obj(error)
        if error:
            raise RuntimeError(error)

    def restore(self, path) -> None:
        """Load a checkpoint into the freshly built run (before ``algo.start()``).

        Raises:
            CheckpointError: missing/invalid file, a different number of ranks, or
                a run configuration that differs in what fixes the trajectory.
        """
        from .checkpoint import CheckpointError, load

        state = load(path)
        saved = json.loads(state["config"])
        if int(state["world_size"]) != self.comm.size:
            raise CheckpointError(
                f"checkpoint {path} was written by {state['world_size']} rank(s), this job has "
                f"{self.comm.size}; resume with mpiexec -n {state['world_size']} (the data sharding and the "
                "averaged gradients depend on the number of ranks, so the trajectory cannot continue otherwise)")
        keys = ("model", "data", "algo", "predictor", "staleness", "batch_size", "seed", "lr", "momentum",
                "nesterov", "weight_decay", "schedule", "warmup_epochs", "scale_lr", "epochs")
        diff = [f"{k}: checkpoint {saved.get(k)!r}, now {getattr(self.cfg, k)!r}" for k in keys
                if saved.get(k) != getattr(self.cfg, k)]
        if diff:
            raise CheckpointError(f"checkpoint {path} was written by a different run configuration ("
                                  + "; ".join(diff) + "); pass the same options to continue its trajectory")
        w = np.asarray(state["weights"], np.float32)
        if w.shape != self.algo.flat.weights.shape:
            raise CheckpointError(f"checkpoint {path} holds {w.size} weights, the model has "
                                  f"{self.algo.flat.weights.size}")
        self.algo.flat.weights[...] = w
        opt = dict(state["optimizer"])
        opt["buffers"] = list(opt["buffers"])
        self.optimizer.load_state_dict(opt)
        self.algo.load_state_dict(state["algorithm"])
        mrandom.set_state(json.loads(state["rng"][self.comm.rank]))
        self.global_step = int(state["step"])
        self.history = json.loads(state["history"])
        self.trace_rows = json.loads(state["trace"])

    def _train_step(self, batch) -> float:
        algo = self.algo
        lr = self.schedule(self.global_step)
        self.optimizer.lr = lr
        timer = algo.timer
        algo.before_forward()
        with timer.phase("forward"):
            loss = self.model.loss(batch)
        value = float(loss.data)
        if not math.isfinite(value):
            where = self._write_trace_at_divergence()
            raise FloatingPointError(
                f"loss is {value} at step {self.global_step} (rank {self.comm.rank}); training diverged. "
                "Lower --lr, or check the data; the last checkpoint (if any) is kept"
                + (f"; the trace up to here is in {where}" if where else ""))
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
    def _summary(self, wall: float, samples: int, stopped=None) -> dict:
        cfg, comm = self.cfg, self.comm
        skip = min(5, max(0, len(self.algo.timer.rows) - 1))  # JIT warm-up steps, pipeline fill
        local = self.algo.timer.mean(skip)
        breakdown = {k: comm.allreduce_scalar(v) / comm.size for k, v in local.items()}
        # Steady-state step time: skip the JIT warm-up steps; the slowest rank
        # sets the pace of the job, so take the max over ranks.
        times = self.step_times[skip:] or self.step_times or [float("nan")]
        step_time = comm.allreduce_scalar(float(np.mean(times)), "max")
        # Overlap efficiency = 1 - wait / (allreduce time when nothing else runs).
        overlap = None
        if self.comm_alone_s:
            overlap = max(0.0, 1.0 - breakdown["wait"] / self.comm_alone_s)
        last = self.last_eval
        summary = {
            "label": cfg.label or (f"{cfg.algo}:{cfg.predictor}" if cfg.algo == "pseudo-sync" else cfg.algo),
            "model": cfg.model, "data": cfg.data, "algo": cfg.algo,
            "predictor": cfg.predictor if cfg.algo == "pseudo-sync" else None,
            "staleness": cfg.staleness if cfg.algo == "pseudo-sync" else None,
            "predictor_options": self.algo.predictor.options() if cfg.algo == "pseudo-sync" else None,
            "world_size": comm.size, "seed": cfg.seed, "epochs": len(self.history),
            "epochs_planned": cfg.epochs,
            "steps": self.global_step, "batch_size_per_rank": cfg.batch_size,
            "global_batch_size": cfg.batch_size * comm.size, "lr": cfg.lr,
            "test_accuracy": last.get("test_accuracy"), "test_loss": last.get("test_loss"),
            "wall_time_s": wall,
            "images_per_s": cfg.batch_size * comm.size / step_time,
            "wall_images_per_s": comm.allreduce_scalar(float(samples)) / wall if wall > 0 else None,
            "time_breakdown": breakdown, "step_time_s": step_time,
            "comm_alone_s": self.comm_alone_s, "overlap_efficiency": overlap,
            "network": str(comm.network) if comm.network else "real",
            "network_emulated": comm.emulated, "progress": comm.progress_mode,
            "threads_per_rank": self.threads,
            "stopped": stopped,
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
        step = summary["step_time_s"]
        emulated = f" [EMULATED network: {summary['network']}]" if summary["network_emulated"] else ""
        lines = [f"timing per step (mean over steps and ranks){emulated}:"]
        for k in PHASES:
            lines.append(f"  {k:<9}{b[k] * 1e3:9.2f} ms  {100 * b[k] / step:5.1f}%")
        other = step - sum(b.values())
        lines.append(f"  {'other':<9}{other * 1e3:9.2f} ms  {100 * other / step:5.1f}%  (data, logging)")
        lines.append(f"  {'step':<9}{step * 1e3:9.2f} ms  (slowest rank); {summary['images_per_s']:.0f} images/s")
        if summary.get("overlap_efficiency") is not None:
            lines.append(f"  blocking allreduce alone {summary['comm_alone_s'] * 1e3:.2f} ms; overlap efficiency "
                         f"{summary['overlap_efficiency']:.2f}  (1 - wait / allreduce alone)")
            if b["wait"] > summary["comm_alone_s"]:
                lines.append("  (the wait is longer than the allreduce itself: the rest is waiting for the "
                             "slowest rank, not communication)")
        lines.append("  " + Trainer.format_final(summary))
        return "\n".join(lines)

    @staticmethod
    def format_final(summary: dict) -> str:
        """The final-metric line: test accuracy (0..1) to 4 decimals, or for the
        captioner BLEU-4 on sacrebleu's 0..100 scale (as summary.json stores it
        and docs/captioning.md reports it) with the exact-match fraction."""
        def num(v, fmt):
            return "n/a" if v is None else format(v, fmt)
        if summary.get("bleu") is not None:
            return (f"final BLEU-4 (0-100): {num(summary['bleu'], '.2f')}, "
                    f"exact match {num(summary.get('exact_match'), '.4f')}")
        return f"final test accuracy: {num(summary.get('test_accuracy'), '.4f')}"

    def _write_trace_at_divergence(self) -> Path | None:
        """Write the per-step trace so far to ``OUT/trace-diverged-rankR.csv`` (by
        every rank that sees the non-finite loss: the others may be aborted
        before they could), so a diverged run can still be read. Returns the
        path, or None when there is nothing to write."""
        if not (self.cfg.trace and self.trace_rows):
            return None
        path = Path(self.cfg.out) / f"trace-diverged-rank{self.comm.rank}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_trace(path)
        return path

    def _write_trace(self, path: Path) -> None:
        """The per-step trace rows as CSV (columns: every key any row has)."""
        keys = list(dict.fromkeys(k for r in self.trace_rows for k in r))
        _atomic_write(path, _csv_text(keys, self.trace_rows))

    def _write_outputs(self, out: Path, summary: dict) -> None:
        keys = list(self.history[0].keys()) if self.history else []
        _atomic_write(out / "metrics.csv", _csv_text(keys, self.history))
        _atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=_json_default) + "\n")
        if self.trace_rows:
            self._write_trace(out / "trace.csv")


class StopAgreement:
    """Stop every rank at the same step when any rank gets SIGTERM or SIGINT.

    Slurm sends SIGTERM to all tasks before a time limit, but they may be at
    different steps. Each step every rank posts a 1-element Iallreduce (MAX) of
    its "stop" flag and reads the result posted one step earlier (long
    complete by then, so this adds no wait): all ranks see the same value at
    the same step and stop together.
    """

    def __init__(self, comm):
        import signal

        self.comm, self.flag = comm, False
        self.bufs = [np.zeros(1, np.float32), np.zeros(1, np.float32)]
        self.req, self.i = None, 0
        self._old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass

    def _handler(self, signum, frame):
        self.flag = True

    def should_stop(self) -> bool:
        """True on every rank at the same step once any rank was signalled."""
        if self.comm.size == 1:
            return self.flag
        stop = False
        if self.req is not None:
            self.req.wait()
            stop = self.req.buf[0] > 0
        buf = self.bufs[self.i]
        self.i ^= 1
        buf[0] = 1.0 if self.flag else 0.0
        self.req = self.comm.iallreduce(buf, tag="stop")
        return bool(stop)

    def close(self, wait: bool = True) -> None:
        """Complete the last flag exchange (``wait``) and restore the signal handlers."""
        import signal

        if self.req is not None and wait:
            self.req.wait()
        self.req = None
        for sig, old in self._old.items():
            signal.signal(sig, old)


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
