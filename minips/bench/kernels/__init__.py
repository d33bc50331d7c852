"""``python -m minips bench kernels``: time every kernel against its NumPy twin
and (when importable) the same operation in PyTorch CPU at equal threads (this
package holds its public names).

For each kernel and shape (the ConvNet's layer shapes at batch 64 and 128,
plus a 3->64 convolution on 32x32 images) the table shows milliseconds for
Numba, the NumPy twin and PyTorch, the ratios numba/torch and numpy/numba,
and what the kernel achieves: GFLOP/s and the fraction of this CPU's float32
peak for compute-bound kernels (convolutions), GB/s and the fraction of the
measured memory bandwidth for memory-bound ones (pooling, ReLU). How the
peak is computed: :mod:`minips.kernels.cpuinfo` and ``docs/kernels.md``.

Times are the *best* of several runs (a shared machine only ever adds time).

Adding cases: write a provider, a function ``provider(ctx) -> iterable of
:class:`~minips.bench.cases.Case```, and add it to the table :data:`~.providers.KERNEL_CASES`
(the LSTM's provider lives in ``minips/bench/lstm.py``).

The package, one job per module: :mod:`.providers` (the cases), :mod:`.timing` (timing them, the
table), :mod:`.machine` (the machine's peak, bandwidth, sgemm), :mod:`.breakdown` (``--breakdown``),
:mod:`.cli` (the command).
"""
from __future__ import annotations

from ..cases import BenchContext, Case
from .breakdown import conv_breakdown, format_breakdown
from .cli import add_arguments, run
from .machine import machine_report, sgemm_rates
from .providers import KERNEL_CASES, collect_cases, conv_cases, elementwise_cases, loss_cases, pool_cases
from .timing import CLOCKS, format_table, run_cases, set_threads, time_call

__all__ = ["Case", "BenchContext", "KERNEL_CASES", "collect_cases", "conv_cases", "pool_cases", "elementwise_cases",
           "loss_cases", "CLOCKS", "time_call", "set_threads", "run_cases", "format_table", "machine_report",
           "sgemm_rates", "conv_breakdown", "format_breakdown", "run", "add_arguments"]
