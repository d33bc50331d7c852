"""Delay compensations of pseudo-sync (spike, dc-asgd, gap-aware): stability,
the spike impulse response, the formulas against NumPy oracles written here,
their limits (= ``last``), options, checkpoints, and replicas on 2 ranks.

Every expectation is computed in this file from the papers' equations (or in
tests/compensation_stability.py's transition matrix), never by the code under
test. Each rule's key term is flipped once in a mutated subclass, and the test
that pins it is shown to fail on the mutant."""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.delay_compensation import DCASGD, GapAware, SpikeCompensation
from minips.distributed.algorithms.predictors import PREDICTORS, make_predictor

from .compensation_stability import MU, code_threshold, drive, matrix_threshold
from .test_mpi import ATOL, RTOL, _reference_stale_run, launch


# --- stability on f(w) = h w^2 / 2, Nesterov 0.9 ------------------------------------------------
def test_stability_of_sync_and_of_a_delay_matches_the_exact_values():
    """The code's own rules (sync; pseudo-sync last, k = 1, 2), bisected by
    simulation, give the issue's 1.357 / 0.253 / 0.081 within 0.001, and the
    spectral radius of the transition matrix written here agrees."""
    assert 2 * (1 + MU) / (1 + 2 * MU) == pytest.approx(1.357, abs=5e-4)  # sync Nesterov's closed form
    for spec, k, rule, want in (("sync", 0, "sync", 1.357), ("pseudo-sync:last:1", 1, "last", 0.253),
                                ("pseudo-sync:last:2", 2, "last", 0.081)):
        exact = matrix_threshold(k, rule)
        got = code_threshold(spec)
        assert exact == pytest.approx(want, abs=1e-3), spec
        assert got == pytest.approx(exact, abs=1e-3), spec


class SpikeAsHeavyBall(SpikeCompensation):
    """Mutant: the heavy-ball coefficients (mu^k) used with Nesterov."""

    def apply_step(self, optimizer, w, d):
        nesterov = optimizer.nesterov
        optimizer.nesterov = False
        try:
            super().apply_step(optimizer, w, d)
        finally:
            optimizer.nesterov = nesterov


def test_spike_and_weight_prediction_stability_match_their_matrix(monkeypatch):
    """Spike compensation (Nesterov form) and SC + weight prediction: the code's
    threshold equals the matrix's (within 0.001) for k = 1 and 2, and is above
    last's; with the heavy-ball coefficients (a mutant) it is not."""
    for spec, k, rule, c in (("pseudo-sync:spike:1", 1, "spike", 0.0), ("pseudo-sync:spike:2", 2, "spike", 0.0),
                             ("pseudo-sync:spike:1:lwp=0.5", 1, "spike", 0.5)):
        exact = matrix_threshold(k, rule, c)
        assert code_threshold(spec) == pytest.approx(exact, abs=1e-3), spec
        assert exact > matrix_threshold(k, "last") + 0.03
    monkeypatch.setitem(PREDICTORS, "spike", SpikeAsHeavyBall)
    assert abs(code_threshold("pseudo-sync:spike:1") - matrix_threshold(1, "spike")) > 1e-3


# --- spike compensation: the impulse response ------------------------------------------------------
def sync_displacement(mu, nesterov, steps):
    """Cumulative displacement of sync's momentum SGD (lr = 1) after each step
    for one unit gradient at step 0 and none after: heavy ball moves mu^j at
    step j; Nesterov (1 + mu) at step 0 and mu^(j+1) at step j >= 1."""
    j = np.arange(steps)
    per_step = mu ** (j + 1) if nesterov else mu ** j
    if nesterov:
        per_step[0] = 1 + mu
    return np.cumsum(per_step)


def impulse_displacements(spec, nesterov, steps=25):
    """Drive ``spec`` with one unit gradient at step 0 (lr = 1): the cumulative
    displacement w_0 - w after each step."""
    out = []
    drive(spec, lambda w, t: np.float32([1.0 if t == 0 else 0.0]), [0.0], steps, lr=1.0, nesterov=nesterov,
          on_step=lambda a, t: out.append(-float(a.flat.weights[0])))
    return np.array(out)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("k", [1, 2])
