"""A laboratory for staleness: stale-by-k SGD on a small least-squares problem,
in one process, with the same predictors as :class:`PseudoSyncSGD`.

Why: on a quadratic the effect of a stale gradient is visible in seconds and
can be reasoned about exactly (the Hessian is known), which is what tutorial 8
and the predictor tests use. The step rule is the one of
:mod:`minips.distributed.algorithms.pseudo_sync`::

    step t:  g_t = grad(w_t, batch_t)            (the "allreduce" of g_t starts)
             if t >= k:  G = g_{t-k};  d_t = predictor.predict(G, w_t, w_{t-k})
                         w_{t+1} = SGD(w_t, d_t)  (momentum acts on d_t; a predictor
                                                  with apply_step, spike, owns this step)
             else:       w_{t+1} = w_t            (pipeline fill: nothing arrived yet)

With ``k = 0`` it is plain (synchronous) minibatch SGD.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..optim import SGD
from ..distributed.algorithms.predictors import Predictor, make_predictor

__all__ = ["LeastSquares", "simulate_stale_sgd", "run_stale_sgd"]


@dataclass
class LeastSquares:
    """``f(w) = 1/(2m) ||X w - y||^2`` with a Hessian of chosen conditioning.

    Rows of X are ``z * sqrt(eig)`` rotated by a random orthogonal Q, so the
    Hessian ``X^T X / m`` is close to ``Q diag(eig) Q^T`` with ``eig``
    log-spaced from 1 down to ``1/cond``. Targets ``y = X w* + noise``.

    Args:
        d: dimension; m: number of samples; cond: condition number;
        noise: standard deviation of the target noise; seed: generator seed;
        rotate: rotate the eigenbasis randomly (a dense Hessian, as in a real
            network) or keep it axis-aligned (a diagonal Hessian, where a
            per-coordinate curvature estimate can be exact).
    """
    d: int = 200
    m: int = 4000
    cond: float = 1000.0
    noise: float = 0.1
    seed: int = 0
    rotate: bool = True

    def __post_init__(self):
        r = np.random.default_rng(self.seed)
        eig = np.logspace(0, -np.log10(self.cond), self.d)
        Q, _ = np.linalg.qr(r.standard_normal((self.d, self.d)))
        if not self.rotate:  # axis-aligned: a diagonal Hessian
            Q = np.eye(self.d)
        self.X = (r.standard_normal((self.m, self.d)) * np.sqrt(eig)) @ Q.T
        self.w_star = r.standard_normal(self.d)
        self.y = self.X @ self.w_star + self.noise * r.standard_normal(self.m)
        self.X, self.y = self.X.astype(np.float32), self.y.astype(np.float32)

    def loss(self, w: np.ndarray) -> float:
        """Full-data loss minus the noise floor's share is not subtracted: float."""
        r = self.X @ w - self.y
        return float(0.5 * np.mean(r.astype(np.float64) ** 2))

    def grad(self, w: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Minibatch gradient (float32, (d,)) on rows ``idx``."""
        Xb = self.X[idx]
        return (Xb.T @ (Xb @ w - self.y[idx]) / len(idx)).astype(np.float32)


def simulate_stale_sgd(grad_fn, w0: np.ndarray, predictor: str | Predictor = "last", staleness: int = 1,
                       lr: float = 0.05, momentum: float = 0.9, steps: int = 100, loss_fn=None,
                       predictor_options: dict | None = None, record_every: int = 1,
                       diverge_at: float = 1e6) -> dict:
    """The stale-by-k rule in one process, for any gradient oracle.

    Args:
        grad_fn: ``grad_fn(w, t) -> g``, float32 (n,) gradient at weights ``w``
            (float32 (n,)) for step ``t`` (e.g. of the global batch of step t).
        w0: initial weights (copied).
        predictor: name or :class:`Predictor`; staleness: k >= 0 (0 = sync SGD).
        lr, momentum: heavy-ball SGD (:class:`minips.optim.SGD`).
        steps: number of steps. loss_fn: optional ``loss_fn(w) -> float``
            recorded every ``record_every`` steps; a loss above ``diverge_at``
            or non-finite stops the run with ``diverged=True``.

    Returns:
        ``{"w": final weights, "loss": [...], "final_loss", "diverged", "diagnostics": [...]}``.
    """
    w = np.array(w0, dtype=np.float32, copy=True)
    opt = SGD([_Flat(w)], lr=lr, momentum=momentum)
    pred = None
    if staleness > 0:
        pred = predictor if isinstance(predictor, Predictor) else \
            make_predictor(predictor, staleness, **(predictor_options or {}))
    in_flight: deque = deque()  # (g_j, w_j) for the last k steps
    losses, diags, diverged = [], [], False
    for t in range(steps):
        la = pred.lookahead_weights(w, opt) if pred is not None else None
        g = grad_fn(w if la is None else la, t)
        if pred is None:
            opt.apply(0, w, g)
        else:
            in_flight.append((g, w.copy()))
            if len(in_flight) > staleness:
                G, w_then = in_flight.popleft()
                d = pred.predict(G, w, w_then)
                if hasattr(pred, "apply_step"):  # a rule that owns the step (spike), as in pseudo-sync
                    pred.apply_step(opt, w, d)
                else:
                    opt.apply(0, w, d)
                diags.append(dict(pred.diagnostics))
        if loss_fn is not None and (t % record_every == 0 or t == steps - 1):
            f = loss_fn(w)
            losses.append(f)
            if not np.isfinite(f) or f > diverge_at:
                diverged = True
                break
    return {"w": w, "loss": losses, "final_loss": losses[-1] if losses else None,
            "diverged": diverged, "diagnostics": diags}


def run_stale_sgd(problem: LeastSquares, predictor: str | Predictor = "last", staleness: int = 1,
                  lr: float = 0.05, momentum: float = 0.9, steps: int = 1500, batch: int = 32,
                  seed: int = 0, predictor_options: dict | None = None, record_every: int = 1) -> dict:
    """Stale-by-k SGD on a :class:`LeastSquares` problem from w = 0, minibatches
    of ``batch`` rows drawn with ``seed``; see :func:`simulate_stale_sgd`."""
    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, problem.m, batch) for _ in range(steps)]
    return simulate_stale_sgd(lambda w, t: problem.grad(w, batches[t]), np.zeros(problem.d, np.float32),
                              predictor, staleness, lr, momentum, steps, problem.loss,
                              predictor_options, record_every)


class _Flat:
    """A bare parameter for the optimizer: the weight vector itself."""

    def __init__(self, w):
        self.data, self.grad, self.shape, self.dtype = w, None, w.shape, w.dtype


def comparison_table(seeds=(0, 1, 2), steps: int = 1500) -> str:
    """The markdown table of docs/distributed.md: every predictor, two settings,
    axis-aligned and rotated Hessians, final loss range over ``seeds``."""
    cases = [("last", 0, {}), ("last", None, {}), ("ema", None, {}), ("holt", None, {}),
             ("lookahead", None, {}), ("adaptive", None, {}),
             ("adaptive", None, {"adapt_lambda": False, "lambda0": 1.0})]
    head = "| lr, k | k = 0 (fresh) | last | ema | holt | lookahead | adaptive | adaptive, lambda = 1 |"
    lines = [head, "|" + "---|" * 8]
    for rotate in (False, True):
        problem = LeastSquares(rotate=rotate)
        for lr, k in ((0.08, 2), (0.05, 1)):
            cells = []
            for name, k_case, opts in cases:
                runs = [run_stale_sgd(problem, name, k if k_case is None else k_case, lr=lr, steps=steps,
                                      seed=s, predictor_options=opts, record_every=50) for s in seeds]
                if any(r["diverged"] for r in runs):
                    cells.append("div" if all(r["diverged"] for r in runs) else
                                 f"div in {sum(r['diverged'] for r in runs)}/{len(runs)}")
                else:
                    f = [r["final_loss"] for r in runs]
                    cells.append(f"{min(f):.4g}-{max(f):.4g}")
            lines.append(f"| {lr}, {k} ({'rotated' if rotate else 'axis'}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(comparison_table())
