"""``python -m minips bench kernels`` runs, prints its table and writes JSON;
other modules can add cases. (No timing is asserted: benchmarks are not tests.)"""
import json

import numpy as np

from minips.bench import kernels as bk
from minips.cli import main


def test_bench_kernels_writes_table_and_json(tmp_path, capsys):
    out = tmp_path / "k.json"
    rc = main(["bench", "kernels", "--threads", "1", "--batch", "2", "--only", "relu",
               "--no-torch", "--quick", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "relu fwd" in text and "peak (stated)" in text and "GFLOP/s" in text
    data = json.loads(out.read_text())
    assert data["machine"]["threads"] == 1 and data["machine"]["peak_gflops"] > 0
    kernels = {r["kernel"] for r in data["rows"]}
    assert kernels == {"relu fwd", "relu bwd"}
    assert all(r["numba_ms"] > 0 and r["numpy_ms"] > 0 and r["torch_ms"] is None for r in data["rows"])


def test_other_modules_can_add_cases():
    def provider(ctx):
        a = ctx.randn(4)
        yield bk.Case("double", "n4", lambda: a * 2, flops=4)
    bk.KERNEL_CASES.append(provider)
    try:
        cases = bk.collect_cases(bk.BenchContext(batches=(2,)), only="double")
        assert [c.kernel for c in cases] == ["double"]
        rows = bk.run_cases(cases, threads=1, peak_gflops=1.0, bandwidth_gbs=1.0, quick=True)
        assert rows[0]["gflops"] > 0 and rows[0]["numpy_ms"] is None
        assert "double" in bk.format_table(rows)
    finally:
        bk.KERNEL_CASES.remove(provider)


def test_cpu_peak_arithmetic():
    from minips.kernels import cpuinfo
    info = cpuinfo.CPUInfo("test", "GenuineIntel", 2, "AVX2", 256, 2, 2.5, "given")
    assert info.flops_per_cycle == 32 and np.isclose(info.peak_gflops(2), 160.0)
    assert "8 lanes" in info.arithmetic() and "80.0 GFLOP/s" in info.arithmetic()
    assert cpuinfo._vector_width({"avx512f"}, "AuthenticAMD", 25) == ("AVX-512 on 256-bit units", 256)
    assert cpuinfo._vector_width({"avx512f"}, "GenuineIntel", 6)[1] == 512
    assert cpuinfo.detect().vector_bits in (128, 256, 512)


def test_only_that_matches_nothing_is_an_error_listing_the_kernels(capsys):
    rc = main(["bench", "kernels", "--threads", "1", "--batch", "2", "--only", "nothing_matches",
               "--no-torch", "--quick"])
    assert rc == 2
    captured = capsys.readouterr()
    assert "error: --only 'nothing_matches' matches no benchmark case" in captured.err
    assert "relu fwd" in captured.err and "conv2d" in captured.err
    assert "GFLOP/s" not in captured.out  # no empty table
