"""The staleness lab on P ranks (issue 42): under ``local`` the ranks' differences follow a rule
of their own, stable only up to half of sync's step, and only per-rank noise excites them."""
import numpy as np
import pytest

from minips.labs.staleness import LeastSquares, largest_stable_steps, simulate_ranks

MU = 0.9


def test_largest_stable_steps_match_the_closed_forms():
    """Nesterov: sync 2(1 + mu)/(1 + 2 mu) = 1.357, a rank's difference under local (k = 1)
    (1 + mu)/(1 + 2 mu) = 0.679 (the Jury condition 1 + trace + det > 0 of its 2x2 matrix);
    heavy ball: 2(1 + mu) and 1 + mu (the step's momentum factor mu - x inside (-1, 1))."""
    nes, hb = largest_stable_steps(1, MU, True), largest_stable_steps(1, MU, False)
    assert nes["synchronous"] == pytest.approx(2 * (1 + MU) / (1 + 2 * MU), abs=1e-6)
    assert nes["local_deviation"] == pytest.approx((1 + MU) / (1 + 2 * MU), abs=1e-6)
    assert hb["synchronous"] == pytest.approx(2 * (1 + MU), abs=1e-6)
    assert hb["local_deviation"] == pytest.approx(1 + MU, abs=1e-6)
    # a longer delay shrinks it further (k = 2: 0.593)
    assert largest_stable_steps(2)["local_deviation"] == pytest.approx(0.5934, abs=1e-3)


def _run(direction, x, steps=3000):
    """The size of the last step after ``steps`` of Nesterov SGD (lr = 1, mu = 0.9, as
    minips.optim.SGD) with the direction ``x * direction(w, t)``, from w_0 = 0, w_1 = 1 (the
    deviation loop keeps any constant offset, so its steps, not w, tell decay from growth)."""
    w, v = [0.0, 1.0], 0.0
    for _ in range(steps):
        d = x * direction(w, len(w) - 1)
        v = MU * v + d
        w.append(w[-1] - (d + MU * v))
        if abs(w[-1]) > 1e6:
            break
    return abs(w[-1] - w[-2])


def test_a_correction_weight_trades_the_mean_loop_for_the_deviation_loop():
    """The two loops of d = G_{t-k} + lam (g_t - g_{t-k}) (issue 43): lam = 1 is local (the mean
    loop is sync's, 1.357; the deviation loop local's, 0.679); the deviation loop's step scales
    as 1 / lam (its direction is lam times local's); lam = 0 leaves the naive stale update,
    whose mean loop is last's (the k = 1 Nesterov threshold of the stale update, below sync's);
    the weight that maximizes the smaller of the two is 0.625, where both hold to about 1.09."""
    from minips.labs.staleness import mean_transition, stability_weight
    one = largest_stable_steps(1, MU, True, lam=1.0)
    assert one["weighted_mean"] == pytest.approx(one["synchronous"], abs=1e-5)
    assert one["weighted_deviation"] == pytest.approx(one["local_deviation"], abs=1e-5)
    for lam in (0.5, 0.625, 0.8):
        w = largest_stable_steps(1, MU, True, lam=lam)
        assert w["weighted_deviation"] == pytest.approx(one["local_deviation"] / lam, abs=1e-5)
        # the thresholds, checked by running the two recursions with the optimizer's rule itself:
        # decays just below, grows just above
        for loop, direction in (("weighted_mean", lambda w, i, lam=lam: lam * w[i] + (1 - lam) * w[i - 1]),
                                ("weighted_deviation", lambda w, i, lam=lam: lam * (w[i] - w[i - 1]))):
            thr = w[loop]
            assert _run(direction, 0.97 * thr) < 1e-3 and _run(direction, 1.03 * thr) > 1e3, (lam, loop)
    # lam = 0: the mean steps along G_{t-1} alone; its matrix is the naive stale update's, by hand
    x = 0.3
    A = mean_transition(x, 1, 0.0)
    w_row = np.array([1.0, -x * (1 + MU), -MU * MU])           # w' = w - (d + mu v'), d = x w_{t-1}, v' = mu v + d
    np.testing.assert_allclose(A[0], w_row, atol=1e-12)
    assert stability_weight(1) == 0.625
    for bad in (lambda: mean_transition(0.5, 0), lambda: mean_transition(0.5, 1, 1.5), lambda: stability_weight(0)):
        with pytest.raises(ValueError, match="must be"):
            bad()
    from minips.labs.staleness import weights_table
    assert "| 0.625 | 1.127 | 1.086 | 1.086 |" in weights_table(lams=(0.625,))  # docs/accuracy.md section 11
    best = largest_stable_steps(1, MU, True, lam=0.625)
    assert min(best["weighted_mean"], best["weighted_deviation"]) == pytest.approx(1.09, abs=0.01)


