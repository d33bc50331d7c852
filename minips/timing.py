"""Per-step timing breakdown: forward, backward, post, wait, predict, update,
and any phase an algorithm names (compress, mix, average, ...)."""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

__all__ = ["PHASES", "StepTimer", "phase_names"]

#: The phases every step row has (0 when unused): forward/backward = compute;
#: post = time to start communication (Iallreduce calls; a whole blocking
#: Allreduce counts as wait); wait = blocked waiting for communication;
#: predict = the gradient predictor; update = the optimizer. Algorithms may
#: add any other name (e.g. "compress", "mix", "average"); it is reported
#: after these, in the order it first appeared.
PHASES = ("forward", "backward", "post", "wait", "predict", "update")


class StepTimer:
    """Accumulate seconds per phase for the current step; keep every step's row.

    Use ``with timer.phase("wait"): ...`` or ``timer.add("wait", s)``;
    ``timer.end_step()`` closes the row. ``rows`` is a list of dicts (seconds).
    ``cpu_rows`` holds the same for the CPU seconds of the calling thread inside
    :meth:`phase` blocks (``time.thread_time``): on virtual ranks, which take
    turns on the cores and the interpreter, what a rank computed, without the
    time it waited for a core.
    """

    def __init__(self):
        self.current = dict.fromkeys(PHASES, 0.0)
        self.rows: list[dict] = []
        self.cpu_current: dict = {}
        self.cpu_rows: list[dict] = []

    @contextmanager
    def phase(self, name: str):
        """Context manager adding the seconds spent inside it to phase ``name``."""
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.current[name] = self.current.get(name, 0.0) + time.perf_counter() - t0
            self.cpu_current[name] = self.cpu_current.get(name, 0.0) + time.thread_time() - c0

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name`` of the current step (any name)."""
        self.current[name] = self.current.get(name, 0.0) + seconds

    def end_step(self) -> dict:
        """Close the current step's row (seconds per phase) and start a new one."""
        row = self.current
        self.rows.append(row)
        self.cpu_rows.append(self.cpu_current)
        self.current = dict.fromkeys(PHASES, 0.0)
        self.cpu_current = {}
        return row

    def mean(self, skip: int = 0) -> dict:
        """Mean seconds per phase over the steps after the first ``skip`` (JIT warm-up)."""
        rows = self.rows[skip:] or self.rows
        names = phase_names(self.rows)
        if not rows:
            return dict.fromkeys(names, 0.0)
        return {k: float(np.mean([r.get(k, 0.0) for r in rows])) for k in names}


    def mean_cpu(self, skip: int = 0) -> dict:
        """Mean thread CPU seconds per :meth:`phase` over the steps after the first ``skip``."""
        rows = self.cpu_rows[skip:] or self.cpu_rows
        names = phase_names(self.cpu_rows)
        if not rows:
            return dict.fromkeys(names, 0.0)
        return {k: float(np.mean([r.get(k, 0.0) for r in rows])) for k in names}


def phase_names(rows) -> list[str]:
    """:data:`PHASES`, then every other phase name in ``rows`` (dicts) in the
    order it first appears."""
    return list(dict.fromkeys([*PHASES, *(k for r in rows for k in r)]))
