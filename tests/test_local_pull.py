"""``local-pull`` (issue 43): the shadow every rank computes is the ranks' mean weights of k
steps ago, the pulls leave the ranks' mean where ``local`` puts it, a rank's difference from
the mean stays bounded up to the noise-free threshold the rule was chosen by (and not beyond),
the rule resumes exactly, and bad options and clipping are refused in one line.

The ranks are simulated as pseudo-sync drives them (tests/test_local_predictors.py's
``simulate``, extended with weights and an optimizer per rank): gradients given in advance
(not depending on the weights, so a pull cannot change them), the allreduce a mean over ranks,
arrival k steps later.
"""
from collections import deque

import numpy as np
import pytest

from minips.distributed.algorithms.local_predictors import LocalPredictor
from minips.distributed.algorithms.local_pull import LocalPullPredictor, pull_bound
from minips.distributed.algorithms.predictors import make_predictor
from minips.labs.stability import largest_stable_steps
from minips.optim import SGD
from minips.tensor import Tensor


def pseudo_sync_step(preds, opts, w, g, pipeline, k):
    """One step of P ranks as pseudo-sync drives them: each rank's local gradient ``g[i]`` observed,
    their mean posted with the weights ``w`` (P, n) it was computed at, and, k steps later, each
    rank's prediction from it (the fill before), applied by the predictor where it owns the step."""
    pipeline.append((g.mean(axis=0, dtype=np.float64).astype(g.dtype), w.copy()))
    for i, p in enumerate(preds):
        p.observe_local(g[i].copy())
    arrived = pipeline.popleft() if len(pipeline) > k else None
    for i, (p, opt) in enumerate(zip(preds, opts)):
        d = p.fill() if arrived is None else p.predict(arrived[0].copy(), w[i].copy(), arrived[1][i].copy())
        own = getattr(p, "apply_step", None)
        own(opt, w[i], d) if own else opt.apply(0, w[i], d)
    return arrived


def run_ranks(cls, grads, k, lrs, steps=None, state=None, **options):
    """Drive P ranks of predictor ``cls`` over ``grads`` (float32 (T, P, n)) with Nesterov 0.9
    and weight decay, learning rate ``lrs[t]`` at step t, from identical weights. With
    ``steps`` stop after that many; with ``state`` (a previous call's return) continue it.

    Returns a dict: ``w`` float32 (P, n) now, ``history`` the (P, n) weights before each step,
    ``shadow`` every rank's shadow after each prediction (local-pull), ``preds``, ``opts``,
    ``pipeline``, ``t``."""
    T, P, n = grads.shape
    if state is None:
        w = np.tile(np.linspace(-1, 1, n, dtype=np.float32), (P, 1))
        preds = [cls(k, **options) for _ in range(P)]
        opts = [SGD([Tensor(w[i])], lr=lrs[0], momentum=0.9, nesterov=True, weight_decay=1e-2) for i in range(P)]
        state = {"w": w, "history": [], "shadow": [], "preds": preds, "opts": opts, "pipeline": deque(), "t": 0}
    w, preds, opts, pipeline = state["w"], state["preds"], state["opts"], state["pipeline"]
    stop = T if steps is None else state["t"] + steps
    for t in range(state["t"], stop):
        state["history"].append(w.copy())
        for opt in opts:
            opt.lr = lrs[t]
        arrived = pseudo_sync_step(preds, opts, w, grads[t], pipeline, k)
        # the shadow after the prediction (apply_step leaves it alone once it exists)
        state["shadow"].append([p.mean_w.copy() for p in preds if arrived is not None
                                and getattr(p, "mean_w", None) is not None])
    state["t"] = stop
    return state


def noise(T=80, P=4, n=40, seed=0):
    """A mean gradient that changes slowly plus independent noise per rank and step, float32 (T, P, n)."""
    rng = np.random.default_rng(seed)
    mean = np.cumsum(rng.standard_normal((T, 1, n)) * 0.1, axis=0) + 1.0
    return (mean + rng.standard_normal((T, P, n))).astype(np.float32)


def lr_schedule(T):
    return [0.02 * (1 + 0.5 * np.cos(t / 7)) for t in range(T)]  # a rate that changes every step


