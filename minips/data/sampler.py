"""DistributedSampler: which samples each rank trains on in an epoch."""
from __future__ import annotations

import numpy as np

from .partition import Partition, check_labels, parse_partition, partition_indices

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """Each rank's sample indices per epoch, under a data partition.

    ``iid`` (the default): one seeded permutation per epoch shared by all
    ranks; each rank takes its strided share ``perm[rank::world_size]``,
    truncated so all ranks get the same count (the last ``n % world_size``
    samples of the permutation are skipped this epoch; they differ from epoch
    to epoch). Strided sharding makes data-parallel SGD equal to large-batch
    SGD: batch j of size b on every rank together holds exactly samples
    ``perm[j*b*P : (j+1)*b*P]``, the j-th batch of size b*P of one process.

    ``by-class:N`` and ``dirichlet:ALPHA`` (see :mod:`minips.data.partition`):
    the rank keeps a fixed shard (:func:`~minips.data.partition.partition_indices`,
    computed identically on every rank from the labels and seed). Each epoch it
    shuffles its shard (the RNG is seeded with ``(seed, epoch, rank)``) and
    yields exactly ``n // world_size`` indices, the iid count: the shard is
    cycled (a fresh shuffle per pass) when smaller than that, truncated when
    larger. Equal counts keep every rank taking the same number of steps, which
    the collectives need; the price is that a small shard's samples are seen
    more than once per epoch and a large shard's only partly.

    Args:
        n: number of samples in the data set.
        rank: this rank, 0 <= rank < world_size.
        world_size: number of ranks P.
        seed: the iid permutation of epoch e comes from ``default_rng((seed, e))``;
            the non-iid partition and shard shuffles are seeded with it too.
        epoch: starting epoch (see :meth:`set_epoch`).
        shuffle: if False, the identity permutation (iid) or the shard in
            ascending order (non-iid).
        partition: a spec string (``"iid"``, ``"by-class:N"``, ``"dirichlet:ALPHA"``)
            or a :class:`~minips.data.partition.Partition`.
        labels: int array (n,), the class of each sample; required by non-iid
            partitions. Optional for iid, where they only feed :meth:`describe`
            (targets that are not 1-D, e.g. captions (n, T), are ignored there),
            so the trainer may pass its targets whatever the partition.

    Raises:
        ValueError: rank out of range, fewer samples than ranks, a bad partition
            spec, labels missing or not one integer per sample (e.g. captions),
            by-class:N with N above the number of classes, or any rank's shard
            empty (checked on every rank, so all ranks fail together).
    """

    def __init__(self, n: int, rank: int = 0, world_size: int = 1, seed: int = 0,
                 epoch: int = 0, shuffle: bool = True, partition: str | Partition = "iid",
                 labels: np.ndarray | None = None):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"DistributedSampler: rank {rank} is not in [0, {world_size})")
        if n < world_size:
            raise ValueError(f"DistributedSampler: {n} samples cannot be split over {world_size} ranks")
        self.n, self.rank, self.world_size = n, rank, world_size
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle
        self.partition = parse_partition(partition)
        self.labels = None
        if not self.partition.is_iid:
            self.labels = check_labels(labels, n, self.partition)
        elif labels is not None and np.ndim(labels) == 1:
            # iid only reports class counts from labels, so targets with no single
            # label per sample (captions) are simply not counted
            self.labels = check_labels(labels, n, self.partition)
        self.shard = None if self.partition.is_iid else self._own_shard()

    def _own_shard(self) -> np.ndarray:
        """This rank's fixed shard; every rank checks all shards so that an
        empty one stops all ranks alike (no rank left waiting in a collective)."""
        shards = partition_indices(self.labels, self.world_size, self.partition, self.seed)
        for r, s in enumerate(shards):
            if len(s) == 0:
                fix = ("use a larger ALPHA or fewer ranks" if self.partition.kind == "dirichlet"
                       else "use a larger N or fewer ranks")
                raise ValueError(f"partition {self.partition} over {self.world_size} ranks leaves rank {r} "
                                 f"with no samples; {fix}")
        return shards[self.rank]

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation :meth:`indices` returns."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n // self.world_size

    def permutation(self) -> np.ndarray:
        """The epoch's iid permutation of ``range(n)``, the same on every rank
        (what the iid partition deals from; unused by non-iid partitions)."""
        if not self.shuffle:
            return np.arange(self.n)
        return np.random.default_rng((self.seed, self.epoch)).permutation(self.n)

    def indices(self) -> np.ndarray:
        """This rank's sample indices for the epoch, int64 of length ``len(self)``."""
        per = len(self)
        if self.partition.is_iid:
            return self.permutation()[self.rank::self.world_size][:per]
        return self._shard_epoch(per)

    def _shard_epoch(self, per: int) -> np.ndarray:
        """The shard shuffled and cycled or truncated to ``per`` indices."""
        passes = -(-per // len(self.shard))
        if not self.shuffle:
            return np.tile(self.shard, passes)[:per]
        rng = np.random.default_rng((self.seed, self.epoch, self.rank))
        return np.concatenate([rng.permutation(self.shard) for _ in range(passes)])[:per]

    def describe(self) -> dict:
        """What this rank trains on, for ``summary.json`` (JSON-serialisable).

        Returns:
            dict with ``partition`` (the spec string), ``rank``, ``world_size``,
            ``samples_per_epoch`` (``len(self)``, the same on every rank),
            ``shard_size`` (samples this rank draws from: its fixed shard, or all
            n for iid, whose share is re-dealt every epoch) and ``class_counts``
            ({label: samples} of that pool as str -> int, or None when the
            sampler has no labels).
        """
        pool = np.arange(self.n) if self.shard is None else self.shard
        counts = None
        if self.labels is not None:
            values, freq = np.unique(self.labels[pool], return_counts=True)
            counts = {str(int(v)): int(c) for v, c in zip(values, freq)}
        return {"partition": str(self.partition), "rank": self.rank, "world_size": self.world_size,
                "samples_per_epoch": len(self), "shard_size": len(pool), "class_counts": counts}
