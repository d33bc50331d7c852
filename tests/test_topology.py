"""Topologies and mixing matrices (minips.distributed.topology), against hand
computations and the properties gossip relies on."""
import numpy as np
import pytest

from minips.distributed.topology import TOPOLOGIES, make_topology, metropolis_weights, spectral_gap

POW2 = (2, 4, 8, 16)


CASES = [(name, P) for name in sorted(TOPOLOGIES) for P in (1, 2, 3, 4, 8, 16)
         if name != "one-peer-exponential" or P in (1, *POW2)]  # powers of two only (its error: below)


@pytest.mark.parametrize("name,P", CASES)
def test_mixing_preserves_the_mean_and_converges(name, P):
    top = make_topology(name, P, **({"seed": 3} if name == "random-geometric" else {}))
    W = top.W
    assert np.allclose(W.sum(axis=0), 1.0)          # column stochastic: the sum (so the mean) is kept
    assert (W >= 0).all()
    if not top.directed:
        assert np.allclose(W, W.T) and np.allclose(W.sum(axis=1), 1.0)
    x = np.random.default_rng(0).normal(size=(P, 5))
    y = x.copy()
    for t in range(2000):
        y = top.at(t).W @ y
    assert np.allclose(y.mean(axis=0), x.mean(axis=0))
    assert np.allclose(y, x.mean(axis=0), atol=1e-6)  # connected: gossip reaches the average


def test_hand_computed_cases():
    W = make_topology("ring", 5).W
    assert np.allclose([W[0, 0], W[0, 1], W[0, 4]], 1 / 3) and W[0, 2] == 0
    # ring of P: eigenvalues 1/3 + 2/3 cos(2 pi k / P); lambda_2 = 1/3 + 2/3 cos(2 pi / P)
    assert make_topology("ring", 8).spectral_gap() == pytest.approx(1 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / 8)))
    assert make_topology("complete", 6).spectral_gap() == pytest.approx(1.0)
    assert np.allclose(make_topology("complete", 4).W, 0.25)
    # a path 0-1-2: degrees 1, 2, 1 -> W_01 = W_12 = 1/3, W_00 = 2/3, W_11 = 1/3
    path = metropolis_weights(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]]))
    assert np.allclose(path, [[2 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3], [0, 1 / 3, 2 / 3]])
    assert spectral_gap(path) == pytest.approx(1 - 2 / 3)   # eigenvalues 1, 2/3, 0
    t = make_topology("torus", 12)   # 3 x 4: four neighbours each
    assert [t.degree(i) for i in range(12)] == [4] * 12


def test_one_peer_exponential_averages_exactly_in_log2_P_steps():
    top = make_topology("one-peer-exponential", 8)
    prod = np.eye(8)
    for t in range(3):
        Wt = top.at(t).W
        assert [len(top.at(t).out_neighbors(i)) for i in range(8)] == [1] * 8
        assert Wt[5, (5 - 2 ** t) % 8] == 0.5
        prod = Wt @ prod
    assert np.allclose(prod, 1 / 8)
    assert top.at(3).fingerprint() == top.at(0).fingerprint()


def test_directed_ring_neighbours():
    top = make_topology("directed-ring", 4)
    assert top.directed and top.out_neighbors(1) == [2] and top.in_neighbors(1) == [0]


@pytest.mark.parametrize("call,msg", [
    (lambda: make_topology("star", 4), "unknown topology 'star'; choose one of ring, torus"),
    (lambda: make_topology("one-peer-exponential", 6), "needs a power-of-two number of ranks, got 6"),
    (lambda: make_topology("random-geometric", 8, radius=0.01), "is not connected"),
    (lambda: make_topology("ring", 0), "P >= 1"),
])
def test_errors(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()


def test_check_same_on_all_ranks_names_the_rank():
    from minips.distributed.topology import check_same_on_all_ranks

    class FakeComm:
        def allgather(self, x):
            return [x, x, "different"]
    with pytest.raises(ValueError, match=r"ranks \[2\] built a different ring graph"):
        check_same_on_all_ranks(make_topology("ring", 3), FakeComm())


def test_topology_command_prints_the_gap_and_draws(tmp_path):
    from .conftest import run_cli
    r = run_cli(["topology", "ring", "-n", "8", "--plot", str(tmp_path / "ring.png")])
    assert r.returncode == 0, r.stderr
    gap = 1 - (1 / 3 + 2 / 3 * np.cos(2 * np.pi / 8))
    assert f"spectral gap 1 - |lambda_2| = {gap:.4f}" in r.stdout and (tmp_path / "ring.png").stat().st_size > 0
    r = run_cli(["topology", "one-peer-exponential", "-n", "6"])
    assert r.returncode == 2 and "power-of-two" in r.stderr and "Traceback" not in r.stderr


def test_plot_layout_shows_the_torus_grid_and_the_random_geometric_points():
    """topology --plot draws a torus on its r x c grid (wrap-around edges as stubs, not lines across
    it) and a random geometric graph at its points; graphs without a shape of their own on a circle."""
    from minips.plots import topology_layout
    xy, wrap = topology_layout(make_topology("torus", 12))              # 3 x 4
    assert sorted(set(map(tuple, xy))) == sorted((float(b), float(-a)) for a in range(3) for b in range(4))
    top = make_topology("torus", 12)
    edges = {(j, i) for i in range(12) for j in top.in_neighbors(i) if j < i}
    inner = edges - set(wrap)
    assert all(np.abs(xy[i] - xy[j]).sum() == 1.0 for i, j in inner)  # grid neighbours
    assert len(wrap) == 3 + 4                                           # one per row, one per column
    pts = np.random.default_rng(5).random((20, 2))                      # the graph's seeded points
    xy, wrap = topology_layout(make_topology("random-geometric", 20, seed=5, radius=0.5))
    np.testing.assert_array_equal(xy, pts)
    assert wrap == []
    xy, _ = topology_layout(make_topology("ring", 8))
    np.testing.assert_allclose(np.hypot(*xy.T), 1.0)
