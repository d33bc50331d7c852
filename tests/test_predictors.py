"""Gradient predictors and the stale-by-k rule on a small deterministic problem."""
import numpy as np
import pytest

from minips.distributed.algorithms.predictors import PREDICTORS, make_predictor
from minips.labs.staleness import LeastSquares, run_stale_sgd, simulate_stale_sgd


@pytest.fixture(scope="module")
def problem():
    # Axis-aligned least squares, d=200, condition number 1000 (the design spec's check).
    return LeastSquares(d=200, m=4000, cond=1000.0, rotate=False, seed=0)


def test_last_diverges_where_adaptive_converges(problem):
    """lr 0.08, momentum 0.9, staleness 2: the stale gradient destabilises heavy
    ball; the curvature-corrected forecast keeps it stable."""
    sync = run_stale_sgd(problem, staleness=0, lr=0.08, steps=1500, seed=1, record_every=50)
    last = run_stale_sgd(problem, "last", staleness=2, lr=0.08, steps=1500, seed=1, record_every=50)
    adaptive = run_stale_sgd(problem, "adaptive", staleness=2, lr=0.08, steps=1500, seed=1, record_every=50)
    assert not sync["diverged"] and sync["final_loss"] < 0.02
    assert last["diverged"]
    assert not adaptive["diverged"] and adaptive["final_loss"] < 0.1


@pytest.mark.parametrize("name", ["ema", "holt"])
def test_literal_smoothing_readings_also_diverge(problem, name):
    r = run_stale_sgd(problem, name, staleness=2, lr=0.08, steps=1500, seed=1, record_every=50)
    assert r["diverged"]


def test_lookahead_and_fixed_lambda_converge(problem):
    look = run_stale_sgd(problem, "lookahead", staleness=2, lr=0.08, steps=1500, seed=1, record_every=50)
    fixed = run_stale_sgd(problem, "adaptive", staleness=2, lr=0.08, steps=1500, seed=1, record_every=50,
                          predictor_options={"adapt_lambda": False, "lambda0": 1.0})
    assert not look["diverged"] and look["final_loss"] < 0.05
    assert not fixed["diverged"] and fixed["final_loss"] < 0.05


def test_adaptive_forecast_beats_naive_on_a_quadratic(problem):
    """With full-batch gradients (no sampling noise) on a diagonal quadratic, the
    secant curvature is the true one: the forecast error is far below the naive
    stale gradient's (rel_error << 1) and lambda stays near 1. (With minibatch
    noise, G_j - G_{j-k} is mostly noise that no forecast can predict, and
    rel_error sits near 1: see docs/distributed.md.)"""
    full = np.arange(problem.m)
    r = simulate_stale_sgd(lambda w, t: problem.grad(w, full), np.zeros(problem.d, np.float32), "adaptive",
                           staleness=1, lr=0.05, steps=300)
    rel = np.array([d["rel_error"] for d in r["diagnostics"] if "rel_error" in d])
    assert np.median(rel[50:]) < 0.3
    assert r["diagnostics"][-1]["lambda"] > 0.8


def test_last_is_identity_and_ema_holt_formulas():
    G1, G2 = np.array([1.0, 2.0], np.float32), np.array([3.0, 0.0], np.float32)
    w = np.zeros(2, np.float32)
    last = make_predictor("last", 1)
    np.testing.assert_array_equal(last.predict(G1, w, w), G1)
    ema = make_predictor("ema", 1, alpha=0.25)
    ema.predict(G1, w, w)
    np.testing.assert_allclose(ema.predict(G2, w, w), 0.25 * G2 + 0.75 * G1)
    holt = make_predictor("holt", 2, alpha=0.5, beta=0.5)
    holt.predict(G1, w, w)  # L = G1, B = 0
    L = 0.5 * G2 + 0.5 * G1
    B = 0.5 * (L - G1)
    np.testing.assert_allclose(holt.predict(G2, w, w), L + 2 * B)


