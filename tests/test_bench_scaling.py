"""bench scaling: argument checks, and a tiny smoke run (mlp, ranks 1 and 2, a few steps)."""
import argparse
import json
import math
import shutil
import sys

import pytest

from minips.bench import scaling
from minips.bench.scaling import ScalingError, parse_algos, parse_ranks

from .conftest import ROOT, run_cli


def test_parse_ranks_and_algos():
    assert parse_ranks("2,1,4,2") == [1, 2, 4]
    for bad, msg in (("0", "must be >= 1"), ("1,-2", "must be >= 1"), ("a", "comma-separated integers"),
                     ("", "empty")):
        with pytest.raises(ScalingError, match=msg):
            parse_ranks(bad)
    a = parse_algos("sync,pseudo-sync,pseudo-sync:last:2")
    assert [e["label"] for e in a] == ["sync", "pseudo-sync", "pseudo-sync:last:2"]
    assert [e["algo"] for e in a] == ["sync", "pseudo-sync", "pseudo-sync:last:2"]  # specs go to train as written
    for bad in ("gossip", "sync:last", "", "pseudo-sync:staleness=0"):
        with pytest.raises(ScalingError):
            parse_algos(bad)


def test_missing_mpiexec_is_a_clear_error(monkeypatch, tmp_path):
    """One helper finds mpiexec for every bench (minips.bench.launch); each bench
    turns its error into its own, with the fix."""
    from minips.bench import launch
    from minips.bench import train as btrain
    from minips.bench.train import TrainBenchError
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert launch.find_mpiexec() is None
    with pytest.raises(launch.MpiexecNotFound, match="mpiexec not found"):
        launch.require_mpiexec()
    with pytest.raises(ScalingError, match="mpiexec not found"):
        scaling.measure(None, [], [], tmp_path)
    args = argparse.Namespace(against="none", ranks="1", batch_size="4", workloads="convnet", steps=1, chunk=1,
                              warmup=0, threads=1, bind=True, timeout=200, json=str(tmp_path / "t.json"))
    with pytest.raises(TrainBenchError, match="mpiexec not found"):
        btrain.run(args)


def test_bad_ranks_from_the_command_line():
    r = run_cli(["bench", "scaling", "--ranks", "0"], timeout=60)
    assert r.returncode == 2 and "rank counts must be >= 1" in r.stderr and "Traceback" not in r.stderr


