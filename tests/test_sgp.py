"""sgp (Assran et al. ICML 2019; push-sum of Kempe et al. 2003): push-sum mixing, gradients at x / omega.

Checked in NumPy from every rank's recorded numerators, weights and
gradients: the mixing is the uniform push ``x <- A (x - lr g)``,
``omega <- A omega`` with ``A[j, i] = 1/(outdeg_i + 1)`` for j in i's
out-neighbours and j = i (built in the test from the graph's edges), on an
irregular random-geometric graph where omega really varies; the total weight
``sum_i omega_i`` stays P after every step and ``sum_i x_i`` moves only by
the gradient steps; the weights the gradient is taken at are x / omega; the
default graph on 4 ranks is the one-peer exponential one (offsets 1, 2, ...,
omega stays 1); the gradient each rank recorded equals the one an untouched
copy of the model computes at x / omega on the same batch (and, where omega
varies, differs from the one at x); with the complete graph every rank holds the average after
each step and the run equals synchronous SGD (momentum 0.9); P = 1 is plain
SGD; a resume on 3 ranks with omega != 1 is bitwise, and the evaluation is
of the de-biased models' average.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.sgp import SGP
from minips.distributed.topology import make_topology

from .gossip_trace_checks import LR, stop_resume_is_bitwise_n, trace_run
from .local_sgd_checks import trace as read_trace
from .test_mpi import ATOL, RTOL, launch


def _push_matrix(top, t):
    Wt = top.at(t).W
    P = len(Wt)
    A = np.zeros((P, P))
    for i in range(P):
        out = [j for j in range(P) if j != i and Wt[j, i] > 0]
        for j in [i, *out]:
            A[j, i] = 1.0 / (len(out) + 1)
    return A


def _check_push_sum(run, P, top, varies):
    xb, xa, z_b, z_a, g = (run[k].astype(np.float64) for k in ("x_before", "x_after", "before", "after", "grads"))
    logs = run["logs"]
    omega = np.ones(P)
    for t in range(xb.shape[1]):
        np.testing.assert_allclose(z_b[:, t], xb[:, t] / omega[:, None], rtol=1e-6, atol=1e-7)  # gradient at z
        A = _push_matrix(top, t)
        omega = A @ omega
        got = np.array([logs[i][t]["omega"] for i in range(P)])
        np.testing.assert_allclose(got, omega, rtol=1e-6)
        assert abs(got.sum() - P) < 1e-5  # the total weight stays P
        np.testing.assert_allclose(xa[:, t], A @ (xb[:, t] - LR * g[:, t]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(xa[:, t].sum(0), (xb[:, t] - LR * g[:, t]).sum(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(z_a[:, t], xa[:, t] / got[:, None], rtol=1e-6, atol=1e-7)
        omega = got
    assert (np.ptp(omega) > 1e-3) == varies
    assert int(run["pending"]) == 0
    # the gradient the step used is the one at z = x / omega, recomputed by an untouched copy of the model
    np.testing.assert_allclose(g, run["grads_at_z"], rtol=1e-4, atol=1e-6)
    if varies:  # and there it differs from the gradient at the numerator x, so the check can fail
        off = np.abs(run["grads_at_x"] - run["grads_at_z"]).max(axis=-1)
        assert off[:, 1:].max() > 1e-2, off


def test_push_sum_on_an_irregular_graph_and_the_default_one(tmp_path):
    run, _ = trace_run(4, {"algo": "sgp:topology=random-geometric", "steps": 8}, tmp_path)
    top = make_topology("random-geometric", 4, seed=0)
    assert len({top.degree(i) for i in range(4)}) > 1  # irregular: omega must move
    _check_push_sum(run, 4, top, varies=True)
    assert run["report"]["topology"]["topology"] == "random-geometric"
    run, _ = trace_run(4, {"algo": "sgp", "steps": 6}, tmp_path)
    _check_push_sum(run, 4, make_topology("one-peer-exponential", 4), varies=False)
    assert [r["peer_offset"] for r in run["logs"][0]] == [1, 2, 1, 2, 1, 2]
    d = run["before"].shape[-1]
    extra = run["bytes_sent"] - 6 * 4 * (d + 1)  # one message of d + 1 floats per step, plus the broadcast
    assert extra.min() == 0 and (extra % (4 * d) == 0).all()
    run, _ = trace_run(3, {"algo": "sgp", "steps": 4}, tmp_path)  # not a power of two: directed ring
    _check_push_sum(run, 3, make_topology("directed-ring", 3), varies=False)


def test_complete_graph_averages_and_equals_sync(tmp_path):
    run, _ = trace_run(4, {"algo": "sgp:topology=complete", "steps": 5}, tmp_path)
    xb, after, g = (run[k].astype(np.float64) for k in ("x_before", "after", "grads"))
    for t in range(5):
        mean = (xb[:, t] - LR * g[:, t]).mean(0)
        np.testing.assert_allclose(after[:, t], np.broadcast_to(mean, after[:, t].shape), rtol=1e-5, atol=1e-6)
    assert all(r["omega"] == pytest.approx(1.0, abs=1e-6) for rank in run["logs"] for r in rank)
    sync, _ = launch(4, {"algo": "sync", "steps": 10, "batch": 8}, tmp_path)
    sgp, _ = launch(4, {"algo": "sgp:topology=complete", "steps": 10, "batch": 8}, tmp_path)
    np.testing.assert_allclose(sgp["weights"], sync["weights"], rtol=RTOL, atol=ATOL)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", "steps": 10, "batch": 8}, tmp_path)
    run, _ = launch(0, {"algo": "sgp", "steps": 10, "batch": 8}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def test_resume_is_bitwise_and_evaluates_the_debiased_average(tmp_path):
    """3 ranks on the random-geometric graph of seed 0 (degrees 2, 1, 1: omega varies)."""
    summary, state, full = stop_resume_is_bitwise_n(3, "sgp:topology=random-geometric", tmp_path, 5, 9)
    omegas = [float(r["algorithm"]["omega"]) for r in state["ranks"]]
    assert abs(sum(omegas) - 3) < 1e-5 and max(omegas) - min(omegas) > 1e-3
    assert summary["topology"]["spectral_gap"] > 0 and summary["topology"]["P"] == 3
    rows = read_trace(full)
    assert "omega" in rows[0] and float(rows[-1]["consensus_distance"]) > 0
    # the checkpoint's weights are the z_i = x_i / omega_i; the summary evaluates their mean
    zs = [np.asarray(r["weights"]) for r in state["ranks"]]
    for r, z in zip(state["ranks"], zs):
        x = np.asarray(r["algorithm"]["numerator"])
        np.testing.assert_array_equal(z, x / np.float32(r["algorithm"]["omega"]))
    from minips import random as mrandom
    from minips.distributed.flat import FlatParams
    from minips.models import build_model
    from minips.tasks import make_task
    task = make_task("fashion-mnist-mini")
    mrandom.seed(0)
    model = build_model("mlp", task)
    flat = FlatParams(model.parameters())
    flat.weights[...] = (zs[0] + zs[1] + zs[2]) / np.float32(3)
    m = task.evaluate(model, None, 500)
    assert m["test_loss"] == pytest.approx(summary["test_loss"], rel=1e-4)


def test_cost_model_is_degree_times_one_message():
    from minips.distributed.costmodel import NETWORKS
    from minips.labs.projection import StepProfile
    prof, net = StepProfile(forward=0.004, backward=0.006, grad_bytes=4_000_000), NETWORKS["1gbe"]
    o = resolve("sgp").options
    one = prof.compute + net.message_time(4_000_004)
    assert SGP.step_time(o, prof, 1024, net) == pytest.approx(one) == SGP.step_time(o, prof, 6, net)
    ring = SGP.step_time(resolve("sgp:topology=ring").options, prof, 64, net)
    assert ring == pytest.approx(prof.compute + 2 * net.message_time(4_000_004))


@pytest.mark.parametrize("text,message", [
    ("sgp:topology=star", "option topology must be one of auto, ring"),
    ("sgp:radius=-1", "radius must be >= 0"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_graphs_give_one_line_errors(tmp_path):
    _, proc = trace_run(3, {"algo": "sgp:topology=one-peer-exponential", "steps": 2}, tmp_path, expect_ok=False)
    assert proc.returncode != 0 and "one-peer-exponential needs a power-of-two number of ranks, got 3" in proc.stderr
    _, proc = trace_run(3, {"algo": "sgp:topology=random-geometric:radius=0.01", "steps": 2}, tmp_path,
                        expect_ok=False)
    assert proc.returncode != 0 and "is not connected" in proc.stderr
