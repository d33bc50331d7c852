"""pqasgd (Jiang & Agrawal, NeurIPS 2018) and qprsgd (reconstruction of Wu et
al. 2020): local steps, then compressed model deltas averaged (allreduce) or
gossiped through public copies (qprsgd's gossip mode), and a restart.

Pinned down on 4 ranks with given gradients (tests/given_gradients.py): with
the identity compressor both equal local SGD with the same period, and with
period 1 synchronous SGD; qprsgd's gossip mode with the identity equals
PD-SGD with one gossip step per cycle; with top-k (and error feedback) every
rank's weights after every step follow a float64 NumPy simulation of the
docstrings' rules; the bytes each step sends are the ring collectives' counts
of the payload sizes computed here from the QSGD/top-k formats; P = 1 runs;
a run stopped and resumed is bitwise the uninterrupted one; bad options give
one clear line.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import build_algorithm, resolve
from minips.distributed.compression import QSGD
from minips.distributed.compression.identity import Identity
from minips.models import MLP
from minips.optim import SGD

from .compress_b_checks import (allgatherv_sent, allreduce_sent, launch, qsgd_bytes, ring_W, simulate,
                                topk)
from .gossip1_checks import TOL, StubComm
from .local_sgd_checks import stop_resume_is_bitwise

P, STEPS, D = 4, 12, 20
ID = "compressor=identity"


def test_four_ranks_identity_equivalences_topk_rules_and_bytes(tmp_path):
    runs = [{"spec": s, "steps": STEPS} for s in (
        "sync", "local-sgd:period=3", f"pqasgd:period=3:{ID}", f"pqasgd:period=1:{ID}", f"qprsgd:period=3:{ID}",
        f"qprsgd:period=1:{ID}", f"qprsgd:period=3:mode=gossip:{ID}", "pd-sgd:i1=2:i2=1:topology=ring",
        "pqasgd:period=2:compressor=topk:k=5", "pqasgd:period=2:compressor=topk:k=5:error-feedback=true",
        "qprsgd:period=3:mode=gossip:compressor=topk:k=5", "pqasgd", "qprsgd:mode=gossip")]
    (sync, local, pqa3, pqa1, qpr3, qpr1, qprg, pd, pqa_top, pqa_ef, qprg_top, pqa_def, qprg_def) = launch(
        P, runs, tmp_path)
    for run, ref in ((pqa3, local), (qpr3, local), (pqa1, sync), (qpr1, sync), (qprg, pd)):
        np.testing.assert_allclose(run["w"], ref["w"], **TOL)
    assert not np.allclose(pqa_top["w"], local["w"], **TOL)  # top-k is not local SGD: the check can fail
    np.testing.assert_allclose(pqa_top["w"], simulate(P, STEPS, "pqasgd", lambda v: topk(v, 5), period=2), **TOL)
    np.testing.assert_allclose(pqa_ef["w"], simulate(P, STEPS, "pqasgd", lambda v: topk(v, 5), period=2,
                                                     ef=True), **TOL)
    assert not np.allclose(pqa_ef["w"], pqa_top["w"], **TOL)
    np.testing.assert_allclose(qprg_top["w"], simulate(P, STEPS, "gossip", lambda v: topk(v, 5), period=3,
                                                       W=ring_W(P)), **TOL)
    # right after an average the allreduce-mode ranks are identical, in between they differ
    assert np.all(pqa_def["w"][2] == pqa_def["w"][2][0]) and not np.all(pqa_def["w"][1] == pqa_def["w"][1][0])
    # bytes per step: the payload (identity 4d, top-k 8k, QSGD norms + packed levels) through the ring
    # allreduce (summable identity), the ring allgatherv, or the ring's 2 neighbours; 0 between averages
    every = lambda n, per: [[n] * P if (t + 1) % per == 0 else [0] * P for t in range(STEPS)]  # noqa: E731
    assert pqa3["bytes"].tolist() == every(allreduce_sent(P, 4 * D), 3)
    assert pqa_top["bytes"].tolist() == every(allgatherv_sent(P, 8 * 5), 2)
    assert pqa_def["bytes"].tolist() == every(allgatherv_sent(P, qsgd_bytes(D, s=1)), 2)
    assert qprg_def["bytes"].tolist() == every(2 * qsgd_bytes(D, s=32), 8)  # gossip mode's default s = 32
    assert qprg_top["bytes"].tolist() == every(2 * 8 * 5, 3)
    assert [r["wire_bytes"] for r in pqa_def["log"]] == [qsgd_bytes(D, s=1) * ((t + 1) % 2 == 0) for t in range(STEPS)]
    assert all(r["pending"] == 0 for r in (pqa3, qprg, pqa_def, qprg_def))
    assert pqa_def["report"]["compressor"] == "qsgd-quant:s=1:bucket=512:seed=0"
    assert qprg_def["report"]["topology"]["topology"] == "ring"


def test_one_rank(tmp_path):
    runs = [{"spec": s, "steps": 8} for s in ("sync", f"pqasgd:period=3:{ID}", f"qprsgd:period=2:mode=gossip:{ID}",
                                             "pqasgd", "qprsgd:period=2:mode=gossip")]
    sgd, pqa, qprg, pqa_def, qprg_def = launch(0, runs, tmp_path)
    np.testing.assert_allclose(pqa["w"], sgd["w"], **TOL)
    np.testing.assert_allclose(qprg["w"], sgd["w"], **TOL)
    assert np.all(np.isfinite(pqa_def["w"])) and np.all(np.isfinite(qprg_def["w"]))
    assert pqa_def["bytes"].sum() == 0 and qprg_def["bytes"].sum() == 0  # nothing leaves one rank


def test_resume_is_bitwise(tmp_path):
    """QSGD's stochastic rounding is drawn from (seed, rank, step): a resumed run draws the same."""
    rows, (_, w, _) = stop_resume_is_bitwise("pqasgd:period=3:error-feedback=true", tmp_path / "a", 5, 8)
    assert [int(r["wire_bytes"]) > 0 for r in rows] == [(t + 1) % 3 == 0 for t in range(8)]
    rows, _ = stop_resume_is_bitwise("qprsgd:period=2:mode=gossip:compressor=topk:ratio=0.01", tmp_path / "b", 5, 8)
    # the ring of 2 ranks mixes with weights 1/2: both restart from the same sum of the public copies
    assert [float(r["consensus_distance"]) == 0 for r in rows] == [(t + 1) % 2 == 0 for t in range(8)]


