"""The hierarchical allreduce (minips/distributed/comm/hierarchical.py), the node
layout (--ranks-per-node, --allreduce) and the cost model over nodes of many ranks.

Most checks run on virtual ranks (in-process, cheap); the real-MPI checks
(the MPI-3 shared window, the emulated times, failures) launch mpiexec -n 4.
"""
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from minips.distributed import costmodel
from minips.distributed.comm import get_comm, virtual
from minips.distributed.costmodel import NETWORKS, SharedMemoryModel

from .conftest import ROOT, cli_on_ranks, run_ranks, subprocess_env

WORKER = ROOT / "tests" / "hier_worker.py"


def _check_sums(res, P):
    n = res["nbytes"]
    assert res["identical"], "ranks got different bits"
    assert res["hier_is_fixed_order"] and res["one_node_is_fixed_order"]
    assert res["big_is_tiled"] and res["threaded_equal"] and res["nonblocking_ok"]
    # both within float32 rounding of the exact sum (P terms: a few ulps of the sum of magnitudes)
    assert res["hier_err"] < P * 2**-23 and res["flat_err"] < P * 2**-23
    assert res["hier_vs_flat"] < 2 * P * 2**-23
    # bytes: every rank puts n into its node's window, the leaders (local rank 0) send 2(N-1)/N n = n to
    # the other node; flat ring: rank r sends 2(P-1)/P n to r+1, inter-node when r+1 is on the next node
    R = P // 2
    assert res["hier_bytes"] == [[n, n if r % R == 0 else 0] for r in range(P)]
    ring = 2 * (P - 1) * n // P
    assert res["flat_bytes"] == [[0, ring] if (r + 1) % R == 0 else [ring, 0] for r in range(P)]


@pytest.mark.parametrize("P", [4, 6])
def test_hierarchical_sum_on_virtual_ranks_is_fixed_order_identical_and_close_to_flat(tmp_path, P):
    out = tmp_path / "s.json"
    r = run_ranks(P, WORKER, "sums", str(out))
    assert r.returncode == 0, r.stderr
    _check_sums(json.loads(out.read_text()), P)


@pytest.mark.mpi(ranks=4)
def test_hierarchical_sum_under_mpiexec_uses_the_shared_window(tmp_path):
    out = tmp_path / "s.json"
    r = run_ranks(4, WORKER, "sums", str(out), mpi=True, timeout=120)
    assert r.returncode == 0, r.stderr
    _check_sums(json.loads(out.read_text()), 4)


