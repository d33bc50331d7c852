"""A validation split held out from the training set (``--val-fraction F``).

Defaults and tuning are chosen on it, never on the test set that is reported.
The split is stratified (each class keeps its share in both parts) and seeded
(the same images are held out in every run, whatever its ``--seed``, so runs
are compared on one validation set).
"""
from __future__ import annotations

import numpy as np

__all__ = ["holdout_indices", "VAL_SEED"]

#: the seed of the split: fixed, so that every run validates on the same samples
VAL_SEED = 12345


def holdout_indices(labels, fraction: float, seed: int = VAL_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the kept training samples and of the held-out validation samples.

    Args:
        labels: int (N,) class labels (stratified: each class contributes
            ``round(fraction * its count)`` samples), or an int N / any array of
            N rows without class labels (e.g. caption token ids): a plain
            seeded random subset of ``round(fraction * N)`` samples.
        fraction: share of the training set to hold out, 0 < fraction < 1.
        seed: the split's seed (default :data:`VAL_SEED`).

    Returns:
        ``(train_idx, val_idx)``: sorted int64 arrays, disjoint, covering 0..N-1.

    Raises:
        ValueError: fraction not in (0, 1), or so small or so large that the
            validation or the training part would be empty.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"--val-fraction must be in (0, 1) (0 or omitted: no validation split), got {fraction}")
    rng = np.random.default_rng(seed)
    if np.isscalar(labels):
        n, groups = int(labels), None
    else:
        labels = np.asarray(labels)
        n = len(labels)
        groups = labels if labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer) else None
    smallest = n
    if groups is None:
        m = int(round(fraction * n))
        val = rng.permutation(n)[:m]
    else:
        val = []
        classes, counts = np.unique(groups, return_counts=True)
        smallest = int(counts.min())
        for c in classes:
            idx = np.flatnonzero(groups == c)
            val.append(rng.permutation(idx)[:int(round(fraction * len(idx)))])
        val = np.concatenate(val)
    if len(val) == 0:
        raise ValueError(f"--val-fraction {fraction} holds out no sample of the {n} training samples; "
                         f"use at least {1 / smallest:.2g}"
                         + (f" (the smallest class has {smallest} samples)" if groups is not None else ""))
    if len(val) >= n:
        raise ValueError(f"--val-fraction {fraction} leaves no training sample of {n}; use a smaller fraction")
    val = np.sort(val).astype(np.int64)
    keep = np.ones(n, bool)
    keep[val] = False
    return np.flatnonzero(keep).astype(np.int64), val
