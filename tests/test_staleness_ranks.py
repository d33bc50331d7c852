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
