"""Partitions of a labelled data set across ranks: iid, by-class:N, dirichlet:ALPHA.

A partition spec is a short string (``--partition`` on the command line):

- ``iid``: every rank sees the same label distribution (today's
  :class:`~minips.data.DistributedSampler`: a fresh shared permutation per epoch).
- ``by-class:N``: each rank holds samples of only N classes, the "pathological
  non-IID" split of McMahan et al. 2017, "Communication-Efficient Learning of Deep
  Networks from Decentralized Data" (AISTATS). Rank r holds the classes at
  positions ``(r*N + j) mod C``, j < N, of the sorted distinct labels (a fixed,
  deterministic rule: no seed, so runs with different seeds keep the same classes);
  each class's samples are shuffled with the seed and split as evenly as possible
  among the ranks that hold it.
- ``dirichlet:ALPHA``: label skew of Hsu, Qi & Brown 2019, "Measuring the Effects
  of Non-Identical Data Distribution for Federated Visual Classification"
  (arXiv:1909.06335): for each class c, proportions ``p_c ~ Dir(ALPHA * 1_P)``
  over the P ranks, and class c's (shuffled) samples are cut in those
  proportions. Small ALPHA (0.1) gives each rank a few dominant classes; large
  ALPHA (1000) tends to iid.

Every random draw comes from ``numpy.random.default_rng`` seeded with the run's
seed alone, so all ranks compute the same partition without communicating.

:func:`partition_indices` gives every rank's shard in one process (tests,
tutorials); the sampler turns a shard into per-epoch index lists of equal length.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PARTITION_FORMS", "Partition", "check_labels", "parse_partition", "partition_indices"]

#: The valid spec forms, quoted in every parse error.
PARTITION_FORMS = "iid, by-class:N (N classes per rank) or dirichlet:ALPHA (ALPHA > 0)"

# Second seed word of the partition's RNG: keeps its stream apart from the
# sampler's per-epoch permutations, which use (seed, epoch) and (seed, epoch, rank).
_PARTITION_STREAM = 0x9A27_1710


@dataclass(frozen=True)
class Partition:
    """A partition spec, validated on construction.

    Attributes:
        kind: ``"iid"``, ``"by-class"`` or ``"dirichlet"``.
        parameter: None for iid, N (int >= 1) for by-class, ALPHA (float > 0)
            for dirichlet.

    ``str(p)`` gives the spec back (``"by-class:2"``, ``"dirichlet:0.5"``).

    Raises:
        ValueError: (one line, naming the valid forms) unknown kind, N not a
            whole number >= 1, or ALPHA not a finite number > 0.
    """
    kind: str
    parameter: int | float | None = None

    def __post_init__(self):
        shown = self.kind if self.parameter is None else f"{self.kind}:{self.parameter}"
        _validate(self.kind, self.parameter, shown)

    def __str__(self) -> str:
        if self.kind == "iid":
            return "iid"
        if self.kind == "by-class":
            return f"by-class:{self.parameter}"
        return f"dirichlet:{self.parameter:g}"

    @property
    def is_iid(self) -> bool:
        return self.kind == "iid"


def parse_partition(text: str | Partition) -> Partition:
    """Parse a partition spec: ``iid``, ``by-class:N`` or ``dirichlet:ALPHA``.

    Args:
        text: the spec (surrounding spaces and case are ignored), or a
            :class:`Partition`, returned as is.

    Returns:
        The :class:`Partition`.

    Raises:
        ValueError: (one line, naming the valid forms, quoting ``text``) unknown
            kind, missing or malformed parameter, N < 1, or ALPHA <= 0 (or not finite).
    """
    if isinstance(text, Partition):
        return text
    spec = str(text).strip().lower()
    kind, sep, arg = spec.partition(":")
    if kind == "iid" and not sep:
        return Partition("iid")
    if kind == "by-class" and sep:
        # a whole number written plainly ("2", not "2.0" or "+2"); anything else reads as N = 0
        n = int(arg) if arg.strip().isdigit() else 0
        _validate("by-class", n, str(text))
        return Partition("by-class", n)
    if kind == "dirichlet" and sep:
        try:
            alpha = float(arg)
        except ValueError:
            alpha = float("nan")
        _validate("dirichlet", alpha, str(text))
        return Partition("dirichlet", alpha)
    raise ValueError(f"unknown partition {text!r}; use {PARTITION_FORMS}")


def _validate(kind: str, parameter, shown: str) -> None:
    """Raise the one-line ValueError of an invalid (kind, parameter), quoting ``shown``."""
    if kind == "iid" and parameter is None:
        return
    if kind == "by-class":
        n = parameter
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"partition {shown!r}: N must be a whole number >= 1 (classes per rank), "
                             f"e.g. by-class:2; use {PARTITION_FORMS}")
        return
    if kind == "dirichlet":
        a = parameter
        if isinstance(a, bool) or not isinstance(a, (int, float, np.number)) or not (np.isfinite(a) and a > 0):
            raise ValueError(f"partition {shown!r}: ALPHA must be a number > 0 (small = skewed, large = "
                             f"close to iid), e.g. dirichlet:0.5; use {PARTITION_FORMS}")
        return
    raise ValueError(f"unknown partition {shown!r}; use {PARTITION_FORMS}")


def check_labels(labels, n: int | None, partition: Partition) -> np.ndarray:
    """Validate per-sample class labels for a non-iid partition.

    Args:
        labels: 1-D integer array, one class label per sample.
        n: the expected number of samples, or None to accept any length.
        partition: used in the messages.

    Returns:
        The labels as an int64 array (N,).

    Raises:
        ValueError: labels missing, not 1-D (e.g. captions: no single label per
            sample), not integers, or of the wrong length.
    """
    fix = "give one integer class label per sample, or use --partition iid"
    if labels is None:
        raise ValueError(f"partition {partition} needs the class labels of the samples; {fix}")
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"partition {partition} needs one class label per sample (a 1-D array), got "
                         f"targets of shape {labels.shape} (e.g. captions have no single label); {fix}")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"partition {partition} needs integer class labels, got dtype {labels.dtype}; {fix}")
    if n is not None and len(labels) != n:
        raise ValueError(f"partition {partition}: {len(labels)} labels for {n} samples; {fix}")
    return labels.astype(np.int64, copy=False)


def partition_indices(labels, size: int, partition: str | Partition = "iid", seed: int = 0) -> list[np.ndarray]:
    """Every rank's shard of the data set, computed in one process.

    Args:
        labels: int array (N,), the class of each sample (any integer values;
            the classes are the sorted distinct values). Only its length is used
            for ``iid``.
        size: number of ranks P >= 1.
        partition: a spec string or :class:`Partition` (see the module docstring).
        seed: seeds the shuffles and the Dirichlet draws (the same on every rank).

    Returns:
        P int64 arrays of sample indices, disjoint, each sorted ascending. Their
        union is every index, except with ``by-class:N`` when ``P*N < C`` (the
        classes no rank holds are left out). A shard may be empty (dirichlet with
        few samples); :class:`~minips.data.DistributedSampler` rejects that.

        For ``iid`` this is a static uniform split (shard r = ``perm[r::P]`` of
        one seeded permutation), the baseline to compare non-iid shards with;
        the sampler's iid mode instead re-deals a fresh permutation each epoch,
        exactly as before partitions existed.

    Raises:
        ValueError: bad spec, ``size < 1``, bad labels (see :func:`check_labels`),
            or ``by-class:N`` with N larger than the number of classes.
    """
    partition = parse_partition(partition)
    if size < 1:
        raise ValueError(f"partition_indices: size must be >= 1 ranks, got {size}")
    rng = np.random.default_rng((seed, _PARTITION_STREAM))
    if partition.is_iid:
        n = len(labels)
        perm = rng.permutation(n)
        return [np.sort(perm[r::size]) for r in range(size)]
    labels = check_labels(labels, None, partition)
    # One shuffled index list per class, in sorted label order; the shuffle
    # keeps a split of a class from following the file's order.
    classes = np.unique(labels)
    by_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    if partition.kind == "by-class":
        pieces = _split_by_class(by_class, size, partition.parameter)
    else:
        pieces = _split_dirichlet(by_class, size, partition.parameter, rng)
    return [np.sort(np.concatenate(p)).astype(np.int64) if p else np.zeros(0, np.int64) for p in pieces]


def by_class_holders(num_classes: int, size: int, n_per_rank: int) -> list[list[int]]:
    """Which class positions each rank holds under ``by-class:N``.

    Rank r holds positions ``(r*N + j) mod C`` for j < N: consecutive windows
    that wrap around, so the classes are covered once ``P*N >= C`` and, when
    ``P*N`` is a multiple of C, every class has the same number of holders.

    Returns:
        For each rank, its N class positions (ints in [0, C)).

    Raises:
        ValueError: N > C (a rank cannot hold more classes than exist).
    """
    if n_per_rank > num_classes:
        raise ValueError(f"partition by-class:{n_per_rank} asks for {n_per_rank} classes per rank but the "
                         f"labels have only {num_classes} classes; use by-class:N with N <= {num_classes}")
    return [[(r * n_per_rank + j) % num_classes for j in range(n_per_rank)] for r in range(size)]


def _split_by_class(by_class: list[np.ndarray], size: int, n_per_rank: int) -> list[list[np.ndarray]]:
    """McMahan et al.'s pathological split: each class's samples divided evenly
    (``np.array_split``, sizes differ by at most one) among the ranks holding it."""
    holders = by_class_holders(len(by_class), size, n_per_rank)
    pieces: list[list[np.ndarray]] = [[] for _ in range(size)]
    for c, idx in enumerate(by_class):
        ranks = [r for r in range(size) if c in holders[r]]
        for r, part in zip(ranks, np.array_split(idx, len(ranks)) if ranks else []):
            pieces[r].append(part)
    return pieces


def _split_dirichlet(by_class: list[np.ndarray], size: int, alpha: float,
                     rng: np.random.Generator) -> list[list[np.ndarray]]:
    """Hsu et al.'s split: class c is cut at the cumulative proportions of
    ``p_c ~ Dir(alpha * 1_P)``, rank r getting about ``p_c[r] * n_c`` samples."""
    pieces: list[list[np.ndarray]] = [[] for _ in range(size)]
    for idx in by_class:
        p = rng.dirichlet(np.full(size, alpha))
        if not np.all(np.isfinite(p)):  # all Gamma draws underflowed to 0
            raise ValueError(f"partition dirichlet:{alpha:g}: ALPHA is too small to sample proportions; "
                             "use a larger ALPHA (e.g. 0.01 or more)")
        cuts = np.floor(np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
        for r, part in enumerate(np.split(idx, cuts)):
            pieces[r].append(part)
    return pieces
