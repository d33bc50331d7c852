"""The gossip lab (minips/averaging/, ``python -m minips gossip-lab``).

Expected values come from plain NumPy here (dense mixing matrices of
:mod:`minips.distributed.topology`, whose matrices and spectra
tests/test_topology.py checks against hand-built ones; explicit loops), never
from the code under test. Exact checks: every method keeps the mean (push-sum:
sum x / sum w); the complete graph averages in one round; accelerated with alpha = 1 is plain
gossip bit for bit; on a ring of 32 the accelerated method needs about a tenth
of plain gossip's rounds to 1e-6 (seed 0: 94 vs 951, the counts
docs/specifications.md section 20 records); periodic gossip's per-period rate is the same for
every edge order on a tree and not on a ring; push-sum's sum, count and churn;
push-sum's spectrum equals the general eigensolver's on its hand-built matrix;
every method's predicted rate is the measured one (pairwise: a bound; ACO:
none), periodic gossip's per round;
the virtual and MPI engines give the same trajectory (mpiexec -n 4); bad
input gives one-line errors.
"""
import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minips.averaging import METHODS, make_method
from minips.averaging.base import greedy_matching
from minips.averaging.engines import VectorisedCluster
from minips.labs.averaging import initial_values, simulate
from minips.averaging.periodic import period_lambda2
from minips.distributed.topology import make_topology

from .conftest import ROOT, run_cli, subprocess_env

WORKER = str(Path(__file__).with_name("gossiplab_worker.py"))


def dense_rounds_to(W, x0, tol=1e-6, max_rounds=5000, alpha=None):
    """Rounds until ||x - mean|| <= tol ||x0 - mean||, by explicit iteration of
    x <- W x (or the shift register with alpha)."""
    mean = x0.mean(0)
    e0 = np.linalg.norm(x0 - mean)
    x, prev = x0.copy(), x0.copy()
    for t in range(1, max_rounds + 1):
        new = W @ x if alpha is None else alpha * (W @ x) + (1 - alpha) * prev
        prev, x = x, new
        if np.linalg.norm(x - mean) <= tol * e0:
            return t
    return None


def test_one_peer_exponential_averages_in_log2_n_rounds():
    r = simulate("plain", "one-peer-exponential", 16, 6, seed=1)
    assert r["rounds_to_1e-6"] == 4 and r["relative_error"][4] < 1e-15


def test_greedy_matching_equals_the_sequential_greedy():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 40))
        prop = rng.integers(-1, n, n)
        pri = rng.permutation(n)
        want = np.full(n, -1)
        for i in np.argsort(pri):  # one proposal after another, in priority order
            j = prop[i]
            if j >= 0 and j != i and want[i] < 0 and want[j] < 0:
                want[i], want[j] = j, i
        np.testing.assert_array_equal(greedy_matching(prop, pri), want)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_keeps_the_mean(method):
    top = "exponential" if method != "push-sum" else "directed-ring"
    g = make_topology(top, 24)
    m = make_method(method, g, seed=3)
    x0 = initial_values(24, 3, seed=3)
    m.start(VectorisedCluster(24), x0)
    for t in range(40 if method != "push-sum" else 300):  # a directed ring mixes slowly
        m.step(t)
        if method == "push-sum":  # the weighted mean: sum x / sum w, and each sum, stay put
            np.testing.assert_allclose(m.z[:, :-1].sum(0), x0.sum(0), rtol=1e-12, atol=1e-12)
            assert m.z[:, -1].sum() == pytest.approx(24, rel=1e-13)
        else:
            np.testing.assert_allclose(m.x.mean(0), x0.mean(0), rtol=1e-12, atol=1e-13)
    spread = np.linalg.norm(m.estimate() - x0.mean(0))
    assert spread < 0.1 * np.linalg.norm(x0 - x0.mean(0))  # and it did average


def test_complete_graph_converges_in_one_round():
    r = simulate("plain", "complete", 20, 3, seed=2, d=2, keep_history=True)
    x0 = initial_values(20, 2, seed=2)
    np.testing.assert_allclose(r["history"][:, 1], np.broadcast_to(x0.mean(0), (20, 2)), rtol=0, atol=1e-14)
    assert r["rounds_to_1e-6"] == 1


def test_accelerated_with_alpha_one_is_plain_gossip_bit_for_bit():
    a = simulate("accelerated", "torus", 36, 60, seed=4, d=2, keep_history=True, options={"alpha": 1.0})
    p = simulate("plain", "torus", 36, 60, seed=4, d=2, keep_history=True)
    np.testing.assert_array_equal(a["history"], p["history"])