@pytest.mark.mpi(ranks=4)
def test_emulation_charges_only_the_traffic_between_nodes(tmp_path):
    # 1 MiB on emulated 1 GbE, 2 nodes x 2: flat ring over 4 ranks T(n, 4) = 12.9 ms; hierarchical: the
    # leaders' ring over 2 nodes, T(n, 2) = 8.5 ms (the node stages are real shared memory, not charged)
    out = tmp_path / "e.json"
    r = run_ranks(4, WORKER, "emulated", str(out), mpi=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["flat_model"] == pytest.approx(12.88e-3, rel=1e-3) and res["hier_model"] == pytest.approx(8.49e-3,
                                                                                                          rel=1e-3)
    assert res["charged"]["flat"] == pytest.approx([res["flat_model"]] * 4, rel=1e-6)
    assert res["charged"]["hierarchical"] == pytest.approx([res["hier_model"]] * 4, rel=1e-6)
    # and the blocking calls do wait for it (lower bounds: the machine may add time, never remove it)
    assert res["times"]["flat"] >= res["flat_model"] and res["times"]["hierarchical"] >= res["hier_model"]


@pytest.mark.mpi(ranks=4)
@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_rank_dying_in_the_node_reduction_ends_the_job(tmp_path, how):
    r = run_ranks(4, WORKER, f"fail-{how}", str(tmp_path / "f.json"), mpi=True, timeout=60)
    assert r.returncode != 0
    if how == "raise":
        assert "injected failure in the node reduction on rank 3" in r.stderr
        assert "aborting all ranks" in r.stderr


def test_a_virtual_rank_failing_in_the_node_reduction_ends_the_job(tmp_path):
    r = run_ranks(4, WORKER, "fail-raise", str(tmp_path / "f.json"))
    assert r.returncode != 0
    assert "injected failure in the node reduction on rank 3" in r.stderr


def test_layout_auto_mode_and_errors():
    def probe():
        c = get_comm()
        seen = {}
        for rpn, net in ((2, None), (4, None), (1, None), (None, None), (None, "1gbe"), (2, "1gbe")):
            c.reconfigure(network=net, allreduce="auto", ranks_per_node=rpn)
            seen[(rpn, net)] = (c.hierarchical, c.nodes, c.node_of, c.node_size)
        c.reconfigure(allreduce="flat", ranks_per_node=2)
        seen["flat"] = c.hierarchical
        c.reconfigure(allreduce="hierarchical", ranks_per_node=4)
        seen["forced"] = (c.hierarchical, c.nodes)
        c.reconfigure(network="1gbe", ranks_per_node=4)
        seen["one node charges"] = c._modelled_seconds(4000)
        c.reconfigure(network="1gbe", ranks_per_node=2)
        seen["two nodes charge"] = c._modelled_seconds(4000)
        errors = []
        for bad in ({"ranks_per_node": 5}, {"ranks_per_node": 0}, {"allreduce": "tree"}):
            with pytest.raises(ValueError) as e:
                c.reconfigure(**bad)
            errors.append(str(e.value))
        c.reconfigure()
        return seen, errors
    seen, errors = virtual.run(4, probe)[0]
    assert seen[(2, None)] == (True, 2, (0, 0, 1, 1), 2)
    assert seen[(4, None)] == (False, 1, (0, 0, 0, 0), 4)      # one node: nothing to gain
    assert seen[(1, None)] == (False, 4, (0, 1, 2, 3), 1)      # a rank per node: nothing to reduce locally
    assert seen[(None, None)] == (False, 1, (0, 0, 0, 0), 4)   # the (virtual) machine: one node
    assert seen[(None, "1gbe")] == (False, 4, (0, 1, 2, 3), 1)  # the emulator's default: a node per rank
    assert seen[(2, "1gbe")][0] is True
    assert seen["flat"] is False and seen["forced"] == (True, 1)
    assert seen["one node charges"] == 0.0
    assert seen["two nodes charge"] == pytest.approx(NETWORKS["1gbe"].allreduce_time(4000, 4))
    assert "--ranks-per-node 5: give 1..4" in errors[0] and "give 1..4" in errors[1]
    assert "unknown allreduce 'tree'" in errors[2]


def test_a_node_whose_ranks_share_no_memory_is_refused():
    # the virtual machine has a node per rank; --ranks-per-node 2 would put two of them in one window
    def body():
        c = get_comm(allreduce="hierarchical", ranks_per_node=2)
        c.allreduce(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="do not all share memory"):
        virtual.run(4, body, ranks_per_node=1)


def test_training_hierarchical_equals_flat_and_keeps_replicas_identical(tmp_path):
    """4 ranks as 2 nodes x 2: sync, overlap-sync and pseudo-sync (a replicated predictor) with
    --check-replicas 1 (weight hashes compared every step) give the flat run's losses."""
    algos = "sync,overlap-sync:bucket-mb=0.05,pseudo-sync:predictor=adaptive"
    got = {}
    for mode in ("flat", "hierarchical"):
        out = tmp_path / mode
        r = cli_on_ranks(4, ["compare", "--model", "mlp", "--epochs", "1", "--max-steps", "6", "--algos", algos,
                             "--batch-size", "16", "--quiet", "--check-replicas", "1", "--ranks-per-node", "2",
                             "--allreduce", mode, "--no-figures", "--out", str(out)])
        assert r.returncode == 0, r.stderr
        got[mode] = {s: json.loads(p.read_text()) for s in algos.split(",")
                     for p in out.glob("*/summary.json") if json.loads(p.read_text())["algo_spec"] == s}
    for spec in algos.split(","):
        flat, hier = got["flat"][spec], got["hierarchical"][spec]
        assert (flat["allreduce"], hier["allreduce"]) == ("flat", "hierarchical")
        assert hier["nodes"] == 2 and hier["ranks_per_node"] == 2
        lf = [h["train_loss"] for h in flat["history"]]
        lh = [h["train_loss"] for h in hier["history"]]
        assert np.allclose(lh, lf, rtol=1e-5), (spec, lf, lh)
        # traffic: every step's gradient leaves the node once per node (n/2 per rank on average) instead of
        # 2(P-1)/P n on half the ranks (3n/4 per rank on average)
        assert hier["allreduce_inter_node_bytes_per_step"] < flat["allreduce_inter_node_bytes_per_step"]


# --- cost model ------------------------------------------------------------------------------
def test_cost_model_by_hand():
    net, shm = NETWORKS["10gbe"], SharedMemoryModel(2e-6, 50e9)
    n, R, N = 4e6, 24, 8
    P = N * R
    # node stages: 3 barriers + 3 passes over the node's R n bytes; leaders: ring over N nodes
    node = 3 * 2e-6 + 3 * R * n / 50e9
    ring_n = 2 * (N - 1) * 10e-6 + 2 * (N - 1) / N * n * 0.8e-9
    assert costmodel.hierarchical_allreduce_time(n, P, R, net, shm) == pytest.approx(node + ring_n)
    # flat: 2(P-1) steps, each the slower of the inter-node hop and R-1 hops through shared memory
    inter_hop = 10e-6 + n / P * 0.8e-9
    intra_hop = 2e-6 + (R - 1) * n / P / 50e9
    assert costmodel.flat_allreduce_time(n, P, R, net, shm) == pytest.approx(2 * (P - 1) * max(inter_hop, intra_hop))
    # one rank per node: the plain ring; one rank: nothing
    assert costmodel.flat_allreduce_time(n, 16, 1, net, shm) == pytest.approx(net.allreduce_time(n, 16))
    assert costmodel.hierarchical_allreduce_time(n, 16, 1, net, shm) == pytest.approx(net.allreduce_time(n, 16))
    assert costmodel.hierarchical_allreduce_time(n, 1, 4, net, shm) == 0.0
    # one node: flat is R hops through memory; hierarchical the node stages only
    assert costmodel.flat_allreduce_time(n, 4, 4, net, shm) == pytest.approx(6 * (2e-6 + 4 * n / 4 / 50e9))
    assert costmodel.hierarchical_allreduce_time(n, 4, 4, net, shm) == pytest.approx(3 * 2e-6 + 3 * 4 * n / 50e9)
    # latency: at 128 nodes x 96 ranks on a 1 us network, 2(P-1) vs 2(N-1) latencies
    tiny = NETWORKS["ib-edr"]
    flat0 = costmodel.flat_allreduce_time(0, 128 * 96, 96, tiny, shm)
    hier0 = costmodel.hierarchical_allreduce_time(0, 128 * 96, 96, tiny, shm)
    assert flat0 == pytest.approx(2 * (128 * 96 - 1) * 2e-6)  # the barrier (2 us) is the slower hop
    assert hier0 == pytest.approx(3 * 2e-6 + 2 * 127 * 1e-6)
    with pytest.raises(ValueError):
        SharedMemoryModel(1e-6, 0)


def test_projection_over_nodes_uses_the_path_and_ranks_per_node():
    from minips.labs.projection import StepProfile, project_nodes
    prof = StepProfile(forward=0.01, backward=0.01, grad_bytes=1e6)
    shm = SharedMemoryModel(1e-6, 100e9)
    rows = {path: project_nodes({"sync": prof}, "10gbe", [1, 64], 48, path, shm=shm)["sync"]
            for path in ("flat", "hierarchical")}
    for path, fn in (("flat", costmodel.flat_allreduce_time), ("hierarchical", costmodel.hierarchical_allreduce_time)):
        r = rows[path]
        assert r["P"] == [48, 64 * 48]
        for P, t, e, a in zip(r["P"], r["step_s"], r["efficiency"], r["comm_s"]):
            A = fn(1e6, P, 48, NETWORKS["10gbe"], shm)
            assert a == pytest.approx(A) and t == pytest.approx(0.02 + A) and e == pytest.approx(0.02 / (0.02 + A))
    assert rows["hierarchical"]["efficiency"][1] > rows["flat"]["efficiency"][1]


def test_bench_scaling_project_prints_flat_and_hierarchical_from_a_committed_measurement(tmp_path):
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, "-m", "minips", "bench", "scaling", "--from-json",
                        str(ROOT / "docs/bench/scaling-real-t2.json"), "--project", "--project-networks", "ib-edr",
                        "--project-ranks-per-node", "24,96", "--json", str(out)],
                       capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "E(64) = 93.4%" in r.stdout and "N=128" in r.stdout
    rows = json.loads(out.read_text())["node_projection"]["ib-edr"]["rows"]
    assert {(x["ranks_per_node"], x["allreduce"]) for x in rows} == {(24, "flat"), (24, "hierarchical"),
                                                                     (96, "flat"), (96, "hierarchical")}
    sync96 = {x["allreduce"]: x for x in rows if x["algo"] == "sync" and x["ranks_per_node"] == 96}
    assert sync96["flat"]["nodes"][-1] == 128 and sync96["flat"]["P"][-1] == 128 * 96
    assert math.isclose(sync96["hierarchical"]["comm_s"][-1], costmodel.hierarchical_allreduce_time(
        json.loads(out.read_text())["grad_bytes"], 128 * 96, 96, NETWORKS["ib-edr"]), rel_tol=1e-9)
    assert sync96["hierarchical"]["efficiency"][-1] > sync96["flat"]["efficiency"][-1]


@pytest.mark.mpi(ranks=4)
def test_bench_comm_measures_both_allreduces(tmp_path):
    out = tmp_path / "c.json"
    r = subprocess.run([shutil.which("mpiexec"), "-n", "4", sys.executable, "-m", "minips", "bench", "comm",
                        "--allreduce", "flat,hierarchical", "--ranks-per-node", "2", "--max-bytes", "1024",
                        "--iters", "5", "--no-overlap", "--json", str(out)],
                       capture_output=True, text=True, timeout=120, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["allreduce_modes"] == ["flat", "hierarchical"] and res["nodes"] == 2
    assert [res["modes"][m]["hierarchical"] for m in ("flat", "hierarchical")] == [False, True]
    assert len(res["modes"]["hierarchical"]["allreduce"]) == 8 and "hierarchical/flat" in r.stdout
