"""Parameters and gradients as views of one contiguous float32 buffer.

One allreduce of one big buffer costs one latency instead of one per tensor,
and a slice of it (a *bucket*) can be sent as soon as backward has produced
its gradients, overlapping communication with the rest of backward (as in
Horovod's tensor fusion and PyTorch DDP's gradient buckets, Li et al., VLDB 2020).

Layout: parameters in **reverse** registration order, because backward produces
the last layer's gradients first; so buckets are consecutive slices from the
start of the buffer, in the order backward fills them::

    weights  [ p_last | ... | p_1 | p_0 ]   p.data are views into it
    grads[i] [ g_last | ... | g_1 | g_0 ]   i = 0..num_grad_buffers-1
    buckets    [---- b0 ----|--- b1 ---|..]  each >= bucket_bytes, parameter-aligned

Several gradient buffers let an algorithm keep one in flight (pseudo-synchronous
SGD) while backward writes the next into another: :meth:`FlatParams.use_grad_buffer`
re-points every ``p.grad`` to the chosen buffer.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = ["FlatParams", "Bucket", "bucket_groups"]


@dataclass
class Bucket:
    """A slice ``[start, stop)`` (elements) of the flat buffers holding whole parameters.

    Attributes:
        index: position in backward order.
        start, stop: element offsets.
        param_ids: indices (into ``FlatParams.params``) of its parameters.
    """
    index: int
    start: int
    stop: int
    param_ids: list

    @property
    def nbytes(self) -> int:
        return (self.stop - self.start) * 4


def bucket_groups(sizes, bucket_mb: float) -> list[list[int]]:
    """The parameters of each bucket, in backward order (the last parameter
    first): a bucket closes once it holds at least ``bucket_mb`` MiB of float32
    (one parameter is never split); ``0`` or ``inf`` = one bucket.

    Args:
        sizes: the number of elements of each parameter, in the model's order.
    """
    limit = np.inf if not bucket_mb or bucket_mb == np.inf else bucket_mb * 2**20 / 4
    groups, ids, held = [], [], 0
    for i in reversed(range(len(sizes))):
        ids.append(i)
        held += int(sizes[i])
        if held >= limit:
            groups.append(ids)
            ids, held = [], 0
    if ids:
        groups.append(ids)
    return groups


class FlatParams:
    """Lay ``params`` out in one weight buffer and ``num_grad_buffers`` gradient buffers.

    Args:
        params: list of Parameters (float32); their ``data`` becomes a view of
            :attr:`weights` (values kept), their ``grad`` a view of the current
            gradient buffer.
        num_grad_buffers: how many gradient buffers to allocate (>= 1).
        bucket_mb: target bucket size in MiB (a bucket closes once it reaches
            this size; one parameter is never split). ``0`` or ``inf`` = one bucket.
        extra: float32 slots appended to every gradient buffer after the
            gradient (``grads[i][numel:]``), for scalars an algorithm sends in
            the same allreduce as the gradient (default 0).

    Attributes:
        weights: float32 (n,) buffer.
        grads: list of float32 (n + extra,) buffers (the ``p.grad`` views
            cover the first n).
        offsets: ``offsets[i]`` = start of parameter i in the buffers.
        buckets: list of :class:`Bucket` in backward order.
        current: index of the gradient buffer the ``p.grad`` views point into.

    Raises:
        TypeError: a parameter is not float32.
        ValueError: no parameters, num_grad_buffers < 1 or extra < 0.
    """

    def __init__(self, params, num_grad_buffers: int = 1, bucket_mb: float = 0.0, extra: int = 0):
        self.params = list(params)
        if not self.params:
            raise ValueError("FlatParams: the model has no parameters")
        if num_grad_buffers < 1:
            raise ValueError(f"num_grad_buffers must be >= 1, got {num_grad_buffers}")
        if extra < 0:
            raise ValueError(f"extra must be >= 0, got {extra}")
        for i, p in enumerate(self.params):
            if p.dtype != np.float32:
                raise TypeError(f"parameter {i} has dtype {p.dtype}; distributed training uses float32")
        order = list(reversed(range(len(self.params))))  # backward order
        self.offsets = [0] * len(self.params)
        pos = 0
        for i in order:
            self.offsets[i] = pos
            pos += self.params[i].size
        self.numel = pos
        self.weights = np.empty(pos, np.float32)
        for i, p in enumerate(self.params):
            view = self._view(self.weights, i)
            view[...] = p.data
            p.data = view
        self.extra = extra
        self.grads = [np.zeros(pos + extra, np.float32) for _ in range(num_grad_buffers)]
        self.current = 0
        self.buckets = self._make_buckets(bucket_mb)
        self.bucket_of_param = {pid: b.index for b in self.buckets for pid in b.param_ids}
        self.use_grad_buffer(0)

    @property
    def nbytes(self) -> int:
        return self.numel * 4

    def _view(self, buf: np.ndarray, i: int) -> np.ndarray:
        o = self.offsets[i]
        return buf[o:o + self.params[i].size].reshape(self.params[i].shape)

    def _make_buckets(self, bucket_mb):
        buckets = []
        for ids in bucket_groups([p.size for p in self.params], bucket_mb):
            start = self.offsets[ids[0]]
            buckets.append(Bucket(len(buckets), start, start + sum(self.params[i].size for i in ids), ids))
        return buckets

    def use_grad_buffer(self, k: int) -> None:
        """Point every ``p.grad`` at gradient buffer ``k`` (its current contents kept)."""
        self.current = k
        for i, p in enumerate(self.params):
            p.grad = self._view(self.grads[k], i)

    def grad_views(self, k: int, bucket: Bucket | None = None) -> list:
        """The ``p.grad`` views into buffer ``k`` (of one bucket, or all): the arrays
        to lock read-only while that buffer is in flight."""
        ids = range(len(self.params)) if bucket is None else bucket.param_ids
        return [self.params[i].grad for i in ids] if k == self.current else \
            [self._view(self.grads[k], i) for i in ids]

    def bucket_slice(self, k: int, bucket: Bucket) -> np.ndarray:
        """Bucket ``bucket`` of gradient buffer ``k`` (a contiguous view)."""
        return self.grads[k][bucket.start:bucket.stop]

    def checksum(self) -> str:
        """BLAKE2b hex digest of the weight bytes: equal on two ranks iff the
        replicas are bit-identical (up to a 2**-128 collision chance)."""
        return hashlib.blake2b(self.weights.tobytes(), digest_size=16).hexdigest()
