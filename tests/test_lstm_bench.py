"""The LSTM benchmark runs and reports sane numbers (a smoke test: one timed run)."""
import numpy as np

from minips.bench import lstm as blstm


def test_bench_lstm_rows_and_table():
    import numba
    before = numba.get_num_threads()  # the benchmark sets the thread count for everyone
    try:
        rows, note = blstm.run(cases=["captioner decoder"], threads=1, repeat=1,
                               impls=("numba", "gemm-only", "twin"))
    finally:
        numba.set_num_threads(before)
    assert {(r["impl"], r["pass"]) for r in rows} == {
        (i, p) for i in ("numba", "gemm-only", "twin") for p in ("forward", "forward+backward")}
    for r in rows:
        assert r["ms"] > 0 and np.isfinite(r["gflops"])
        assert (r["T"], r["N"], r["F"], r["H"]) == blstm.CASES["captioner decoder"]
    table = blstm.format_table(rows)
    assert "captioner decoder" in table and "x numba" in table


def test_flops_count():
    # forward: 2 * T * N * 4H * (F + H); backward adds twice that
    assert blstm.flops(2, 3, 5, 7, backward=False) == 2 * 2 * 3 * 28 * 12
    assert blstm.flops(2, 3, 5, 7, backward=True) == 3 * blstm.flops(2, 3, 5, 7, backward=False)


def test_lstm_cases_are_registered_in_bench_kernels():
    from minips.bench import kernels as bk
    ctx = bk.BenchContext(torch=None)
    cases = [c for c in bk.collect_cases(ctx, only="lstm")]
    assert {c.kernel for c in cases} == {"lstm fwd", "lstm fwd+bwd"}
    assert all(c.numpy is not None and c.flops > 0 for c in cases)
    cases[0].numba()  # runs