def test_plain_and_accelerated_follow_the_dense_recursions():
    W = make_topology("ring", 10).W
    l2 = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1][1]
    alpha = 2 / (1 + np.sqrt(1 - l2 ** 2))
    x0 = initial_values(10, 2, seed=7)
    for method, opts in (("plain", {}), ("accelerated", {})):
        r = simulate(method, "ring", 10, 15, seed=7, d=2, keep_history=True, options=opts)
        x, prev = x0.copy(), x0.copy()
        for t in range(15):
            new = W @ x if method == "plain" else alpha * (W @ x) + (1 - alpha) * prev
            prev, x = x, new
            np.testing.assert_allclose(r["history"][:, t + 1], x, rtol=1e-12, atol=1e-14)
    assert r["alpha"] == pytest.approx(alpha, rel=1e-12)


def test_ring_32_accelerated_needs_about_a_tenth_of_plain_rounds():
    """Seed 0: 94 vs 951 rounds (ratio 0.099); seeds 0-4 stay within 85-110 vs 900-1080."""
    W = make_topology("ring", 32).W
    l2 = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1][1]
    alpha = 2 / (1 + np.sqrt(1 - l2 ** 2))
    for seed in range(5):
        plain = simulate("plain", "ring", 32, 1200, seed=seed, stop_at=1e-6)["rounds_to_1e-6"]
        acc = simulate("accelerated", "ring", 32, 1200, seed=seed, stop_at=1e-6)["rounds_to_1e-6"]
        x0 = initial_values(32, 1, seed=seed)
        assert plain == dense_rounds_to(W, x0)
        assert acc == dense_rounds_to(W, x0, alpha=alpha)
        assert 900 <= plain <= 1080 and 85 <= acc <= 110 and 0.08 <= acc / plain <= 0.12
        if seed == 0:
            assert (plain, acc) == (951, 94)


def test_pairwise_rounds_average_matched_neighbours_only():
    A = make_topology("torus", 16).W > 0
    r = simulate("pairwise", "torus", 16, 20, seed=1, keep_history=True)
    H = r["history"][:, :, 0]
    for t in range(20):
        changed = np.flatnonzero(np.abs(H[:, t + 1] - H[:, t]) > 1e-15)
        for i in changed:  # i averaged with exactly one neighbour j, and j with i
            js = [j for j in np.flatnonzero(A[i]) if j != i and abs(H[i, t + 1] - (H[i, t] + H[j, t]) / 2) < 1e-14]
            assert js, f"round {t}: node {i} did not average with a neighbour"


def test_periodic_rate_does_not_depend_on_the_order_on_a_tree_but_does_on_a_ring():
    def lam(edges, n):  # independent: product of the pair matrices, dense
        Phi = np.eye(n)
        for i, j in edges:
            Wij = np.eye(n)
            Wij[np.ix_([i, j], [i, j])] = 0.5
            Phi = Wij @ Phi
        return np.sort(np.abs(np.linalg.eigvals(Phi)))[::-1][1]
    tree = [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5)]
    vals = {round(lam(o, 6), 10) for o in itertools.permutations(tree)}
    assert len(vals) == 1
    ring6 = [(i, (i + 1) % 6) for i in range(6)]
    rv = {round(lam(o, 6), 10) for o in itertools.permutations(ring6)}
    assert len(rv) == 3 and min(rv) == pytest.approx(0.25) and max(rv) < 0.49
    for o in list(itertools.permutations(tree))[:30]:
        assert period_lambda2(np.array(o), 6) == pytest.approx(lam(o, 6), abs=1e-12)
    g = make_topology("tree", 40, seed=2)
    seen = {round(period_lambda2(g.undirected_edges()[np.random.default_rng(s).permutation(39)], 40), 9)
            for s in range(10)}
    assert len(seen) == 1


def test_periodic_gossip_applies_the_period_product():
    r = simulate("periodic", "ring", 12, 60, seed=1, keep_history=True, options={"order_seed": 5})
    m = make_method("periodic", make_topology("ring", 12), order_seed=5)
    steps = len(m.schedule)
    Phi = np.eye(12)
    for i, j in m.edges:
        W = np.eye(12)
        W[np.ix_([i, j], [i, j])] = 0.5
        Phi = W @ Phi
    x0 = initial_values(12, 1, seed=1)
    np.testing.assert_allclose(r["history"][:, 2 * steps], np.linalg.matrix_power(Phi, 2) @ x0, atol=1e-13)