def test_adaptive_recovers_diagonal_curvature_exactly_without_noise():
    """Noise-free quadratic g = H w with diagonal H: h converges to diag(H) and
    the forecast G + h (w_now - w_then) is the exact gradient at w_now."""
    H = np.array([0.5, 2.0, 10.0], np.float32)
    pred = make_predictor("adaptive", 1, rho=0.5)
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(3).astype(np.float32) for _ in range(40)]
    for t in range(1, 40):
        F = pred.predict(H * ws[t - 1], ws[t], ws[t - 1])
    np.testing.assert_allclose(pred.h, H, rtol=1e-4)
    np.testing.assert_allclose(F, H * ws[39], rtol=1e-3, atol=1e-5)
    assert pred.lam == pytest.approx(1.0, abs=1e-3)
    assert pred.diagnostics["rel_error"] < 1e-2


def _drive(p, opt, w, G, w_then, t, k):
    """Step t of pseudo-sync's pipeline for one rank: the fill (t < k) or the prediction from
    G_{t-k} (computed at w_then), then the step, by the predictor when it owns it."""
    d = p.fill() if t < k else p.predict(G, w.copy(), w_then)
    if d is not None:
        own = getattr(p, "apply_step", None)
        own(opt, w, d) if own else opt.apply(0, w, d)
    return d


def test_predictor_state_roundtrip():
    """A predictor restored from its state_dict (with the optimizer's) continues exactly: the
    same directions and the same weights for three steps (as pseudo-sync drives it: fill,
    then predictions from k-step-old averages, the step by the predictor where it owns it)."""
    from minips.optim import SGD
    from minips.tensor import Tensor
    rng = np.random.default_rng(1)
    k = 2
    for name in PREDICTORS:
        a, b = make_predictor(name, k), make_predictor(name, k)
        w = np.zeros(5, np.float32)
        opt_a = SGD([Tensor(w)], lr=0.1, momentum=0.9, nesterov=True)
        sent = []  # (G_t, w_t) in flight
        for t in range(5):
            G = rng.standard_normal(5).astype(np.float32)
            sent.append((G, w.copy()))
            if a.uses_local_gradient:  # local, adaptive-local: this rank's gradient first
                a.observe_local(G + 0.1)
            G_old, w_then = sent[t - k] if t >= k else (None, None)
            _drive(a, opt_a, w, G_old, w_then, t, k)
        b.load_state_dict(a.state_dict())
        wb = w.copy()
        opt_b = SGD([Tensor(wb)], lr=0.1, momentum=0.9, nesterov=True)
        opt_b.load_state_dict(opt_a.state_dict())
        for t in range(5, 8):  # three steps on: state that only matters a step later (momentum) shows too
            G = rng.standard_normal(5).astype(np.float32)
            G_old, w_then = sent[t - k]
            sent.append((G, w.copy()))
            for p in (a, b):
                if p.uses_local_gradient:
                    p.observe_local(G - 0.2)
            da, db = _drive(a, opt_a, w, G_old, w_then, t, k), _drive(b, opt_b, wb, G_old, w_then, t, k)
            np.testing.assert_array_equal(da, db, err_msg=f"{name}, step {t}")
            np.testing.assert_array_equal(w, wb, err_msg=f"{name}, step {t}")


def test_bad_predictor_options():
    with pytest.raises(ValueError, match="unknown predictor 'magic'.*adaptive"):
        make_predictor("magic")
    with pytest.raises(ValueError, match="no option.*gamma.*alpha"):
        make_predictor("ema", 1, gamma=0.3)
    with pytest.raises(ValueError, match="alpha must be in"):
        make_predictor("ema", 1, alpha=0.0)
    with pytest.raises(ValueError, match="staleness must be >= 1"):
        make_predictor("last", 0)


