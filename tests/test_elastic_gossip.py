"""elastic-gossip (Pramod 2018): pairwise elastic averaging with probability p and moving rate alpha.

Checked in NumPy from every rank's recorded weights, gradients and picks (4
ranks, plain SGD): the partner sets are ``S_i = {c_i} U {j : c_j = i}``, the
update is ``w_i - lr g_i - alpha sum_{s in S_i} (w_i - w_s)`` (pre-step
weights), the mean over ranks moves only by the mean gradient step, the
period tau silences the steps in between; P = 1 is plain SGD; with 2 ranks,
p = 1 and alpha = 1/2 both ranks meet at the midpoint; resume is bitwise.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.elastic_gossip import ElasticGossip

from .gossip_trace_checks import LR, stop_resume_is_bitwise_n, trace_run
from .test_mpi import launch


def _check(run, P, alpha, period):
    before, g, after = (run[k].astype(np.float64) for k in ("before", "grads", "after"))
    logs = run["logs"]
    met = 0
    for t in range(before.shape[1]):
        picks = [logs[i][t]["pick"] for i in range(P)]
        for i in range(P):
            S = sorted({j for j in range(P) if picks[j] == i} | ({picks[i]} if picks[i] >= 0 else set()))
            if t % period:
                assert S == [] and picks[i] == -1
            assert logs[i][t]["partners"] == len(S) and logs[i][t]["communicated"] == int(bool(S))
            expect = before[i, t] - LR * g[i, t] - alpha * sum(before[i, t] - before[s, t] for s in S)
            np.testing.assert_allclose(after[i, t], expect, rtol=1e-5, atol=1e-6)
            met += bool(S)
        np.testing.assert_allclose(after[:, t].mean(0), (before[:, t] - LR * g[:, t]).mean(0), rtol=1e-5, atol=1e-6)
    assert 0 < met < P * before.shape[1]
    assert int(run["pending"]) == 0


def test_update_rule_on_4_ranks(tmp_path):
    for spec, alpha, period in (("elastic-gossip:p=0.5", 0.5, 1), ("elastic-gossip:p=1:alpha=0.25:period=2", 0.25, 2)):
        run, _ = trace_run(4, {"algo": spec, "steps": 10}, tmp_path)
        _check(run, 4, alpha, period)
        assert run["report"]["topology"]["topology"] == "random-pairs"


def test_two_ranks_p1_meet_at_the_midpoint(tmp_path):
    run, _ = trace_run(2, {"algo": "elastic-gossip", "steps": 4}, tmp_path)
    before, g, after = (run[k].astype(np.float64) for k in ("before", "grads", "after"))
    mid = before.mean(0)
    np.testing.assert_allclose(after, mid[None] - LR * g, rtol=1e-5, atol=1e-6)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", "steps": 10, "batch": 8}, tmp_path)
    run, _ = launch(0, {"algo": "elastic-gossip", "steps": 10, "batch": 8}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def test_resume_is_bitwise(tmp_path):
    summary, _, _ = stop_resume_is_bitwise_n(2, "elastic-gossip:p=0.5", tmp_path, 5, 9)
    assert summary["topology"]["spectral_gap"] > 0


def test_cost_model():
    from minips.distributed.costmodel import NETWORKS
    from minips.labs.projection import StepProfile
    prof, net = StepProfile(forward=0.004, backward=0.006, grad_bytes=4_000_000), NETWORKS["10gbe"]
    o = resolve("elastic-gossip:p=0.25:period=2").options
    expect = prof.compute + (net.allgatherv_time([4] * 8) + 0.5 * net.message_time(4_000_000)) / 2
    assert ElasticGossip.step_time(o, prof, 8, net) == pytest.approx(expect)
    assert ElasticGossip.step_time(o, prof, 1, net) == prof.compute


@pytest.mark.parametrize("text,message", [
    ("elastic-gossip:p=1.5", "p must be in [0, 1]"),
    ("elastic-gossip:alpha=0.9", "alpha must be in (0, 0.5]"),
    ("elastic-gossip:period=0", "period must be >= 1"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
