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

import math
from dataclasses import dataclass, field

from ..flat import bucket_groups
from .base import Algorithm

__all__ = ["SyncSGD", "OverlapSyncSGD"]

_SYNC_PAPER = "Goyal et al., Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, arXiv:1706.02677 (2017)"


class SyncSGD(Algorithm):
    """Blocking allreduce of the flat gradient, then the update."""

    name = "sync"
    family = "gradient averaging"
    paper = _SYNC_PAPER

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + A(P)``: nothing overlaps, so phi does not matter."""
        return profile.compute + net.allreduce_time(profile.grad_bytes, P)

    def step(self) -> None:
        g = self.flat.grads[0]
        self.timer.add("wait", self.comm.allreduce(g))  # all of it is waiting
        self.average(g)
        self.apply_update(g)
        self.end_step()


class OverlapSyncSGD(Algorithm):
    """Per-bucket Iallreduce posted during backward; wait for all, then update.

    Options:
        bucket_mb: bucket size in MiB (default 1; PyTorch DDP uses 25 for
            models 100x larger; 0 = one bucket, i.e. plain sync).

    Attributes:
        requests: bucket index -> :class:`~minips.distributed.comm.Request` of the
            current (or last) step, with ``post_time`` and ``complete_time``
            for timelines.
    """

    name = "overlap-sync"
    family = "gradient averaging"
    paper = ("Sergeev & Del Balso, Horovod, arXiv:1802.05799 (2018); Li et al., PyTorch Distributed, "
             "VLDB 2020")

    @dataclass
    class Options:
        bucket_mb: float = field(default=1.0, metadata={"help": "bucket size", "unit": "MiB"})

        def validate(self):
            if self.bucket_mb < 0:
                raise ValueError(f"bucket-mb must be >= 0 (0 = one bucket), got {self.bucket_mb}")

    def bucket_mb(self) -> float:
        return self.options.bucket_mb

    PROFILE_EXTRAS = {"buckets": "bytes of each bucket in backward order (sums to grad_bytes); absent: one bucket"}

    @classmethod
    def profile_extras(cls, options, shapes, phases) -> dict:
        """The buckets :class:`~minips.distributed.flat.FlatParams` cuts a model
        of these parameter ``shapes`` into at ``bucket_mb``."""
        sizes = [math.prod(s) for s in shapes]
        return {"buckets": tuple(4.0 * sum(sizes[i] for i in ids) for ids in bucket_groups(sizes, options.bucket_mb))}

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """Per-bucket allreduce posted during backward; buckets go one after the
        other, all of backward can hide them except the last bucket (ready only
        when backward ends); each bucket pays the latency term::

            A_total = sum_b A(bucket_b);  hidden = min(A_total - A_last, backward)
            T = compute + phi * hidden + (A_total - hidden)

        With one bucket nothing is hidden and it equals sync.

        Raises:
            ValueError: buckets that do not sum to ``grad_bytes``."""
        buckets = profile.extras.get("buckets") or (profile.grad_bytes,)
        if not math.isclose(sum(buckets), profile.grad_bytes, rel_tol=1e-9):
            raise ValueError(f"StepProfile: buckets sum to {sum(buckets)} bytes, grad_bytes is {profile.grad_bytes}")
        times = [net.allreduce_time(b, P) for b in buckets]
        total, last = sum(times), times[-1]
        hidden = min(total - last, profile.backward)
        return profile.compute + phi * hidden + (total - hidden)

    def setup(self) -> None:
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
