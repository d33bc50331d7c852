"""The local-anchored predictors ``local`` and ``adaptive-local`` (issue 12):
d^i_t = G_{t-k} + lambda (g^i_t - g^i_{t-k}).

- On 4 virtual ranks (tests/local_predictor_worker.py), with every rank fed the same batch, both equal synchronous
  SGD step by step (k = 1 and 2: the local gradient then equals the average);
  ``last`` does not (the check can fail). lambda is the same on every rank.
- lambda's regression, in a one-process simulation of P = 4 ranks: it settles
  near 1/P when the local changes are pure noise and near 1 on a noiseless
  problem; a mutated regression (numerator accumulating <c, c>) fails that check.
- The fill rule and the telescoping sum, checked against NumPy sums of the fed
  gradients; without the fill rule the identity fails.
- A stopped and resumed run equals the uninterrupted one bitwise (every rank's
  weights, momentum, the metrics, the consensus distance), and the consensus
  distance stays bounded.
"""
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.local_predictors import AdaptiveLocalPredictor, LocalPredictor

from .conftest import run_ranks
from .local_sgd_checks import stop_resume_is_bitwise

WORKER = str(Path(__file__).with_name("local_predictor_worker.py"))


# --- on 4 ranks ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def worker_run(tmp_path_factory):
    """One run of the worker on 4 virtual ranks (the rules are under test, not MPI; virtual ranks
    sum as MPICH does, tests/test_virtual.py): every check below reads its file."""
    out = tmp_path_factory.mktemp("local_predictor") / "w.npz"
    r = run_ranks(4, WORKER, str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    return np.load(out)


def test_same_batch_on_every_rank_equals_sync_and_lambda_is_shared(worker_run):
    d = worker_run
    sync = d["same_sync"]
    for spec in ("pseudo-sync:local:1", "pseudo-sync:local:2", "pseudo-sync:adaptive-local:1",
                 "pseudo-sync:adaptive-local:2", "pseudo-sync:local-rewind:1", "pseudo-sync:local-rewind:2",
                 "pseudo-sync:layerwise-local:1",
                 "pseudo-sync:local:2:sync_warmup=4"):  # the hand-over at step W applies every average once
        # every step, not only the last: float32 rounding of G + (g_t - g_{t-k}) vs g_t
        np.testing.assert_allclose(d[f"same_{spec}"], sync, rtol=1e-5, atol=1e-6, err_msg=spec)
        assert d[f"identical_{spec}"], spec  # same data: the ranks' weights agree bitwise
    assert np.abs(d["same_pseudo-sync:last:1"] - sync).max() > 1e-2  # the stale rule is not sync
    for k in (1, 2):
        lam = d[f"lam_{k}"]                  # (P, steps), own data per rank
        assert (lam == lam[0]).all(), k      # pooled sums: every rank uses the same lambda
        assert np.isfinite(lam[:, 2 * k + 2:]).all() and 0 <= lam[0, -1] <= 1
        assert not d[f"own_identical_{k}"]   # own data: the ranks' weights differ


def test_sync_warmup_is_sync_then_local(worker_run):
    """``local``'s sync_warmup = W (issue 31): own data per rank; the first W steps
    equal --algo sync bitwise with identical ranks, after them the ranks differ
    (the local rule took over); without the option step 0 already differs."""
    d = worker_run
    sync = d["own_sync"]
    for spec in ("pseudo-sync:local:1:sync_warmup=4", "pseudo-sync:local:2:sync_warmup=4"):
        w, same = d[f"own_{spec}"], d[f"own_same_{spec}"]
        assert np.array_equal(w[:4], sync[:4]) and same[:4].all(), spec
        assert not same[4:].any() and not np.array_equal(w[4], sync[4]), spec
    assert not np.array_equal(d["own_pseudo-sync:local:1"][0], sync[0])   # the check can fail
    assert not d["own_same_pseudo-sync:local:1"][0]


def test_resume_is_bitwise_and_consensus_distance_bounded(tmp_path):
    rows, (_, w, _) = stop_resume_is_bitwise("pseudo-sync:adaptive-local:2", tmp_path, 7, 14)
    assert not np.array_equal(w[0], w[1])
    dist = np.array([float(r["consensus_distance"]) for r in rows])
    lam = np.array([float(r["lambda"]) for r in rows])
    # bounded: the first steps' large gradients set the peak, then the drift shrinks with them
    # (an offset that accumulated, e.g. without the fill rule, would not fall back)
    assert (dist > 0).all() and dist.max() < 5, dist
    assert dist[-1] < 0.5 * dist.max(), dist
    assert ((lam >= 0) & (lam <= 1)).all()


# --- one-process simulation of P ranks -----------------------------------------------
def simulate(cls, grads, k, layout=None, **options):
    """Drive P predictors as pseudo-sync does (payload appended to each posted
    buffer, the allreduce a mean over ranks, FIFO arrival k steps later).

    Args:
        grads: float32 (T, P, n), rank i's gradient at step t (given, not
            depending on the weights).
        layout: the tensors' (start, stop) handed to ``set_layout`` (default:
            one tensor, the whole vector).

    Returns:
        (directions (T, P, n) float64, lambdas (T,), the predictors).
    """
    T, P, n = grads.shape
    preds = [cls(k, **options) for _ in range(P)]
    for p in preds:
        p.set_layout(layout or [(0, n)])
    pipeline, dirs, lams = deque(), np.zeros((T, P, n)), np.zeros(T)
    for t in range(T):
        bufs = []
        for i, p in enumerate(preds):
            p.observe_local(grads[t, i])
            tail = p.payload() if p.extra_floats else np.zeros(0, np.float32)
            bufs.append(np.concatenate([grads[t, i], tail]).astype(np.float32))
        pipeline.append(np.mean(bufs, axis=0, dtype=np.float64).astype(np.float32))
        if len(pipeline) > k:
            G = pipeline.popleft()
            for i, p in enumerate(preds):
                if p.extra_floats:
                    p.receive(G[n:])
                dirs[t, i] = p.predict(G[:n].copy(), None, None)
        else:
            for i, p in enumerate(preds):
                d = p.fill()
                dirs[t, i] = 0 if d is None else d
        lams[t] = preds[0].lam
    return dirs, lams, preds


def noise_problem(T=600, P=4, n=50, seed=0):
    """A constant mean gradient plus independent noise per rank and step: every
    local change is pure noise."""
    r = np.random.default_rng(seed)
    return (np.ones(n) + r.standard_normal((T, P, n))).astype(np.float32)


def noiseless_problem(T=600, P=4, n=50, seed=0):
    """The same, changing gradient on every rank: local change = global change."""
    r = np.random.default_rng(seed)
    walk = np.cumsum(r.standard_normal((T, n)), axis=0)
    return np.repeat(walk[:, None, :], P, axis=1).astype(np.float32)


def lambda_settles(cls, k):
    """lambda's mean over the last third: near 1/P = 0.25 on noise, near 1 noiseless."""
    _, lam_noise, _ = simulate(cls, noise_problem(), k)
    _, lam_clean, _ = simulate(cls, noiseless_problem(), k)
    tail = slice(400, None)
    return abs(lam_noise[tail].mean() - 0.25) < 0.06 and lam_clean[tail].min() > 0.97


class NumeratorMutant(AdaptiveLocalPredictor):
    """A wrong regression: the numerator accumulates <c, c> instead of <a, c>."""

    def _update_confidence(self, ac, cc):
        super()._update_confidence(cc, cc)


@pytest.mark.parametrize("k", [1, 2])
def test_lambda_settles_near_1_over_P_on_noise_and_near_1_noiseless(k):
    assert lambda_settles(AdaptiveLocalPredictor, k)
    assert not lambda_settles(NumeratorMutant, k)  # the check catches a wrong regression


def telescoped(grads, k, weights=None):
    """NumPy: what a rank's directions must sum to after T steps: every average
    G_s, s <= T-1-k, once, plus its own last k gradients (times their weights)."""
    T = grads.shape[0]
    G = grads.astype(np.float64).mean(axis=1)
    w = np.ones(T) if weights is None else weights
    return G[:T - k].sum(axis=0)[None] + np.einsum("t,tpn->pn", w[T - k:], grads[T - k:].astype(np.float64))


class NoFill(LocalPredictor):
    """``local`` without the fill rule (no update before the first arrival)."""

    def fill(self):
        return None


@pytest.mark.parametrize("k", [1, 2])
def test_fill_rule_makes_the_directions_telescope(k):
    g = noise_problem(T=40, P=3, n=20, seed=k)
    for cls, opts in ((LocalPredictor, {}), (AdaptiveLocalPredictor, {"warmup": 1, "rho": 0.5})):
        dirs, lams, _ = simulate(cls, g, k, **opts)
        weights = lams if cls is AdaptiveLocalPredictor else None   # lambda_t of each step's own g_t
        np.testing.assert_allclose(dirs.sum(axis=0), telescoped(g, k, weights), rtol=1e-4, atol=1e-3,
                                   err_msg=cls.name)
    dirs, _, _ = simulate(NoFill, g, k)
    assert not np.allclose(dirs.sum(axis=0), telescoped(g, k), rtol=1e-4, atol=1e-3)
    # the literal form with a varying lambda does not telescope (the residual the default removes)
    dirs, lams, _ = simulate(AdaptiveLocalPredictor, g, k, warmup=1, rho=0.5, telescope=False)
    assert not np.allclose(dirs.sum(axis=0), telescoped(g, k, lams), rtol=1e-4, atol=1e-3)


def test_constant_lambda_forms_agree_and_local_is_adaptive_local_at_lambda_1():
    g = noise_problem(T=30, P=2, n=10)
    a, _, _ = simulate(LocalPredictor, g, 2)
    b, lam, _ = simulate(AdaptiveLocalPredictor, g, 2, warmup=10**6)  # lambda stays at lambda0 = 1
    assert (lam == 1).all() and np.array_equal(a, b)


@pytest.mark.parametrize("k", [1, 2])
def test_local_with_a_weight_is_adaptive_local_held_at_that_confidence(k):
    """``local:correction_weight=lambda`` (issue 43) takes the same directions as adaptive-local whose
    confidence stays at lambda0 = lambda (its warm-up never ends), step for step, fill included;
    weight 1 is local itself, bit for bit."""
    g = noise_problem(T=40, P=3, n=12)
    a, lam_a, _ = simulate(LocalPredictor, g, k, correction_weight=0.5)
    b, lam_b, _ = simulate(AdaptiveLocalPredictor, g, k, lambda0=0.5, warmup=10**6)
    assert (lam_a == 0.5).all() and (lam_b == 0.5).all()
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    one, _, _ = simulate(LocalPredictor, g, k, correction_weight=1.0)
    plain, _, _ = simulate(LocalPredictor, g, k)
    assert np.array_equal(one, plain)


# --- the code that runs, against the formula written here --------------------------------
@pytest.mark.parametrize("n", [1, 7, 1000])
@pytest.mark.parametrize("lams", [(1.0, 1.0), (0.3, 0.3), (0.4, 0.7)])
def test_adaptive_local_loop_matches_the_formula_in_float64(n, lams, rng):
    """_adaptive_local_loop against an independent float64 expression of
    d = G + lam_new g_new - lam_old g_old and the sums <G, c_t>, <c_t, c_t>, <G, c_{t-k}>."""
    from minips.distributed.algorithms.local_predictors import _adaptive_local_loop
    G, gn, go, c_old = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
    c_before = c_old.astype(np.float64)
    d = np.empty_like(G)
    q, cc, r = _adaptive_local_loop(G, gn, go, c_old, np.float32(lams[0]), np.float32(lams[1]), d)
    G64, gn64, go64 = (v.astype(np.float64) for v in (G, gn, go))
    c64 = gn64 - go64
    np.testing.assert_allclose(d, G64 + lams[0] * gn64 - lams[1] * go64, rtol=1e-5, atol=1e-5)
    assert q == pytest.approx(float(G64 @ c64), rel=1e-5, abs=1e-5)
    assert cc == pytest.approx(float(c64 @ c64), rel=1e-5)
    assert r == pytest.approx(float(G64 @ c_before), rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(c_old, c64, rtol=1e-6, atol=1e-6)  # c_t written over c_{t-k}


def test_local_direction_is_the_formula(rng):
    """``local``: d = G_{t-k} + (g_t - g_{t-k}), checked in float64 against the ring's gradients."""
    p = LocalPredictor(2)
    gs = [rng.standard_normal(50).astype(np.float32) for _ in range(5)]
    for t, g in enumerate(gs):
        p.observe_local(g)
        if t < 2:
            np.testing.assert_array_equal(p.fill(), g)  # pipeline fill: g_t itself
            continue
        G = rng.standard_normal(50).astype(np.float32)
        want = G.astype(np.float64) + (g.astype(np.float64) - gs[t - 2].astype(np.float64))
        np.testing.assert_allclose(p.predict(G, None, None), want, rtol=1e-6, atol=1e-6)


def test_local_with_a_weight_is_the_formula(rng):
    """``local:correction_weight=lambda``: fill lambda g_t, then d = G_{t-k} + lambda (g_t - g_{t-k}), in float64."""
    p = LocalPredictor(2, correction_weight=0.3)
    gs = [rng.standard_normal(50).astype(np.float32) for _ in range(5)]
    for t, g in enumerate(gs):
        p.observe_local(g)
        if t < 2:
            np.testing.assert_allclose(p.fill(), 0.3 * g.astype(np.float64), rtol=1e-6)
            continue
        G = rng.standard_normal(50).astype(np.float32)
        want = G.astype(np.float64) + 0.3 * (g.astype(np.float64) - gs[t - 2].astype(np.float64))
        np.testing.assert_allclose(p.predict(G, None, None), want, rtol=1e-6, atol=1e-6)


# --- options ---------------------------------------------------------------------------
def test_spec_and_replication():
    for text in ("pseudo-sync:local", "pseudo-sync:adaptive-local:2", "pseudo-sync:predictor=adaptive-local:rho=0.9"):
        assert not resolve(text).replicated, text
    assert resolve("pseudo-sync:last").replicated and resolve("pseudo-sync:adaptive").replicated


@pytest.mark.parametrize("text,message", [
    ("pseudo-sync:adaptive-local:rho=1", "adaptive-local: rho must be in [0, 1), got 1.0"),
    ("pseudo-sync:adaptive-local:lambda0=2", "adaptive-local: lambda0 must be in [0, 1], got 2.0"),
    ("pseudo-sync:adaptive-local:warmup=-1", "adaptive-local: warmup must be >= 0, got -1"),
    ("pseudo-sync:local:rho=0.9", "predictor 'local' has no option(s) rho"),
    ("pseudo-sync:local:sync_warmup=-1", "local: sync_warmup must be >= 0"),
    ("pseudo-sync:local:correction_weight=0", "local: correction_weight must be in (0, 1]"),
    ("pseudo-sync:local:correction_weight=1.5", "local: correction_weight must be in (0, 1]"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
