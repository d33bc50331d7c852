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

P ranks (issue 42): :func:`simulate_ranks` runs the same rule on P ranks, each with its own
minibatches (its own gradient noise), every rank holding its own weights, optimizer and predictor,
and the average of the P fresh gradients standing for the allreduce; ``predictor=None`` is
synchronous SGD (every rank applies the average at once). :func:`largest_stable_steps` gives the
largest stable ``h * lr`` on ``f(w) = h w^2 / 2`` from the transition matrices, for sync and for the
*differences between ranks* under ``local``; :func:`largest_stable_lr` finds the largest stable
learning rate of a simulation by bisection, and :func:`ranks_table` prints docs/accuracy.md's
table of both (``python -m minips.labs.staleness ranks``); :func:`weights_table` the table of a
correction weight's two loops (``python -m minips.labs.staleness weights``), :func:`pulls_table` those of
``local-pull`` (``python -m minips.labs.staleness pulls``), :func:`candidates_table` issue 43's
candidates' largest stable rates with per-rank noise (``python -m minips.labs.staleness candidates``).

Why the differences between ranks matter: on a quadratic with every rank's gradient
``g^i = h w^i + xi^i`` (xi^i: rank i's batch noise), ``local``'s direction
``d^i_t = G_{t-k} + g^i_t - g^i_{t-k}`` averages over ranks to ``G_t = h w-bar_t + xi-bar_t``: the
ranks' mean follows synchronous SGD exactly, with its stable step (1.357 for Nesterov 0.9). A
rank's difference from the mean, ``e^i = w^i - w-bar``, follows
``d^i_t - d-bar_t = h (e^i_t - e^i_{t-k}) + (xi^i_t - xi-bar_t) - (xi^i_{t-k} - xi-bar_{t-k})``: a
rule of its own, stable only up to ``h * lr`` = (1 + mu) / (1 + 2 mu) = 0.679 for k = 1 (half of
sync's), 0.593 for k = 2. With every rank on the same data the differences are zero and never
show; any per-rank noise excites them, and above that step they grow geometrically.

The noise-free thresholds (transition matrices, and a correction weight's two loops) are in
:mod:`minips.labs.stability`; this module re-exports them.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..optim import SGD
from ..distributed.algorithms.predictors import Predictor, make_predictor
from .stability import (deviation_transition, largest_stable_steps, mean_transition, pulls_table,  # noqa: F401
                        stability_weight, sync_transition, weights_table)

__all__ = ["LeastSquares", "simulate_stale_sgd", "run_stale_sgd", "simulate_ranks", "largest_stable_lr",
           "largest_stable_steps", "sync_transition", "deviation_transition", "mean_transition", "stability_weight",
           "ranks_table", "weights_table", "pulls_table", "candidates_table", "CANDIDATES"]


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


def simulate_ranks(problem: LeastSquares, P: int, predictor: str | None = None, staleness: int = 1,
                   lr: float = 0.05, momentum: float = 0.9, nesterov: bool = True, steps: int = 400,
                   batch: int = 16, seed: int = 0, same_batch: bool = False, diverge_at: float = 1e4,
                   predictor_options: dict | None = None) -> dict:
    """The stale-by-k rule on P ranks, each with its own weights, optimizer (SGD with
    ``momentum``, Nesterov by default, as the studies) and predictor, and its own
    minibatches of ``batch`` rows; the mean of the P fresh gradients is what the
    allreduce returns, k steps later. ``predictor=None``: synchronous SGD (every
    rank applies the mean at once). From w = 0.

    Args:
        problem: the least-squares problem; P: ranks >= 1; predictor: a predictor
            name (one without pooled sums: ``extra_floats == 0``) or None.
        staleness: k >= 1 for a predictor; lr, momentum, nesterov: the optimizer.
        steps, batch, seed: the run (batches drawn with ``seed``).
        same_batch: every rank gets the same rows (no per-rank noise).
        diverge_at: a weight of magnitude above it (or non-finite) stops the run.
        predictor_options: the predictor's options (e.g. ``{"pull": 0.5}`` for ``local-pull``).

    Returns:
        ``{"diverged": bool, "steps": steps run, "consensus": [(1/P) sum_i ||w^i - w-bar||^2
        per step], "loss": full-data loss of w-bar at the end (None if diverged)}``.

    Raises:
        ValueError: P < 1, or a predictor that pools sums across ranks (it needs the
            pipeline of :class:`~minips.distributed.algorithms.pseudo_sync.PseudoSyncSGD`).
    """
    if P < 1:
        raise ValueError(f"simulate_ranks: P must be >= 1, got {P}")
    rng = np.random.default_rng(seed)
    d = problem.d
    W = [np.zeros(d, np.float32) for _ in range(P)]
    opts = [SGD([_Flat(w)], lr=lr, momentum=momentum, nesterov=nesterov) for w in W]
    preds = None if predictor is None else [make_predictor(predictor, staleness, **(predictor_options or {}))
                                            for _ in range(P)]
    if preds is not None and preds[0].extra_floats:
        raise ValueError(f"simulate_ranks: predictor {predictor!r} pools sums across ranks inside the allreduce; "
                         "run it in training (mpiexec or --virtual-ranks), not in this lab")
    in_flight: deque = deque()
    consensus = []
    for t in range(steps):
        idx = rng.integers(0, problem.m, (1 if same_batch else P, batch))
        idx = np.broadcast_to(idx, (P, batch))
        Xb, yb = problem.X[idx], problem.y[idx]                       # (P, b, d), (P, b)
        r = np.einsum("pbd,pd->pb", Xb, np.stack(W)) - yb
        g = (np.einsum("pbd,pb->pd", Xb, r) / batch).astype(np.float32)
        G = g.mean(0, dtype=np.float64).astype(np.float32)          # the allreduce's average
        if preds is None:
            for i in range(P):
                opts[i].apply(0, W[i], G)
        else:
            in_flight.append((G, [w.copy() for w in W]))   # the average and the weights it was computed at
            arrived = in_flight.popleft() if len(in_flight) > staleness else None
            for i, p in enumerate(preds):
                if p.uses_local_gradient:
                    p.observe_local(g[i])
                di = p.fill() if arrived is None else p.predict(arrived[0], W[i], arrived[1][i])
                if di is None:                    # pipeline fill of a replicated rule: no update
                    continue
                if hasattr(p, "apply_step"):
                    p.apply_step(opts[i], W[i], di)
                else:
                    opts[i].apply(0, W[i], di)
        Ws = np.stack(W).astype(np.float64)
        consensus.append(float(np.mean(np.sum((Ws - Ws.mean(0)) ** 2, 1))))
        if not np.isfinite(Ws).all() or np.abs(Ws).max() > diverge_at:
            return {"diverged": True, "steps": t + 1, "consensus": consensus, "loss": None}
    return {"diverged": False, "steps": steps, "consensus": consensus,
            "loss": problem.loss(np.mean(np.stack(W), 0))}


def largest_stable_lr(problem: LeastSquares, P: int, predictor: str | None = None, batch: int = 16,
                      steps: int = 400, seeds=(0, 1), lo: float = 0.005, hi: float = 3.0, iters: int = 12,
                      **options) -> float:
    """The largest learning rate at which :func:`simulate_ranks` does not diverge
    with any of ``seeds`` (geometric bisection between ``lo`` and ``hi``, ``iters``
    halvings of the bracket; assumes stable below, unstable above)."""
    with np.errstate(all="ignore"):   # the unstable runs overflow, by design
        for _ in range(iters):
            m = float(np.sqrt(lo * hi))
            if any(simulate_ranks(problem, P, predictor, lr=m, batch=batch, steps=steps, seed=s, **options)["diverged"]
                   for s in seeds):
                hi = m
            else:
                lo = m
    return lo


def ranks_table(Ps=(1, 4, 16, 64), batches=(16, 256), steps: int = 400, seeds=(0, 1), local: str = "local") -> str:
    """docs/accuracy.md's table: the largest stable learning rate of synchronous
    SGD and of ``local`` (k = 1) on P ranks with a per-rank batch, on the default
    :class:`LeastSquares` (rotated, cond 1000), next to the noise-free prediction
    (``largest_stable_steps`` over the Hessian's largest eigenvalue)."""
    problem = LeastSquares()
    H = problem.X.T.astype(np.float64) @ problem.X.astype(np.float64) / problem.m
    lam = float(np.linalg.eigvalsh(H)[-1])
    th = largest_stable_steps(1)
    lines = [f"Hessian's largest eigenvalue {lam:.4f}: noise-free prediction synchronous "
             f"{th['synchronous'] / lam:.4f}, "
             f"{local}'s ranks' differences {th['local_deviation'] / lam:.4f} "
             f"(= {th['synchronous']:.4f} and {th['local_deviation']:.4f} over it); {steps} steps, seeds {list(seeds)}",
             "", f"| per-rank batch | P | synchronous | {local} (k = 1) | {local} / synchronous |",
             "|---:|---:|---:|---:|---:|"]
    for b in batches:
        for P in Ps:
            s = largest_stable_lr(problem, P, None, b, steps, seeds)
            loc = largest_stable_lr(problem, P, local, b, steps, seeds) if P > 1 else None
            lines.append(f"| {b} | {P} | {s:.4f} | " + ("- | - |" if loc is None else f"{loc:.4f} | {loc / s:.3f} |"))
    return "\n".join(lines)


#: issue 43's local-anchored candidates, (predictor, options), for :func:`candidates_table`
CANDIDATES = (("local", {}), ("local", {"correction_weight": 0.5}), ("local-pull", {"pull": 0.5}),
              ("local-pull", {"pull": 0.75, "correction_weight": 0.7}))


def candidates_table(Ps=(16, 32), batch: int = 16, steps: int = 400, seeds=(0, 1), rules=CANDIDATES) -> str:
    """docs/accuracy.md section 11.5's table: the largest stable learning rate of each of issue 43's
    local-anchored ``rules`` (k = 1) on P ranks with per-rank batches of ``batch`` rows (their own
    noise), on the default :class:`LeastSquares`, as a share of synchronous SGD's, where the
    noise-free limits (``python -m minips.labs.staleness pulls``) leave the noise out."""
    problem = LeastSquares()
    lines = [f"largest stable lr on P ranks, per-rank batch {batch}, k = 1, Nesterov 0.9, {steps} steps, "
             f"seeds {list(seeds)} (share of synchronous SGD's in brackets)", "",
             "| P | synchronous | " + " | ".join(f"`{n}`" + "".join(f" {k}={v:g}" for k, v in o.items())
                                           for n, o in rules) + " |",
             "|---:|---:|" + "---:|" * len(rules)]
    for P in Ps:
        s = largest_stable_lr(problem, P, None, batch, steps, seeds)
        cells = [largest_stable_lr(problem, P, n, batch, steps, seeds, predictor_options=o) for n, o in rules]
        lines.append(f"| {P} | {s:.4f} | " + " | ".join(f"{c:.4f} ({c / s:.3f})" for c in cells) + " |")
    return "\n".join(lines)


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
    import sys
    cmd = sys.argv[1:]
    tables = {"ranks": ranks_table, "weights": weights_table, "pulls": pulls_table, "candidates": candidates_table}
    print(tables[cmd[0]]() if len(cmd) == 1 and cmd[0] in tables else comparison_table())