@pytest.fixture(scope="module")
def problem():
    p = LeastSquares()
    H = p.X.T.astype(np.float64) @ p.X.astype(np.float64) / p.m
    return p, float(np.linalg.eigvalsh(H)[-1])


def test_local_diverges_between_the_two_thresholds_only_with_per_rank_noise(problem):
    """lr h between 0.679 and 1.357 (0.9 / lambda_max), large per-rank batches (little noise):
    sync is stable; local diverges when each rank draws its own rows, and with the same rows on
    every rank it is sync itself (no difference between ranks ever appears)."""
    p, lam = problem
    lr = 0.9 / lam
    kw = dict(lr=lr, batch=256, steps=300, seed=0)
    with np.errstate(all="ignore"):
        sync = simulate_ranks(p, 4, None, **kw)
        own = simulate_ranks(p, 4, "local", **kw)
        same = simulate_ranks(p, 4, "local", same_batch=True, **kw)
        sync_same = simulate_ranks(p, 4, None, same_batch=True, **kw)
    assert not sync["diverged"]
    assert own["diverged"]
    assert own["consensus"][own["steps"] - 1] > 1e3 * own["consensus"][10]   # the differences blew up
    assert not same["diverged"] and max(same["consensus"]) == 0.0
    assert same["loss"] == pytest.approx(sync_same["loss"], rel=1e-5)


def test_below_half_of_syncs_step_local_is_stable(problem):
    p, lam = problem
    r = simulate_ranks(p, 4, "local", lr=0.55 / lam, batch=256, steps=300, seed=0)
    assert not r["diverged"] and r["consensus"][-1] < 1e-2 * r["consensus"][0]   # the differences die out


def test_a_predictor_that_pools_sums_is_refused(problem):
    p, _ = problem
    with pytest.raises(ValueError, match="pools sums"):
        simulate_ranks(p, 2, "adaptive-local", steps=2)


def test_the_lab_passes_predictor_options_and_the_weights_an_average_was_computed_at(problem):
    """``predictor_options`` reach the rule (a bad one is refused by it), and ``local-pull``, which
    needs the weights each arriving average was computed at, gets them: with every rank on the same
    rows the ranks never differ, so the pull must be zero and the run ``local``'s, which holds only if
    the mean the rule computes from those weights is the ranks' true mean of k steps before (with a
    correction weight below 1 too, whose mean direction mixes two averages; the lab's rate is constant,
    so the learning rates' bookkeeping is tests/test_local_pull.py's)."""
    p, _ = problem
    with pytest.raises(ValueError, match=r"pull must be at most 1.000 at staleness 1"):
        simulate_ranks(p, 2, "local-pull", steps=2, predictor_options={"pull": 2.0})
    for k, lam in ((1, 1.0), (2, 0.7)):
        runs = [simulate_ranks(p, 4, name, staleness=k, lr=0.1, steps=200, same_batch=True, predictor_options=opts)
                for name, opts in [("local", {"correction_weight": lam}),
                                   ("local-pull", {"pull": 0.5, "correction_weight": lam})]]
        assert not any(r["diverged"] for r in runs)
        assert runs[1]["loss"] == pytest.approx(runs[0]["loss"], rel=1e-5), k
