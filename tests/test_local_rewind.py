"""``local-rewind`` (issue 31): after every step, a rank's weights and momentum
buffer are those of the optimizer fed the averages G_0 .. G_{t-k} and then its
own last k gradients; ``local`` does not have that property (its momentum
keeps a tail of old local-minus-average gradients), so the check can fail.

The oracle is an independent float64 recursion of minips.optim's update
(Nesterov, heavy ball, plain SGD) written here, run on the sequence of
gradients the property names, with the learning rates of the run.
"""
from collections import deque

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.local_predictors import LocalPredictor
from minips.distributed.algorithms.local_rewind import LocalRewindPredictor, impulse_shares
from minips.optim import SGD

from .local_sgd_checks import stop_resume_is_bitwise


class _Flat:
    """A stand-in for the flat parameter the optimizer updates."""

    def __init__(self, w):
        self.data = w


def run_ranks(cls, grads, k, lrs, momentum, nesterov):
    """Drive P (predictor, optimizer) pairs as pseudo-sync does (allreduce = the
    mean over ranks, arriving k steps later; a predictor with ``apply_step``
    owns the step). Returns the weights (T, P, n) and momentum buffers (T, P, n)
    after each step."""
    T, P, n = grads.shape
    ranks = []
    for _ in range(P):
        w = np.zeros(n, np.float32)
        ranks.append((cls(k), SGD([_Flat(w)], lr=1.0, momentum=momentum, nesterov=nesterov), w))
    pipeline, W, V = deque(), np.zeros((T, P, n)), np.zeros((T, P, n))
    for t in range(T):
        pipeline.append(grads[t].astype(np.float64).mean(axis=0).astype(np.float32))
        G = pipeline.popleft() if len(pipeline) > k else None
        for i, (p, opt, w) in enumerate(ranks):
            opt.lr = lrs[t]
            p.observe_local(grads[t, i])
            d = p.fill() if G is None else p.predict(G.copy(), None, None)
            own = getattr(p, "apply_step", None)
            own(opt, w, d) if own else opt.apply(0, w, d)
            W[t, i] = w
            V[t, i] = opt.buffers[0] if momentum else 0
    return W, V


def oracle(seq, lrs, momentum, nesterov):
    """float64: (w, v) after the optimizer applied the directions ``seq`` (m, n)
    with learning rates ``lrs`` from w = 0 (v = d on the first step)."""
    w, v = np.zeros(seq.shape[1]), None
    for d, lr in zip(seq.astype(np.float64), lrs):
        v = d.copy() if v is None else momentum * v + d
        w = w - lr * ((d + momentum * v) if nesterov else (v if momentum else d))
    return w, (v if momentum else 0)


def has_property(cls, k, momentum, nesterov, seed=0, constant_lr=False):
    r = np.random.default_rng(seed)
    T, P, n = 12, 3, 16
    grads = (r.standard_normal((T, P, n)) + 1).astype(np.float32)
    # a varying schedule by default: the swap must use the lr each step had
    lrs = np.full(T, 0.1) if constant_lr else 0.1 + 0.05 * r.random(T)
    W, V = run_ranks(cls, grads, k, lrs, momentum, nesterov)
    G = grads.astype(np.float64).mean(axis=1)
    ok = True
    for t in range(T):
        for i in range(P):
            cut = max(t - k + 1, 0)          # averages for s <= t-k, own gradients after
            seq = np.concatenate([G[:cut], grads[cut:t + 1, i]])
            w, v = oracle(seq, lrs[:t + 1], momentum, nesterov)
            ok &= np.allclose(W[t, i], w, rtol=1e-4, atol=1e-5) and np.allclose(V[t, i], v, rtol=1e-4, atol=1e-5)
    return ok


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("momentum,nesterov", [(0.9, True), (0.9, False), (0.0, False)])
def test_state_is_the_averages_then_the_last_k_own_gradients(k, momentum, nesterov):
    assert has_property(LocalRewindPredictor, k, momentum, nesterov)
    assert has_property(LocalRewindPredictor, k, momentum, nesterov, constant_lr=True)


@pytest.mark.parametrize("k", [1, 2])
def test_local_has_a_momentum_tail_that_rewind_removes(k):
    assert not has_property(LocalPredictor, k, 0.9, True)   # the check can fail
    assert not has_property(LocalPredictor, k, 0.9, True, constant_lr=True)
    # without momentum and at a constant lr local's swap is exact: the rules agree there;
    # with a varying lr local swaps at today's lr, rewind at the lr g_{t-k} was applied with
    assert has_property(LocalPredictor, k, 0.0, False, constant_lr=True)
    assert not has_property(LocalPredictor, k, 0.0, False)


def test_mean_over_ranks_is_local_and_sync():
    """The averaged model moves as with ``local``: the corrections average to 0."""
    r = np.random.default_rng(1)
    grads = r.standard_normal((10, 4, 8)).astype(np.float32)
    lrs = np.full(10, 0.1)
    a, _ = run_ranks(LocalRewindPredictor, grads, 1, lrs, 0.9, True)
    b, _ = run_ranks(LocalPredictor, grads, 1, lrs, 0.9, True)
    np.testing.assert_allclose(a.mean(axis=1), b.mean(axis=1), rtol=1e-4, atol=1e-5)
    assert not np.allclose(a, b, rtol=1e-4, atol=1e-5)       # the ranks themselves differ


def test_impulse_shares_are_the_optimizers_steps():
    """A unit gradient's displacement at lags 0..k-1, read off minips.optim itself."""
    for mu, nest in ((0.9, True), (0.9, False), (0.0, False)):
        w = np.zeros(1, np.float32)
        opt = SGD([_Flat(w)], lr=1.0, momentum=mu, nesterov=nest)
        moves = []
        for d in (1.0, 0.0, 0.0, 0.0):
            before = w.copy()
            opt.apply(0, w, np.array([d], np.float32))
            moves.append(float(before[0] - w[0]))
        np.testing.assert_allclose(impulse_shares(mu, nest, 4), moves, rtol=1e-6, atol=1e-7)


def test_spec_and_state_roundtrip():
    assert not resolve("pseudo-sync:local-rewind").replicated
    p = LocalRewindPredictor(2)
    p.lrs.extend([0.1, 0.2])
    q = LocalRewindPredictor(2)
    q.load_state_dict(p.state_dict())
    assert list(q.lrs) == [0.1, 0.2] and q.lrs.maxlen == 2


def test_resume_is_bitwise(tmp_path):
    """The learning rates of the last k steps travel in the checkpoint: a stopped
    and resumed run equals the uninterrupted one (weights, momentum, metrics)."""
    _, (_, w, _) = stop_resume_is_bitwise("pseudo-sync:local-rewind:2", tmp_path, 7, 14)
    assert not np.array_equal(w[0], w[1])
