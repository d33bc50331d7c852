"""DistributedSampler: which samples each rank trains on in an epoch."""
from __future__ import annotations

import numpy as np

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """One seeded permutation per epoch shared by all ranks; each rank takes its
    strided share ``perm[rank::world_size]``, truncated so all ranks get the
    same count (the last ``n % world_size`` samples of the permutation are
    skipped this epoch; they differ from epoch to epoch).

    Strided sharding makes data-parallel SGD equal to large-batch SGD: batch j
    of size b on every rank together holds exactly samples
    ``perm[j*b*P : (j+1)*b*P]``, the j-th batch of size b*P of one process.

    Args:
        n: number of samples in the data set.
        rank: this rank, 0 <= rank < world_size.
        world_size: number of ranks P.
        seed: the permutation of epoch e comes from ``default_rng((seed, e))``.
        epoch: starting epoch (see :meth:`set_epoch`).
        shuffle: if False, the identity permutation.

    Raises:
        ValueError: rank out of range, or fewer samples than ranks.
    """

    def __init__(self, n: int, rank: int = 0, world_size: int = 1, seed: int = 0,
                 epoch: int = 0, shuffle: bool = True):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"DistributedSampler: rank {rank} is not in [0, {world_size})")
        if n < world_size:
            raise ValueError(f"DistributedSampler: {n} samples cannot be split over {world_size} ranks")
        self.n, self.rank, self.world_size = n, rank, world_size
        self.seed, self.epoch, self.shuffle = seed, epoch, shuffle

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose permutation :meth:`indices` returns."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.n // self.world_size

    def permutation(self) -> np.ndarray:
        """The epoch's permutation of ``range(n)``, the same on every rank."""
        if not self.shuffle:
            return np.arange(self.n)
        return np.random.default_rng((self.seed, self.epoch)).permutation(self.n)

    def indices(self) -> np.ndarray:
        """This rank's sample indices for the epoch, int64 of length ``len(self)``."""
        per = len(self)
        return self.permutation()[self.rank::self.world_size][:per]
