"""Aperiodic local SGD: local SGD whose averaging times form a non-uniform set.

A reconstruction: the paper "Aperiodic Local SGD: Beyond Local SGD" was not
found (docs/specifications.md section 3). Its relatives allow arbitrary communication
times: Cooperative SGD (Wang & Joshi, JMLR 2021), adaptive synchronization
(Haddadpour et al., NeurIPS 2019), AdaComm (Wang & Joshi, SysML 2019). What is
implemented is local SGD (:class:`.local_sgd.LocalSGD`'s local step and
average) with the averaging times given by a schedule: gaps that grow (dense
early, sparse late) or an explicit list.
"""
from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field

from .local_sgd import LocalSGD

__all__ = ["AperiodicLocalSGD", "averaging_times"]

#: rounds over which the cost model averages a growing schedule
COST_ROUNDS = 16


def _parse_list(text: str) -> list[int]:
    """``"10+20+40"`` (or ``10;20;40``) -> [10, 20, 40], checked.

    Raises:
        ValueError: not integers >= 1, or not strictly increasing.
    """
    parts = [p.strip() for p in re.split(r"[+;]", text)]
    try:
        times = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"schedule must be 'growing' or step counts joined by '+', e.g. schedule=10+20+40, "
                         f"got {text!r}") from None
    if times[0] < 1:
        raise ValueError(f"schedule: step counts start at 1 (average after the first step), got {times[0]}")
    for a, b in zip(times, times[1:]):
        if b <= a:
            raise ValueError(f"schedule must be strictly increasing, got {text} ({b} after {a}); "
                             "list the step counts in order, each once")
    return times


def growing_gap(options, r: int) -> int:
    """H_r = ceil(h0 * (r + 1)^gamma): the steps between average r-1 and r (r = 0, 1, ...)."""
    return math.ceil(options.h0 * (r + 1) ** options.gamma)


def averaging_times(options, rounds: int = COST_ROUNDS) -> list[int]:
    """The step counts t (1-based: after the t-th local step) of the first
    ``rounds`` averages (all of an explicit list): t_r = t_{r-1} + H_r, t_{-1} = 0."""
    if options.schedule != "growing":
        return _parse_list(options.schedule)
    times = [growing_gap(options, 0)]
    while len(times) < rounds:
        times.append(times[-1] + growing_gap(options, len(times)))
    return times


class AperiodicLocalSGD(LocalSGD):
    """Local SGD averaging at a non-uniform set of steps (a reconstruction).

    Pseudo-code (reconstruction of docs/specifications.md section 3; rank i, step t = 0, 1, ...)::

        g_i = gradient of rank i's mini-batch at w_i
        w_i = opt_i(w_i, g_i)                       # a local step, own momentum buffer
        if t + 1 in T:                              # T: the averaging times (step counts)
            w_i = (1/P) sum_j w_j                   # one Allreduce of the d weights
        T = {t_0 < t_1 < ...}:
          growing:  t_r = t_{r-1} + H_r,  H_r = ceil(h0 * (r + 1)^gamma)   (t_{-1} = 0)
          list:     the given step counts, nothing after the last

    With gamma = 0 (or the list H, 2H, 3H, ...) it is local SGD with period H
    step for step (bitwise; tests/test_aperiodic_local_sgd.py).

    Options (spec ``aperiodic-local-sgd:h0=2:gamma=1`` or
    ``aperiodic-local-sgd:schedule=10+20+40``):
        schedule: ``growing`` (default), or the step counts after which to
            average joined by ``+`` (``;`` works too, quoted in a shell); ``,``
            and ``:`` are taken by the spec grammar. 10+20+40 averages after
            the 10th, 20th and 40th local steps (trace rows step 9, 19, 39) and
            never after; a list that is not strictly increasing is an error.
        h0: the first gap H_0 >= 1 (growing; default 4).
        gamma: gap growth exponent >= 0 (growing; default 0.5: gaps 4, 6, 7, 8,
            9, 10, ...; 0 = uniform period h0).
        average_momentum: as in local-sgd.

    The schedule is a function of the options and the step count alone, so a
    checkpoint needs no state beyond the step count. Logged per step:
    ``period`` = the gap of the round in progress (0 after an explicit list
    ends) and, on averaging steps, ``consensus_before_avg``.
    """

    name = "aperiodic-local-sgd"
    family = "model averaging"
    paper = ("reconstruction: 'Aperiodic Local SGD: Beyond Local SGD' not found; local SGD with a non-uniform set "
             "of averaging times as in Cooperative SGD (J. Wang, G. Joshi, JMLR 2021); "
             "docs/specifications.md section 3")
    POSITIONAL = ()

    @dataclass
    class Options:
        schedule: str = field(default="growing", metadata={
            "help": "'growing' (gaps ceil(h0 (r+1)^gamma)) or step counts to average after, e.g. 10+20+40"})
        h0: int = field(default=4, metadata={"help": "first gap of the growing schedule", "unit": "steps"})
        gamma: float = field(default=0.5, metadata={"help": "growth exponent of the gaps (0 = uniform)"})
        average_momentum: bool = field(default=False, metadata={
            "help": "also average the momentum buffers (one more allreduce of d floats)"})

        def validate(self):
            if self.h0 < 1:
                raise ValueError(f"h0 must be >= 1 (the first gap in steps), got {self.h0}")
            if not self.gamma >= 0:
                raise ValueError(f"gamma must be >= 0 (gaps that grow, or 0 for a uniform period), got {self.gamma}")
            if self.schedule != "growing":
                _parse_list(self.schedule)

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + k * A * n / t_n``: the averages per step over an
        explicit list's span (n averages, the last after step t_n), or over the
        first 16 rounds of a growing schedule (its rate falls further in longer
        runs); k = 2 with average-momentum. gamma = 0 gives local-sgd's A / h0."""
        times = averaging_times(options, COST_ROUNDS)
        k = 2 if options.average_momentum else 1
        return profile.compute + k * net.allreduce_time(profile.grad_bytes, P) * len(times) / times[-1]

    @classmethod
    def default_label(cls, options) -> str:
        return cls.name

    def setup(self) -> None:
        super().setup()
        # averaging times generated so far (step counts), after a sentinel 0
        self._times: list[int] = [0, *(_parse_list(self.options.schedule) if self.options.schedule != "growing"
                                        else [])]

    def _upto(self, t: int) -> None:
        """Extend a growing schedule until it reaches step count t."""
        while self.options.schedule == "growing" and self._times[-1] < t:
            self._times.append(self._times[-1] + growing_gap(self.options, len(self._times) - 1))

    def averages_after(self, t: int) -> bool:
        self._upto(t)
        i = bisect.bisect_left(self._times, t)
        return i < len(self._times) and self._times[i] == t

    def period_now(self) -> int:
        t = self.step_count + 1
        self._upto(t)
        i = bisect.bisect_left(self._times, t)            # the round in progress ends at _times[i]
        return self._times[i] - self._times[i - 1] if i < len(self._times) else 0
