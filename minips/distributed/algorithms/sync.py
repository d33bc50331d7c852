"""Synchronous data-parallel SGD: every step uses the fresh averaged gradient.

With P ranks each computing the gradient g_t^p of its own mini-batch of b
samples at the same weights w_t, the update

    G_t = (1/P) sum_p g_t^p            (one allreduce)
    w_{t+1} = optimizer(w_t, G_t)

is exactly SGD with a batch of P*b samples (the mean of means of equal-size
batches is the mean). Two ways to communicate:

- :class:`SyncSGD`: one blocking Allreduce of the whole flat gradient after
  backward. Simple; the network is idle during compute and vice versa.
- :class:`OverlapSyncSGD`: an Iallreduce per bucket, posted from a gradient
  hook as soon as backward has finished that bucket, so the allreduce of the
  last layers runs while backward computes the first layers (Horovod, Sergeev
  & Del Balso 2018; PyTorch DDP, Li et al. VLDB 2020). Still waits for all
  buckets before the update, so it is the same maths as SyncSGD.
"""
from __future__ import annotations

from .base import Algorithm

__all__ = ["SyncSGD", "OverlapSyncSGD"]


class SyncSGD(Algorithm):
    """Blocking allreduce of the flat gradient, then the update."""

    name = "sync"

    def step(self) -> None:
        g = self.flat.grads[0]
        self.timer.add("wait", self.comm.allreduce(g))  # all of it is waiting
        self.average(g)
        self.apply_update(g)
        self.end_step()


class OverlapSyncSGD(Algorithm):
    """Per-bucket Iallreduce posted during backward; wait for all, then update.

    Args:
        bucket_mb: bucket size in MiB (default 1; PyTorch DDP uses 25 for
            models 100x larger).

    Attributes:
        requests: bucket index -> :class:`~minips.distributed.comm.Request` of the
            current (or last) step, with ``post_time`` and ``complete_time``
            for timelines.
    """

    name = "overlap-sync"

    def __init__(self, params, optimizer, comm, bucket_mb: float = 1.0):
        super().__init__(params, optimizer, comm, num_grad_buffers=1, bucket_mb=bucket_mb)
        self.requests = {}
        self._remaining = {}
        for i, p in enumerate(self.flat.params):
            p.register_grad_hook(lambda _t, i=i: self._param_ready(i))

    def before_backward(self) -> None:
        super().before_backward()
        self.requests = {}
        self._remaining = {b.index: len(b.param_ids) for b in self.flat.buckets}

    def _param_ready(self, pid: int) -> None:
        """Gradient hook: when the last parameter of a bucket is done, post its Iallreduce."""
        if not self._remaining:  # backward outside a training step (e.g. a test)
            return
        b = self.flat.bucket_of_param[pid]
        self._remaining[b] -= 1
        if self._remaining[b] == 0:
            self._post(self.flat.buckets[b])

    def _post(self, bucket) -> None:
        with self.timer.phase("post"):
            self.requests[bucket.index] = self.comm.iallreduce(
                self.flat.bucket_slice(0, bucket), lock=self.flat.grad_views(0, bucket),
                tag=(self.step_count, bucket.index))

    def step(self) -> None:
        # Buckets whose parameters got no gradient this step (unused layers).
        for b in self.flat.buckets:
            if b.index not in self.requests:
                self._post(b)
        with self.timer.phase("wait"):
            for r in self.requests.values():
                r.wait()
        g = self.average(self.flat.grads[0])
        self.apply_update(g)
        self._remaining = {}
        self.end_step()
