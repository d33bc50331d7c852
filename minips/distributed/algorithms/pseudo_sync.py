"""Pseudo-synchronous SGD: update with a k-step-old averaged gradient while the
allreduce of the fresh one runs in the background.

After Wen, Qiu, Zhang, Huang, Xiao & Lin, "Accelerating Massively Distributed
Deep Learning Through Efficient Pseudo-Synchronous Update Method", Int. J.
Parallel Programming (2024). Step t on every rank (k = staleness >= 1)::

    1. g_t = local gradient at w_t                       (forward + backward)
    2. r_t = Iallreduce(g_t)                            (progresses during step t+1)
    3. G_{t-k} = wait(r_{t-k}) / P                      (usually already complete)
    4. d_t = predictor.predict(G_{t-k}, w_t, w_{t-k})
    5. w_{t+1} = optimizer(w_t, d_t)                    (momentum acts on d_t)

The default predictor is ``local`` (:mod:`.local_predictors`): step 4 adds
the rank's own fresh gradient change, ``d^i_t = G_{t-k} + (g^i_t - g^i_{t-k})``,
which keeps synchronous SGD's stability (docs/accuracy.md measures it against
sync and AESP). Ranks then hold slightly different weights (``replicated`` is
False: the Trainer logs the consensus distance, evaluates the averaged weights
and checkpoints every rank's state). With the replicated predictors (``last``,
``adaptive`` = AESP, the seed paper's rule as we reconstruct it, ...) every rank
applies the same d_t to the same w_t and the replicas stay bit-identical.
Either way the network never stalls the computation unless an allreduce takes
longer than k steps of compute.

One process: nothing is stale and the local gradient is the global one, so a
local-anchored predictor's rule is synchronous SGD; pseudo-sync then applies
g_t at once (the sync path, bitwise equal to ``--algo sync``). The replicated
predictors keep their pipeline on one process (a way to study staleness alone).

Pipeline fill: in steps 0..k-1 no result has arrived, so those steps post their
allreduce and do not update (as the start-up phase of a pipeline), except with
a local-anchored predictor, which applies g_t (its fill rule). Each averaged
gradient is applied exactly once, k steps after it was computed.

Buffers: k+1 flat gradient buffers rotate: up to k in flight (read-only while
pending) and one that the next backward writes into.
"""
from __future__ import annotations

from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ...options import fields_of, type_hints
from .base import Algorithm
from .predictors import PREDICTORS, make_predictor
from .spec import convert_value

__all__ = ["PseudoSyncSGD"]


class _Pending:
    """One gradient in the pipeline: either still in flight (``req`` and the
    buffer it lives in) or already averaged (``G``, a private copy)."""

    __slots__ = ("G", "buf", "req", "step", "w_then")

    def __init__(self, req, buf, w_then, step, G=None):
        self.req, self.buf, self.w_then, self.step, self.G = req, buf, w_then, step, G


