"""d-psgd (Lian et al., NeurIPS 2017): combine-then-adapt gossip SGD, and its
adapt-then-combine form.

Pinned down: with the complete graph, atc equals synchronous SGD (weights after
12 steps, float32 tolerance) and cta does not (each rank keeps its own
gradient step); on 4 ranks the MPI runs (ring and the time-varying one-peer
exponential graph, cta and atc) follow a float64 NumPy simulation of the rule
with hand-written mixing matrices; pure mixing steps (zero gradients) keep the mean
over ranks and shrink the consensus distance; P = 1 is plain SGD bitwise;
nothing is left in flight; a checkpoint resumes bitwise; bad options and bad
graphs give one clear line.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import build_algorithm, resolve
from minips.models import MLP
from minips.optim import SGD

from .gossip1_checks import TOL, StubComm, consensus, launch, one_peer_exponential, ring, simulate
from .local_sgd_checks import stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL
from .test_mpi import launch as launch_mlp

RUN = {"steps": 12, "batch": 8}  # mpi_worker: MLP on synthetic data, SGD lr 0.1, momentum 0.9


def test_complete_graph_atc_equals_sync_and_cta_does_not(tmp_path):
    sync, _ = launch_mlp(3, {"algo": "sync", **RUN}, tmp_path)
    atc, _ = launch_mlp(3, {"algo": "d-psgd:topology=complete:form=atc", **RUN}, tmp_path)
    np.testing.assert_allclose(atc["weights"], sync["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(atc["hashes"].tolist())) == 1 and int(atc["pending"]) == 0  # the ranks stay identical
    cta, _ = launch_mlp(3, {"algo": "d-psgd:topology=complete", **RUN}, tmp_path)
    assert not np.allclose(cta["weights"], sync["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(cta["hashes"].tolist())) == 3 and int(cta["pending"]) == 0


def test_four_ranks_follow_the_rule(tmp_path):
    """cta / atc on the ring, cta on one-peer-exponential; and pure mixing from
    spread-out weights (zero gradients): the mean is kept, the distance shrinks."""
    runs = [{"spec": "d-psgd:ring", "steps": 15}, {"spec": "d-psgd:ring:form=atc", "steps": 15},
            {"spec": "d-psgd:one-peer-exponential", "steps": 15},
            {"spec": "d-psgd:ring:form=atc", "steps": 6, "zero_grad": True, "spread": 1.0}]
    res = launch(4, runs, tmp_path)
    np.testing.assert_allclose(res[0][0], simulate(4, 15, ring(4), "cta"), **TOL)
    np.testing.assert_allclose(res[1][0], simulate(4, 15, ring(4), "atc"), **TOL)
    np.testing.assert_allclose(res[2][0], simulate(4, 15, one_peer_exponential(4), "cta"), **TOL)
    assert not np.allclose(res[0][0], res[1][0], **TOL)  # the two forms differ
    w = res[3][0].astype(np.float64)
    np.testing.assert_allclose(w.mean(axis=1), np.repeat(w[:1].mean(axis=1), 7, axis=0), rtol=1e-6, atol=1e-6)
    c = consensus(w)
    assert c[0] > 1 and np.all(np.diff(c) < 0)
    assert all(p == 0 for _, _, p, _ in res)
    top = res[0][3]["topology"]
    assert top["topology"] == "ring" and top["max_degree"] == 2 and top["spectral_gap"] == pytest.approx(2 / 3)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch_mlp(0, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("d-psgd", "d-psgd:form=atc:topology=torus"):
        run, _ = launch_mlp(0, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], plain["weights"]), spec


def test_resume_is_bitwise(tmp_path):
    rows, _ = stop_resume_is_bitwise("d-psgd:topology=exponential", tmp_path, 5, 8)
    # cta: each rank keeps its own gradient step after the (here complete) mix, so the ranks differ
    assert all(float(r["consensus_distance"]) > 0.0 for r in rows)
    assert all(float(r["post_s"]) > 0 for r in rows) and "wait_s" in rows[0]


def _build(spec, P):
    model = MLP(20, (4,), 2)
    return build_algorithm(spec, model.parameters(), SGD(model.parameters(), lr=0.1), StubComm(P))


@pytest.mark.parametrize("text,message", [
    ("d-psgd:topology=star", "option topology must be one of ring, torus"),
    ("d-psgd:form=both", "option form must be one of cta, atc"),
    ("d-psgd:radius=-1", "radius must be >= 0"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_bad_graphs_say_what_to_do():
    with pytest.raises(ValueError, match="one-peer-exponential needs a power-of-two number of ranks, got 3"):
        _build("d-psgd:one-peer-exponential", 3)
    with pytest.raises(ValueError, match="random-geometric on 6 nodes is not connected"):
        _build("d-psgd:topology=random-geometric:radius=0.01", 6)


def test_spec_forms():
    assert resolve("d-psgd:torus").options == resolve("d-psgd:topology=torus").options
    assert resolve("d-psgd").run_label == "d-psgd:ring" and not resolve("d-psgd").replicated
