"""Post-local SGD: synchronous SGD until a switch step t', local SGD with
period H afterwards.

Lin, Stich, Patel & Jaggi, "Don't Use Large Mini-Batches, Use Local SGD",
ICLR 2020 (arXiv:1808.07217), section 3: the first phase of training (until
the first learning-rate decay in the paper) runs ordinary mini-batch SGD; the
second runs local SGD, whose local steps act as injected noise that helps
generalisation. PyTorch's ``PostLocalSGDOptimizer`` (``warmup_steps``) does
the same: gradient allreduce before the switch, weight averaging every
``period`` steps after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .local_sgd import LocalSGD

__all__ = ["PostLocalSGD"]


class PostLocalSGD(LocalSGD):
    """Post-local SGD: synchronous gradient averaging for steps t < t', then local SGD.

    Pseudo-code (Lin et al. 2020, section 3; rank i, step t = 0, 1, ...)::

        g_i = gradient of rank i's mini-batch at w_i
        if t < t':                              # phase 1: mini-batch SGD (H = 1)
            G = (1/P) sum_j g_j                 # one Allreduce of the d gradients
            w_i = opt_i(w_i, G)                 # the same update on every rank
        else:                                   # phase 2: local SGD with period H
            w_i = opt_i(w_i, g_i)
            if (t + 1 - t') mod H == 0:         # H local steps since t' or the last average
                w_i = (1/P) sum_j w_j           # one Allreduce of the d weights

    Phase 1 averages gradients (as sync does and as PyTorch's post-local SGD
    does), so at t' the ranks hold identical weights *and* identical momentum
    buffers; phase 2 is :class:`LocalSGD`'s step, counting H from t'.

    Options (spec ``post-local-sgd:switch-step=300:period=16``):
        period: H >= 1 after the switch (default 16, the paper's typical value).
        switch_step: t', the first local step (0-based step index); -1 (default)
            = half of the planned training (the Trainer's epochs x steps per
            epoch; the paper switches at the first learning-rate decay, at 50%
            of its schedule). A t' at or after the end of the planned training
            is an error, raised at the first step (one line).
        average_momentum: as in local-sgd (phase 2 only).

    Logged per step: ``period`` (1 before the switch, H after) and, on
    averaging steps, ``consensus_before_avg``. Phase 1's allreduce is timed
    as ``wait`` (as sync), phase 2's as ``average``.
    """

    name = "post-local-sgd"
    family = "model averaging"
    paper = ("T. Lin, S. U. Stich, K. K. Patel, M. Jaggi, Don't Use Large Mini-Batches, Use Local SGD, ICLR 2020 "
             "(arXiv:1808.07217), section 3 (post-local SGD)")
    POSITIONAL = ()

    @dataclass
    class Options(LocalSGD.Options):
        period: int = field(default=16, metadata={"help": "H: local steps between weight averages after the switch",
                                                  "unit": "steps"})
        switch_step: int = field(default=-1, metadata={
            "help": "first local-SGD step (0-based); -1 = half of the planned steps", "unit": "steps"})

        def validate(self):
            super().validate()
            if self.switch_step < -1:
                raise ValueError(f"switch-step must be >= 0 (a step index) or -1 (half of the planned steps), "
                                 f"got {self.switch_step}")

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Mean seconds per step over the run: a fraction s of steps pays the
        gradient allreduce A, the rest k * A / H (k = 2 with average-momentum)::

            T = compute + s * A + (1 - s) * k * A / H

        s = 1/2 for the default switch (half of training). An explicit
        switch-step is a step index whose fraction of the run the cost model
        cannot know: then s = 0 (the steady state after the switch, = local-sgd)."""
        a = net.allreduce_time(profile.grad_bytes, P)
        s = 0.5 if options.switch_step == -1 else 0.0
        k = 2 if options.average_momentum else 1
        return profile.compute + s * a + (1 - s) * k * a / options.period

    def setup(self) -> None:
        super().setup()
        self._switch: int | None = None  # t', resolved at the first step (needs ctx.planned_steps)

    def switch_at(self) -> int:
        """t': the option, or half of ``ctx.planned_steps``; checked against the planned end.

        Raises:
            ValueError: t' at or after the planned end, or -1 without a planned length.
        """
        if self._switch is None:
            s, planned = self.options.switch_step, self.ctx.planned_steps
            if s == -1 and not planned:
                raise ValueError(f"{self.name}: switch-step=-1 (half of training) needs the planned number of "
                                 "steps, which only the Trainer knows; give switch-step=N")
            if s == -1:
                s = planned // 2
            elif planned and s >= planned:
                raise ValueError(f"{self.name}: switch-step={s} is at or after the end of training ({planned} "
                                 f"planned steps); give a step below {planned}, or -1 for half of them")
            self._switch = s
        return self._switch

    def period_now(self) -> int:
        return self.options.period if self.step_count >= self.switch_at() else 1

    def averages_after(self, t: int) -> bool:
        return (t - self.switch_at()) % self.options.period == 0

    def step(self) -> None:
        if self.step_count >= self.switch_at():          # phase 2: local SGD, H counted from t'
            super().step()
            return
        self.log = {"period": 1}                         # phase 1: synchronous SGD
        g = self.flat.grads[0]
        self.timer.add("wait", self.comm.allreduce(g))   # G = sum_j g_j (blocking: all of it is waiting)
        self.average(g)                                  # ... / P
        self.apply_update(g)                             # every rank: the same update from the same w
        self.end_step()

    def report(self) -> dict:
        """summary.json: the switch step that ran (the default -1 resolved)."""
        return {"switch_at_step": self._switch}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "switch_step": -1 if self._switch is None else self._switch}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        s = int(state.get("switch_step", -1))
        self._switch = None if s < 0 else s
