"""Overlap Local-SGD: local SGD whose weight average travels while the next
round computes, and is applied one round late.

Paper: Jianyu Wang, Hao Liang, Gauri Joshi, "Overlap Local-SGD: An Algorithmic
Approach to Hide Communication Delays in Distributed SGD", ICASSP 2020
(arXiv:2002.09539); the exact update is read from the authors' code
(github.com/JYWa/Overlap_Local_SGD, ``distoptim/OverlapLocalSGD.py``, its
``average()``), which agrees with the paper's description: every worker keeps a
local model x_i and an *anchor* z; after tau local steps it pulls x_i towards
the anchor, and the anchor for the next round is the average of the pulled
models, computed by a nonblocking allreduce that runs during the next tau
steps. The paper's pseudo-code, in our notation (worker i, anchor z = x_0)::

    for k = 0, 1, 2, ...:
        x_i <- opt(x_i, g_i(x_i))                  local SGD step (own momentum)
        if (k + 1) mod tau == 0:                   end of a round
            z <- wait(anchor request)              (1/P) sum_j x_j, posted a round ago
            x_i <- x_i - alpha (x_i - z)           pull back towards the anchor
            post Iallreduce(x_i) -> anchor request needed only at the next round's end

The rule implemented (``rule=pull``, the default), step t on rank i, H = period::

    1. w_i <- opt(w_i, g_i)                                   (every step)
    at the end of a round ((t + 1) mod H == 0):
    2. if a request is pending:  z = wait(request) / P        ("wait"; the mean of
                                                               the weights posted a round ago)
    3.   w_i <- w_i - alpha (w_i - z)                         ("average")
    4. s_i = copy(w_i); post Iallreduce(copy(w_i)) -> request ("post"; the buffer is
                                                               read-only while in flight)

``rule=delta`` replaces step 3 by ``w_i <- z + (w_i - s_i)``: the average of
the weights posted at the end of round r replaces each rank's own contribution
s_i, and the local progress made since (round r+1) is kept on top. This is the
form the project's pseudo-synchronous method suggests (an average applied late,
on top of the newer local work); it is not in the paper. It keeps the mean of
the ranks' weights unchanged by the merge, while ``pull`` moves it towards the
stale anchor.

Differences from the authors' code: (1) the first round pulls nothing (no
request is in flight yet, the ranks behave like local SGD), where the authors'
first pull is towards the initial model x_0; (2) their "global momentum" on the
anchor (``gmf``, the momentum variant) is not implemented (gmf = 0); (3) with
P = 1 nothing is communicated or pulled, so the run is plain SGD (the paper's
rule would pull a single worker back to its own one-round-old copy).

Momentum buffers stay on their rank and are never averaged or reset (as in the
authors' code). At most one request is in flight; :meth:`drain` completes it
and keeps the averaged anchor, so a checkpoint taken with it in flight resumes
bitwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Algorithm

__all__ = ["OverlapLocalSGD"]

RULES = ("pull", "delta")
CONSENSUS = ("piggyback", "blocking", "off")


class _Anchor:
    """The average of one round's weights: in flight (``req`` on ``buf``, d + 1
    floats) or completed (``z``, the mean of the first d), with this rank's
    contribution ``s``. The last float carries the ranks' squared distances to
    the previous anchor (``carried`` = the step of that merge, -1 if none);
    ``total`` is their sum once completed."""

    __slots__ = ("buf", "carried", "req", "s", "step", "total", "z")

    def __init__(self, req, buf, s, step, carried, z=None, total=0.0):
        self.req, self.buf, self.s, self.step, self.carried = req, buf, s, step, carried
        self.z, self.total = z, total


class OverlapLocalSGD(Algorithm):
    """Local SGD with the weight average of round r applied at the end of round r+1.

    Options (spec ``overlap-local-sgd:period=8:alpha=0.5:rule=pull``, or
    positionally ``overlap-local-sgd:8``):
        period: H >= 1 local steps per round (default 4).
        alpha: the pull coefficient of ``rule=pull``, 0 < alpha <= 1 (default 0.5).
        rule: ``pull`` (the paper: w <- w - alpha (w - z)) or ``delta``
            (w <- z + (w - s): the average replaces the posted weights, the
            local progress since is kept).
        consensus: how the consensus distance of the averaged weights is
            logged: ``piggyback`` (default: one extra float in the next round's
            allreduce, logged one round late), ``blocking`` (an 8-byte blocking
            allreduce at the merge, on time, but a sync point per round), ``off``.

    Raises:
        ValueError: period < 1, alpha outside (0, 1], an unknown rule or consensus mode.
    """

    name = "overlap-local-sgd"
    family = "model averaging"
    gradient_allreduce_per_step = False  # the weights go every H steps: no per-step overlap efficiency
    paper = ("J. Wang, H. Liang, G. Joshi, Overlap Local-SGD: An Algorithmic Approach to Hide Communication "
             "Delays in Distributed SGD, ICASSP 2020 (arXiv:2002.09539)")
    POSITIONAL = ("period",)

    @dataclass
    class Options:
        period: int = field(default=4, metadata={"help": "H: local steps per round (one weight average posted "
                                                         "per round, applied a round later)", "unit": "steps"})
        alpha: float = field(default=0.5, metadata={"help": "pull coefficient of rule=pull: "
                                                            "w <- w - alpha (w - anchor)"})
        rule: str = field(default="pull", metadata={
            "choices": ("pull", "delta"),
            "help": "pull (the paper) or delta (w <- average + local progress since the post)"})
        consensus: str = field(default="piggyback", metadata={
            "choices": ("piggyback", "blocking", "off"),
            "help": "log the averaged weights' consensus distance: piggyback (in the next round's "
                    "allreduce, logged a round late), blocking (8-byte allreduce, on time) or off"})

        def validate(self):
            if self.period < 1:
                raise ValueError(f"period must be >= 1 step per round, got {self.period} (e.g. period=4)")
            if self.rule not in RULES:
                raise ValueError(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
            if not 0.0 < self.alpha <= 1.0:
                raise ValueError(f"alpha must be in (0, 1] (the pull towards the anchor), got {self.alpha}")
            if self.consensus not in CONSENSUS:
                raise ValueError(f"consensus must be one of {', '.join(CONSENSUS)}, got {self.consensus!r}")

    @classmethod
    def keeps_replicas(cls, options) -> bool:
        return False  # ranks step on their own data; even right after a merge they differ

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """The weight allreduce posted at the end of round r is needed at the end
        of round r+1, so it hides behind the H steps of compute in between::

            C = compute;  A = allreduce time of the weights (grad_bytes: same size)
            per round:  H C + phi * min(A, H C) + max(0, A - H C)
            T = C + (phi * min(A, H C) + max(0, A - H C)) / H   (+ the 8-byte
                consensus allreduce / H with consensus=blocking)

        With phi = 0 and A <= H C the network is free: T = C. Assumes one
        request in flight at a time that progresses in the background (progress
        thread or polling from forward/backward), free copies and merges, and
        that the extra float of ``consensus=piggyback`` costs nothing."""
        H, C = options.period, profile.compute
        A = net.allreduce_time(profile.grad_bytes, P)
        T = C + (phi * min(A, H * C) + max(0.0, A - H * C)) / H
        if options.consensus == "blocking":
            T += net.allreduce_time(8, P) / H
        return T

    def setup(self) -> None:
        self.H = self.options.period
        self.pending: _Anchor | None = None  # the one round average in the pipeline
        self.carry = (0.0, -1)  # (||s_i - z||^2, step of that merge): rides on the next post

    def describe(self) -> str:
        o = self.options
        return f"{self.name} (H={o.period}, rule={o.rule}" + (f", alpha={o.alpha})" if o.rule == "pull" else ")")

    def step(self) -> None:
        # 1. a local step with this rank's gradient and its own optimizer state
        self.apply_update(self.flat.grads[0])
        self.log = {"period": self.H}
        if self.comm.size > 1 and (self.step_count + 1) % self.H == 0:  # end of a round
            if self.pending is not None:  # the first round has nothing to apply
                z, s = self._wait_anchor()  # 2. mean of the weights posted a round ago
                with self.timer.phase("average"):
                    w = self.flat.weights
                    if self.options.rule == "pull":  # 3. pull back towards the anchor
                        w -= np.float32(self.options.alpha) * (w - z)
                    else:  # 3'. swap our posted weights for their mean, keep the progress since
                        w += z - s
            self._post_weights()  # 4. the next anchor travels during the next round
        self.end_step()

    def _wait_anchor(self):
        """The pending average (waited for, or kept by :meth:`drain`) and our
        contribution to it; logs the consensus distance (1/P) sum_i ||s_i - z||^2
        of the weights averaged, here or (piggyback) at the next merge."""
        a, self.pending = self.pending, None
        if a.z is None:
            with self.timer.phase("wait"):
                a.req.wait()
            self._complete(a)
        mode = self.options.consensus
        if mode == "piggyback" and a.carried >= 0:  # the distances of the previous merge's inputs
            self.log["consensus_before_avg"] = a.total / self.comm.size
        local = float(np.sum((a.s.astype(np.float64) - a.z) ** 2))  # exact in float64
        if mode == "blocking":
            with self.timer.phase("consensus"):
                self.log["consensus_before_avg"] = self.comm.allreduce_scalar(local) / self.comm.size
        self.carry = (local, self.step_count)
        return a.z, a.s

    def _complete(self, a: _Anchor) -> None:
        """A completed request: the mean of the weights and the carried sum."""
        a.total, a.z = float(a.buf[-1]), self.average(a.buf[:-1])  # the buffer is ours again
        a.req, a.buf = None, None

    def _post_weights(self) -> None:
        with self.timer.phase("post"):
            s = self.flat.weights.copy()
            buf = np.empty(s.size + 1, np.float32)  # reduced in place, read-only while in flight
            buf[:-1], buf[-1] = s, self.carry[0]  # a sum of P non-negative floats: float32 is enough
            req = self.comm.iallreduce(buf, tag=self.step_count)
        self.pending = _Anchor(req, buf, s, self.step_count, self.carry[1])
        self.carry = (0.0, -1)

    def drain(self) -> None:
        """Complete the average in flight and keep it (not applied): training,
        a checkpoint or an evaluation continue on the same trajectory."""
        a = self.pending
        if a is not None and a.z is None:
            a.req.wait()
            self._complete(a)
        super().drain()

    # --- checkpoint state -----------------------------------------------------------
    def state_dict(self) -> dict:
        """The completed-but-unapplied average (call :meth:`drain` first), this
        rank's weights that went into it, and the step it was posted at."""
        a = self.pending
        if a is not None and a.z is None:
            raise RuntimeError(f"{self.name} state_dict with a request in flight: call drain() first")
        none = a is None
        return {**super().state_dict(), "anchor_z": [] if none else [a.z], "anchor_s": [] if none else [a.s],
                "anchor_step": [] if none else [a.step], "anchor_carried": [] if none else [a.carried],
                "anchor_total": [] if none else [a.total]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        zs, ss, steps = state.get("anchor_z", []), state.get("anchor_s", []), state.get("anchor_step", [])
        self.pending = None
        if len(zs):
            self.pending = _Anchor(None, None, np.asarray(ss[0], np.float32), int(steps[0]),
                                   int(state["anchor_carried"][0]), z=np.asarray(zs[0], np.float32),
                                   total=float(state["anchor_total"][0]))