# --- AESP regression oracle ----------------------------------------------------------
# tests/fixtures/aesp_before_refactor.npz holds what AdaptivePredictor produced at commit
# 528db07, before its rule was gathered into AdaptivePredictor.forecast: every forecast,
# lambda and diagnostic of a fixed sequence of (G_{t-k}, w_t, w_{t-k}), and the
# state_dict halfway and at the end. The refactor promised bit-identical results, so the
# comparison is on the bytes. It was written by
#     python -c "import tests.test_predictors as t; t.write_aesp_fixture()"
# (numpy 2.4.6, numba 0.68.1). If it fails after a NumPy/Numba upgrade but not after a
# change to the predictor, look at h_mean first (a float32 np.mean).
AESP_FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "aesp_before_refactor.npz"
# (The fixture also holds the "_numpy" cases of the NumPy twin that AESP had until issue 25;
# the one path left is the Numba loop, whose cases are the ones without the suffix.)
AESP_CASES = {f"k{k}_{tag}": (k, opts)
              for k in (1, 2)
              for tag, opts in (("adapt", {}), ("adapt_l1_h50", {"lambda0": 1.0, "h_max": 50.0}),
                                ("fixed_l1", {"adapt_lambda": False, "lambda0": 1.0}))}
AESP_DIAGNOSTICS = ("lambda", "h_mean", "cos_forecast", "rel_error")


def _aesp_sequence(k, n=24, steps=32, seed=7):
    """A noisy diagonal quadratic along a fixed random walk: the calls (G_{t-k}, w_t, w_{t-k})
    for t = k..steps-1, independent of the forecasts (so the oracle needs no predictor)."""
    r = np.random.default_rng(seed)
    H = r.uniform(0.1, 5.0, n).astype(np.float32)
    w = np.cumsum(0.05 * r.standard_normal((steps, n)), axis=0).astype(np.float32)
    G = (H * w + 0.05 * r.standard_normal((steps, n))).astype(np.float32)
    return [(G[t - k], w[t], w[t - k]) for t in range(k, steps)]


def _aesp_outputs(k, options):
    """Flat dict of arrays: forecasts, lambda, diagnostics (NaN where absent), state_dicts."""
    pred = make_predictor("adaptive", k, **options)
    calls = _aesp_sequence(k)
    F, diag, out = [], [], {}
    for i, (G, w_now, w_then) in enumerate(calls):
        F.append(pred.predict(G, w_now, w_then))
        diag.append([float(pred.diagnostics.get(name, np.nan)) for name in AESP_DIAGNOSTICS])
        if i in (len(calls) // 2, len(calls) - 1):
            tag = "mid" if i < len(calls) - 1 else "end"
            state = pred.state_dict()
            out[f"state_{tag}_keys"] = np.array(sorted(state))
            for key, v in state.items():
                if isinstance(v, list):
                    v = np.stack(v) if v else np.zeros((0,), np.float32)
                out[f"state_{tag}/{key}"] = np.asarray(v, np.float64 if isinstance(v, float) else None)
    out["F"], out["diagnostics"] = np.stack(F), np.array(diag, np.float64)
    return out


def write_aesp_fixture():
    AESP_FIXTURE.parent.mkdir(exist_ok=True)
    arrays = {f"{case}/{key}": v for case, (k, opts) in AESP_CASES.items()
              for key, v in _aesp_outputs(k, opts).items()}
    np.savez_compressed(AESP_FIXTURE, **arrays)


@pytest.mark.parametrize("case", list(AESP_CASES))
def test_adaptive_bit_identical_to_before_refactor(case):
    k, opts = AESP_CASES[case]
    got = _aesp_outputs(k, opts)
    with np.load(AESP_FIXTURE) as fx:
        want = {key[len(case) + 1:]: fx[key] for key in fx.files if key.startswith(case + "/")}
    assert sorted(got) == sorted(want)
    for key, w in want.items():
        g = got[key]
        assert g.dtype == w.dtype and g.shape == w.shape, key
        if g.dtype.kind in "fiu":
            diff = np.nanmax(np.abs(g - w)) if g.size else 0.0
            assert g.tobytes() == w.tobytes(), f"{case}: {key} differs (max |diff| {diff})"
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case}: {key}")
