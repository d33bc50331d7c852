"""gs-SGD: distributed SGD with a global count-sketch (reconstruction).

L. Dai, B. Diao, C. Li, Y. Xu, "A Distributed SGD Algorithm with Global
Sketching for Deep Learning Training Acceleration", arXiv:2108.06004. Only the
abstract was read (gradients stored in a Count-Sketch, the sketch of the
global gradient formed across workers since sketches sum, communication
O(log d log P)); the rule below is the reconstruction of
docs/specifications.md section 15: Sketched-SGD (Ivkin et al., NeurIPS 2019) made fully collective.
Rank i, step t (hashes from a seed shared by all ranks)::

    e_i += g_i                                  # error feedback (gradient units)
    S = ALLREDUCE(CountSketch(e_i))             # rows x cols floats; sketches sum
    est = median_r s_r(j) S[r, h_r(j)]          # estimate of sum_i e_i[j], every j
    K = the k largest |est|                     # the same on every rank
    v = ALLREDUCE(e_i[K])  if second_round      # exact sums of those k entries
        else est[K]
    G[K] = v / P;  G = 0 elsewhere
    e_i[K] = 0                                  # error reset on what was applied
    w = opt(w, G)

Every rank applies the same G: replicas stay identical. Bytes per step:
``4 rows cols`` (+ ``4 k`` with the second round) in one or two allreduces.
The optimizer's momentum, if any, acts on the applied sparse G (not
Sketched-SGD's local momentum with stopping).

Options: ``k`` or ``ratio`` (fraction of d, default 0.01), ``rows`` (5),
``cols`` (default ``4 k``: "a few times k"; must be >= k), ``second_round``
(true), ``seed`` (0).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..compression import make_compressor
from ..compression.memory import ErrorFeedback
from .base import Algorithm

__all__ = ["GlobalSketchSGD"]


class GlobalSketchSGD(Algorithm):
    """gs-SGD (reconstruction): allreduced count-sketch, global top-k, optional exact second round, error reset."""

    name = "gs-sgd"
    family = "compression"
    paper = ("L. Dai, B. Diao, C. Li, Y. Xu, A Distributed SGD Algorithm with Global Sketching for Deep Learning "
             "Training Acceleration, arXiv:2108.06004 (rule: reconstruction, docs/specifications.md section 15)")
    per_rank_state = True  # each rank's error e_i

    @dataclass
    class Options:
        k: int = field(default=0, metadata={"help": "entries applied per step (0: from ratio)"})
        ratio: float = field(default=0.01, metadata={"help": "k as a fraction of the model's size (when k = 0)"})
        rows: int = field(default=5, metadata={"help": "hash rows of the sketch"})
        cols: int = field(default=0, metadata={"help": "columns of the sketch (0: 4 k)"})
        second_round: bool = field(default=True, metadata={
            "help": "allreduce the exact values of the k chosen entries (else the sketch's estimates)"})
        seed: int = field(default=0, metadata={"help": "seed of the hashes (shared by all ranks)"})

        def validate(self):
            if self.k < 0:
                raise ValueError(f"k must be >= 1 (entries applied per step), or 0 to use ratio; got {self.k}")
            if not 0 < self.ratio <= 1:
                raise ValueError(f"ratio must be in (0, 1] (fraction of entries applied), got {self.ratio}")
            if self.rows < 1:
                raise ValueError(f"rows must be >= 1 (hash rows of the sketch; 5 is usual), got {self.rows}")
            if self.cols < 0 or (self.k and self.cols and self.cols < self.k):
                raise ValueError(f"cols={self.cols} makes the sketch too small for k={self.k}: give cols >= k "
                                 "(a few times k), or 0 for 4 k")

    @staticmethod
    def sizes(options, d: int) -> tuple[int, int]:
        """(k, cols) for a model of d floats."""
        k = options.k or max(1, math.ceil(options.ratio * d))
        return k, options.cols or 4 * k

    @classmethod
    def step_time(cls, options, profile, P, net, phi=0.0) -> float:
        """``T = compute + sketching + selection + A(4 rows cols) [+ A(4 k)]``:
        blocking allreduces; sketching = count-sketch compress and the query of
        all d entries, selection = the top-k of the d estimates (argpartition,
        as top-k's compress), both from the compressors' measured per-entry
        costs."""
        d = int(profile.grad_bytes // 4)
        k, cols = cls.sizes(options, d)
        cs = make_compressor("countsketch", rows=options.rows, cols=max(2, cols))
        select = make_compressor("topk", k=k).compress_ns * d * 1e-9
        t = profile.compute + cs.seconds(d) + select + net.allreduce_time(4 * options.rows * cols, P)
        return t + (net.allreduce_time(4 * k, P) if options.second_round else 0.0)

    def setup(self) -> None:
        d = self.flat.weights.size
        self.k, cols = self.sizes(self.options, d)
        if self.k > d:
            raise ValueError(f"{self.name}: k={self.k} exceeds the model's size d={d}; choose k <= {d} or ratio")
        if cols < self.k:
            raise ValueError(f"{self.name}: cols={cols} makes the sketch too small for k={self.k}; give cols >= k")
        self.sketch = make_compressor("countsketch", rows=self.options.rows, cols=max(2, cols),
                                      seed=self.options.seed)
        self.memory = ErrorFeedback(d)                    # e_i
        self.G = np.zeros(d, np.float32)

    def step(self) -> None:
        e = self.memory.m
        with self.timer.phase("compress"):
            e += self.flat.grads[0]                                   # e_i += g_i
            S = self.sketch.compress(e, self.step_count)
        table = S.arrays[0]
        self.timer.add("wait", self.comm.allreduce(table))            # S = sum_i sketch(e_i)
        with self.timer.phase("decompress"):
            est = self.sketch.decompress(S)                           # estimates of sum_i e_i
            K = np.sort(np.argpartition(np.abs(est), est.size - self.k)[est.size - self.k:])
        if self.options.second_round:
            v = e[K]                                                  # exact sums of the chosen entries
            self.timer.add("wait", self.comm.allreduce(v))
        else:
            v = est[K]
        self.G.fill(0)
        self.G[K] = v
        self.average(self.G)
        self.memory.reset(K)                                          # e_i[K] = 0
        self.log = {"wire_bytes": table.nbytes + (4 * self.k if self.options.second_round else 0)}
        self.apply_update(self.G)
        self.end_step()

    def report(self) -> dict:
        return {"k": self.k, "sketch": self.sketch.describe()}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "memory": self.memory.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if "memory" in state:
            self.memory.load_state_dict(state["memory"])
