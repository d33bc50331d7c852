"""Fused predictor kernels against their NumPy twins, and the fused AESP
against its NumPy path."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minips.distributed.algorithms.predictors import make_predictor
from minips.kernels import predict as kp
from minips.kernels import reference as ref


def vecs(n, k, seed):
    r = np.random.default_rng(seed)
    return [r.standard_normal(n).astype(np.float32) for _ in range(k)]


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 10_000), st.booleans())
def test_arrival_sums_match_twin(n, seed, with_c):
    G, Gn, F, c = vecs(n, 4, seed)
    got = kp.arrival_sums(G, Gn, F, c if with_c else None)
    want = ref.arrival_sums(G, Gn, F, c if with_c else None)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-9), k


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3000), st.integers(0, 10_000), st.floats(0, 1), st.floats(0, 0.99))
def test_aesp_step_matches_twin(n, seed, lam, rho):
    G, wn, wt, Gp, wp, Sgw, Sww, h = vecs(n, 8, seed)
    Sww = np.abs(Sww)  # a sum of squares
    h = np.abs(h)
    state_k = [a.copy() for a in (Gp, wp, Sgw, Sww, h)]
    state_t = [a.copy() for a in (Gp, wp, Sgw, Sww, h)]
    F, c = kp.aesp_step(G, wn, wt, *state_k, lam, rho, 1e-12, 50.0)
    Ft, ct = ref.aesp_step(G, wn, wt, *state_t, lam, rho, np.float32(1e-12), np.float32(50.0))
    np.testing.assert_allclose(F, Ft, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, ct, rtol=1e-5, atol=1e-6)
    for a, b in zip(state_k, state_t):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert (state_k[4] >= 0).all() and (state_k[4] <= 50).all()


def test_aesp_step_checks_inputs():
    G, *rest = vecs(5, 8, 0)
    with pytest.raises(ValueError, match="w_prev must be float32 with 5 elements"):
        kp.aesp_step(G, *rest[:3], rest[3][:4], *rest[4:], 0.5, 0.9, 1e-12, 50.0)
    with pytest.raises(ValueError, match="F has 4 elements"):
        kp.arrival_sums(G, G, G[:4])


def test_fused_adaptive_equals_numpy_path():
    """fused=False runs steps 2 and 1 with the twin reference.aesp_step."""
    rng = np.random.default_rng(3)
    a = make_predictor("adaptive", 2)
    b = make_predictor("adaptive", 2, fused=False)
    w = np.zeros(400, np.float32)
    H = rng.uniform(0, 3, 400).astype(np.float32)
    for _ in range(30):
        w_then = w.copy()
        w = w - 0.05 * rng.standard_normal(400).astype(np.float32)
        G = (H * w_then + 0.1 * rng.standard_normal(400)).astype(np.float32)
        Fa, Fb = a.predict(G, w, w_then), b.predict(G, w, w_then)
        np.testing.assert_allclose(Fa, Fb, rtol=1e-4, atol=1e-5)
        assert a.lam == pytest.approx(b.lam, rel=1e-4, abs=1e-6)
    np.testing.assert_allclose(a.h, b.h, rtol=1e-4, atol=1e-5)
    assert a.diagnostics["cos_forecast"] == pytest.approx(b.diagnostics["cos_forecast"], rel=1e-5)
