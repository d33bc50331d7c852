"""What every distributed algorithm shares: the flat buffers, the optimizer
binding, the initial broadcast, and the driving interface::

    algo = make_algorithm(name, model.parameters(), optimizer, comm, **options)
    algo.start()                 # broadcast initial weights from rank 0
    for batch in loader:
        algo.before_forward()    # e.g. look-ahead weights
        loss = model.loss(batch)
        algo.before_backward()   # e.g. choose the gradient buffer, arm hooks
        loss.backward()          # hooks may post Iallreduce per bucket
        algo.step()              # communicate / predict / apply the update
    algo.finish()                # wait for every outstanding request

Subclasses implement :meth:`Algorithm.step` (and, if they keep state across
steps, :meth:`state_dict` / :meth:`load_state_dict`).
"""
from __future__ import annotations

import numpy as np

from ... import autograd
from ...nn import module as nn_module
from ...timing import StepTimer
from ..flat import FlatParams

__all__ = ["Algorithm", "FlatHandle"]


class FlatHandle:
    """The flat weight buffer seen by the optimizer as a single parameter."""

    def __init__(self, flat: FlatParams):
        self.data = flat.weights
        self.grad = None
        self.shape = flat.weights.shape
        self.dtype = flat.weights.dtype


class Algorithm:
    """Base class of data-parallel training algorithms.

    Args:
        params: the model's Parameters (float32).
        optimizer: an :class:`minips.optim.SGD` over those parameters; it is
            rebound to the single flat weight buffer.
        comm: a :class:`minips.distributed.comm.Comm`.
        num_grad_buffers: gradient buffers to allocate (pseudo-sync needs k+1).
        bucket_mb: bucket size for per-bucket communication (MiB; 0 = one bucket).

    Attributes:
        flat: the :class:`FlatParams`.
        timer: a :class:`StepTimer` the algorithm adds post/wait/predict/update to.
        step_count: completed calls to :meth:`step`.
        log: dict of per-step scalars to record (e.g. predictor diagnostics),
            refreshed every step.
    """

    name = "base"

    def __init__(self, params, optimizer, comm, num_grad_buffers: int = 1, bucket_mb: float = 0.0):
        self.comm = comm
        self.optimizer = optimizer
        self.flat = FlatParams(params, num_grad_buffers=num_grad_buffers, bucket_mb=bucket_mb)
        self.handle = FlatHandle(self.flat)
        optimizer.set_params([self.handle])
        self.timer = StepTimer()
        self.step_count = 0
        self.log: dict = {}
        self._callbacks_on = False

    # --- lifecycle -------------------------------------------------------------
    def start(self) -> None:
        """Make every replica start from rank 0's weights; arm progress polling."""
        self.comm.bcast(self.flat.weights, root=0)
        if self.comm.progress_mode == "poll" and self.comm.size > 1 and not self._callbacks_on:
            autograd.backward_callbacks.append(self.comm.progress)
            nn_module.forward_callbacks.append(self.comm.progress)
            self._callbacks_on = True

    def before_forward(self) -> None:
        """Hook before the forward pass (e.g. move to look-ahead weights)."""

    def before_backward(self) -> None:
        """Zero the gradient buffer backward will accumulate into."""
        self.flat.grads[self.flat.current].fill(0)

    def step(self) -> None:  # pragma: no cover - abstract
        """Communicate the gradient of this step and apply the update (see the subclass)."""
        raise NotImplementedError

    def drain(self) -> None:
        """Complete every outstanding request and keep its result (for a
        checkpoint); training can continue afterwards."""
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

    # --- helpers for subclasses ------------------------------------------------
    def average(self, buf: np.ndarray) -> np.ndarray:
        """In place: the allreduce SUM -> the MEAN over ranks (divide by P)."""
        if self.comm.size > 1:
            buf *= np.float32(1.0 / self.comm.size)
        return buf

    def apply_update(self, direction: np.ndarray) -> None:
        """``w <- optimizer(w, direction)`` on the flat weights, timed as 'update'."""
        with self.timer.phase("update"):
            self.optimizer.apply(0, self.flat.weights, direction)

    def end_step(self) -> dict:
        """Count the step and close its timing row; returns the row (seconds per phase)."""
        self.step_count += 1
        return self.timer.end_step()

    # --- state -----------------------------------------------------------------
    def state_dict(self) -> dict:
        """Algorithm state beyond weights and optimizer (pending results etc.)."""
        return {"step_count": self.step_count}

    def load_state_dict(self, state: dict) -> None:
        self.step_count = int(state.get("step_count", 0))

    def describe(self) -> str:
        """One line naming the algorithm and its options (for logs)."""
        return self.name
