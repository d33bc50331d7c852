"""``python -m minips bench kernels`` runs, prints its table and writes JSON;
other modules can add cases. (No timing is asserted: benchmarks are not tests.)"""
import json

import numpy as np
import pytest

from minips.bench import kernels as bk
from minips.bench.kernels import breakdown
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


def test_vector_peak_probe_uses_every_width_the_cpu_has():
    """The probe runs one loop per vector width the CPU flags list (512 bits only
    with avx512f), and on x86 its FMA instructions name that width's registers."""
    import platform

    from minips.kernels import cpuinfo
    with open("/proc/cpuinfo") as f:
        flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith(("flags", "Features"))), [])
    assert "<16 x float>" in cpuinfo.fma_loop_ir(512) and "<8 x float>" in cpuinfo.fma_loop_ir(256)
    res = cpuinfo.measure_vector_peak(seconds=0.01)
    want = [128] + ([256] if "avx" in flags else []) + ([512] if "avx512f" in flags else [])
    assert sorted(res["gflops"]) == want
    assert all(g > 0 for g in res["gflops"].values())
    assert res["peak_gflops_per_core"] == max(res["gflops"].values())
    if platform.machine() == "x86_64":
        regs = {128: "%xmm", 256: "%ymm", 512: "%zmm"}
        for bits in want:
            assert res["verified"][bits] is True
            assert res["instruction"][bits].startswith("vfmadd") and regs[bits] in res["instruction"][bits]


def test_rows_above_the_peak_are_marked():
    row = dict(kernel="k", shape="s", numba_ms=1.0, numpy_ms=None, torch_ms=None, numba_over_torch=None,
               numpy_over_numba=None, gflops=120.0, gbs=None, bandwidth_fraction=None)
    lines = bk.format_table([dict(row, peak_fraction=1.2), dict(row, kernel="j", peak_fraction=0.5)]).splitlines()
    assert lines[2].startswith("*k") and lines[3].startswith("j")


def test_breakdown_times_every_stage_and_counts_bytes_by_hand(tmp_path, capsys):
    """``--breakdown``: one block per conv shape, the stages of the training path
    (direct forward for 1->32; im2col, three GEMMs and col2im for 32->64), and
    the byte and FLOP counts of _stage_work, worked out by hand for one shape."""
    from minips.kernels import conv
    out = tmp_path / "k.json"
    rc = main(["bench", "kernels", "--threads", "1", "--batch", "2", "--only", "conv2d fwd+bwd",
               "--no-torch", "--quick", "--breakdown", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "per-stage breakdown" in text and "floor ms" in text
    blocks = {b["shape"]: b for b in json.loads(out.read_text())["breakdown"]}
    assert len(blocks) == 5            # 3 shapes, and the direct forward of the two first layers
    first = {s["stage"] for s in blocks["N2 1->32 28x28 k3 +ReLU+pool2"]["stages"]}
    direct = {s["stage"] for s in blocks["N2 1->32 28x28 k3 +ReLU+pool2 direct fwd"]["stages"]}
    second = {s["stage"] for s in blocks["N2 32->64 14x14 k3 +ReLU+pool2"]["stages"]}
    assert {"patch build", "GEMM fwd", "epilogue fwd", "epilogue bwd", "GEMM dW"} <= first
    assert {"direct conv", "patch build", "GEMM dW"} <= direct and "GEMM fwd" not in direct
    assert not (first | direct) & {"GEMM dX", "col2im"}          # the first layer needs no dL/dx
    assert {"patch build", "GEMM fwd", "epilogue fwd", "epilogue bwd", "GEMM dW", "GEMM dX", "col2im"} <= second
    # a stage done block by block adds up to one pass of the layer's work
    passes = {s["stage"]: s["passes"] for s in blocks["N2 32->64 14x14 k3 +ReLU+pool2"]["stages"]}
    assert all(passes[k] == pytest.approx(1.0) for k in ("patch build", "GEMM fwd", "GEMM dX", "col2im"))
    for b in blocks.values():
        assert b["total_ms"] > 0 and all(s["ms"] >= 0 and s["floor_ms"] >= 0 for s in b["stages"])
    # N2, 32->64, 14x14, 3x3, padding 1: x 2*14*14*32 = 12544 values, y 2*14*14*64 = 25088,
    # cols 392 rows x 288 = 112896, weights 64*288 = 18432, pooled z 2*7*7*64 = 6272
    g = conv.geometry((2, 32, 14, 14), (64, 32, 3, 3), 1, 1)
    assert breakdown._stage_work(g, "patch build", True, 4) == ((12544 + 112896) * 4, 0)
    assert breakdown._stage_work(g, "GEMM fwd", True, 4) == ((112896 + 18432 + 25088) * 4, 2 * 25088 * 288)
    assert breakdown._stage_work(g, "epilogue fwd", True, 4) == ((25088 + 6272) * 4 + 6272 * 4, 0)
    assert breakdown._stage_work(g, "col2im", True, 4) == ((112896 + 12544) * 4, 0)