@pytest.mark.parametrize("k,lam", [(1, 1.0), (2, 1.0), (1, 0.6), (2, 0.7)])
def test_the_shadow_is_the_ranks_mean_of_k_steps_before(k, lam):
    """After the prediction at step t every rank's shadow holds mean_j w^j_{t-k+1}, though
    each rank computed it alone, from the averaged gradients (to float32 rounding)."""
    g, T = noise(), 80
    s = run_ranks(LocalPullPredictor, g, k, lr_schedule(T), pull=0.5, correction_weight=lam)
    for t in range(k, T):
        mean_then = np.mean(s["history"][t - k + 1], axis=0, dtype=np.float64)
        for shadow in s["shadow"][t]:
            np.testing.assert_allclose(shadow, mean_then, rtol=1e-5, atol=1e-5, err_msg=f"step {t}")


@pytest.mark.parametrize("k,lam", [(1, 1.0), (2, 0.7)])
def test_the_pulls_leave_the_ranks_mean_where_local_puts_it(k, lam):
    """With the same gradients, the ranks' mean under local-pull is the mean under local (with
    the same correction weight) at every step (to float32 rounding): the pulls sum to zero over
    the ranks. (What the pull changes, a rank's difference from the mean through its own
    gradient, needs gradients that depend on the weights: the next test.)"""
    g, T = noise(), 80
    pulled = run_ranks(LocalPullPredictor, g, k, lr_schedule(T), pull=0.5, correction_weight=lam)
    plain = run_ranks(LocalPredictor, g, k, lr_schedule(T), correction_weight=lam)
    for t in range(T):
        np.testing.assert_allclose(pulled["history"][t].mean(axis=0), plain["history"][t].mean(axis=0),
                                   rtol=1e-5, atol=1e-5, err_msg=f"step {t}")
    assert not np.allclose(pulled["w"], plain["w"], rtol=1e-3, atol=1e-3), "the pull changed no rank's weights"


def test_a_stopped_run_resumes_bitwise_through_its_checkpoint(tmp_path):
    """Through the Trainer and its checkpoint (the shadow, its momentum, the learning rates and the
    last averages written and read back): stopped at step 7 and resumed to 14 on 2 virtual ranks,
    every rank's weights and momentum, the metrics and the consensus distance equal an uninterrupted
    run's, with k = 2 and a correction weight below 1 (so the kept averages matter)."""
    from .local_sgd_checks import stop_resume_is_bitwise
    stop_resume_is_bitwise("pseudo-sync:local-pull:2:pull=0.5:correction_weight=0.8", tmp_path, 7, 14)


def test_it_resumes_exactly_from_its_state():
    """Stopped after 30 steps, its state_dict (and the optimizer's) loaded into new predictors
    continues to the same weights, bit for bit, as the run that never stopped."""
    g, T, k = noise(T=60), 60, 2
    lrs = lr_schedule(T)
    straight = run_ranks(LocalPullPredictor, g, k, lrs, pull=0.3, correction_weight=0.8)
    first = run_ranks(LocalPullPredictor, g, k, lrs, steps=30, pull=0.3, correction_weight=0.8)
    preds = [LocalPullPredictor(k, pull=0.3, correction_weight=0.8) for _ in first["preds"]]
    w = first["w"].copy()
    opts = []
    for i, (p, q, o) in enumerate(zip(first["preds"], preds, first["opts"])):
        q.load_state_dict(p.state_dict())
        opts.append(SGD([Tensor(w[i])], lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2))
        opts[-1].load_state_dict(o.state_dict())
    resumed = dict(first, w=w, preds=preds, opts=opts, pipeline=deque(first["pipeline"]))
    run_ranks(LocalPullPredictor, g, k, lrs, state=resumed)
    np.testing.assert_array_equal(resumed["w"], straight["w"])


def test_bad_options_name_the_range():
    with pytest.raises(ValueError, match=r"local-pull: pull must be > 0"):
        make_predictor("local-pull", 1, pull=0.0)
    with pytest.raises(ValueError, match=r"local-pull: pull must be at most 1.000 at staleness 1"):
        make_predictor("local-pull", 1, pull=1.5)
    with pytest.raises(ValueError, match=r"correction_weight must be in \(0, 1\]"):
        make_predictor("local-pull", 1, correction_weight=0.0)
    with pytest.raises(ValueError, match="no option.*sync_warmup"):
        make_predictor("local-pull", 1, sync_warmup=5)
    with pytest.raises(ValueError, match=r"pull must be at most 0.618 at staleness 2"):
        make_predictor("local-pull", 2, pull=0.75)
    make_predictor("local-pull", 2, pull=0.6)
    make_predictor("local-pull", 1, pull=1.0)   # at the bound (1 up to rounding): taken


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_the_pull_bound_is_where_the_delayed_restoring_force_stops_damping(k):
    """pull_bound(k) against the roots of e_{t+1} = e_t - pull e_{t-k} (z^(k+1) - z^k + pull = 0):
    all inside the unit circle 1 % below the bound, one outside 1 % above it."""
    def radius(a):
        return max(abs(np.roots([1.0, -1.0] + [0.0] * (k - 1) + [a])))
    b = pull_bound(k)
    assert radius(0.99 * b) < 1 < radius(1.01 * b)


