"""choco-sgd (Koloskova, Stich & Jaggi, ICML 2019): a local step, then gossip of
the compressed change of each rank's public copy and a consensus step gamma.

Pinned down on 4 ranks with given gradients (tests/given_gradients.py): with
the identity compressor and gamma = 1 it equals D-PSGD in its adapt-then-
combine form; with top-k and gamma = 0.4 every rank's weights after every
step follow a float64 NumPy simulation of the docstring's rule; pure
consensus steps (zero gradients, ranks started apart, copies from 0) keep the
mean of the models over ranks for top-k and sign, as the theory says for a
doubly stochastic W, and shrink the consensus distance; the bytes each step
sends are the ring's two neighbour messages of the payload computed here
from the sign/top-k formats; P = 1 is plain SGD bitwise; a run stopped and
resumed is bitwise the uninterrupted one; bad options give one clear line.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import build_algorithm, resolve
from minips.distributed.compression.identity import Identity
from minips.distributed.compression.sign import Sign
from minips.models import MLP
from minips.optim import SGD

from .compress_b_checks import launch, ring_W, simulate, topk
from .gossip1_checks import TOL, StubComm, consensus
from .local_sgd_checks import stop_resume_is_bitwise

P, STEPS, D = 4, 12, 20


def test_four_ranks(tmp_path):
    pure = {"steps": 10, "zero_grad": True, "spread": 1.0}
    runs = [{"spec": "choco-sgd:ring:gamma=1:compressor=identity", "steps": STEPS},
            {"spec": "d-psgd:ring:form=atc", "steps": STEPS},
            {"spec": "choco-sgd:ring:gamma=0.4:compressor=topk:k=5", "steps": STEPS},
            {"spec": "choco-sgd:ring", "steps": STEPS},
            {"spec": "choco-sgd:ring:gamma=0.4:compressor=topk:k=5", **pure},
            {"spec": "choco-sgd:ring:gamma=0.5:compressor=sign", **pure},
            {"spec": "choco-sgd:complete:gamma=0.8:compressor=qsgd-quant:s=16", **pure}]
    ident, dpsgd, top, default, pure_top, pure_sign, pure_q = launch(P, runs, tmp_path)
    np.testing.assert_allclose(ident["w"], dpsgd["w"], **TOL)
    np.testing.assert_allclose(top["w"], simulate(P, STEPS, "choco", lambda v: topk(v, 5), gamma=0.4, W=ring_W(P)),
                               **TOL)
    assert not np.allclose(top["w"], dpsgd["w"], **TOL)  # compression changes the run: the check can fail
    np.testing.assert_allclose(pure_top["w"], simulate(P, 10, "choco", lambda v: topk(v, 5), gamma=0.4, W=ring_W(P),
                                                       spread=1.0, zero_grad=True), **TOL)
    for run in (pure_top, pure_sign, pure_q):
        w = run["w"].astype(np.float64)
        # kept to float32 rounding: ~1e-7 relative per step on weights of size ~4 (a real shift would be ~0.1-1)
        np.testing.assert_allclose(w.mean(axis=1), np.repeat(w[:1].mean(axis=1), 11, axis=0), rtol=0, atol=1e-5)
        c = consensus(w)
        assert c[0] > 1 and c[-1] < 0.5 * c[0]
    # bytes: the payload (identity 4d, top-k 8k, sign d/8 bits + a float32 scale) to each of the 2 neighbours
    assert ident["bytes"].tolist() == [[2 * 4 * D] * P] * STEPS
    assert top["bytes"].tolist() == [[2 * 8 * 5] * P] * STEPS
    assert default["bytes"].tolist() == [[2 * (4 + (D + 7) // 8)] * P] * STEPS
    assert [r["wire_bytes"] for r in default["log"]] == [4 + (D + 7) // 8] * STEPS
    assert all(r["pending"] == 0 for r in (ident, top, default))
    assert default["report"]["compressor"] == "sign" and default["report"]["topology"]["topology"] == "ring"


def test_one_rank_is_plain_sgd(tmp_path):
    runs = [{"spec": s, "steps": 8} for s in ("sync", "choco-sgd", "choco-sgd:gamma=0.3:compressor=topk:k=2")]
    sgd, sign, top = launch(0, runs, tmp_path)
    assert np.array_equal(sign["w"], sgd["w"]) and np.array_equal(top["w"], sgd["w"])
    assert sign["bytes"].sum() == 0


def test_resume_is_bitwise(tmp_path):
    rows, _ = stop_resume_is_bitwise("choco-sgd:exponential:gamma=0.3:compressor=topk:ratio=0.02", tmp_path, 5, 8)
    assert all(float(r["consensus_distance"]) > 0 for r in rows) and all(int(r["wire_bytes"]) > 0 for r in rows)


def _build(spec, P=4):
    model = MLP(20, (4,), 2)
    return build_algorithm(spec, model.parameters(), SGD(model.parameters(), lr=0.1), StubComm(P))


@pytest.mark.parametrize("text,message", [
    ("choco-sgd:gamma=0", "gamma must be in (0, 1] (the consensus step size; 1 with the identity compressor is "
                          "D-PSGD), got 0.0"),
    ("choco-sgd:gamma=1.5", "gamma must be in (0, 1]"),
    ("choco-sgd:compressor=gzip", "option compressor must be one of identity, fp16, topk"),
    ("choco-sgd:compressor=topk:k=0", "compressor=topk: topk: k must be >= 1"),
    ("choco-sgd:one-peer-exponential", "option topology must be one of ring, torus, exponential, complete"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_options_that_do_not_fit_the_model_or_the_ranks_fail_at_build():
    with pytest.raises(ValueError, match=r"compressor=topk: topk: k=500 exceeds the vector's size d=94"):
        _build("choco-sgd:compressor=topk:k=500")
    with pytest.raises(ValueError, match="random-geometric on 6 nodes is not connected"):
        _build("choco-sgd:topology=random-geometric:radius=0.01", 6)


def test_spec_forms_and_cost_model():
    from minips.distributed.costmodel import NetworkModel
    from minips.labs.projection import StepProfile
    assert resolve("choco-sgd:torus").options == resolve("choco-sgd:topology=torus").options
    assert resolve("choco-sgd").run_label == "choco-sgd:ring:gamma=0.5:sign" and not resolve("choco-sgd").replicated
    net, d = NetworkModel(alpha=1e-4, beta=1e-8), 1_000_000
    prof = StepProfile(forward=0.02, backward=0.03, grad_bytes=4 * d)
    codec = lambda c, decodes: d * (c.compress_ns + decodes * c.decompress_ns) * 1e-9  # noqa: E731
    # ring: 2 messages of the sign payload, blocking; compress once, decode own + 2
    assert resolve("choco-sgd").step_time(prof, 8, net) == pytest.approx(
        0.05 + 2 * (1e-4 + (4 + d // 8) * 1e-8) + codec(Sign, 3))
    # identity: what D-PSGD's atc form costs, plus the identity's copies
    assert resolve("choco-sgd:compressor=identity").step_time(prof, 8, net) == pytest.approx(
        resolve("d-psgd:form=atc").step_time(prof, 8, net) + codec(Identity, 3))