def test_spike_impulse_moves_the_weights_as_sync_once_arrived(k, nesterov, monkeypatch):
    sync = sync_displacement(MU, nesterov, 25)
    got = impulse_displacements(f"pseudo-sync:spike:{k}", nesterov)
    assert np.all(got[:k] == 0)                          # the pipeline fill: nothing has arrived
    np.testing.assert_allclose(got[k:], sync[k:], rtol=1e-5)  # from the arrival on: sync's, step for step
    if (k, nesterov) == (1, False):
        assert got[1] == pytest.approx(1.9, rel=1e-6)    # 1 + 0.9 (docs/distributed.md, spike)
    if (k, nesterov) == (2, True):
        assert got[2] == pytest.approx(3.439, rel=1e-6)
    last = impulse_displacements(f"pseudo-sync:last:{k}", nesterov)
    assert not np.allclose(last[k:], sync[k:], rtol=1e-3)  # naive staleness is behind (1.0 / 1.9 at arrival)
    if nesterov:  # the mutant (heavy-ball coefficients with Nesterov) misses sync's displacement
        monkeypatch.setitem(PREDICTORS, "spike", SpikeAsHeavyBall)
        bad = impulse_displacements(f"pseudo-sync:spike:{k}", nesterov)
        assert not np.allclose(bad[k:], sync[k:], rtol=1e-3)


class SpikeBackwards(SpikeCompensation):
    """Mutant: weight prediction extrapolates backwards, w_t - c (w_t - w_{t-1})."""

    def lookahead_weights(self, w, optimizer):
        la = super().lookahead_weights(w, optimizer)
        return None if la is None else 2 * w - la


@pytest.mark.parametrize("cls,ok", [(SpikeCompensation, True), (SpikeBackwards, False)])
def test_weight_prediction_takes_the_gradient_at_the_extrapolated_weights(cls, ok, monkeypatch):
    """lwp = c: the gradient of step t is computed at w_t + c (w_t - w_{t-1});
    w_t is read after each step, the point inside the gradient call."""
    monkeypatch.setitem(PREDICTORS, "spike", cls)
    rng = np.random.default_rng(0)
    H = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    points, traj = [], [np.ones(6, np.float32)]
    drive("pseudo-sync:spike:2:lwp=0.75", lambda w, t: points.append(w.copy()) or H * w, np.ones(6), 12,
          on_step=lambda a, t: traj.append(a.flat.weights.copy()))
    want = [traj[t] + 0.75 * (traj[t] - traj[t - 1]) for t in range(3, 12)]  # moves start after the fill
    match = all(np.allclose(p, q, rtol=1e-6, atol=1e-7) for p, q in zip(points[3:], want))
    assert match is ok
    assert np.array_equal(points[0], traj[0])  # nothing to extrapolate from yet


# --- dc-asgd and gap-aware against NumPy oracles ---------------------------------------------------
def sequence(n=40, steps=30, seed=3):
    """(G_{t-k}, w_t, w_{t-k}) for a fixed random walk, independent of the predictor."""
    r = np.random.default_rng(seed)
    w = np.cumsum(0.05 * r.standard_normal((steps, n)), axis=0).astype(np.float32)
    G = r.standard_normal((steps, n)).astype(np.float32)
    return w, G


def dc_oracle(k, lambda0, m, adaptive, eps=1e-7):
    """DC-ASGD (Zheng et al. 2017, Algorithm 3): MeanSquare = m MS + (1-m) g^2 first,
    then g + lambda0 / (sqrt(MS) + eps) g^2 (w_t - w_{t-k}) (float64 here)."""
    w, G = sequence()
    ms, out = np.zeros(w.shape[1]), []
    for t in range(k, len(w)):
        g = G[t - k].astype(np.float64)
        ms = m * ms + (1 - m) * g * g
        lam = lambda0 / (np.sqrt(ms) + eps) if adaptive else lambda0
        out.append(g + lam * g * g * (w[t].astype(np.float64) - w[t - k]))
    return np.array(out)