def test_clipping_is_refused_in_one_line(tmp_path, capsys):
    from minips.cli import main
    with pytest.raises(SystemExit) as stop:
        main(["train", "--model", "mlp", "--max-steps", "2", "--virtual-ranks", "2", "--clip-norm", "1",
              "--algo", "pseudo-sync:local-pull:1", "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert stop.value.code != 0 and "does not take --clip-norm" in err and "clipping is not" in err, err
    assert "Traceback" not in err


def ranks_on_a_quadratic(cls, h_lr, k=1, P=2, steps=600, **options):
    """P ranks of ``cls`` on f(w) = h w^2 / 2 (h = 1, lr = ``h_lr``, Nesterov 0.9, float64 scalars):
    identical start, a different kick per rank in the first 3 steps' gradients, noise-free after.
    Returns the ranks' largest |difference from their mean| over the last 50 steps."""
    w = np.ones((P, 1))
    preds = [cls(k, **options) for _ in range(P)]
    opts = [SGD([Tensor(w[i])], lr=h_lr, momentum=0.9, nesterov=True) for i in range(P)]
    kicks = np.linspace(-1e-3, 1e-3, P)
    pipeline, worst = deque(), 0.0
    for t in range(steps):
        g = w.copy() + (kicks[:, None] if t < 3 else 0.0)      # g^i = h w^i (+ the kick)
        pseudo_sync_step(preds, opts, w, g, pipeline, k)
        if not np.all(np.isfinite(w)):
            return np.inf                                        # overflowed: grown without bound
        if t >= steps - 50:
            worst = max(worst, float(np.max(np.abs(w - w.mean(axis=0)))))
    return worst


@pytest.mark.parametrize("pull,lam", [(0.5, 1.0), (0.75, 0.7)])
def test_the_difference_loop_holds_to_the_modelled_threshold(pull, lam):
    """The noise-free threshold of a rank's difference (k = 1, Nesterov 0.9;
    :func:`minips.labs.stability.pull_deviation_transition`) is where the real rule's ranks stop
    converging to each other: 5 % below it the kicks' difference dies out, 5 % above it grows;
    ``local`` (with the same correction weight) already grows 5 % below it, its own threshold
    being lower. Pull 0.5: 0.848 (local: 0.679); pull 0.75 with lambda 0.7: 1.33 (below sync's
    1.357; the mean's own, lambda 0.7: 1.48)."""
    x = largest_stable_steps(1, 0.9, lam=lam, pull=pull)["pulled_deviation"]
    assert x == pytest.approx({(0.5, 1.0): 0.848, (0.75, 0.7): 1.333}[(pull, lam)], abs=2e-3)  # as the docs quote
    assert x > largest_stable_steps(1, 0.9, lam=lam)["weighted_deviation"]
    kick = 1e-3
    assert ranks_on_a_quadratic(LocalPullPredictor, 0.95 * x, pull=pull, correction_weight=lam) < 1e-3 * kick
    assert ranks_on_a_quadratic(LocalPullPredictor, 1.05 * x, pull=pull, correction_weight=lam) > 10 * kick
    assert ranks_on_a_quadratic(LocalPredictor, 0.95 * x, correction_weight=lam) > 10 * kick


def test_the_lab_tables_run():
    """``python -m minips.labs.staleness pulls`` and ``candidates`` (docs/accuracy.md section 11.5)
    build their tables: every candidate the lab lists is one the rule accepts (a smaller run)."""
    from minips.labs.stability import pulls_table
    from minips.labs.staleness import CANDIDATES, candidates_table
    table = pulls_table()
    assert "| 0.5 | 1.36 / 0.85 (**0.85**)" in table and "damps only below" in table
    small = candidates_table(Ps=(4,), steps=40, seeds=(0,))
    assert small.count("|") > 4 * len(CANDIDATES) and "| 4 |" in small
