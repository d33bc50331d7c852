"""gossipgrad (Daily et al. 2018): the gradient averaged with one rotating partner per step.

Checked: with 2 ranks the partner is always the other rank, so the run is
synchronous SGD; on 3 and 4 ranks every rank's update is, in NumPy from the
recorded weights and gradients, ``w - lr (g_i + g_src(i)) / 2`` with src the
logged partner, the partners form a permutation whose inverse is the
send-to map, the mean update over ranks is the mean gradient's (the mixing is
doubly stochastic), and after one rotation of L = ceil(log2 P) steps every
rank's gradient has reached every rank; P = 1 is plain SGD; resume is bitwise.
"""
import math

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.gossipgrad import GossipGraD, gossipgrad_partners

from .gossip_trace_checks import LR, stop_resume_is_bitwise_n, trace_run
from .test_mpi import ATOL, RTOL, launch

RUN = {"steps": 10, "batch": 8}


def test_two_ranks_is_sync_sgd(tmp_path):
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("gossipgrad", "gossipgrad:hypercube"):
        run, _ = launch(2, {"algo": spec, **RUN}, tmp_path)
        np.testing.assert_allclose(run["weights"], sync["weights"], rtol=RTOL, atol=ATOL, err_msg=spec)
        assert len(set(run["hashes"].tolist())) == 1 and int(run["pending"]) == 0


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch(0, {"algo": "gossipgrad", **RUN}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def _check_rule(run, P):
    L = max(1, math.ceil(math.log2(P)))
    before, g, after = (run[k].astype(np.float64) for k in ("before", "grads", "after"))
    logs = run["logs"]
    T = before.shape[1]
    for t in range(T):
        src = np.array([logs[i][t]["recv_from"] for i in range(P)])
        dst = np.array([logs[i][t]["send_to"] for i in range(P)])
        assert sorted(src) == list(range(P)) and all(dst[src[i]] == i for i in range(P))
        assert all(src[i] != i for i in range(P)) and {logs[i][t]["rotation_k"] for i in range(P)} == {t % L}
        expect = before[:, t] - LR * (g[:, t] + g[src, t]) / 2
        np.testing.assert_allclose(after[:, t], expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose((after[:, t] - before[:, t]).mean(0), -LR * g[:, t].mean(0), rtol=1e-4, atol=1e-6)
    for t0 in range(0, T - L + 1, L):  # one rotation spreads every gradient to every rank
        M = np.eye(P)
        for t in range(t0, t0 + L):
            W = np.eye(P) / 2
            W[np.arange(P), [logs[i][t]["recv_from"] for i in range(P)]] += 0.5
            M = W @ M
        assert (M > 0).all(), (t0, M)
    assert not np.allclose(after[0, -1], after[1, -1])  # the replicas drift apart
    assert int(run["pending"]) == 0


def test_update_rule_on_3_and_4_ranks(tmp_path):
    for P, spec in ((4, "gossipgrad"), (3, "gossipgrad:seed=7"), (4, "gossipgrad:hypercube")):
        run, _ = trace_run(P, {"algo": spec, **RUN}, tmp_path)
        _check_rule(run, P)
        if "hypercube" in spec:
            assert all(r["send_to"] == r["recv_from"] for rank in run["logs"] for r in rank)
        d = run["before"].shape[-1]
        extra = run["bytes_sent"] - RUN["steps"] * 4 * d  # one gradient per step, plus the initial broadcast
        assert extra.min() == 0 and (extra % (4 * d) == 0).all()
        assert run["report"]["topology"]["period"] == max(1, math.ceil(math.log2(P)))
    _, proc = trace_run(3, {"algo": "gossipgrad:hypercube", "steps": 2}, tmp_path, expect_ok=False)
    assert proc.returncode != 0 and "hypercube needs a power-of-two number of ranks, got 3" in proc.stderr


@pytest.mark.parametrize("P", [2, 3, 4, 5, 8, 12])
def test_partners_are_a_shift_along_a_shared_permutation(P):
    L = max(1, math.ceil(math.log2(P)))
    for t in range(3 * L):
        dest, src = gossipgrad_partners(t, P, 2403)
        assert sorted(dest) == list(range(P)) and all(src[dest[i]] == i for i in range(P))
        assert all(dest[i] != i for i in range(P))
    # the permutation is redrawn every L steps: the offset-1 partners of two rotations differ
    firsts = {tuple(gossipgrad_partners(t, P, 2403)[0]) for t in range(0, 6 * L, L)}
    assert len(firsts) > 1 or P == 2


def test_cost_model_is_one_message_independent_of_P():
    from minips.distributed.costmodel import NETWORKS
    from minips.labs.projection import StepProfile
    prof = StepProfile(forward=0.004, backward=0.006, grad_bytes=4_000_000)
    net, o = NETWORKS["1gbe"], resolve("gossipgrad").options
    times = {GossipGraD.step_time(o, prof, P, net) for P in (2, 16, 1024)}
    assert len(times) == 1 and times.pop() == pytest.approx(prof.compute + net.message_time(4_000_000))


def test_resume_is_bitwise(tmp_path):
    summary, _, _ = stop_resume_is_bitwise_n(2, "gossipgrad", tmp_path, 5, 9)
    assert summary["topology"]["spectral_gap"] == pytest.approx(1.0)  # P = 2: the pair average is exact


@pytest.mark.parametrize("text,message", [
    ("gossipgrad:pattern=ring", "option pattern must be one of dissemination, hypercube"),
    ("gossipgrad:seed=-1", "seed must be >= 0"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