def gap_oracle(k, beta, fixed_c=0.0):
    """Gap-aware: G / (1 + |w_t - w_{t-k}| / C), C = sqrt of the bias-corrected EMA
    of the squared steps between consecutive calls (none before the second)."""
    w, G = sequence()
    S, n, out = np.zeros(w.shape[1]), 0, []
    for t in range(k, len(w)):
        if t > k:
            S = beta * S + (1 - beta) * (w[t].astype(np.float64) - w[t - 1]) ** 2
            n += 1
        gap = np.abs(w[t].astype(np.float64) - w[t - k])
        if fixed_c:
            gap = gap / fixed_c
        elif n:
            gap = gap / np.sqrt(S / (1 - beta ** n))
        else:
            gap = 0 * gap
        out.append(G[t - k] / (1 + gap))
    return np.array(out)


def run_predictor(pred, k):
    w, G = sequence()
    return np.array([pred.predict(G[t - k], w[t], w[t - k]) for t in range(k, len(w))])


class DCMinus(DCASGD):
    """Mutant: the compensation subtracted."""

    def forecast(self, G, w_now, w_then):
        return 2 * G - super().forecast(G, w_now, w_then)


class GapTimes(GapAware):
    """Mutant: the stale gradient multiplied by the gap instead of divided."""

    def forecast(self, G, w_now, w_then):
        d = super().forecast(G, w_now, w_then)
        return G * (G / np.where(d == 0, 1, d))


