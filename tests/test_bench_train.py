"""bench train: option checks, the same network in minips and PyTorch, and tiny
runs (1 and 2 ranks, one timed step) with and without PyTorch. No timing asserts."""
import argparse
import json

import numpy as np
import pytest

from minips.bench import train as btrain
from minips.bench import train_worker as w

from .conftest import run_cli


def _args(**kw):
    a = dict(against="none", ranks="1", batch_size="4", workloads="convnet", steps=1, chunk=1, warmup=0,
             threads=1, bind=True, timeout=200, json=None)
    a.update(kw)
    return argparse.Namespace(**a)


def test_bad_options_are_one_line_errors():
    r = run_cli(["bench", "train", "--ranks", "0"], timeout=60)
    assert r.returncode == 2 and "--ranks '0'" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for kw, msg in ((dict(batch_size="x"), "--batch-size"), (dict(workloads="resnet"), "choose from convnet, lstm"),
                    (dict(steps=0), "--steps"), (dict(warmup=-1), "--warmup")):
        with pytest.raises(btrain.TrainBenchError, match=msg):
            btrain.run(_args(**kw))


@pytest.mark.parametrize("workload", ["convnet", "lstm"])
def test_the_same_network_in_both(workload):
    """Equal trainable parameter counts, and equal outputs from the copied weights
    (eval mode: no dropout), against an independent float64 computation of the
    first layer's output for the ConvNet."""
    torch = pytest.importorskip("torch")
    from minips import random as mrandom
    from minips.tensor import Tensor
    mrandom.seed(0)
    model, _ = w.minips_net(workload)
    net, _ = w.torch_net(workload, torch, model)
    assert w.count_params(model) == w.count_params(net) > 0
    x, _ = w.make_batches(workload, 3, rank=0, n=1)[0]
    model.eval()
    net.eval()
    with torch.no_grad():
        out_t = net(torch.from_numpy(x)).numpy()
    if workload == "convnet":
        out_m = model(Tensor(x)).data
        # first convolution in plain float64 NumPy, compared with torch's first layer
        c1 = model.features[0]
        wt, b = c1.weight.data.astype(np.float64), c1.bias.data.astype(np.float64)
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        ref = b[None, :, None, None] + sum(np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 28, s:s + 28], wt[:, :, r, s])
                                           for r in range(3) for s in range(3))
        with torch.no_grad():
            np.testing.assert_allclose(net[0](torch.from_numpy(x)).numpy(), ref, rtol=1e-4, atol=1e-4)
    else:
        from minips import ops
        h, _ = model.lstm(Tensor(x))
        out_m = model.out(ops.reshape(h, (-1, w.LSTM_H))).data
    assert out_m.shape == out_t.shape
    np.testing.assert_allclose(out_m, out_t, rtol=1e-3, atol=1e-4)


def _check_schema(res, ranks, torch_compared):
    assert res["torch_compared"] is torch_compared
    for k in ("cpu", "cores", "simd", "vector_bits_isa", "vector_bits_datapath", "numpy", "numba"):
        assert k in res["machine"]
    assert [p["ranks"] for p in res["points"]] == ranks
    for pt in res["points"]:
        assert len(pt["affinity_per_rank"]) == pt["ranks"] and pt["threads"] == 1
        assert len(pt["load_before"]) == 3 and len(pt["load_after"]) == 3
        assert pt["threading_layer"]
        for r in pt["rows"]:
            assert r["ranks"] == pt["ranks"]
            impls = ["minips", "torch"] if torch_compared else ["minips"]
            assert sorted(r["params"]) == sorted(impls)
            assert len(set(r["params"].values())) == 1           # same parameter count
            for k in impls:
                assert r[k]["step_ms_median"] > 0 and r[k]["cpu_ms_median"] > 0
                assert r[k]["samples_per_s"] == pytest.approx(
                    r["batch_per_rank"] * r["ranks"] * 1e3 / r[k]["step_ms_median"])
            assert ("ratio_minips_over_torch_time" in r) is torch_compared
            assert r["flops_per_sample"] > 0 and all(r[k]["fraction_of_sgemm"] > 0 for k in impls)


@pytest.mark.mpi
def test_bench_train_with_torch_one_and_two_ranks(tmp_path):
    pytest.importorskip("torch")
    js = tmp_path / "t.json"
    r = run_cli(["bench", "train", "--against", "torch", "--ranks", "1,2", "--batch-size", "4", "--steps", "1",
                 "--chunk", "1", "--warmup", "1", "--json", str(js)], timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(js.read_text())
    _check_schema(res, [1, 2], True)
    assert {(r["workload"], r["ranks"]) for p in res["points"] for r in p["rows"]} == {
        ("convnet", 1), ("lstm", 1), ("convnet", 2), ("lstm", 2)}
    assert "time ratio" in r.stdout and "note:" not in r.stdout


@pytest.mark.mpi
def test_bench_train_without_torch_prints_minips_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(btrain, "_torch_available", lambda: False)
    js = tmp_path / "n.json"
    assert btrain.run(_args(against="torch", json=str(js))) == 0
    out = capsys.readouterr().out
    assert "PyTorch is not installed: minips timed alone" in out
    _check_schema(json.loads(js.read_text()), [1], False)


def test_bind_args_give_a_rank_of_t_threads_t_cores():
    from minips.bench.launch import bind_args
    assert bind_args(2, 1, 2) == ["-bind-to", "core"]
    assert bind_args(1, 2, 2) == ["-bind-to", "core:2"]  # was "core": 2 threads on 1 core, 10-20x slower
    assert bind_args(2, 2, 2) == []                       # 4 threads on 2 cores: binding would stack them
    assert bind_args(1, 1, 2, bind=False) == []


@pytest.mark.mpi
def test_a_rank_of_two_threads_is_bound_to_two_cores():
    """What mpiexec does with the flags: a rank of 2 threads sees 2 cores."""
    import os
    import subprocess
    import sys

    from minips.bench.launch import bind_args, find_mpiexec
    if (os.cpu_count() or 1) < 2 or len(os.sched_getaffinity(0)) < 2:
        pytest.fail("this check needs 2 cores; the suite's machine has them")
    mpiexec = find_mpiexec()
    assert mpiexec, "mpiexec missing: pip install -e '.[mpi]'"
    cmd = [mpiexec, "-n", "1", *bind_args(1, 2, 2), sys.executable, "-c",
           "import os; print(len(os.sched_getaffinity(0)))"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "2"
