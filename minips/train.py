"""The training loop: data -> model (forward, backward) -> algorithm -> metrics.

:class:`Trainer` runs a :class:`~minips.config.TrainConfig` on one process or
under ``mpiexec``. The loop only: the options live in :mod:`minips.config`,
the output files in :mod:`minips.rundir`, checkpoints in
:mod:`minips.checkpoint`, the stop protocol in :mod:`minips.stop`, the
summary and its text in :mod:`minips.report`.

Per step the Trainer asks the algorithm (:mod:`minips.distributed.algorithms`)
for the learning rate, the weights to compute the gradient at and the number
of micro-batches, runs forward and backward, and calls ``algo.step()``. When
the algorithm lets ranks hold different weights (``algo.replicated`` is
False) the Trainer logs the consensus distance, evaluates the model averaged
over ranks, and checkpoints every rank's state.

Long because one job: the Trainer is the loop a student follows from
``build`` through each step and epoch end to the last evaluation; its
methods all read and change the same run state (model, algorithm, sampler,
timer, history), and what is not the loop (options, output files,
checkpoints, the stop protocol, the summary) already lives in the modules
named above.
"""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import random as mrandom
from . import report, rundir
from .config import ConfigError, TrainConfig, check_out_dir, load_config  # noqa: F401 - the public API
from .stop import StopAgreement