def test_push_sum_sum_count_and_churn():
    x0 = initial_values(16, 2, seed=3)
    # directed, time-varying: after log2 16 = 4 rounds every weight is 1/16 and every estimate the sum
    s = simulate("push-sum", "one-peer-exponential", 16, 4, seed=3, d=2, keep_history=True,
                 options={"estimate": "sum"})
    assert np.isinf(s["history"][1:, 0]).all()  # weight 0: no estimate yet
    np.testing.assert_allclose(s["history"][:, -1], np.broadcast_to(x0.sum(0), (16, 2)), rtol=1e-13)
    c = simulate("push-sum", "directed-ring", 8, 400, seed=3, keep_history=True, options={"estimate": "count"})
    np.testing.assert_allclose(c["history"][:, -1, 0], 8, rtol=1e-9)
    # node 15 joins at round 30, node 8 leaves at round 60: the targets are the live nodes' mean
    j = simulate("push-sum", "exponential", 16, 200, seed=3, d=2, keep_history=True,
                 options={"join": 30, "leave": 60})
    H = j["history"]
    live_before = np.arange(16) != 15
    assert np.abs(x0[live_before].mean(0) - x0.mean(0)).max() > 0.02  # the join moves the target visibly
    np.testing.assert_allclose(H[live_before, 30], np.broadcast_to(x0[live_before].mean(0), (15, 2)), atol=1e-3)
    live_end = np.arange(16) != 8
    np.testing.assert_allclose(H[live_end, -1], np.broadcast_to(x0[live_end].mean(0), (15, 2)), atol=1e-9)
    assert j["relative_error"][-1] < 1e-9


def _push_matrix_by_hand(g):
    """Push-sum's column-stochastic matrix from the graph's edge list: node i
    keeps 1 / (k_i + 1) and sends as much to each of its k_i out-neighbours."""
    A = np.zeros((g.n, g.n))
    for i in range(g.n):
        out = g.out_neighbors(i)
        A[i, i] = 1.0 / (len(out) + 1)
        A[out, i] = 1.0 / (len(out) + 1)
    return A


@pytest.mark.parametrize("name,n", [("tree", 64), ("random-geometric", 40), ("ring", 12), ("directed-ring", 9)])
def test_push_sum_spectrum_uses_the_general_solver_where_the_matrix_is_not_symmetric(name, n):
    """On an irregular undirected graph push-sum's matrix is not symmetric (node
    i's column holds 1 / (k_i + 1)), though no edge is one-way; the symmetric
    solver reads one triangle and reported |lambda_2| = 0.914 for the tree of
    64 (true 0.990, measured 0.990)."""
    from minips.averaging.push_sum import push_graph
    g = make_topology(name, n)
    A = _push_matrix_by_hand(g)
    np.testing.assert_allclose(push_graph(g).dense(), A, atol=1e-15)
    want = np.sort(np.abs(np.linalg.eigvals(A)))[::-1]
    got = np.sort(np.abs(push_graph(g).eigenvalues()))[::-1]
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert push_graph(g).lambda2() == pytest.approx(want[1], abs=1e-9)
    if name == "tree":
        assert not np.allclose(A, A.T) and want[1] == pytest.approx(0.990, abs=5e-4)


