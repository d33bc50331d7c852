"""Mini-batches from in-memory arrays."""
from __future__ import annotations

import numpy as np

from .sampler import DistributedSampler

__all__ = ["BatchLoader", "normalize_images"]


def normalize_images(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    """uint8 (N, H, W) -> float32 (N, 1, H, W), scaled to [0, 1] then standardised.

    Args:
        images: uint8 array (N, H, W) or (N, C, H, W).
        mean, std: of the [0, 1]-scaled training pixels.
    """
    x = images.astype(np.float32) / 255.0
    x = (x - np.float32(mean)) / np.float32(std)
    return x[:, None] if x.ndim == 3 else x


class BatchLoader:
    """Iterate over ``(x_batch, y_batch)`` in the order a sampler gives.

    Args:
        x, y: arrays with the same first dimension N (inputs are used as given;
            normalise them first, e.g. with :func:`normalize_images`).
        batch_size: samples per batch on this rank (>= 1).
        sampler: a :class:`DistributedSampler`; default one rank, shuffled with ``seed``.
        drop_last: drop the final short batch (keeps every step the same size,
            which data-parallel SGD needs so all ranks run the same number of steps).
        seed: seed of the default sampler.

    Batches are copies (contiguous float32), safe to modify. ``start_batch``
    lets a resumed run skip the batches it already trained on.

    Raises:
        ValueError: x and y lengths differ, batch_size < 1, or the sampler's
            n is not len(x).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, batch_size: int, sampler: DistributedSampler | None = None,
                 drop_last: bool = True, shuffle: bool = True, seed: int = 0):
        if len(x) != len(y):
            raise ValueError(f"BatchLoader: {len(x)} inputs but {len(y)} targets")
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        self.x, self.y, self.batch_size, self.drop_last = x, y, batch_size, drop_last
        self.sampler = sampler or DistributedSampler(len(x), 0, 1, seed=seed, shuffle=shuffle)
        if self.sampler.n != len(x):
            raise ValueError(f"BatchLoader: sampler covers {self.sampler.n} samples, data has {len(x)}")
        if drop_last and len(self) == 0:
            raise ValueError(f"batch size {batch_size} is larger than this rank's share "
                             f"({len(self.sampler)} samples): lower --batch-size or use fewer ranks")

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s permutation (call before iterating each epoch)."""
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def batches(self, start_batch: int = 0):
        """Yield batches ``start_batch, start_batch+1, ...`` of the current epoch."""
        idx = self.sampler.indices()
        for b in range(start_batch, len(self)):
            sel = idx[b * self.batch_size:(b + 1) * self.batch_size]
            yield self.x[sel], self.y[sel]

    def __iter__(self):
        return self.batches()
