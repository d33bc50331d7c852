"""QSGD: synchronous SGD on stochastically quantized gradients.

D. Alistarh, D. Grubic, J. Li, R. Tomioka, M. Vojnovic, "QSGD:
Communication-Efficient SGD via Gradient Quantization and Encoding",
NeurIPS 2017 (arXiv:1610.02132; docs/specifications.md section 14). Every step (rank i)::

    q_i = Q_s(g_i)                        # per bucket: norm + signed levels 0..s,
                                          #   stochastic rounding: E[Q_s(g)] = g
    G = (1/P) sum_j decode(q_j)           # Allgather of the codes and norms
    w = opt(w, G)

Unbiased, so no error feedback by default (``error_feedback=true`` adds it).
The codes go as fixed-width ``ceil(log2(2s+1))``-bit integers, not the
paper's Elias code (:mod:`minips.distributed.compression.qsgd`). As s grows it
approaches synchronous SGD. The step is :class:`~.topk_sgd.CompressedSGD`'s.

Options: ``s`` (levels, default 15: 5 bits), ``bucket`` (512), ``seed``;
``compressor`` may name any other compressor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .compressed_common import compressor_field, compressor_options_field, validate_compressor
from .topk_sgd import CompressedSGD

__all__ = ["QSGDSGD"]


class QSGDSGD(CompressedSGD):
    """QSGD (Alistarh et al. 2017): the mean of s-level stochastically rounded gradients."""

    name = "qsgd"
    paper = ("D. Alistarh, D. Grubic, J. Li, R. Tomioka, M. Vojnovic, QSGD: Communication-Efficient SGD via "
             "Gradient Quantization and Encoding, NeurIPS 2017 (arXiv:1610.02132)")

    @dataclass
    class Options:
        compressor: str = compressor_field("qsgd-quant")
        error_feedback: bool = field(default=False, metadata={
            "help": "keep what the quantizer changed and add it to the next gradient (QSGD is unbiased: off)"})
        compressor_options: dict = compressor_options_field()
        EXTRA: ClassVar[str] = "compressor_options"
        COMPRESSOR_DEFAULTS: ClassVar[dict] = {}

        def validate(self):
            validate_compressor(self)
