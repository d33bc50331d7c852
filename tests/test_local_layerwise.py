"""``layerwise-local`` (issue 31): one pooled confidence per parameter tensor.

Its defining property, in the one-process simulation of P = 4 ranks
(tests/test_local_predictors.py's ``simulate``): on a model whose first tensor
sees pure noise and whose second changes without noise, each tensor's lambda
settles where its own regression puts it (near 1/P, near 1), which one lambda
for the whole model (``adaptive-local``) cannot do; the directions telescope
(ranks differ by their last k terms) for any lambdas; every rank uses the same
lambdas; with the confidence held at 1 the rule is ``local``.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.local_layerwise import LayerwiseLocalPredictor
from minips.distributed.algorithms.local_predictors import AdaptiveLocalPredictor, LocalPredictor

from .test_local_predictors import noise_problem, noiseless_problem, simulate, telescoped

LAYOUT = [(0, 50), (50, 100)]   # tensor 0: noise, tensor 1: noiseless


def mixed_problem(T=600, P=4):
    return np.concatenate([noise_problem(T, P, 50), noiseless_problem(T, P, 50)], axis=2)


@pytest.mark.parametrize("k", [1, 2])
def test_each_tensor_settles_at_its_own_lambda(k):
    _, _, preds = simulate(LayerwiseLocalPredictor, mixed_problem(), k, layout=LAYOUT)
    lam = preds[0].lam_l
    assert abs(lam[0] - 0.25) < 0.08 and lam[1] > 0.97, lam
    assert all(np.array_equal(p.lam_l, lam) for p in preds)          # pooled: one value per tensor everywhere
    _, lam_one, _ = simulate(AdaptiveLocalPredictor, mixed_problem(), k)
    assert 0.35 < lam_one[-1] < 0.9, lam_one[-1]    # one lambda for the model lands in between: neither


@pytest.mark.parametrize("k", [1, 2])
def test_directions_telescope_with_per_tensor_lambdas(k):
    g = mixed_problem(T=40, P=3)
    assert telescopes(LayerwiseLocalPredictor, g, k)
    assert not telescopes(TodaysLambda, g, k)                  # the check can fail


class TodaysLambda(LayerwiseLocalPredictor):
    """A wrong rule: g_{t-k} taken back with today's lambdas, not those it was added with."""

    def predict(self, G, w_now, w_then):
        self.added_l[:] = self.lam_l
        return super().predict(G, w_now, w_then)


def telescopes(cls, g, k):
    """Per tensor, the directions' sum is every average G_s (s <= T-1-k) once plus the
    last k own gradients times the lambdas they were added with (the predictor's ring of
    added lambdas holds the last k + 1 steps)."""
    dirs, _, preds = simulate(cls, g, k, layout=LAYOUT, warmup=1, rho=0.5)
    T, ok = g.shape[0], True
    added = preds[0].added_l                                     # (k + 1, L), slot t mod (k + 1)
    for L, (a, b) in enumerate(LAYOUT):
        w = np.ones(T)
        for t in range(T - k, T):
            w[t] = added[t % (k + 1), L]
        ok &= np.allclose(dirs[:, :, a:b].sum(axis=0), telescoped(g[:, :, a:b], k, w), rtol=1e-4, atol=2e-3)
    assert preds[0].lam_l.min() < 0.9                          # the lambdas did move
    return ok


def test_confidence_held_at_1_is_local():
    g = noise_problem(T=30, P=2, n=10)
    a, _, _ = simulate(LocalPredictor, g, 2)
    b, _, _ = simulate(LayerwiseLocalPredictor, g, 2, layout=[(0, 4), (4, 10)], warmup=10**6)
    assert np.array_equal(a, b)


def test_spec_options_and_payload_size():
    algo = resolve("pseudo-sync:layerwise-local:rho=0.9")
    assert not algo.replicated and algo.options.predictor_options == {"rho": 0.9}
    with pytest.raises(ValueError, match="layerwise-local: rho must be in"):
        resolve("pseudo-sync:layerwise-local:rho=1")
    p = LayerwiseLocalPredictor(1)
    p.set_layout([(10, 30), (0, 10)])                          # any order: the flat buffer is backward order
    assert p.extra_floats == 4 and list(p.starts) == [0, 10] and list(p.sizes) == [10, 20]
