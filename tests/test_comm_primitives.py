"""The communication primitives of ``Comm``: allgatherv, neighbour exchange,
sendrecv/iexchange, (i)bcast, scalar reductions; their one-rank fallback, their
read-only locks, byte counters and alpha-beta times.

The MPI tests launch ``tests/mpi_primitives_worker.py`` once per P (2, 3, 4),
which runs every check and writes one JSON file per rank; the expected values
are computed here, independently of ``minips.distributed.comm``.
"""
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minips.distributed import costmodel
from minips.distributed.comm import Comm, NeighborGraph
from minips.distributed.costmodel import NETWORKS, NetworkModel

from .conftest import ROOT, subprocess_env
from .mpi_primitives_worker import agv_len, graph_edges, node_value, weight

WORKER = str(Path(__file__).with_name("mpi_primitives_worker.py"))

# Binomial-tree children per rank relative to the root (MPICH's tree), by hand.
BCAST_CHILDREN = {2: [1, 0], 3: [2, 0, 0], 4: [2, 0, 1, 0]}


def run_worker(P, mode, tmp_path, timeout=60):
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:  # pragma: no cover - the mpi extra installs it
        pytest.fail("mpiexec not found: pip install -e '.[mpi,test]'", pytrace=False)
    return subprocess.run([mpiexec, "-n", str(P), sys.executable, WORKER, mode, str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=timeout, env=subprocess_env(),
                          cwd=ROOT)


def expected_bytes_sent(P, r):
    """Bytes rank r sends in the worker's check_all, from the documented conventions."""
    agv = [agv_len(j) for j in range(P)]
    allgatherv = sum(isz * (sum(agv) - agv[(r + 1) % P]) for isz in (4, 8))  # ring: all but the successor's
    remote_out = sum(1 for i, j in graph_edges(P) if i == r and j != r)
    neighbor = remote_out * 5 * 8 * 2  # two exchanges of 5 x 8 bytes
    sendrecv = 2 * P * 3 * 8  # every step a 3 x int64 message to another rank
    exchange = sum(4 * 2 for step in range(2 * P) if (step - r) % P != r)  # self-exchanges are free
    bcast = BCAST_CHILDREN[P][(r - (P - 1)) % P] * 6 * 4 + BCAST_CHILDREN[P][r] * 4 * 2
    scalars = 6 * (2 * (P - 1) * 8 // P)
    allreduce = 2 * (P - 1) * 40 // P
    return {"allgatherv": allgatherv, "neighbor_allgather": neighbor, "sendrecv": sendrecv,
            "exchange": exchange, "bcast": bcast, "allreduce_scalar": scalars, "allreduce": allreduce}


@pytest.mark.mpi(ranks=4)
@pytest.mark.parametrize("P", [2, 3, 4])
def test_every_primitive_on_P_ranks(P, tmp_path):
    proc = run_worker(P, "all", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(P)]
    check_results(P, res)
    # virtual ranks (threads of this process) receive and count exactly what MPI's ranks did
    got = virtual_results(P)
    for r in range(P):
        for key in res[r]:
            if key == "stats":  # how often a rank polled depends on timing
                assert {k: v for k, v in got[r][key].items() if k != "progress_calls"} == \
                    {k: v for k, v in res[r][key].items() if k != "progress_calls"}
            elif key != "emulated":  # virtual ranks do not sleep: only the modelled times are the same
                assert got[r][key] == res[r][key], (r, key)


def virtual_results(P):
    """The worker's checks on P virtual ranks, its results as JSON reads them."""
    from minips.distributed.comm import get_comm, virtual

    from .mpi_primitives_worker import check_all, check_thread_progress

    def rank():
        c = get_comm()
        res = {"rank": c.rank, "size": c.size}
        check_all(c, res)
        check_thread_progress(c, res)
        res["pending_end"] = c.pending()
        res["describe"] = get_comm(network="1gbe").describe()
        get_comm(network=None)
        return json.loads(json.dumps(res))
    return virtual.run(P, rank)


@pytest.mark.parametrize("P", [2, 3, 4])
def test_every_primitive_on_P_virtual_ranks(P):
    res = virtual_results(P)
    check_results(P, res, emulated=False)
    assert all("VIRTUAL ranks" in o["describe"] and "MODELLED" in o["describe"] for o in res)


def check_results(P, res, emulated=True):
    """What every rank of the worker must have received and counted."""
    edges = graph_edges(P)
    W = np.zeros((P, P))
    for i, j in edges:  # i sends to j, so row j mixes x_i with weight(j, i)
        W[j, i] = weight(j, i)
    X = np.stack([node_value(j) for j in range(P)])
    WX = W @ X
    assert any(sum(1 for e in edges if e[0] == r) != sum(1 for e in edges if e[1] == r) for r in range(P))

    agv_f32 = [[100.0 * j + k for k in range(agv_len(j))] for j in range(P)]
    for r, out in enumerate(res):
        # allgatherv: rank order, per-rank lengths (an empty one), two dtypes
        assert out["agv_f32"] == agv_f32
        assert out["agv_i64"] == [[-v for v in row] for row in agv_f32]
        assert out["agv_dtypes"] == ["int64"] and out["agv_locked"] and out["agv_unlocked"]
        assert "rank 0: float64, rank 1: float32" in out["dtype_error"] and "astype" in out["dtype_error"]
        assert (f"rank(s) [{P - 1}]" in out["shape_error"] if r != P - 1
                else "expects a 1-D array" in out["shape_error"] and "ravel" in out["shape_error"])

        # neighbour exchange: rows in the order of the sources, weighted sum = W @ X
        sources = sorted((i for i, j in edges if j == r), reverse=True)
        np.testing.assert_array_equal(out["rows"], X[sources])
        np.testing.assert_array_equal(out["mix"], WX[r])
        np.testing.assert_array_equal(out["imix"], WX[r])
        assert out["degrees"] == [len(sources), sum(1 for e in edges if e[0] == r)]
        assert out["nb_locked"]
        assert out["graph_error"].startswith("graph: the graph differs between ranks: "
                                             f"rank 0 sends to {P - 1} but rank {P - 1} does not list 0")

        # point to point: the peer changed every step, the data are the peer's
        for step in range(2 * P):
            s = 1 + step % (P - 1)
            assert out["sendrecv"][step] == [1000 * ((r - s) % P) + step] * 3
            assert out["exchange"][step] == [1000 * ((step - r) % P) + step] * 2
        assert len(set(out["peers"])) == P and out["ex_locked"]

        assert out["bcast"] == list(range(6)) and out["ibcast"] == list(range(4)) and out["ibcast_locked"]
        assert out["scalars"] == [P * (P + 1) // 2, P, 1] and out["iscalars"] == [P * (P + 1) / 2, P, 1]
        assert out["allreduce"] == [P * (P - 1) / 2] * 10
        assert out["thread_agv"] == [[j] * agv_len(j) for j in range(P)]
        assert out["thread_exchange"] == [P - 1 - r]
        assert out["pending"] == 0 and out["pending_end"] == 0

        # byte counters follow the documented conventions
        want = expected_bytes_sent(P, r)
        got = {k[:-5]: v for k, v in out["stats"].items() if k.endswith("_sent")}
        assert got == want, (r, got, want)
        assert out["bytes_sent"] == sum(want.values())
        assert out["stats"]["allgatherv_calls"] == 2 and out["stats"]["exchange_calls"] == 2 * P
        assert out["stats"]["allreduce_calls"] == 1 and out["stats"]["allreduce_bytes"] == 40

        # emulated 1 GbE: no request completes before post time + its modelled time
        for name, (early, took, modelled) in (out["emulated"].items() if emulated else ()):
            assert not early or modelled == 0, (r, name)
            assert took >= modelled - 1e-9, (r, name, took, modelled)
    # every rank received each allgathered block: the ring's total traffic is (P-1) * sum
    agv_total = sum(4 * agv_len(j) + 8 * agv_len(j) for j in range(P))
    assert sum(o["stats"]["allgatherv_sent"] for o in res) == (P - 1) * agv_total
    assert sum(o["stats"]["bcast_sent"] for o in res) == (P - 1) * (24 + 8)


@pytest.mark.mpi
def test_a_graph_that_differs_between_ranks_ends_the_job(tmp_path):
    proc = run_worker(2, "bad-graph", tmp_path, timeout=60)
    assert proc.returncode != 0
    assert "the graph differs between ranks: rank 0 sends to 1 but rank 1 does not list 0" in proc.stderr
    assert "pass the same graph on every rank" in proc.stderr


# --- one rank, no MPI -------------------------------------------------------------------

def one_rank(**kw):
    return Comm(progress="none", **kw)


def test_one_rank_fallback_of_every_primitive():
    c = one_rank()
    x = np.arange(5, dtype=np.int64)
    parts = c.allgatherv(x)
    assert len(parts) == 1 and parts[0].tolist() == x.tolist() and not np.shares_memory(parts[0], x)
    assert c.allgatherv(np.zeros(0, np.float16))[0].shape == (0,)
    assert c.gather_obj({"step": 3}) == [{"step": 3}]
    g = c.graph([0], [0], weights=[0.5])
    assert isinstance(g, NeighborGraph) and g.mpi is None and (g.remote_in, g.remote_out) == (0, 0)
    y = np.ones((2, 3), np.float32)
    rows = c.neighbor_allgather(g, y)
    assert rows.shape == (1, 2, 3) and np.array_equal(rows[0], y) and g.weights.dtype == np.float64
    empty = c.graph([], [])
    assert c.neighbor_allgather(empty, y).shape == (0, 2, 3)
    got = c.sendrecv(x, 0, 0)
    assert got.tolist() == x.tolist() and not np.shares_memory(got, x)
    recv = np.empty_like(x)
    assert c.sendrecv(x, 0, 0, recv=recv) is recv
    b = np.arange(3.0)
    c.bcast(b)
    assert c.allreduce_scalar(3, "max") == 3
    assert c.pending() == 0 and c.bytes_sent == 0
    assert c.stats["allgatherv_calls"] == 2 and c.stats["neighbor_allgather_bytes"] == 48


def test_one_rank_nonblocking_results_locks_and_progress():
    c = one_rank()
    x, y, z = np.arange(4, dtype=np.int32), np.ones(3), np.arange(2.0)
    b = np.arange(3, dtype=np.uint8)
    reqs = [c.iallgatherv(x), c.ineighbor_allgather(c.graph([0], [0]), y), c.iexchange(z, 0), c.ibcast(b),
            c.iallreduce_scalar(2.5, "sum")]
    assert c.pending() == 5 and all(r.result is None for r in reqs)
    for a in (x, y, z, b):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 1
    with pytest.raises(RuntimeError, match="still in flight"):
        c.ibcast(b)
    assert c.progress() == 0 and c.pending() == 0  # one rank: complete at the first test
    assert all(a.flags.writeable for a in (x, y, z, b))
    assert reqs[0].result[0].tolist() == [0, 1, 2, 3]
    assert reqs[1].result.shape == (1, 3) and reqs[2].result.tolist() == [0.0, 1.0]
    assert reqs[3].result is b and reqs[4].result == 2.5


def test_two_requests_sharing_an_array_keep_it_read_only_until_both_complete():
    c = one_rank()
    x = np.arange(4.0)
    r1, r2 = c.iexchange(x, 0), c.iallgatherv(x)
    r1.wait()
    assert not x.flags.writeable
    r2.wait()
    assert x.flags.writeable
    frozen = np.arange(3.0)
    frozen.flags.writeable = False  # read-only for another reason: stays so
    c.iexchange(frozen, 0).wait()
    assert not frozen.flags.writeable


def test_clear_errors_name_the_fix():
    c = one_rank()
    with pytest.raises(ValueError, match=r"1-D array.*ravel"):
        c.allgatherv(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"numpy array.*np.asarray"):
        c.allgatherv([1, 2])
    with pytest.raises(ValueError, match="numeric dtype"):
        c.allgatherv(np.array(["a"]))
    with pytest.raises(ValueError, match=r"rank 0: sources lists rank 1, outside 0..0"):
        c.graph([1], [0])
    with pytest.raises(ValueError, match="lists a rank twice"):
        c.graph([0, 0], [0])
    with pytest.raises(ValueError, match="one weight per source"):
        c.graph([0], [0], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="differs between ranks: rank 0 sends to 0 but rank 0 does not list 0"):
        c.graph([], [0])
    with pytest.raises(TypeError, match="NeighborGraph from comm.graph"):
        c.neighbor_allgather(([0], [0]), np.ones(2))
    with pytest.raises(ValueError, match=r"dest = 1 is not a rank of this job \(0..0\)"):
        c.sendrecv(np.ones(2), 1, 0)
    with pytest.raises(TypeError, match="shape .* and dtype"):
        c.sendrecv(np.ones(2), 0, 0, recv=np.ones(3))
    with pytest.raises(ValueError, match="unknown reduction 'mean'; choose one of sum, max, min"):
        c.allreduce_scalar(1.0, "mean")


# --- alpha-beta times and byte conventions, by hand ---------------------------------------

def test_primitive_times_hand_computed():
    a, b = 1e-6, 1e-9  # 1 us, 1 ns/byte
    # ring allgatherv: (P-1)(alpha + max block beta); 4 ranks, blocks 1e6, 0, 5e5, 2e6 bytes
    assert costmodel.ring_allgatherv_time([1e6, 0, 5e5, 2e6], a, b) == pytest.approx(3 * (1e-6 + 2e-3))
    # equal blocks n/P: Thakur et al.'s (P-1) alpha + (P-1)/P n beta; n = 4e6, P = 4
    assert costmodel.ring_allgatherv_time([1e6] * 4, a, b) == pytest.approx(3e-6 + 0.75 * 4e6 * 1e-9)
    assert costmodel.ring_allgatherv_time([123], a, b) == 0.0
    # neighbour exchange: degree (alpha + n beta); 3 neighbours, 1e5 bytes
    assert costmodel.neighbor_exchange_time(1e5, 3, a, b) == pytest.approx(3 * (1e-6 + 1e-4))
    assert costmodel.neighbor_exchange_time(1e5, 0, a, b) == 0.0
    # one message
    assert costmodel.message_time(1e6, a, b) == pytest.approx(1.001e-3)
    # binomial bcast: ceil(log2 P) (alpha + n beta); P = 5 -> 3 rounds, P = 8 -> 3, P = 1 -> 0
    assert costmodel.binomial_bcast_time(1e6, 5, a, b) == pytest.approx(3 * 1.001e-3)
    assert costmodel.binomial_bcast_time(1e6, 8, a, b) == pytest.approx(3 * 1.001e-3)
    assert costmodel.binomial_bcast_time(1e6, 1, a, b) == 0.0
    # the NetworkModel methods are the same functions; 1 GbE is 50 us, 8 ns/byte
    net = NETWORKS["1gbe"]
    assert net.message_time(1e6) == pytest.approx(50e-6 + 8e-3)
    assert net.bcast_time(1e6, 4) == pytest.approx(2 * (50e-6 + 8e-3))
    assert net.neighbor_time(1e6, 2) == pytest.approx(2 * (50e-6 + 8e-3))
    assert net.allgatherv_time([1e6, 1e6]) == pytest.approx(50e-6 + 8e-3)
    assert net.allreduce_time(4e6, 2) == pytest.approx(0.0321)  # unchanged
    for bad in (lambda: costmodel.message_time(-1, a, b), lambda: costmodel.ring_allgatherv_time([], a, b),
                lambda: costmodel.binomial_bcast_time(1, 0, a, b), lambda: NetworkModel(-1, 0).message_time(1)):
        with pytest.raises(ValueError):
            bad()


def test_byte_conventions_hand_computed():
    assert costmodel.ring_allreduce_bytes_sent(1000, 4) == 1500  # 2 * 3/4 * 1000
    assert costmodel.ring_allreduce_bytes_sent(40, 3) == 53  # 2 * 2/3 * 40 = 53.3, rounded down
    assert costmodel.ring_allreduce_bytes_sent(1000, 1) == 0
    # ring allgatherv: rank r forwards every block but its successor's
    blocks = [10, 0, 30, 40]
    assert [costmodel.ring_allgatherv_bytes_sent(blocks, r) for r in range(4)] == [80, 50, 40, 70]
    assert costmodel.ring_allgatherv_bytes_sent([7], 0) == 0
    # binomial tree from root 0, P = 8: 0 -> 1, 2, 4; 2 -> 3; 4 -> 5, 6; 6 -> 7
    assert [costmodel.binomial_bcast_bytes_sent(1, 8, r) for r in range(8)] == [3, 0, 1, 0, 2, 0, 1, 0]
    assert [costmodel.binomial_bcast_bytes_sent(1, 3, r, root=2) for r in range(3)] == [0, 0, 2]
    assert math.ceil(math.log2(5)) == costmodel.binomial_bcast_bytes_sent(1, 5, 0)
