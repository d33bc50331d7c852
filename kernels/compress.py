"""Kernels of the gradient compressors (:mod:`minips.distributed.compression`).

- :func:`qsgd_quantize` / :func:`qsgd_dequantize`: QSGD's stochastic rounding
  to ``s`` levels per bucket (Alistarh et al., NeurIPS 2017): for a bucket
  ``v`` with norm ``n = ||v||_2`` and an entry ``x``, ``r = s |x| / n``,
  ``l = floor(r)``, the level is ``l + 1`` with probability ``r - l`` (the
  uniform ``u < r - l``), else ``l``; the signed level ``sign(x) * level`` is
  the code and ``n * code / s`` its value, so ``E[value] = x``.
- :func:`countsketch_accumulate` / :func:`countsketch_query`: a Count-Sketch
  (Charikar, Chen, Farach-Colton 2002) of ``rows x cols`` floats:
  ``S[r, h_r(j)] += s_r(j) v_j``; the estimate of ``v_j`` is the median over
  rows of ``s_r(j) S[r, h_r(j)]``.

The random draws (``u``) and the hashes come from the caller, so each kernel
is a pure function and its plain-NumPy twin in :mod:`minips.kernels.reference`
(same name) gives the same result: the test oracle. Norms and ratios are
computed in float64 in both. One thread: the loops are memory-bound.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["qsgd_quantize", "qsgd_dequantize", "countsketch_accumulate", "countsketch_query"]


@njit(cache=True, nogil=True)
def _qsgd_quantize(v, s, bucket, u, norms, codes):
    d = v.size
    nb = norms.size
    for b in range(nb):
        lo = b * bucket
        hi = min(d, lo + bucket)
        acc = 0.0
        for j in range(lo, hi):
            x = np.float64(v[j])
            acc += x * x
        n = np.sqrt(acc)
        norms[b] = np.float32(n)
        for j in range(lo, hi):
            if n == 0.0:
                codes[j] = 0
                continue
            x = np.float64(v[j])
            r = s * abs(x) / n
            lev = np.floor(r)
            if u[j] < r - lev:
                lev += 1.0
            codes[j] = np.int16(lev) if x >= 0 else -np.int16(lev)


def qsgd_quantize(v: np.ndarray, s: int, bucket: int, u: np.ndarray):
    """QSGD codes of ``v``.

    Args:
        v: float32 (d,).
        s: levels (>= 1).
        bucket: entries per bucket (>= 1); the last bucket may be shorter.
        u: float64 (d,) uniforms in [0, 1) (the stochastic rounding's draws).

    Returns:
        (norms float32 (ceil(d/bucket),), codes int16 (d,) in [-s, s]).
    """
    d = v.size
    norms = np.empty((d + bucket - 1) // bucket, np.float32)
    codes = np.empty(d, np.int16)
    _qsgd_quantize(v, float(s), int(bucket), u, norms, codes)
    return norms, codes


@njit(cache=True, nogil=True)
def _qsgd_dequantize(norms, codes, s, bucket, out):
    for j in range(codes.size):
        out[j] = np.float32(np.float64(norms[j // bucket]) * codes[j] / s)


def qsgd_dequantize(norms: np.ndarray, codes: np.ndarray, s: int, bucket: int) -> np.ndarray:
    """Values of QSGD codes: float32 (d,), ``norm_of_bucket * code / s``."""
    out = np.empty(codes.size, np.float32)
    _qsgd_dequantize(norms, codes, float(s), int(bucket), out)
    return out


@njit(cache=True, nogil=True)
def _cs_accumulate(v, buckets, signs, table):
    rows = buckets.shape[0]
    for r in range(rows):
        for j in range(v.size):
            table[r, buckets[r, j]] += signs[r, j] * v[j]


def countsketch_accumulate(v: np.ndarray, buckets: np.ndarray, signs: np.ndarray, cols: int) -> np.ndarray:
    """Count-Sketch of ``v``: float32 (rows, cols).

    Args:
        v: float32 (d,).
        buckets: int32 (rows, d), column of entry j in row r (``h_r(j)``).
        signs: float32 (rows, d) of +-1 (``s_r(j)``).
        cols: columns of the table.
    """
    table = np.zeros((buckets.shape[0], cols), np.float32)
    _cs_accumulate(v, buckets, signs, table)
    return table


@njit(cache=True, nogil=True)
def _cs_query(table, buckets, signs, out):
    rows = buckets.shape[0]
    est = np.empty(rows, np.float32)
    for j in range(out.size):
        for r in range(rows):  # insertion sort of the few row estimates
            x = signs[r, j] * table[r, buckets[r, j]]
            i = r
            while i > 0 and est[i - 1] > x:
                est[i] = est[i - 1]
                i -= 1
            est[i] = x
        if rows % 2 == 1:
            out[j] = est[rows // 2]
        else:
            out[j] = np.float32(0.5) * (est[rows // 2 - 1] + est[rows // 2])


def countsketch_query(table: np.ndarray, buckets: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Estimate of every entry from a Count-Sketch: float32 (d,), the median over
    rows of ``s_r(j) table[r, h_r(j)]`` (mean of the middle two for even rows)."""
    out = np.empty(buckets.shape[1], np.float32)
    _cs_query(table, buckets, signs, out)
    return out
