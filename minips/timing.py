"""Per-step timing breakdown: forward, backward, post, wait, predict, update."""
from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

__all__ = ["PHASES", "StepTimer"]

#: forward/backward = compute; post = time to start communication (Iallreduce
#: calls, or a whole blocking Allreduce counts as wait); wait = blocked waiting
#: for communication; predict = the gradient predictor; update = the optimizer.
PHASES = ("forward", "backward", "post", "wait", "predict", "update")


class StepTimer:
    """Accumulate seconds per phase for the current step; keep every step's row.

    Use ``with timer.phase("wait"): ...`` or ``timer.add("wait", s)``;
    ``timer.end_step()`` closes the row. ``rows`` is a list of dicts (seconds).
    """

    def __init__(self):
        self.current = dict.fromkeys(PHASES, 0.0)
        self.rows: list[dict] = []

    @contextmanager
    def phase(self, name: str):
        """Context manager adding the seconds spent inside it to phase ``name``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.current[name] += time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name`` of the current step."""
        self.current[name] += seconds

    def end_step(self) -> dict:
        """Close the current step's row (seconds per phase) and start a new one."""
        row = self.current
        self.rows.append(row)
        self.current = dict.fromkeys(PHASES, 0.0)
        return row

    def mean(self, skip: int = 0) -> dict:
        """Mean seconds per phase over the steps after the first ``skip`` (JIT warm-up)."""
        rows = self.rows[skip:] or self.rows
        if not rows:
            return dict.fromkeys(PHASES, 0.0)
        return {k: float(np.mean([r[k] for r in rows])) for k in PHASES}