def _aligned_rate(r):
    """The measured contraction per round, computed here from the relative
    errors: between the first round at or below 1e-2 and the last above 1e-10,
    both moved to whole periods of the schedule (periodic gossip's rounds do
    not contract alike within a period)."""
    rel = np.asarray(r["relative_error"])
    L = r.get("rounds_per_period", 1)
    a = int(np.flatnonzero(rel <= 1e-2)[0])
    a = -(-a // L) * L
    b = int(np.flatnonzero(rel > 1e-10)[-1]) // L * L
    assert b - a >= 3 * L, (a, b, L)
    return float((rel[b] / rel[a]) ** (1.0 / (b - a)))


RATE_CASES = [(m, t, n) for m in ("plain", "accelerated", "periodic", "push-sum")
              for t, n in (("ring", 32), ("tree", 30), ("tree", 64), ("random-geometric", 40))] + [
    ("plain", "directed-ring", 9), ("push-sum", "directed-ring", 9)]


@pytest.mark.parametrize("method,topology,n", RATE_CASES)
def test_predicted_rate_is_the_measured_one(method, topology, n):
    """The spectral prediction of every method that makes one against the rate
    measured on its run (seed 1, 4 values per node so that the slowest mode is
    excited: with one value the tree of 30 starts with 0.01 of it against 1.2
    of the next, to a relative error of 1e-11): within 15% in
    log(rate), i.e. in rounds needed. Measured from the run's errors here, over
    whole periods. Catches push-sum's spectrum from the symmetric solver
    (tree of 64: predicted 0.914, measured 0.990) and periodic gossip's rate
    per period instead of per round (random-geometric 40: 0.25 per period of
    29 rounds, 0.95 per round). The accelerated method's double root at the
    optimal alpha makes the error t r^t: measured a little above r."""
    r = simulate(method, topology, n=n, rounds=6000, seed=1, d=4, stop_at=1e-11)
    pred, meas = r["rate_predicted"], _aligned_rate(r)
    assert 0 < pred < 1 and abs(math.log(meas) / math.log(pred) - 1) < 0.15, (pred, meas, r["prediction"])


@pytest.mark.parametrize("method", ["plain", "push-sum"])
def test_a_rate_of_zero_means_exact_after_one_period(method):
    """One-peer exponential graph of 16: the product of its 4 matrices is 11^T/n."""
    r = simulate(method, "one-peer-exponential", n=16, rounds=8, seed=1)
    assert r["rate_predicted"] == 0.0 and r["rounds_to_1e-6_predicted"] == 4 == r["rounds_to_1e-6"]
    assert r["relative_error"][4] < 1e-13


@pytest.mark.parametrize("topology,n", [("ring", 16), ("tree", 30), ("random-geometric", 40), ("complete", 8)])
def test_pairwise_prediction_bounds_the_measured_rate(topology, n):
    """Randomized gossip's sqrt(lambda_2(E[W])) bounds the mean-square rate
    (Boyd et al. 2006): every seed's run is at least that fast, and not more
    than 3 times faster in log(rate) (the bound is not vacuous)."""
    for seed in (1, 2, 3):
        r = simulate("pairwise", topology, n=n, rounds=6000, seed=seed, stop_at=1e-11)
        pred, meas = r["rate_predicted"], _aligned_rate(r)
        assert meas <= pred * (1 + 1e-3) and math.log(meas) / math.log(pred) < 3, (seed, pred, meas)


@pytest.mark.parametrize("method", ["aco-local", "aco-global"])
def test_aco_makes_no_prediction(method):
    """Its partner choices change with the pheromone: no fixed E[W] to read a rate from."""
    r = simulate(method, "ring", n=16, rounds=20, seed=1)
    assert r["rate_predicted"] is None and r["prediction"] == "no spectral prediction for this method"


def test_every_method_is_in_a_rate_test():
    tested = {m for m, _, _ in RATE_CASES} | {"pairwise", "aco-local", "aco-global"}
    assert tested == set(METHODS)


@pytest.mark.mpi(ranks=4)
def test_virtual_and_mpi_engines_give_the_same_trajectory(tmp_path):
    """One launch of 4 ranks runs every method, then the command line (``gossip-lab`` under the
    same ranks); the vectorised cluster runs them here."""
    from .gossiplab_worker import CASES, ROUNDS
    mpiexec = shutil.which("mpiexec")
    assert mpiexec, "mpiexec not found: pip install -e '.[mpi,test]'"
    out = tmp_path / "w.npz"
    cli = [["gossip-lab", "--method", "plain,accelerated", "--rounds", "30", "--out", str(tmp_path / "lab")]]
    p = subprocess.run([mpiexec, "-n", "4", sys.executable, WORKER, str(out), json.dumps(cli)], capture_output=True,
                       text=True, timeout=120, env=subprocess_env(), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    z = np.load(out)
    for label, method, top, opts in CASES:
        r = simulate(method, top, 4, ROUNDS, seed=5, d=2, keep_history=True, options=opts)
        np.testing.assert_allclose(z[label + "/history"], r["history"], rtol=1e-12, atol=1e-14, equal_nan=True,
                                   err_msg=label)
        np.testing.assert_array_equal(z[label + "/messages"], r["messages"], err_msg=label)
    # the command line under mpiexec, and its refusals
    res = json.loads((tmp_path / "lab" / "lab.json").read_text())
    assert [r["engine"] for r in res] == ["mpi", "mpi"] and res[0]["n"] == 4
    virt = simulate("accelerated", "ring", 4, 30)
    np.testing.assert_allclose(res[1]["error"], virt["error"], rtol=1e-10, atol=1e-15)
    for args, msg in ((["-n", "1"], "needs P >= 2 ranks"), (["-n", "2", "-n", "8"], "-n must equal")):
        nproc = args[1]
        p = subprocess.run([mpiexec, "-n", nproc, sys.executable, "-m", "minips", "gossip-lab", *args[2:]],
                           capture_output=True, text=True, timeout=60, env=subprocess_env(), cwd=ROOT)
        assert p.returncode != 0 and msg in p.stderr, p.stderr[-2000:]


@pytest.mark.parametrize("args,message", [
    (["--topology", "random-geometric", "-n", "50", "--radius", "0.05"], "is not connected"),
    (["-n", "1"], "at least 2 nodes"),
    (["--method", "accelerated", "--alpha", "2.5"], "outside (0, 2)"),
    (["--method", "accelerated", "--alpha", "0"], "outside (0, 2)"),
    (["--method", "plain", "--alpha", "1.5"], "--alpha is not an option of plain"),
    (["--method", "periodic", "--topology", "directed-ring"], "needs an undirected static graph"),
    (["--method", "push-sum", "--topology", "directed-ring", "--leave", "5"], "no longer strongly connected"),
    (["--method", "nope"], "unknown --method"),
])
def test_bad_input_gives_one_line(args, message, capsys):
    from minips.cli import main
    assert main(["gossip-lab", "--rounds", "5", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines


def test_bad_input_from_the_shell_is_one_line_without_traceback():
    p = run_cli(["gossip-lab", "--method", "accelerated", "--alpha", "3"], timeout=60)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "outside (0, 2)" in p.stderr, p.stderr


def test_command_writes_json_figure_and_frames(tmp_path):
    p = run_cli(["gossip-lab", "--topology", "ring", "-n", "16", "--method", "plain,accelerated,push-sum",
                 "--rounds", "80", "--frames", "2", "--out", str(tmp_path)], timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "lab.json").read_text())
    assert [r["method"] for r in res] == ["plain", "accelerated", "push-sum"]
    assert (tmp_path / "error.png").stat().st_size > 10_000
    assert sorted(f.name for f in (tmp_path / "frames").iterdir()) == ["frame_000.png", "frame_001.png"]
    W = make_topology("ring", 16).W
    l2 = np.sort(np.abs(np.linalg.eigvalsh(W)))[::-1][1]
    assert res[0]["rate_predicted"] == pytest.approx(l2, rel=1e-12)
    assert res[0]["messages"][1] == 32  # every node sends to its 2 neighbours
    assert "rounds to 1e-6" in p.stdout


def test_error_plot_y_range_follows_the_measured_curves():
    """The y-axis spans the measured errors, not a fixed 1e-16..10: a large ring whose errors stay
    above 0.1 fills the plot; a run that reaches 1e-15 is shown down there; the 1e-6 line is drawn
    only when some curve comes within a factor 100 of it."""
    from minips.labs.averaging import TOL
    from minips.labs.averaging_figures import error_ylim
    slow = [{"relative_error": list(np.linspace(1.0, 0.14, 500))}, {"relative_error": [1.0, 0.9, 0.72]}]
    lo, hi = error_ylim(slow)
    assert 0.04 <= lo <= 0.14 / 2 and hi == pytest.approx(3.0)
    fast = [{"relative_error": list(0.5 ** np.arange(50.0))}]   # down to 1.8e-15
    lo, _ = error_ylim(fast)
    assert lo <= 0.5 ** 49 and lo > 0.5 ** 49 / 10
    near = [{"relative_error": [1.0, 1e-3, 5e-5]}]               # within 100 x 1e-6: the line is in range
    assert error_ylim(near)[0] <= TOL


def test_report_table_has_one_header_word_pair_per_column():
    from minips.labs.averaging import report_lines
    r = {"topology": "ring", "n": 8, "d": 1, "engine": "vectorised", "lambda2": 0.9, "method": "plain",
         "rounds_to_1e-6": 100, "rounds_to_1e-6_predicted": 99, "rate_measured": 0.87, "rate_predicted": 0.86,
         "messages_to_1e-6": 1600, "relative_error": [1.0, 1e-7]}
    lines = report_lines([r])
    heads = [[c.strip() for c in line.split("|")] for line in lines[1:3]]
    cells = [c.strip() for c in lines[4].split("|")]
    assert len(heads[0]) == len(heads[1]) == len(cells) == 7
    named = dict(zip((f"{a} {b}".strip() for a, b in zip(*heads)), cells))
    assert named["rounds to 1e-6 measured"] == "100" and named["rounds to 1e-6 predicted"] == "99"
    assert named["rate per round measured"] == "0.87000" and named["rate per round predicted"] == "0.86000"
    assert named["messages to 1e-6"] == "1600" and named["method"] == "plain"
