"""The predictors' maths against expectations computed independently of
minips.distributed.algorithms (plain NumPy written here from the docstrings'
formulas), so that a wrong formula fails a test instead of being copied into
its expected value (issue 13, mutation checks: AESP's confidence pinned at 1,
the lookahead extrapolation's sign flipped)."""
from collections import deque

import numpy as np
import pytest

from minips.distributed.algorithms.predictors import make_predictor
from minips.optim import SGD


class AESPReference:
    """AESP as the AdaptivePredictor docstring states it, in float64:

    on the arrival of G_j (k steps after its forecast F_j = G_{j-k} + lam c_j):
        a_j = G_j - G_{j-k};  num = rho_l num + (1-rho_l) <a_j, c_j>;
        den = rho_l den + (1-rho_l) <c_j, c_j>;  lam = clip(num / den, 0, 1)
    then the forecast with the curvature from before G:
        c_t = h (w_t - w_{t-k});  F_t = G_{t-k} + lam c_t
    then the curvature from the secant between consecutive arrivals:
        Sgw = rho Sgw + (1-rho) dG dw;  Sww = rho Sww + (1-rho) dw^2;  h = clip(Sgw / (Sww + eps), 0, h_max)
    """

    def __init__(self, k, rho=0.9, rho_l=0.99, h_max=10.0, lambda0=0.0, eps=1e-12):
        self.k, self.rho, self.rho_l, self.h_max, self.eps = k, rho, rho_l, h_max, eps
        self.lam, self.num, self.den = lambda0, 0.0, 0.0
        self.h = self.Sgw = self.Sww = self.G_prev = self.w_prev = None
        self.pending = deque()  # (G_{j-k}, c_j)

    def predict(self, G, w_now, w_then):
        G, w_now, w_then = (np.asarray(v, np.float64) for v in (G, w_now, w_then))
        if len(self.pending) >= self.k:
            G_naive, c = self.pending.popleft()
            a = G - G_naive
            self.num = self.rho_l * self.num + (1 - self.rho_l) * (a @ c)
            self.den = self.rho_l * self.den + (1 - self.rho_l) * (c @ c)
            if self.den > 0:
                self.lam = float(np.clip(self.num / self.den, 0, 1))
        if self.G_prev is None:
            self.h, self.Sgw, self.Sww = np.zeros_like(G), np.zeros_like(G), np.zeros_like(G)
            c = np.zeros_like(G)
        else:
            c = self.h * (w_now - w_then)
            dG, dw = G - self.G_prev, w_then - self.w_prev
            self.Sgw = self.rho * self.Sgw + (1 - self.rho) * dG * dw
            self.Sww = self.rho * self.Sww + (1 - self.rho) * dw * dw
            self.h = np.clip(self.Sgw / (self.Sww + self.eps), 0, self.h_max)
        self.G_prev, self.w_prev = G, w_then
        self.pending.append((G, c))
        return G + self.lam * c


def _noisy_quadratic(steps, n=8, noise=0.3, seed=0):
    """Weights on a random walk and gradients H w + noise at them (float32)."""
    rng = np.random.default_rng(seed)
    H = rng.uniform(0.5, 3.0, n)
    w = np.cumsum(rng.standard_normal((steps, n)) * 0.2, axis=0).astype(np.float32)
    g = (H * w + noise * rng.standard_normal((steps, n))).astype(np.float32)
    return w, g


@pytest.mark.parametrize("k,noise", [(1, 0.3), (2, 0.3), (2, 0.05), (3, 1.0)])
def test_aesp_matches_an_independent_implementation(k, noise):
    w, g = _noisy_quadratic(60, noise=noise, seed=k)
    pred = make_predictor("adaptive", k)
    ref = AESPReference(k)
    lams = []
    for t in range(k, len(w)):
        F = pred.predict(g[t - k], w[t], w[t - k])
        F_ref = ref.predict(g[t - k], w[t], w[t - k])
        np.testing.assert_allclose(F, F_ref, rtol=1e-4, atol=1e-5, err_msg=f"forecast at t={t}")
        assert pred.lam == pytest.approx(ref.lam, rel=1e-4, abs=1e-6), f"lambda at t={t}"
        lams.append(ref.lam)
    # the confidence takes values inside (0, 1): a rule that pins it (at 0 or 1) cannot match
    assert any(0 < x < 1 for x in lams), lams


def test_aesp_confidence_falls_when_corrections_are_noise():
    """Gradients that are pure noise: the corrections explain nothing, so the
    smoothed regression slope (lambda) stays near 0, far from 1."""
    rng = np.random.default_rng(5)
    pred = make_predictor("adaptive", 1, rho_l=0.9)
    w = np.cumsum(rng.standard_normal((200, 6)) * 0.3, axis=0).astype(np.float32)
    for t in range(1, 200):
        pred.predict(rng.standard_normal(6).astype(np.float32), w[t], w[t - 1])
    assert pred.lam < 0.3


@pytest.mark.parametrize("k", [1, 3])
def test_lookahead_extrapolates_along_minus_the_velocity(k):
    """SpecTrain: the gradient is taken at w - k * lr * mu * v (v: the momentum
    buffer), where the weights will be when it is applied. Hand numbers."""
    w = np.array([1.0, -2.0, 0.5], np.float32)
    opt = SGD([], lr=0.1, momentum=0.9)
    opt.buffers = [np.array([1.0, 2.0, -4.0], np.float32)]
    got = make_predictor("lookahead", k).lookahead_weights(w, opt)
    expected = np.array([1.0 - k * 0.09 * 1.0, -2.0 - k * 0.09 * 2.0, 0.5 + k * 0.09 * 4.0], np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # and the weights really move that way: heavy-ball SGD with a zero gradient
    # for k steps carries w along -lr * mu * v per step (to first order in mu)
    assert np.all(np.sign(got - w) == -np.sign(opt.buffers[0]))
    opt.buffers = [None]
    assert make_predictor("lookahead", k).lookahead_weights(w, opt) is None  # no velocity yet