__all__ = ["TrainConfig", "Trainer", "ConfigError", "load_config", "check_out_dir", "train", "run_config"]


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
        self.spec = cfg.resolve_algo()  # a bad --algo fails here, before any work
        from .distributed.comm import get_comm
        self.comm = comm if comm is not None else get_comm(cfg.network, cfg.progress, cfg.allreduce,
                                                           cfg.ranks_per_node or None)
        if cfg.virtual_ranks and not (self.comm.virtual and self.comm.size == cfg.virtual_ranks):
            raise ConfigError(f"virtual_ranks = {cfg.virtual_ranks} starts that many ranks as threads: run it with "
                              "minips.train.train(...) or python -m minips train --virtual-ranks P (a Trainer is "
                              "one rank)")
        from .kernels import configure_threads
        from .kernels.threads import set_threads
        # a virtual rank is a thread among P: one Numba thread each (BLAS is one for the whole job)
        self.threads = set_threads(1, blas=False) if self.comm.virtual else configure_threads(self.comm.local_size)

    # --- building blocks ----------------------------------------------------------
    def build(self):
        """Make the task, model, optimizer, algorithm, sampler/loader and schedule
        from the config (the same initial weights on every rank: seeded, then
        broadcast from rank 0 by ``algo.start()``)."""
        cfg, comm = self.cfg, self.comm
        from .data import BatchLoader
        from .models import build_model
        from .optim import SGD, make_schedule
        from .tasks import make_task

        self.task = make_task(cfg.data)
        if cfg.val_fraction:  # before the sampler: the held-out samples are never trained on
            try:
                self.task.hold_out(cfg.val_fraction)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        mrandom.seed(cfg.seed)  # same initial weights everywhere (rank 0's are broadcast anyway)
        self.model = build_model(cfg.model, self.task)
        lr = cfg.lr * (comm.size if cfg.scale_lr else 1)
        self.optimizer = SGD(self.model.parameters(), lr=lr, momentum=cfg.momentum,
                             nesterov=cfg.nesterov, weight_decay=cfg.weight_decay, clip_norm=cfg.clip_norm)
        self.algo = self.spec.build(self.model.parameters(), self.optimizer, comm)
        if cfg.check_replicas and not self.algo.replicated:
            raise ConfigError(f"--check-replicas compares weight hashes across ranks, but {self.spec.label} lets "
                              "ranks hold different weights; drop --check-replicas (the consensus distance is "
                              "logged instead: --consensus-every N)")
        x, y = self.task.train_arrays
        self.sampler = self._sampler(len(x), y)
        self.batch_size = self.algo.batch_size(cfg.batch_size)
        self.loader = BatchLoader(x, y, self.batch_size, self.sampler, drop_last=True)
        # Every rank must take the same number of steps (collectives pair up
        # step by step); with unequal batch sizes the fewest steps win.
        self.steps_per_epoch = int(comm.allreduce_scalar(len(self.loader), "min"))
        # The schedule spans all epochs; --max-steps only stops early (so a run
        # cut short and resumed follows the same learning rates).
        planned = self.steps_per_epoch * cfg.epochs
        self.total_steps = min(planned, cfg.max_steps) if cfg.max_steps else planned
        self.schedule = make_schedule(cfg.schedule, lr, planned,
                                      warmup_steps=int(round(cfg.warmup_epochs * self.steps_per_epoch)))
        # Dropout masks differ per rank (different data), but are fixed by the seed.
        mrandom.seed(cfg.seed * 100003 + 7919 * comm.rank + 1)

    def _sampler(self, n: int, y):
        """This rank's sampler for ``--partition`` (the targets are the labels
        of non-iid partitions; iid ignores them)."""
        from .data import DistributedSampler
        cfg, comm = self.cfg, self.comm
        try:
            return DistributedSampler(n, comm.rank, comm.size, seed=cfg.seed, partition=cfg.partition, labels=y)
        except ValueError as e:
            raise ConfigError(f"--partition {cfg.partition}: {e}") from None

    def _progress_bar(self):
        if self.comm.rank != 0 or self.cfg.quiet or not sys.stderr.isatty():
            return _NullBar()
        from tqdm import tqdm
        return tqdm(total=self.total_steps, desc=f"{self.cfg.label or self.spec.run_label} x{self.comm.size}",
                    unit="step", dynamic_ncols=True, initial=self.global_step)

    def _warn_if_busy(self) -> None:
        """Parallel Numba loops wait for their slowest thread; when other jobs
        already occupy the cores, a descheduled thread stalls every loop (seen:
        a ConvNet step 8x slower with 2 threads than with 1 under load 7 on 2
        cores). Say so, once, on rank 0."""
        from .kernels.threads import cores_on_node
        cores, ranks = cores_on_node(), self.comm.local_size
        if "NUMBA_NUM_THREADS" in os.environ and self.threads * ranks > cores:
            self._say(f"warning: NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']} gives {self.threads} threads "
                      f"per rank x {ranks} rank(s) = {self.threads * ranks} threads on {cores} cores: parallel loops "
                      "then wait for descheduled threads and steps can be many times slower; set "
                      f"NUMBA_NUM_THREADS={max(1, cores // ranks)} or unset it (minips then uses cores // ranks)")
        if self.threads < 2 or "NUMBA_NUM_THREADS" in os.environ:
            return
        load = os.getloadavg()[0]
        if load >= cores:
            self._say(f"warning: this machine is busy (load average {load:.1f} on {cores} cores); "
                      f"{self.threads} Numba threads per rank may run much slower than 1: "
                      "set NUMBA_NUM_THREADS=1 if steps are slow")

    def _note_oversubscribed(self) -> None:
        """More ranks on a node than processors they may run on (``mpiexec -n 3``
        on 2 cores): the ranks take turns, every collective waits for the one
        that is descheduled, steps are slower and timings say little. Say so,
        once, on rank 0. Collective. The processors are the union of the node's
        ranks' affinities (with ``-bind-to core`` each rank sees one core)."""
        import socket
        mine = (socket.gethostname(), sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                else list(range(os.cpu_count() or 1)))
        everyone = self.comm.allgather(mine) if self.comm.size > 1 else [mine]
        here = [cpus for host, cpus in everyone if host == mine[0]]
        cores = len(set().union(*map(set, here)))
        if len(here) > cores:
            self.oversubscribed = {"ranks_on_node": len(here), "cores": cores}  # for summary.json and the reports
            self._say(f"note: {len(here)} ranks share {cores} core(s) on this node: they take turns, so each step "
                      f"waits for a descheduled rank and timings are not meaningful; use mpiexec -n {cores} (or "
                      "fewer) for measurements")

    def _warn_unseen_classes(self) -> None:
        """With a non-IID partition, say which classes no rank trains on (e.g.
        by-class:2 on 2 ranks covers 4 of 10): a test accuracy near the share of
        classes seen is then expected, not a bug."""
        if self.cfg.partition == "iid":
            return
        counts = self.comm.allgather(self.sampler.describe().get("class_counts") or {})
        seen = set().union(*counts)
        labels = self.task.train_arrays[1]
        every = {str(c) for c in np.unique(labels)} if np.ndim(labels) == 1 else seen
        missing = sorted(every - seen, key=lambda c: (len(c), c))
        if missing:
            self._say(f"note: with --partition {self.cfg.partition} on {self.comm.size} rank(s) no rank trains on "
                      f"class(es) {', '.join(missing)} ({len(seen)} of {len(every)} classes are seen)")

    def _say(self, msg: str) -> None:
        if self.comm.rank == 0 and not self.cfg.quiet:
            print(msg, flush=True)

    # --- the loop -------------------------------------------------------------------
    def run(self) -> dict:
        """Train, evaluate after every epoch, write the outputs; returns the summary."""
        cfg, comm = self.cfg, self.comm
        out = self.preflight()
        comm.barrier()  # every rank passed its checks (one that failed never comes): only now is --out touched
        # Rank 0 creates the run folder and takes its lock (which also shows the
        # folder is writable) before any training: the outcome is broadcast so
        # every rank stops with the same message.
        lock, error = None, None
        if comm.rank == 0:
            try:
                lock = rundir.take_lock(out)
            except rundir.RunFolderError as e:
                error = str(e)
            # only once the lock is ours: --overwrite must never clear a running run's files
            if lock is not None and cfg.overwrite and not cfg.resume:  # resuming keeps the checkpoint it reads
                rundir.clear_run_files(out)
        error, owner = comm.bcast_obj((error, lock.owner if lock is not None else None))
        if error:
            raise rundir.RunFolderError(error)
        if lock is not None and lock.replaced:
            self._say(f"note: removed the stale lock {lock.path} of process {lock.replaced.get('pid')} on this "
                      "host, which no longer runs")
        try:
            return self._run(out)
        except BaseException:
            # A failure here ends the whole job (the CLI aborts it), and the abort
            # may kill rank 0 before its `finally` releases the lock: the failing
            # rank removes rank 0's lock itself (only if it still holds rank 0's pid).
            if owner is not None and comm.rank != 0:
                rundir.release_lock_of(out / rundir.LOCK, owner)
            raise
        finally:
            if lock is not None:
                lock.release()

    def preflight(self) -> Path:
        """Every check that can refuse the run, before anything in ``--out`` is
        touched (so ``--overwrite`` never deletes a run that is then refused):
        the output folder (not another run's, no earlier run's files unless
        ``--overwrite``), the options (:meth:`build`), the checkpoint of
        ``--resume`` (loaded here) and the algorithm's own check of the run
        (``Algorithm.preflight``, e.g. an option that no run this short can use).
        Collective. Returns the output folder.

        Raises:
            ConfigError, RunFolderError (another run holds the folder),
            FileExistsError, CheckpointError: naming the fix.
        """
        cfg = self.cfg
        out = check_out_dir(cfg.out)  # on every rank, before any work
        rundir.check_unlocked(out)  # a folder another run is writing: say so (it holds that run's files too)
        rundir.check_fresh(out, cfg.overwrite, bool(cfg.resume))  # no old trace.csv left beside the new run
        self.build()
        self.global_step = 0
        self.position = None  # (epoch, next batch) once known; None: from global_step
        self.history: list[dict] = []
        # --eval-every: every validation evaluation (mid-epoch and epoch end), and the seconds the
        # mid-epoch ones took, which no clock counts (they are not training)
        self.curve: list[dict] = []
        self.eval_every_s = 0.0
        self.last_eval: dict = {}
        self.trace_rows: list[dict] = []
        self.step_times: list[float] = []
        self.step_bytes: list[int] = []
        self.step_inter_bytes: list[int] = []  # the allreduce bytes of step_bytes that left the node
        self.oversubscribed: dict | None = None
        # The epoch in progress (kept in checkpoints, so that a resumed epoch's
        # train loss and seconds cover the whole epoch) and the seconds spent
        # before this process (a resumed run's wall time continues).
        self.epoch_losses: list[float] = []
        self.epoch_seconds_before = 0.0
        self.wall_before = 0.0
        if cfg.resume:
            from .checkpoint import restore_trainer
            restore_trainer(self, cfg.resume)
        self._check_algorithm()
        self.out = out
        return out

    def _run(self, out: Path) -> dict:
        cfg, comm = self.cfg, self.comm
        self._t_epoch = self._t_start = time.perf_counter()
        if cfg.resume and self.global_step >= self.total_steps:
            return self._nothing_to_train(out)
        if comm.rank == 0:  # the header (and a resumed run's rows) before the first epoch ends
            self._write_metrics(out)
        if not comm.virtual:  # virtual ranks take turns on the cores by design, one thread each
            self._warn_if_busy()
            self._note_oversubscribed()
        self._warn_unseen_classes()
        self._say(f"minips: {cfg.model} on {cfg.data}, {self.algo.describe()}; {comm.describe()}; "
                  f"{self.threads} thread(s)/rank; batch {self.batch_size}/rank x {comm.size} = "
                  f"{self.batch_size * comm.size}; {self.total_steps} steps"
                  + ("" if cfg.partition == "iid" else f"; partition {cfg.partition}")
                  + ("" if self.algo.replicated else "; ranks hold different weights")
                  + (f"; resumed at step {self.global_step}" if cfg.resume else ""))
        # A resumed run of an algorithm whose ranks differ keeps each rank's own weights.
        self.algo.start(broadcast=not cfg.resume or self.algo.replicated)
        stopper = StopAgreement(comm)
        bar = self._progress_bar()
        self._t_start = time.perf_counter()
        try:
            self.comm_alone_s = self.measure_comm_alone()
            # A diverging run overflows to inf and NaN inside the layers first:
            # the loss check (_train_step) reports it in one line naming the
            # fix, so NumPy's RuntimeWarnings would only print noise before it
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                samples, stopped = self._train_epochs(stopper, bar, out)
        except BaseException:
            self._abandon(stopper, bar)
            raise
        # The signal handlers stay until the outputs are written: a signal from
        # here on cannot stop anything (training is over), so it must neither
        # be lost without a word nor kill the run while it writes its results.
        try:
            bar.close()
            self.algo.finish()  # drain the pipeline: no request left pending
            stopper.complete()
            if stopped == "signal" or cfg.checkpoint_every:  # the final state, to continue or inspect
                self.save_checkpoint(out / rundir.CHECKPOINT)
                if stopped == "signal":
                    self._say(f"stopped by signal at step {self.global_step}; checkpoint {out / rundir.CHECKPOINT} "
                              f"(continue with --resume {out / rundir.CHECKPOINT})")
            wall = time.perf_counter() - self._t_start  # less the --eval-every evaluations (_evaluate_mid)
            summary = report.summary(self, wall, samples, stopped, wall_before=self.wall_before)
            if comm.rank == 0:
                self._write_outputs(out, summary)
                self._say(report.format_breakdown(summary))
            if comm.size > 1:  # rank 0 lets go of the signals last: one that any rank got, rank 0 got too
                if comm.rank != 0:
                    stopper.close(wait=False)
                comm.barrier()
            stopper.close(wait=False)
            if stopper.late:
                self._say(f"note: the stop signal came after the last step, with nothing left to stop: the run "
                          f"finished and its results are in {out}")
        finally:
            stopper.close(wait=False)
        return summary

    def _nothing_to_train(self, out: Path) -> dict:
        """A resumed checkpoint already at (or past) the last step asked for:
        train nothing, say so, and report the run as the checkpoint left it
        (its summary.json is kept when there is one)."""
        cfg, step = self.cfg, self.global_step
        planned = self.steps_per_epoch * cfg.epochs
        if step >= planned:
            self._say(f"checkpoint {cfg.resume} is of a finished run (step {step} of {planned}, "
                      f"{cfg.epochs} epoch(s)): nothing to train")
        else:
            self._say(f"--max-steps {cfg.max_steps} is at or below the checkpoint's step {step}: nothing to train; "
                      f"give --max-steps above {step} (or 0 for all {cfg.epochs} epochs) to continue")
        self.comm_alone_s = None
        self.last_eval = self.history[-1] if self.history else {}
        summary = report.summary(self, 0.0, 0, None if step >= planned else "max_steps", wall_before=self.wall_before)
        if self.comm.rank == 0:
            if (out / rundir.SUMMARY).exists():
                self._say(f"(the run's results are in {out / rundir.SUMMARY}, left as they were)")
            else:
                self._write_outputs(out, summary)
        return summary

    def _check_algorithm(self) -> None:
        """The algorithm's own pre-run check (``Algorithm.preflight``) against
        this run's steps: it may refuse the run (ConfigError with its message)
        or warn (printed on rank 0)."""
        from .distributed.algorithms.base import RunPlan
        plan = RunPlan(planned_steps=self.steps_per_epoch * self.cfg.epochs, total_steps=self.total_steps,
                       resumed=bool(self.cfg.resume), world_size=self.comm.size, max_steps=self.cfg.max_steps)
        try:
            warnings = self.spec.cls.preflight(self.spec.options, plan)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        for w in warnings:
            self._say(f"warning: {w}")

    def _train_epochs(self, stopper, bar, out: Path):
        """The epoch/step loop; returns (samples trained on by this rank, why it stopped early or None).

        The epoch in progress is closed (evaluated, a row in metrics.csv) when
        it is complete, however the run stopped, and when ``--max-steps`` ends
        the run inside it (a row marked ``partial``, replaced once a resumed
        run completes the epoch). A stop signal inside an epoch records no row
        (the stop is kept short: the checkpoint holds the epoch so far)."""
        cfg = self.cfg
        samples, stopped = 0, None
        # Where in the data the run stands: (epoch, next loader batch). A step
        # consumes algo.batches_per_step() batches (1 for most algorithms, so
        # the position is divmod(step, steps_per_epoch)); an epoch ends when
        # fewer batches are left than the next step needs.
        start_epoch, start_batch = self.position or divmod(self.global_step, self.steps_per_epoch)
        for epoch in range(start_epoch, cfg.epochs):
            self.loader.set_epoch(epoch)
            if epoch != start_epoch or start_batch == 0:  # a new epoch (else: the resumed one continues)
                self.epoch_losses, self.epoch_seconds_before = [], 0.0
            self._t_epoch = time.perf_counter()
            losses = self.epoch_losses
            t_step, cpu_step = time.perf_counter(), time.process_time()
            batches, b = self.loader.batches(start_batch), start_batch
            while b + self.algo.batches_per_step() <= self.steps_per_epoch:
                group = [next(batches) for _ in range(self.algo.batches_per_step())]
                b += len(group)
                self.position = (epoch, b)
                loss = self._train_step(group, epoch)
                now, cpu_now = time.perf_counter(), time.process_time()
                self.step_times.append(now - t_step)  # whole iteration, data slicing included
                cpu = cpu_now - cpu_step  # the process's CPU seconds, all threads (virtual ranks: all ranks)
                t_step, cpu_step = now, cpu_now
                losses.append(loss)
                samples += sum(self.task.samples(batch) for batch in group)
                row = None
                if cfg.trace:
                    # seconds columns end in _s; warmup = 1: a step of this process's first
                    # report.WARMUP_STEPS (JIT compile, pipeline fill), left out of summary.json's means
                    row = {"step": self.global_step, "epoch": epoch, "loss": loss, "lr": self.optimizer.lr,
                           "step_s": self.step_times[-1], "process_cpu_s": cpu, "bytes_sent": self.step_bytes[-1],
                           "warmup": int(len(self.step_times) <= report.WARMUP_STEPS),
                           **{f"{k}_s": v for k, v in self._last_phases.items()}, **self.algo.log}
                    self.trace_rows.append(row)
                self.global_step += 1
                bar.update(1)
                if self.global_step % 20 == 0:
                    bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
                if not self.algo.replicated and cfg.consensus_every and self.global_step % cfg.consensus_every == 0:
                    t0, c0 = time.perf_counter(), time.process_time()
                    dist = self.algo.consensus_distance()  # outside the timed step
                    if row is not None:
                        row["consensus_distance"] = dist
                    t_step += time.perf_counter() - t0
                    cpu_step += time.process_time() - c0
                # --eval-every: not on an epoch's last step (_end_epoch evaluates there)
                if cfg.eval_every and self.global_step % cfg.eval_every == 0 and \
                        b + self.algo.batches_per_step() <= self.steps_per_epoch:
                    t0, c0 = time.perf_counter(), time.process_time()
                    self._evaluate_mid(epoch + b / self.steps_per_epoch, out)
                    t_step += time.perf_counter() - t0  # outside the timed step
                    cpu_step += time.process_time() - c0
                if cfg.check_replicas and self.global_step % cfg.check_replicas == 0:
                    self.check_replicas()
                if cfg.checkpoint_every and self.global_step % cfg.checkpoint_every == 0:
                    self.save_checkpoint(out / rundir.CHECKPOINT)
                # the run's last step (--max-steps, or no further step fits in the last
                # epoch) completes its stop exchange at once: no later step would read it
                data_left = epoch < cfg.epochs - 1 or b + self.algo.batches_per_step() <= self.steps_per_epoch
                last = self.global_step >= self.total_steps or not data_left
                if stopper.should_stop_last() if last else stopper.should_stop():
                    stopped = "signal"
                    break
                if self.global_step >= self.total_steps:
                    stopped = "max_steps" if data_left else None
                    break
            start_batch = 0
            complete = b + self.algo.batches_per_step() > self.steps_per_epoch  # no further step fits
            # (losses is empty when this epoch was closed before a resume)
            if losses and (complete or stopped == "max_steps"):
                self._end_epoch(epoch, losses, partial=not complete)
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
        None on one rank (there is no communication) and on virtual ranks (an
        in-process sum is not a network's allreduce). Not counted in bytes sent."""
        if self.comm.size == 1 or self.comm.virtual:
            return None
        buf = np.zeros(self.algo.flat.numel, np.float32)
        times = []
        for _ in range(repeats):
            self.comm.barrier()
            times.append(self.comm.allreduce(buf))
        return float(self.comm.allreduce_scalar(float(np.median(times)), "max"))

    def _bytes_sent(self) -> int:
        """Bytes this rank has sent so far, as the communication layer counts them."""
        return int(self.comm.bytes_sent)

    def evaluate(self, test: bool = True) -> dict:
        """Test metrics (and with ``--val-fraction`` validation metrics, keys
        ``val_*``) of the model the algorithm says to evaluate (its own
        weights when ranks are identical, else the average over ranks);
        with ``eval_rank0`` also rank 0's own model (keys ``rank0_*``), and for
        non-replicated algorithms the consensus distance. ``test`` False: the
        validation metrics alone (the ``--eval-every`` evaluations). Collective."""
        algo, bs = self.algo, self.cfg.eval_batch_size
        if not algo.replicated:
            algo.drain()  # nothing in flight on the weights while we swap them
        with algo.eval_point():
            metrics = self.task.evaluate(self.model, self.comm, bs) if test else {}
            if self.cfg.val_fraction:  # the split that chooses defaults; the test set is only reported
                metrics.update(self.task.evaluate(self.model, self.comm, bs, split="val"))
        if not test:
            return metrics
        if not algo.replicated:
            if self.cfg.eval_rank0:
                own = self.task.evaluate(self.model, None, bs) if self.comm.rank == 0 else {}
                own = self.comm.bcast_obj(own)
                metrics.update({f"rank0_{k}": v for k, v in own.items()})
            metrics["consensus_distance"] = algo.consensus_distance()
        return metrics

    def epoch_seconds(self) -> float:
        """Seconds spent in the epoch in progress, before a resume included."""
        return self.epoch_seconds_before + time.perf_counter() - self._t_epoch

    def wall_seconds(self) -> float:
        """Seconds of training so far, earlier runs of a resumed run included."""
        return self.wall_before + time.perf_counter() - self._t_start

    def _evaluate_mid(self, epoch: float, out: Path) -> None:
        """An ``--eval-every`` evaluation inside an epoch: the validation
        metrics of the model at this step, a row of the curve (``epoch`` the
        fraction of epochs trained, ``wall_time_s`` the run's clock at the
        step) and ``curve.csv`` rewritten. Its seconds are taken off every
        clock (the run's and the epoch's, so ``wall_time_s`` and ``seconds``
        count training and the epoch-end evaluations only; the caller keeps
        them out of the step time too) and summed in ``eval_every_s``. Collective."""
        t0, wall = time.perf_counter(), self.wall_seconds()
        row = {"step": self.global_step, "epoch": epoch, "epoch_end": 0, **self.evaluate(test=False),
               "wall_time_s": wall}
        self.curve.append(row)
        if self.comm.rank == 0:
            rundir.write_csv(out / rundir.CURVE, self.curve, _columns(self.curve))
        spent = time.perf_counter() - t0
        self._t_start += spent  # the clocks resume where they stopped
        self._t_epoch += spent
        self.eval_every_s += spent

    def _end_epoch(self, epoch, losses, partial=False) -> None:
        """Evaluate and record the epoch's row in the history (metrics.csv): a
        complete epoch, or a ``partial`` one (--max-steps inside it), which a
        resumed run replaces when it completes the epoch. ``train_loss`` is
        the mean over all the epoch's steps, those before a resume included.
        The ``--eval-every`` curve's point of the epoch's end holds the clock
        before this evaluation, as the mid-epoch points do."""
        trained_s = self.wall_seconds()  # before the evaluation: the curve's clock (the history's is after it)
        metrics = self.evaluate()
        row = {"epoch": epoch + 1, "step": self.global_step,
               "train_loss": float(np.mean(losses)),
               **metrics, "seconds": self.epoch_seconds(),
               "wall_time_s": self.wall_seconds(), "partial": int(partial)}
        self.last_eval = row
        self.history = [r for r in self.history if r["epoch"] != row["epoch"]] + [row]
        if self.cfg.eval_every and not partial:  # the curve's point at the epoch's end (a partial one's
            # step holds a mid-epoch row when it is a multiple of --eval-every)
            self.curve.append({"step": self.global_step, "epoch": float(epoch + 1), "epoch_end": 1,
                               **{k: v for k, v in metrics.items() if k.startswith("val_")},
                               "wall_time_s": trained_s})
        if self.comm.rank == 0:  # the row is on disk as soon as the epoch ends (a later crash keeps it)
            self._write_metrics(getattr(self, "out", None) or Path(self.cfg.out))
        if not partial:  # the next epoch starts afresh (a checkpoint now holds no epoch in progress)
            self.epoch_losses, self.epoch_seconds_before = [], 0.0
            self._t_epoch = time.perf_counter()
        self._say(f"{'partial ' if partial else ''}epoch {epoch + 1}/{self.cfg.epochs}: train_loss "
                  f"{row['train_loss']:.4f}, " + ", ".join(f"{k} {v:.4g}" if k == "consensus_distance"
                                                            else f"{k} {v:.4f}" for k, v in metrics.items())
                  + f", {row['seconds']:.1f} s")

    # --- checkpoints --------------------------------------------------------------------
    def save_checkpoint(self, path) -> None:
        """Write a checkpoint of this step (collective; see :func:`minips.checkpoint.save_trainer`)."""
        from .checkpoint import save_trainer
        save_trainer(self, path)

    def _train_step(self, group: list, epoch: int = 0) -> float:
        """One step on ``group``, the ``algo.batches_per_step()`` loader batches
        it consumes: their gradients (each split into ``algo.micro_batches()``
        parts) accumulate into one mean gradient, then ``algo.step()``."""
        algo = self.algo
        lr = algo.adjust_lr(self.schedule(self.global_step))
        self.optimizer.lr = lr
        samples = sum(self.task.samples(batch) for batch in group)
        algo.ctx = type(algo.ctx)(step=self.global_step, epoch=epoch, lr=lr, samples=samples,
                                  planned_steps=self.steps_per_epoch * self.cfg.epochs)
        timer = algo.timer
        sent, inter = self._bytes_sent(), self.comm.bytes_inter_node
        n = algo.micro_batches()
        parts = [part for batch in group for part in ([batch] if n == 1 else _split_batch(batch, n))]
        values = []
        with algo.compute_point():
            for i, part in enumerate(parts):
                with timer.phase("forward"):
                    loss = self.model.loss(part)
                values.append(float(loss.data))
                if not math.isfinite(values[-1]):
                    self._diverged(values[-1])
                if i == 0:
                    algo.before_backward()
                if len(parts) > 1:  # the step's gradient is the mean over its parts
                    loss = loss * (1.0 / len(parts))
                with timer.phase("backward"):
                    loss.backward()
        algo.ctx.loss = value = float(np.mean(values))
        algo.step()
        self._last_phases = dict(timer.rows[-1]) if timer.rows else {}
        self.step_bytes.append(self._bytes_sent() - sent)
        self.step_inter_bytes.append(self.comm.bytes_inter_node - inter)
        return value

    def _diverged(self, value: float):
        try:
            where = self._write_trace_at_divergence()
            trace = f"; the trace up to here is in {where}" if where else ""
        except OSError as e:  # a full disk: the divergence is still the news, in one line
            where = rundir.diverged_trace(self.cfg.out, self.comm.rank)
            trace = f"; the trace up to here could not be written to {where} ({e.strerror or e})"
        raise FloatingPointError(
            f"loss is {value} at step {self.global_step} (rank {self.comm.rank}); training diverged. "
            "Lower --lr, or check the data; the last checkpoint (if any) is kept" + trace)

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
    format_breakdown = staticmethod(report.format_breakdown)
    format_final = staticmethod(report.format_final)

    def _write_trace_at_divergence(self) -> Path | None:
        """Write the per-step trace so far to ``OUT/trace-diverged-rankR.csv`` (by
        every rank that sees the non-finite loss: the others may be aborted
        before they could), so a diverged run can still be read. Returns the
        path, or None when there is nothing to write."""
        if not (self.cfg.trace and self.trace_rows):
            return None
        path = rundir.diverged_trace(self.cfg.out, self.comm.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not via a temporary file: another rank's abort may kill this one at
        # any moment, which would leave the .tmp behind; one write of the
        # whole text leaves at worst a shorter CSV.
        path.write_text(rundir.csv_text(list(dict.fromkeys(k for r in self.trace_rows for k in r)),
                                        self.trace_rows))
        return path

    def _write_metrics(self, out: Path) -> None:
        """``metrics.csv`` as the history stands: the header (once the run
        starts), then one row more at the end of each epoch. Atomic: the file
        is rewritten beside and renamed into place, so a crash leaves the
        previous version whole (a row's columns are known only once its epoch
        is evaluated, so the header may grow)."""
        keys = list(dict.fromkeys(k for r in self.history for k in r)) or rundir.METRICS_COLUMNS
        rundir.write_csv(out / rundir.METRICS, self.history, keys)
        if self.cfg.eval_every:
            rundir.write_csv(out / rundir.CURVE, self.curve, _columns(self.curve))

    def _write_outputs(self, out: Path, summary: dict) -> None:
        """The run's files at its end, all or none (:func:`minips.rundir.atomic_write_all`):
        metrics.csv, summary.json (which marks a finished run: ``plot``,
        ``compare`` and ``bench study`` read a folder with one as complete) and
        trace.csv. A write that fails (a full disk) raises
        :class:`~minips.rundir.WriteError` in one line and leaves every file as
        it was, with no temporary file: never a summary.json beside a missing trace."""
        keys = list(dict.fromkeys(k for r in self.history for k in r)) or rundir.METRICS_COLUMNS
        files = {out / rundir.METRICS: rundir.csv_text(keys, self.history),
                 out / rundir.SUMMARY: rundir.json_text(summary)}
        if self.cfg.eval_every:
            files[out / rundir.CURVE] = rundir.csv_text(_columns(self.curve), self.curve)
        if self.trace_rows:
            files[out / rundir.TRACE] = rundir.csv_text(list(dict.fromkeys(k for r in self.trace_rows for k in r)),
                                                        self.trace_rows)
        rundir.atomic_write_all(files)


#: curve.csv's columns before its first row (the metrics' names are known once evaluated)
CURVE_COLUMNS = ["step", "epoch", "epoch_end", "wall_time_s"]


def _columns(rows: list[dict]) -> list[str]:
    """The columns of curve.csv: those of its rows in order of appearance."""
    return list(dict.fromkeys(k for r in rows for k in r)) or CURVE_COLUMNS


def _split_batch(batch, n: int) -> list:
    """Split every array of a batch along its first (sample) axis into ``n`` parts.

    Raises:
        ValueError: fewer samples than micro-batches.
    """
    size = len(batch[0])
    if size < n:
        raise ValueError(f"{n} micro-batches need at least {n} samples per batch, got {size}")
    bounds = np.linspace(0, size, n + 1).astype(int)
    return [tuple(a[lo:hi] for a in batch) for lo, hi in zip(bounds[:-1], bounds[1:])]


def train(**options) -> dict:
    """Convenience: ``train(model="mlp", epochs=1, ...)`` builds a TrainConfig and runs it
    (with ``virtual_ranks=P``, on P virtual ranks: see :func:`run_config`)."""
    return run_config(TrainConfig(**options))


def run_config(cfg: TrainConfig) -> dict:
    """Run ``cfg`` here: one rank of the job this process belongs to, or, with
    ``cfg.virtual_ranks`` = P, all P ranks as threads of this process
    (:func:`minips.distributed.comm.virtual.run`). Returns (rank 0's) summary.

    Raises:
        ConfigError: a bad option; as :meth:`Trainer.run`, on virtual ranks
            with a note naming the rank that raised first.
    """
    if not cfg.virtual_ranks:
        return Trainer(cfg).run()
    import copy

    from .distributed.comm import virtual
    cfg.validate()
    return virtual.run(cfg.virtual_ranks, lambda: Trainer(copy.deepcopy(cfg)).run(), network=cfg.network,
                       progress=cfg.progress, allreduce=cfg.allreduce, ranks_per_node=cfg.ranks_per_node or None)[0]