class PseudoSyncSGD(Algorithm):
    """Stale-by-k data-parallel SGD with a gradient predictor.

    Options (spec ``pseudo-sync:predictor=adaptive:staleness=2:rho=0.95``, or
    positionally ``pseudo-sync:adaptive:2``):
        staleness: k >= 1 (default 1).
        predictor: ``local`` (default) or ``adaptive-local``
            (:mod:`.local_predictors`); ``local-rewind`` (:mod:`.local_rewind`),
            ``layerwise-local`` (:mod:`.local_layerwise`); ``adaptive`` (AESP, :mod:`.aesp`);
            ``last``, ``ema``, ``holt``, ``lookahead``
            (:mod:`.predictors`); ``spike``, ``dc-asgd``, ``gap-aware``
            (:mod:`.delay_compensation`).
        predictor_options: the predictor's options (e.g. ``{"rho": 0.9}``);
            in a spec, any key that is not staleness or predictor goes here.

    Raises:
        ValueError: staleness < 1, unknown predictor or option.
    """

    name = "pseudo-sync"
    family = "stale gradient averaging"
    paper = ("Wen, Qiu, Zhang, Huang, Xiao & Lin, Accelerating Massively Distributed Deep Learning Through "
             "Efficient Pseudo-Synchronous Update Method, Int. J. Parallel Programming (2024); the update and the "
             "adaptive predictor (AESP) are our formulation (reconstruction), docs/specifications.md section 2")
    POSITIONAL = ("predictor", "staleness")
    #: the paper's measured weak-scaling efficiency (where, {nodes: E(P)})
    reported_efficiency = ("Tianhe-II", {64: 0.934, 128: 0.905})

    @dataclass
    class Options:
        predictor: str = field(default="local", metadata={"help": "gradient predictor",
                                                              "choices": tuple(PREDICTORS)})
        staleness: int = field(default=1, metadata={"help": "k: apply each averaged gradient k steps later",
                                                     "unit": "steps"})
        predictor_options: dict = field(default_factory=dict, metadata={
            "help": "the predictor's options: write them as key=value in the spec (e.g. rho=0.95), "
                    "or in a [predictor_options] TOML table"})
        EXTRA = "predictor_options"

        def validate(self):
            if self.staleness < 1:
                raise ValueError(f"staleness must be >= 1, got {self.staleness} "
                                 "(staleness 0 is plain synchronous SGD: use sync)")
            if self.predictor in PREDICTORS:  # typed like the fields of the predictor's Options ("0.95" -> 0.95)
                hints = type_hints(PREDICTORS[self.predictor].Options)
                self.predictor_options = {k: convert_value(v, hints[k], f"{self.predictor} option {k}")
                                          if k in hints else v for k, v in self.predictor_options.items()}
            try:
                make_predictor(self.predictor, self.staleness, **self.predictor_options)  # a bad name/option
            except ValueError as e:
                where = " (options come from the spec and the [predictor_options] table)"
                raise ValueError(f"{e}{where if 'has no option' in str(e) else ''}") from None

    @classmethod
    def default_label(cls, options) -> str:
        k = f":{options.staleness}" if options.staleness != 1 else ""
        return f"{cls.name}:{options.predictor}{k}"

    @classmethod
    def extra_options(cls) -> dict:
        """Each predictor's options and defaults (what ``key=value`` may add)."""
        return {name: fields_of(pcls.Options) for name, pcls in PREDICTORS.items()}

    # --- what the generic layers ask (base.Algorithm's hooks) ----------------------------
    TRACE_COLUMNS = {"lambda": ("predictor confidence", "lambda (confidence in history)"),
                     "cos_forecast": ("forecast quality", "cos(forecast, arrived gradient)")}
    PROFILE_EXTRAS = {"predict": "seconds per step of the predictor (the 'predict' phase), on top of compute"}

    @classmethod
    def profile_extras(cls, options, shapes, phases) -> dict:
        return {"predict": float(phases.get("predict", 0.0))}

    @classmethod
    def preflight(cls, options, plan) -> list[str]:
        """A staleness at or above the number of steps: a gradient is applied
        ``staleness`` steps after it is computed, so no update would ever be
        applied. Refused when the whole run is that short; only a warning
        when ``--max-steps`` cuts it (a resumed run goes on training)."""
        k = options.staleness
        if plan.resumed or k < plan.total_steps:
            return []
        why = (f"staleness {k} (--staleness or the spec's staleness=) is at or above the run's {{n}} steps: every "
               "gradient would be applied after the run ends, so nothing would be trained")
        if k >= plan.planned_steps:
            raise ValueError(why.format(n=plan.planned_steps) + f"; use a staleness below {plan.planned_steps} or "
                             "train longer (--epochs)")
        return [why.format(n=plan.total_steps) + f" before --max-steps {plan.max_steps} stops it; give --max-steps "
                f"above {k} unless this run is to be resumed"]

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """The allreduce of step t hides behind step t+1::

            C = compute + predict;  A = allreduce time of the whole gradient
            T = C + phi * min(A, C) + max(0, A - C)

        With phi = 0, ``T = max(C, A)``; with phi = 1, ``T = C + A``. The
        staleness does not change the steady state: the network carries one
        allreduce at a time, so a step lasts at least one allreduce for any k."""
        C = profile.compute + profile.extras.get("predict", 0.0)
        A = net.allreduce_time(profile.grad_bytes, P)
        return C + phi * min(A, C) + max(0.0, A - C)

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        # a predictor that uses the rank's own gradient lets the ranks' weights differ
        return not PREDICTORS[options.predictor].uses_local_gradient

    @property
    def replicated(self) -> bool:
        # the sync path (one process) has one rank: nothing can drift
        return getattr(self, "sync_path", False) or super().replicated

    def num_grad_buffers(self) -> int:
        return self.options.staleness + 1

    def __init__(self, params, optimizer, comm, options=None, **kw):
        self._tensors = len(params := list(params))  # a per-tensor payload is sized before setup()
        super().__init__(params, optimizer, comm, options, **kw)

    def grad_extra(self) -> int:
        cls = PREDICTORS[self.options.predictor]  # e.g. adaptive-local's two regression sums
        return cls.extra_floats + cls.payload_per_tensor * self._tensors

    def setup(self) -> None:
        o = self.options
        self.predictor = make_predictor(o.predictor, o.staleness, **o.predictor_options)
        if self.optimizer.clip_norm and self.predictor.clip_norm_refused:
            raise ValueError(f"predictor {self.predictor.name} does not take --clip-norm: "
                             f"{self.predictor.clip_norm_refused}")
        self.predictor.set_layout([(a, a + p.size) for a, p in zip(self.flat.offsets, self.flat.params)])
        self.k = o.staleness
        self.pipeline: deque[_Pending] = deque()
        self.free = deque(range(1, self.k + 1))  # buffer 0 is current
        self._released = None  # the buffer of the gradient consumed this step, if any
        # One process and a local-anchored rule: g_t is the global gradient, the rule is sync's.
        self.sync_path = self.comm.size == 1 and self.predictor.uses_local_gradient

    def describe(self) -> str:
        path = "; one process: the sync path" if self.sync_path else ""
        return f"{self.name} (k={self.k}, predictor={self.predictor.name}: {self.predictor.code()}{path})"

    def report(self) -> dict:
        return {"predictor": self.predictor.name, "staleness": self.k, "predictor_options": self.predictor.options(),
                "predictor_code": "sync path (one process)" if self.sync_path else self.predictor.code()}

    @contextmanager
    def compute_point(self):
        """``lookahead``: compute this step's gradient at extrapolated weights,
        then put the actual weights back for the update."""
        la = self.predictor.lookahead_weights(self.flat.weights, self.optimizer)
        if la is None:
            yield
            return
        w_actual = self.flat.weights.copy()
        self.flat.weights[...] = la
        try:
            yield
        finally:
            self.flat.weights[...] = w_actual

    def apply_update(self, direction: np.ndarray) -> None:
        """The optimizer step, unless the predictor owns it: a rule that changes
        the step itself (``spike`` rescales the momentum term and adds the missed
        steps) has ``apply_step(optimizer, w, d)``, and pseudo-sync calls it instead."""
        own = getattr(self.predictor, "apply_step", None)
        if own is None:
            return super().apply_update(direction)
        with self.timer.phase("update"):
            own(self.optimizer, self.flat.weights, direction)

    def step(self) -> None:
        p, n = self.predictor, self.flat.numel
        if self.sync_path:  # d_t = g_t: what G_{t-k} + (g_t - g_{t-k}) is when P = 1, without its rounding
            self.apply_update(self.flat.grads[self.flat.current][:n])
            self.end_step()
            return
        if p.uses_local_gradient:  # keep g_t before the allreduce overwrites it with the sum
            with self.timer.phase("predict"):
                p.observe_local(self.flat.grads[self.flat.current][:n])
        if self.step_count < getattr(p, "sync_warmup", 0):  # local's synchronous start: d_t = G_t, now
            self._post_fresh_gradient()
            G, _ = self._complete_oldest()
            self.apply_update(G[:n])
            self.log = {}
            self.end_step()
            return
        self._post_fresh_gradient()
        self.log = {}
        d = None
        if len(self.pipeline) > self.k:
            G, w_then = self._complete_oldest()
            with self.timer.phase("predict"):
                if self.flat.extra:  # the tail: the ranks' mean of what p.payload() posted with G
                    p.receive(G[n:])
                d = p.predict(G[:n], self.flat.weights, w_then)
            if self._released is not None:  # G consumed: its buffer is reusable
                self.free.append(self._released)
        else:
            d = p.fill()  # pipeline fill: None (no update), or the local rule's g_t
        if d is not None:
            self.apply_update(d)
            self.log = dict(p.diagnostics)
        self.flat.use_grad_buffer(self.free.popleft())
        self.end_step()

    # 2. Start averaging the fresh gradient; it completes while the next step computes.
    def _post_fresh_gradient(self) -> None:
        cur = self.flat.current
        if self.flat.extra:  # scalars that ride in the same Iallreduce as the gradient
            self.flat.grads[cur][self.flat.numel:] = self.predictor.payload()
        with self.timer.phase("post"):
            req = self.comm.iallreduce(self.flat.grads[cur], lock=self.flat.grad_views(cur),
                                       tag=self.step_count)
        self.pipeline.append(_Pending(req, cur, self.flat.weights.copy(), self.step_count))

    # 3. The oldest gradient, averaged: G_{t-k} and the weights it was computed at.
    def _complete_oldest(self):
        item = self.pipeline.popleft()
        self._released = None
        if item.G is not None:  # already drained (after finish() or a checkpoint)
            return item.G, item.w_then
        with self.timer.phase("wait"):
            item.req.wait()
        self._released = item.buf
        return self.average(self.flat.grads[item.buf]), item.w_then

    def drain(self) -> None:
        """Wait for every gradient in flight and keep it (averaged) in the
        pipeline, so that training can continue (or be checkpointed) with the
        same trajectory. Nothing is applied."""
        for item in self.pipeline:
            if item.G is None:
                item.req.wait()
                item.G = self.average(self.flat.grads[item.buf]).copy()
                self.free.append(item.buf)
                item.req, item.buf = None, None
        super().drain()

    # --- checkpoint state -----------------------------------------------------------
    def state_dict(self) -> dict:
        """Completed-but-unapplied gradients (call :meth:`finish` first so none is
        in flight), the weights they were computed at, and the predictor state."""
        if any(item.G is None for item in self.pipeline):
            raise RuntimeError("pseudo-sync state_dict with requests in flight: call finish() first")
        return {**super().state_dict(),
                "pipeline_G": [item.G for item in self.pipeline],
                "pipeline_w": [item.w_then for item in self.pipeline],
                "pipeline_step": [item.step for item in self.pipeline],
                "predictor": self.predictor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pipeline = deque(_Pending(None, None, np.asarray(w, np.float32), int(s), G=np.asarray(G, np.float32))
                              for G, w, s in zip(state["pipeline_G"], state["pipeline_w"], state["pipeline_step"]))
        self.predictor.load_state_dict(state["predictor"])
