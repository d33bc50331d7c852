"""gradient-tracking (DIGing/NEXT) and gt-pga (Feng et al. 2024), and the gossip
step they share (gossip_common.Mixer).

Pinned down: every topology's gossip step keeps the mean over ranks and the
complete graph's equals the allreduce average; the tracking invariant
mean_i(y_i) == mean_i(g_i) holds at every step (cta and atc forms, gossip and
global steps, static and time-varying graphs; float32 allreduce tolerance);
form=atc with the complete graph, and gt-pga with period 1, equal synchronous
SGD (the expectation is mpi_worker's sync run, not this code); P = 1 is plain
SGD; a stopped and resumed gt-pga run is bitwise equal to an uninterrupted one;
bad options and graphs give one-line messages.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.gossip_common import GossipOptions, build_topology

from .gossip3_checks import RUN, launch3
from .local_sgd_checks import stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL, launch

TOPOLOGIES = ["ring", "torus", "exponential", "one-peer-exponential", "complete", "random-geometric",
              "directed-ring"]
TRACK_TOL = 2e-5  # float32 sums of P vectors, relative to the largest mean gradient entry


def test_gossip_step_keeps_the_mean_and_complete_graph_is_the_average(tmp_path):
    r = launch3(4, {"mode": "mix", "topologies": TOPOLOGIES, "hetero": "hetero-gossip:topology=complete"},
                tmp_path)
    for name in TOPOLOGIES:
        assert r[f"mean_err_{name}"] < 1e-6, name
    assert r["complete_err"] < 1e-6


@pytest.mark.parametrize("P,spec", [
    (3, "gradient-tracking:topology=ring"),
    (4, "gt-pga:period=3"),
    (4, "gradient-tracking:form=atc:topology=one-peer-exponential"),
])
def test_tracking_invariant_every_step(P, spec, tmp_path):
    r = launch3(P, {"algo": spec, **RUN}, tmp_path)
    assert len(r["track_err"]) == RUN["steps"] and r["track_err"].max() < TRACK_TOL, r["track_err"]
    w = r["all_weights"]
    assert not np.array_equal(w[0], w[1]) and int(r["pending"]) == 0


def test_atc_on_the_complete_graph_and_period_1_equal_sync(tmp_path):
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("gradient-tracking:form=atc:topology=complete", "gt-pga:period=1:form=atc"):
        r = launch3(2, {"algo": spec, **RUN}, tmp_path)
        np.testing.assert_allclose(r["weights"], sync["weights"], rtol=RTOL, atol=ATOL, err_msg=spec)
    cta = launch3(2, {"algo": "gradient-tracking:topology=complete", **RUN}, tmp_path)
    assert not np.allclose(cta["weights"], sync["weights"], rtol=RTOL, atol=ATOL)  # cta is not sync


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("gradient-tracking", "gt-pga:period=2:form=atc"):
        r = launch3(0, {"algo": spec, **RUN}, tmp_path)
        np.testing.assert_allclose(r["weights"], plain["weights"], rtol=RTOL, atol=ATOL, err_msg=spec)


def test_gt_pga_resume_is_bitwise_and_averages_every_h_steps(tmp_path):
    rows, _ = stop_resume_is_bitwise("gt-pga:period=4", tmp_path, 5, 9)
    assert [int(r["global_avg"]) for r in rows] == [0, 0, 0, 1, 0, 0, 0, 1, 0]
    assert all(float(r["tracker_gap"]) >= 0 for r in rows) and float(rows[0]["tracker_gap"]) == 0.0


@pytest.mark.parametrize("text,message", [
    ("gt-pga:period=0", "period must be >= 1"),
    ("gradient-tracking:topology=star", "option topology must be one of"),
    ("gradient-tracking:form=both", "option form must be one of"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("opts,P,message", [
    (GossipOptions("one-peer-exponential"), 3, "topology=one-peer-exponential: one-peer-exponential needs a "
                                               "power-of-two number of ranks, got 3"),
    (GossipOptions("random-geometric", 0, 0.01), 8, "topology=random-geometric: topology random-geometric on 8 "
                                                    "nodes is not connected"),
])
def test_bad_graphs_say_what_to_do(opts, P, message):
    with pytest.raises(ValueError) as e:
        build_topology(opts, P)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cost_model_exchange_is_independent_of_P():
    from minips.distributed.costmodel import NetworkModel
    from minips.labs.projection import StepProfile
    net, prof = NetworkModel(1e-5, 1e-9), StepProfile(0.1, 0.2, grad_bytes=4e6)
    gt = resolve("gradient-tracking").cls
    t16, t1024 = (gt.step_time(resolve("gradient-tracking").options, prof, P, net) for P in (16, 1024))
    assert t16 == t1024 == pytest.approx(0.3 + 2 * (1e-5 + 8e6 * 1e-9))
    pga = resolve("gt-pga:period=4")
    assert pga.step_time(prof, 1024, net) > t1024  # the allreduce every 4th step grows with P