def test_a_missing_or_foreign_json_is_named_with_its_flag(tmp_path):
    """--from-json / --comm-json printed bare exception text ("[Errno 2] ...", "'measured'")."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": 3}')
    text = tmp_path / "t.json"
    text.write_text("not json")
    cases = [(["--from-json", str(tmp_path / "nope.json")], "--from-json", "no such file"),
             (["--from-json", str(bad)], "--from-json", "no 'measured' key"),
             (["--from-json", str(text)], "--from-json", "not a JSON file"),
             (["--from-json", str(ROOT / "docs/bench/scaling-real-t3.json"), "--comm-json", str(bad)],
              "--comm-json", "no 'fit' key")]
    for argv, flag, why in cases:
        r = run_cli(["bench", "scaling", *argv, "--out", str(tmp_path / "o")], timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith(f"error: {flag} ") and why in line, line


@pytest.mark.mpi
def test_bench_scaling_smoke(tmp_path):
    js = tmp_path / "s.json"
    r = run_cli(["bench", "scaling", "--model", "mlp", "--ranks", "1,2", "--algos", "sync,pseudo-sync:last",
                 "--steps", "8", "--repeats", "1", "--batch-size", "64", "--out", str(tmp_path / "runs"),
                 "--project-networks", "ib-edr,1gbe", "--project-max", "128", "--json", str(js),
                 "--plot", str(tmp_path / "m.png"), "--plot-projection", str(tmp_path / "p.png")], timeout=240)
    assert r.returncode == 0, r.stderr
    res = json.loads(js.read_text())
    rows = {(m["label"], m["P"]): m for m in res["measured"]}
    assert set(rows) == {("sync", 1), ("sync", 2), ("pseudo-sync:last", 1), ("pseudo-sync:last", 2)}
    assert rows[("sync", 1)]["efficiency"] == 1.0 and rows[("sync", 2)]["efficiency"] > 0
    assert rows[("sync", 2)]["comm_alone_s"] > 0
    assert {c["label"] for c in res["model_check"]} == {"sync", "pseudo-sync:last"}
    edr = res["projection"]["ib-edr"]["algos"]
    assert edr["sync"]["P"] == [1, 2, 4, 8, 16, 32, 64, 128] and edr["sync"]["efficiency"][0] == 1.0
    assert res["grad_bytes"] > 0 and 4 * sum(math.prod(s) for s in res["shapes"]) == res["grad_bytes"]
    assert (tmp_path / "m.png").stat().st_size > 1000 and (tmp_path / "p.png").stat().st_size > 1000
    assert "weak" not in r.stderr and "projected E(P)" in r.stdout
    # the model and plots again from the JSON, running nothing
    r = run_cli(["bench", "scaling", "--from-json", str(js), "--project-networks", "10gbe", "--out",
                 str(tmp_path / "again")], timeout=60)
    assert r.returncode == 0, r.stderr
    assert "10 GbE" in r.stdout and "predicted vs measured" in r.stdout


def test_superlinear_weak_scaling_is_flagged_as_noise():
    from minips.bench.scaling.tables import print_measured

    zero = {"forward": 0.01, "backward": 0.01, "post": 0.0, "wait": 0.0, "predict": 0.0, "update": 0.0}
    rows = [{"label": "sync", "P": P, "step_time_s": t, "images_per_s": 32 * P / t, "efficiency": e,
             "time_breakdown": zero} for P, t, e in ((1, 0.040, 1.0), (2, 0.020, 2.0))]
    out = []
    print_measured(rows, out.append)
    assert any("warning: E(P) > 1.05 for sync at P = 2" in line for line in out)
    rows[1].update(step_time_s=0.041, efficiency=0.98)
    out.clear()
    print_measured(rows, out.append)
    assert not any("warning" in line for line in out)


def test_projection_of_every_family_from_a_committed_measurement(tmp_path):
    """--project-also all adds every registered algorithm that was not measured
    (default options) to the projection; the figure then has one row of panels
    per family. Runs nothing: the measurement is a committed JSON."""
    from pathlib import Path

    from minips.distributed.algorithms import ALGORITHMS

    src = Path(__file__).resolve().parents[1] / "docs" / "bench" / "scaling-real-t3.json"
    js, png = tmp_path / "all.json", tmp_path / "all.png"
    r = run_cli(["bench", "scaling", "--from-json", str(src), "--project-also", "all", "--project-networks",
                 "ib-edr,1gbe", "--project-max", "1024", "--json", str(js), "--plot-projection", str(png),
                 "--out", str(tmp_path / "runs")], timeout=120)
    assert r.returncode == 0, r.stderr
    # the tables beside --json, not in --out (runs/scaling: it may hold a measured run's own tables)
    assert "projected E(P)" in (tmp_path / "all.txt").read_text()
    assert not (tmp_path / "runs" / "scaling.txt").exists()
    assert f"wrote {js} (everything) and {tmp_path / 'all.txt'} (these tables)" in r.stdout
    res = json.loads(js.read_text())
    projected = set(res["projection"]["1gbe"]["algos"])
    names = {a.split(":")[0] for a in projected}
    assert names == set(ALGORITHMS)                     # every registered algorithm, once measured or projected
    assert set(res["project_also"]) == set(ALGORITHMS) - {m["algo"].split(":")[0] for m in res["measured"]}
    assert res["projection"]["1gbe"]["algos"]["sync"]["P"][-1] == 1024
    assert png.stat().st_size > 20000
    from minips.bench.scaling import project_also
    assert project_also("sync,d-psgd", res["measured"]) == ["sync", "d-psgd"]
    with pytest.raises(ScalingError):
        project_also("no-such-algorithm", res["measured"])


def test_a_projected_spec_that_names_a_measured_algorithm_keeps_its_measured_predictor_cost():
    """`pseudo-sync:predictor=adaptive:staleness=1` is the measured `pseudo-sync:adaptive` written
    another way: the projection charges it the measured predictor (throughput below sync's on one node),
    not the free step of an unmeasured spec. Runs nothing: the measurement is a committed JSON."""
    from pathlib import Path

    from minips.bench.scaling import projection
    from minips.bench.scaling.model import grad_layout

    src = Path(__file__).resolve().parents[1] / "docs" / "bench" / "scaling-real-t3.json"
    res = json.loads(src.read_text())
    also = ["pseudo-sync:predictor=adaptive:staleness=1", "pseudo-sync:predictor=last:staleness=1"]
    grad_bytes, shapes = grad_layout(res["config"]["model"], res["config"]["data"])
    assert grad_bytes == res["grad_bytes"]
    out = projection(res["measured"], grad_bytes, shapes, ["1gbe"], [1, 64], 0.0, also)
    algos = out["1gbe"]["algos"]
    for spec, measured in zip(also, ("pseudo-sync:adaptive", "pseudo-sync:last")):
        assert algos[spec]["vs_baseline_1"] == pytest.approx(algos[measured]["vs_baseline_1"])
    assert algos[also[0]]["vs_baseline_1"][0] < 0.9  # AESP's ~4 ms on a ~25 ms step
