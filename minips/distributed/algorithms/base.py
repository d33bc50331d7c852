"""What every distributed algorithm shares: the flat buffers, the optimizer
binding, the initial broadcast, and the hooks the Trainer drives::

    algo = build_algorithm("local-sgd:period=8", params, optimizer, comm)
    algo.start()                          # every rank starts from rank 0's weights
    for batch in loader:
        with algo.compute_point():        # weights to take the gradient at (as is, or
            loss = model.loss(batch)      #   lookahead's / push-sum's de-biased ones)
            algo.before_backward()        # zero (or choose) the gradient buffer
            loss.backward()               # gradient hooks may post per-bucket requests
        algo.step()                       # communicate / predict / average / update
    algo.drain()                          # complete everything in flight (checkpoint, end)
    with algo.eval_point():               # own weights, or the average over ranks
        metrics = task.evaluate(model, comm)
    algo.state_dict() / load_state_dict() # this rank's algorithm state

A subclass sets ``name``, ``family``, ``paper`` and an ``Options`` dataclass,
implements :meth:`Algorithm.step`, and gives its cost model
:meth:`Algorithm.step_time`. Everything else has a default that fits
gradient-averaging methods whose ranks stay identical.

What the Trainer tells an algorithm before each :meth:`step`:
``self.ctx`` (a :class:`StepContext`: step, epoch, loss, learning rate,
samples in this rank's batch). What an algorithm may change: the learning rate
(:meth:`adjust_lr`), its rank's batch size (:meth:`batch_size`), the number of
micro-batches whose gradients one step accumulates (:meth:`micro_batches`),
the number of loader batches one step consumes (:meth:`batches_per_step`),
and the optimizer step itself (override :meth:`apply_update`).

What the generic layers (``train``, the summary, ``plot``, the projection,
``bench scaling``) ask an algorithm, so that none of them names one:
:meth:`preflight` (may refuse a run, before anything in ``--out`` is touched,
or warn), :meth:`report` (its entries in summary.json), :meth:`trace_columns`
(the per-step columns of ``self.log`` that ``plot`` draws, with their titles)
and :meth:`profile_extras` (what its cost model reads from a
:class:`~minips.distributed.costmodel.StepProfile` beyond the shared fields).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ... import autograd
from ...nn import module as nn_module
from ...timing import StepTimer
from ..flat import FlatParams
from .spec import build_options, options_dict

__all__ = ["Algorithm", "FlatHandle", "NoOptions", "RunPlan", "StepContext"]


class FlatHandle:
    """The flat weight buffer seen by the optimizer as a single parameter."""

    def __init__(self, flat: FlatParams):
        self.data = flat.weights
        self.grad = None
        self.shape = flat.weights.shape
        self.dtype = flat.weights.dtype


@dataclass
class NoOptions:
    """An algorithm without options."""

    def validate(self) -> None:
        pass


@dataclass
class StepContext:
    """What the Trainer knows about the current step, set before :meth:`Algorithm.step`.

    Attributes:
        step: global step index (0-based).
        epoch: epoch index (0-based).
        loss: this rank's training loss of the step (float).
        lr: the learning rate of this step (after :meth:`Algorithm.adjust_lr`).
        samples: samples in this rank's batch (for weighted averages when ranks
            use different batch sizes).
        planned_steps: the steps the run is planned for (epochs x steps per
            epoch, the learning-rate schedule's span; --max-steps may stop a run
            earlier, and a resumed run keeps the same value); 0 = unknown (an
            algorithm driven outside the Trainer). E.g. post-local SGD's default
            switch point is half of it.
    """
    step: int = 0
    epoch: int = 0
    loss: float = float("nan")
    lr: float = 0.0
    samples: int = 0
    planned_steps: int = 0


@dataclass(frozen=True)
class RunPlan:
    """What a run is about to do, for :meth:`Algorithm.preflight`.

    Attributes:
        planned_steps: epochs x steps per epoch (the learning-rate schedule's span).
        total_steps: the steps this run will reach (``--max-steps`` may stop it
            earlier than ``planned_steps``).
        resumed: whether the run continues a checkpoint (``--resume``).
        world_size: the number of ranks P.
        max_steps: ``--max-steps`` as given (0 = no limit).
    """
    planned_steps: int
    total_steps: int
    resumed: bool = False
    world_size: int = 1
    max_steps: int = 0


class Algorithm:
    """Base class of data-parallel training algorithms.

    Args:
        params: the model's Parameters (float32).
        optimizer: an :class:`minips.optim.SGD` over those parameters; it is
            rebound to the single flat weight buffer.
        comm: a :class:`minips.distributed.comm.Comm`.
        options: an instance of the class's ``Options`` (from a spec string via
            :func:`minips.distributed.algorithms.build_algorithm`), or None to
            build it from ``**kw`` (e.g. ``PseudoSyncSGD(p, opt, comm, staleness=2)``).

    Raises:
        ValueError: an unknown option or a value ``Options.validate`` rejects.

    Attributes:
        options: the validated ``Options``.
        flat: the :class:`FlatParams` (weights, gradient buffers, buckets).
        timer: a :class:`StepTimer`; algorithms add any phase name to it
            (post, wait, predict, average, compress, mix, ...).
        step_count: completed calls to :meth:`step`.
        log: per-step scalars to record in trace.csv (e.g. predictor diagnostics).
        ctx: the :class:`StepContext` of the current step.
    """

    name = "base"
    family = "gradient averaging"
    #: the paper (or source) the update rule follows; "reconstruction" if its text was unavailable
    paper = ""
    #: whether "overlap efficiency = 1 - wait / (whole-gradient allreduce alone)"
    #: describes this algorithm: True when it allreduces the whole gradient every
    #: step (model averaging communicates every H steps: the summary omits it)
    gradient_allreduce_per_step = True
    #: option names that a spec may give positionally (``NAME:V1:V2``)
    POSITIONAL: tuple = ()
    #: whether :meth:`state_dict` differs between ranks although the weights are
    #: identical (e.g. error-feedback memories): checkpoints then store every rank's state
    per_rank_state = False
    Options = NoOptions
    #: per-step columns of ``self.log`` that ``plot`` draws (one panel each in
    #: trace.png): name -> (panel title, axis label); see :meth:`trace_columns`
    TRACE_COLUMNS: dict = {}
    #: what :meth:`step_time` reads from ``StepProfile.extras``: name -> meaning;
    #: :meth:`profile_extras` computes them
    PROFILE_EXTRAS: dict = {}

    def __init__(self, params, optimizer, comm, options=None, **kw):
        if options is not None and kw:
            raise TypeError(f"{self.name}: give options either as an Options instance or as keywords, not both")
        self.options = options if options is not None else build_options(type(self), **kw)
        self.comm = comm
        self.optimizer = optimizer
        self.flat = FlatParams(params, num_grad_buffers=self.num_grad_buffers(), bucket_mb=self.bucket_mb(),
                               extra=self.grad_extra())
        self.handle = FlatHandle(self.flat)
        optimizer.set_params([self.handle])
        self.timer = StepTimer()
        self.step_count = 0
        self.log: dict = {}
        self.ctx = StepContext()
        self._callbacks_on = False
        self.setup()

    # --- what the class says about itself, from its options --------------------------
    @classmethod
    def keeps_replicas(cls, options) -> bool:
        """Whether every rank holds identical weights after every step with
        these options (then the Trainer can check hashes and checkpoint one copy)."""
        return True

    @property
    def replicated(self) -> bool:
        """Whether this instance keeps all ranks' weights identical."""
        return self.keeps_replicas(self.options)

    @classmethod
    def step_time(cls, options, profile, P: int, net, phi: float = 0.0) -> float:
        """Seconds per step at P nodes (weak scaling) predicted from a one-node
        ``profile`` (:class:`~minips.distributed.costmodel.StepProfile`) and an
        interconnect ``net`` (anything with ``allreduce_time(nbytes, P)``);
        ``phi`` in [0, 1] is the fraction of overlapped communication charged
        to compute. Every registered algorithm gives its own model.

        Raises:
            NotImplementedError: the algorithm has no cost model.
        """
        raise NotImplementedError(f"{cls.name} has no step-time model")

    @classmethod
    def preflight(cls, options, plan: RunPlan) -> list[str]:
        """Check a run with these options against its ``plan`` before anything
        in ``--out`` is touched (the Trainer calls it on every rank).

        Returns:
            warnings to print (one line each; empty: nothing to say).

        Raises:
            ValueError: the run cannot do what is asked; one line that names
                the fix (the Trainer refuses the run with it).
        """
        return []

    @classmethod
    def trace_columns(cls, options) -> dict:
        """The columns of ``self.log`` (trace.csv) worth a figure with these
        options: name -> (panel title, axis label). summary.json lists them
        (``trace_columns``) and ``plot`` draws one panel per column (default:
        :data:`TRACE_COLUMNS`)."""
        return dict(cls.TRACE_COLUMNS)

    @classmethod
    def profile_extras(cls, options, shapes, phases: dict) -> dict:
        """The ``StepProfile.extras`` its :meth:`step_time` reads (named in
        :data:`PROFILE_EXTRAS`), for a model with parameter ``shapes`` (tuples
        of ints, in the model's order) and the seconds per step of each timed
        phase measured on one rank (``phases``, e.g. a summary's
        ``time_breakdown``; empty: not measured). Default: none."""
        return {}

    def num_grad_buffers(self) -> int:
        """Flat gradient buffers to allocate (pseudo-sync rotates k+1)."""
        return 1

    def grad_extra(self) -> int:
        """float32 slots to append to every gradient buffer, allreduced with the
        gradient (pseudo-sync's adaptive-local sends two regression sums)."""
        return 0

    def bucket_mb(self) -> float:
        """Bucket size in MiB for per-bucket communication (0 = one bucket)."""
        return 0.0

    def setup(self) -> None:
        """Subclass initialisation once ``self.flat`` exists (hooks, state)."""

    # --- lifecycle -------------------------------------------------------------------
    def start(self, broadcast: bool = True) -> None:
        """Make every replica start from rank 0's weights (``broadcast``; a run
        resumed with per-rank weights keeps its own); arm progress polling."""
        if broadcast:
            self.comm.bcast(self.flat.weights, root=0)
        if self.comm.progress_mode == "poll" and self.comm.size > 1 and not self._callbacks_on:
            autograd.backward_callbacks.append(self.comm.progress)
            nn_module.forward_callbacks.append(self.comm.progress)
            self._callbacks_on = True

    @contextmanager
    def compute_point(self):
        """Context in which forward and backward run: the weights the gradient is
        taken at. Default: the weights as they are."""
        yield

    def before_backward(self) -> None:
        """Zero the gradient buffer backward will accumulate into."""
        self.flat.grads[self.flat.current].fill(0)

    def step(self) -> None:  # pragma: no cover - abstract
        """Communicate the gradient of this step and apply the update (see the subclass)."""
        raise NotImplementedError

    def drain(self) -> None:
        """Complete every outstanding request and keep its result (for a
        checkpoint or an evaluation); training can continue afterwards with the
        same trajectory."""
        self.comm.wait_all()

    def finish(self) -> None:
        """Complete every outstanding request; disarm progress polling."""
        self.drain()
        self.disarm()

    def disarm(self) -> None:
        """Stop polling MPI progress from the autograd and module callbacks."""
        if self._callbacks_on:
            autograd.backward_callbacks.remove(self.comm.progress)
            nn_module.forward_callbacks.remove(self.comm.progress)
            self._callbacks_on = False

    # --- what the Trainer evaluates and logs -----------------------------------------
    def average_weights(self) -> np.ndarray:
        """The mean of the weights over ranks (a new float32 array; one blocking
        allreduce, not timed as part of a step)."""
        avg = self.flat.weights.copy()
        self.comm.allreduce(avg)
        return self.average(avg)

    @contextmanager
    def eval_point(self, own: bool = False):
        """Context in which the model holds the weights to evaluate: its own
        when ranks are identical (or ``own``), else the average over ranks
        (collective: every rank must enter it). The weights are restored after."""
        if self.replicated or own:
            yield
            return
        saved = self.flat.weights.copy()
        avg = self.average_weights()
        self.flat.weights[...] = avg
        try:
            yield
        finally:
            self.flat.weights[...] = saved

    def average_model(self, distance: bool = True) -> float | None:
        """In place, every rank's weights become their mean over ranks: one
        Allreduce of the weights, timed as ``average`` (where model-averaging
        and gossip methods meet). With ``distance``, also returns the consensus
        distance just before, ``(1/P) sum_i ||w_i - mean(w)||^2`` (float64, one
        more scalar Allreduce); else None. Collective."""
        w = self.flat.weights
        with self.timer.phase("average"):
            before = w.astype(np.float64) if distance else None
            self.comm.allreduce(w)
            self.average(w)
            if distance:
                return self.comm.allreduce_scalar(float(np.sum((before - w) ** 2))) / self.comm.size
        return None

    def consensus_distance(self) -> float:
        """``(1/P) sum_i ||w_i - mean(w)||^2`` over ranks (collective; 0 when
        replicas are identical): how far the ranks' models have drifted apart."""
        if self.comm.size == 1:
            return 0.0
        avg = self.average_weights()
        local = float(np.sum((self.flat.weights.astype(np.float64) - avg) ** 2))
        return self.comm.allreduce_scalar(local) / self.comm.size

    # --- what an algorithm may change in the loop -------------------------------------
    def adjust_lr(self, lr: float) -> float:
        """The learning rate to use this step, given the schedule's ``lr``
        (e.g. STL-SGD halves it per stage). Default: unchanged."""
        return lr

    def batch_size(self, base: int) -> int:
        """This rank's batch size, given the configured per-rank ``base``
        (e.g. unequal batches for ranks of different speed). Read once at build."""
        return base

    def micro_batches(self) -> int:
        """How many micro-batches this step's gradient accumulates (1 = the
        whole batch at once). Algorithms that post requests from gradient hooks
        must keep 1."""
        return 1

    def batches_per_step(self) -> int:
        """How many consecutive loader batches the next step consumes (default 1).
        The Trainer accumulates their gradients into one step (each batch's loss
        scaled by 1/m, so the gradient is the mean over the m*b samples;
        :meth:`before_backward` runs once, before the first backward). Read
        before every step, so it may change during training (adaptive batch
        sizes), but every rank must return the same m. An epoch ends when fewer
        than m batches are left; the learning-rate schedule and ``--max-steps``
        count steps, not batches."""
        return 1

    # --- helpers for subclasses --------------------------------------------------------
    def average(self, buf: np.ndarray) -> np.ndarray:
        """In place: the allreduce SUM -> the MEAN over ranks (divide by P)."""
        if self.comm.size > 1:
            buf *= np.float32(1.0 / self.comm.size)
        return buf

    def apply_update(self, direction: np.ndarray) -> None:
        """``w <- optimizer(w, direction)`` on the flat weights, timed as 'update'.
        Override to replace the optimizer step itself."""
        with self.timer.phase("update"):
            self.optimizer.apply(0, self.flat.weights, direction)

    def end_step(self) -> dict:
        """Count the step and close its timing row; returns the row (seconds per phase)."""
        self.step_count += 1
        return self.timer.end_step()

    # --- state -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """This rank's algorithm state beyond weights and optimizer (pending
        results, counters, buffers); call :meth:`drain` first."""
        return {"step_count": self.step_count}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state.get("step_count", 0))

    def report(self) -> dict:
        """This run's own entries for summary.json, e.g. its diagnostics or the
        predictor's full options (keys the generic summary does not use)."""
        return {}

    def options_dict(self) -> dict:
        """The options as a plain dict (summary.json)."""
        return options_dict(self.options)

    def describe(self) -> str:
        """One line naming the algorithm and its options (for logs)."""
        opts = ", ".join(f"{k}={v}" for k, v in self.options_dict().items() if v not in ({}, None))
        return f"{self.name} ({opts})" if opts else self.name

    @classmethod
    def extra_options(cls) -> dict:
        """Options that go to a part of the algorithm (its ``Options.EXTRA``
        dict), by variant: ``{variant: {option: default}}`` (for the listing)."""
        return {}

    @classmethod
    def default_label(cls, options) -> str:
        """The run's name when none is given (tables, figures, folders)."""
        return cls.name