def _build(spec, P=2):
    model = MLP(20, (4,), 2)
    return build_algorithm(spec, model.parameters(), SGD(model.parameters(), lr=0.1), StubComm(P))


@pytest.mark.parametrize("text,message", [
    ("pqasgd:period=0", "period must be >= 1 (local steps between averages; 1 = every step), got 0"),
    ("qprsgd:period=-1", "period must be >= 1 (local steps between averages; 1 = every step), got -1"),
    ("pqasgd:compressor=zip", "option compressor must be one of identity, fp16, topk"),
    ("pqasgd:compressor=topk:bits=3", "compressor=topk: compressor topk has no option 'bits'; its options: k, ratio"),
    ("pqasgd:s=0", "compressor=qsgd-quant: qsgd-quant: s must be an integer in 1..32767"),
    ("qprsgd:compressor=topk:ratio=2", "compressor=topk: topk: ratio must be in (0, 1]"),
    ("qprsgd:mode=ring", "option mode must be one of allreduce, gossip, got 'ring'"),
    ("qprsgd:mode=gossip:topology=one-peer-exponential", "option topology must be one of ring, torus"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_options_that_do_not_fit_the_model_fail_at_build():
    with pytest.raises(ValueError, match=r"compressor=topk: topk: k=100000 exceeds the vector's size d=94"):
        _build("pqasgd:compressor=topk:k=100000")


def test_spec_forms_and_cost_models():
    from minips.distributed.costmodel import NetworkModel
    from minips.labs.projection import StepProfile
    assert resolve("pqasgd:3").options == resolve("pqasgd:period=3").options
    assert resolve("pqasgd").run_label == "pqasgd:period=2:qsgd-quant:s=1"
    gossip = resolve("qprsgd:mode=gossip")
    assert gossip.cls.default_label(gossip.options) == "qprsgd:period=8:qsgd-quant:s=32:gossip-ring"
    assert not resolve("pqasgd").replicated and not resolve("qprsgd").replicated
    net, d = NetworkModel(alpha=1e-4, beta=1e-8), 1_000_000
    prof = StepProfile(forward=0.02, backward=0.03, grad_bytes=4 * d)
    # codec seconds from the compressors' measured per-entry costs (inputs here, like alpha and beta)
    codec = lambda c, decodes: d * (c.compress_ns + decodes * c.decompress_ns) * 1e-9  # noqa: E731
    # identity, period 1: the allreduce of the weights every step (sync's cost) + the identity's copies
    assert resolve(f"pqasgd:period=1:{ID}").step_time(prof, 8, net) == pytest.approx(
        resolve("sync").step_time(prof, 8, net) + codec(Identity, 1))
    nb = qsgd_bytes(d, s=1)  # ring allgatherv of 8 payloads: 7 (alpha + n beta); 8 decodes
    assert resolve("pqasgd:period=2").step_time(prof, 8, net) == pytest.approx(
        0.05 + (7 * (1e-4 + nb * 1e-8) + codec(QSGD, 8)) / 2)
    nb = qsgd_bytes(d, s=32)  # gossip mode's default s = 32; the ring's 2 neighbours; own + 2 decodes
    assert resolve("qprsgd:mode=gossip").step_time(prof, 8, net) == pytest.approx(
        0.05 + (2 * (1e-4 + nb * 1e-8) + codec(QSGD, 3)) / 8)