@pytest.mark.parametrize("k", [1, 2])
def test_dc_asgd_follows_the_paper_and_the_mutant_does_not(k):
    for opts in ({}, {"lambda0": 0.5, "m": 0.5}, {"adaptive": False, "lambda0": 3.0}):
        o = {"lambda0": 2.0, "m": 0.95, "adaptive": True, **opts}
        want = dc_oracle(k, o["lambda0"], o["m"], o["adaptive"])
        np.testing.assert_allclose(run_predictor(make_predictor("dc-asgd", k, **opts), k), want, rtol=2e-5, atol=1e-6)
        assert not np.allclose(run_predictor(DCMinus(k, **opts), k), want, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("k", [1, 2])
def test_gap_aware_follows_the_rule_and_the_mutant_does_not(k):
    for opts in ({}, {"beta": 0.5}, {"fixed_c": 0.03}):
        want = gap_oracle(k, opts.get("beta", 0.99), opts.get("fixed_c", 0.0))
        np.testing.assert_allclose(run_predictor(make_predictor("gap-aware", k, **opts), k), want,
                                   rtol=2e-5, atol=1e-6)
        assert not np.allclose(run_predictor(GapTimes(k, **opts), k), want, rtol=1e-3, atol=1e-4)


def trajectory(spec, k=None, steps=30):
    """Weights after each step of ``spec`` on a noisy quadratic (Nesterov 0.9)."""
    rng = np.random.default_rng(5)
    H = rng.uniform(0.2, 1.5, 16).astype(np.float32)  # h*lr <= 0.15: every rule here is stable
    noise = (0.1 * rng.standard_normal((steps, 16))).astype(np.float32)
    out = []
    drive(spec, lambda w, t: H * w + noise[t], rng.standard_normal(16), steps,
          on_step=lambda a, t: out.append(a.flat.weights.copy()))
    assert np.isfinite(out).all(), spec
    return np.array(out)


@pytest.mark.parametrize("k", [1, 2])
def test_limits_equal_last(k):
    """dc-asgd with lambda0 = 0, gap-aware with C -> infinity, spike with sc off
    and no weight prediction: the same trajectory as last, bitwise; the default
    rules do differ from it."""
    last = trajectory(f"pseudo-sync:last:{k}")
    for spec in (f"pseudo-sync:dc-asgd:{k}:lambda0=0", f"pseudo-sync:spike:{k}:sc=false",
                 f"pseudo-sync:gap-aware:{k}:fixed_c=1e30"):
        assert np.array_equal(trajectory(spec), last), spec
    for spec in (f"pseudo-sync:dc-asgd:{k}", f"pseudo-sync:spike:{k}", f"pseudo-sync:gap-aware:{k}"):
        assert not np.allclose(trajectory(spec), last, rtol=1e-3), spec
    # C -> infinity as a limit (not only a huge value): the predictor with C = inf
    ga, w, G = GapAware(k, fixed_c=np.inf), *sequence()
    for t in range(k, len(w)):
        assert np.array_equal(ga.predict(G[t - k], w[t], w[t - k]), G[t - k])


@pytest.mark.parametrize("spec,words", [
    ("pseudo-sync:spike:1:lwp=-1", "spike: lwp must be a finite number >= 0"),
    ("pseudo-sync:spike:1:sc=maybe", "must be true or false"),
    ("pseudo-sync:dc-asgd:1:lambda0=-0.5", "dc-asgd: lambda0 must be a finite number >= 0"),
    ("pseudo-sync:dc-asgd:1:m=1", "dc-asgd: m must be in [0, 1)"),
    ("pseudo-sync:dc-asgd:1:eps=0", "dc-asgd: eps must be in (0, 1e-2)"),
    ("pseudo-sync:gap-aware:1:beta=1.5", "gap-aware: beta must be in [0, 1)"),
    ("pseudo-sync:gap-aware:1:fixed_c=-2", "gap-aware: fixed_c must be >= 0"),
    ("pseudo-sync:gap-aware:1:C=2", "has no option(s) C"),
])
def test_bad_options_give_one_clear_line(spec, words):
    with pytest.raises(ValueError) as e:
        resolve(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("spec", ["pseudo-sync:spike:1:lwp=0.5", "pseudo-sync:spike:2", "pseudo-sync:dc-asgd:1",
                                  "pseudo-sync:dc-asgd:2", "pseudo-sync:gap-aware:1", "pseudo-sync:gap-aware:2"])
def test_checkpoint_resume_is_bitwise(spec, tmp_path):
    """Stop after 11 steps, save the algorithm (its predictor's state_dict
    included), the optimizer and the weights to an HDF5 checkpoint, load them
    into a fresh algorithm and continue: bitwise the uninterrupted run."""
    from minips.checkpoint import load, save

    full = trajectory(spec, steps=24)
    rng = np.random.default_rng(5)
    H = rng.uniform(0.2, 1.5, 16).astype(np.float32)  # as trajectory()
    noise = (0.1 * rng.standard_normal((24, 16))).astype(np.float32)
    w0 = rng.standard_normal(16)

    def grad(offset):
        return lambda w, t: H * w + noise[t + offset]

    first = drive(spec, grad(0), w0, 11)
    save(tmp_path / "c.h5", {"weights": first.flat.weights.copy(), "algo": first.state_dict(),
                             "opt": first.optimizer.state_dict()})
    s = load(tmp_path / "c.h5")

    out = []

    def resume(algo, t):
        out.append(algo.flat.weights.copy())

    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import Comm
    from minips.nn.module import Parameter
    from minips.optim import SGD
    p = Parameter(np.asarray(s["weights"], np.float32))
    opt = SGD([p], lr=0.1, momentum=MU, nesterov=True)
    algo = build_algorithm(spec, [p], opt, Comm())
    opt.load_state_dict(s["opt"])
    algo.load_state_dict(s["algo"])
    algo.start()
    for t in range(11, 24):
        with algo.compute_point():
            algo.before_backward()
            algo.flat.grads[algo.flat.current][...] = grad(0)(algo.flat.weights, t)
        algo.step()
        resume(algo, t)
    assert np.array_equal(np.array(out), full[11:])


# --- two ranks: replicas bit-identical, and equal to the one-process simulation ---------------------
@pytest.mark.parametrize("predictor,k,opts", [("spike", 2, {"lwp": 1.0}), ("dc-asgd", 1, {}), ("gap-aware", 2, {})])
def test_two_ranks_stay_identical_and_follow_the_simulation(predictor, k, opts, tmp_path):
    spec = "pseudo-sync" + "".join(f":{a}={b}" for a, b in opts.items())  # the worker passes k and the name
    run, _ = launch(2, {"algo": spec, "steps": 12, "batch": 8, "predictor": predictor, "staleness": k}, tmp_path)
    assert len(set(run["hashes"].tolist())) == 1 and int(run["pending"]) == 0
    ref = _reference_stale_run(2, 8, 12, make_predictor(predictor, k, **opts), k)
    np.testing.assert_allclose(run["weights"], ref, rtol=RTOL, atol=ATOL)
