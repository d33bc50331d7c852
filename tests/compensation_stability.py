"""Stability of stale-gradient rules on f(w) = h w^2 / 2, Nesterov momentum 0.9.

Two independent ways to find the largest stable step ``h*lr``:

- :func:`code_threshold`: minips' own update rules. An algorithm spec (``sync``
  or a pseudo-sync spec) is driven in one process (Comm() of size 1, the real
  pipeline, predictor and optimizer), one coordinate per value of ``h*lr``
  (the rules are element-wise, so the coordinates are independent quadratics),
  from w = 1; a coordinate is stable when ``|w|`` ends below 1. A coarse grid,
  then a fine one around the first unstable point.
- :func:`matrix_threshold`: plain NumPy, written from the update equations
  (not from the code): the spectral radius of the linear transition matrix of
  the state (w, w_prev, v, the k queued gradients), bisected to 1e-7.

``python -m tests.compensation_stability`` prints the two tables of
docs/accuracy.md, section 1 (the thresholds, then the nonlinear rules' dependence on
the start amplitude); its output is docs/bench/accuracy/compensation_stability.txt.
"""
from __future__ import annotations

import numpy as np

MU = 0.9
LR = 0.1  # h = x / LR; only the product x = h*lr matters


def drive(spec, grad, w0, steps, lr=LR, mu=MU, nesterov=True, weight_decay=0.0, on_step=None):
    """Run ``spec`` in one process for ``steps`` steps with the gradient
    ``grad(w, t)`` (float32, at the weights the algorithm computes it at);
    returns the algorithm (finished). ``on_step(algo, t)`` after each step."""
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import Comm
    from minips.nn.module import Parameter
    from minips.optim import SGD

    p = Parameter(np.array(w0, np.float32))
    opt = SGD([p], lr=lr, momentum=mu, nesterov=nesterov, weight_decay=weight_decay)
    algo = build_algorithm(spec, [p], opt, Comm())
    algo.start()
    for t in range(steps):
        with algo.compute_point():
            algo.before_backward()
            algo.flat.grads[algo.flat.current][...] = grad(algo.flat.weights, t)
        algo.step()
        if on_step is not None:
            on_step(algo, t)
    algo.finish()
    return algo


def stable_mask(spec, x, steps, w0=1.0):
    """Per value of h*lr in ``x``: whether |w| ends below its start ``w0``."""
    h = (np.asarray(x, np.float64) / LR).astype(np.float32)
    with np.errstate(all="ignore"):  # the unstable coordinates overflow, by design
        algo = drive(spec, lambda w, t: h * w, np.full(len(h), w0), steps)
        w = np.abs(algo.flat.weights.astype(np.float64))
    return w < w0  # NaN (overflowed) compares False: unstable


def code_threshold(spec, coarse=(0.002, 2.0, 0.002), fine_steps=20000, fine_step=0.0002, w0=1.0):
    """The largest stable h*lr of ``spec`` (to ``fine_step``) from the start
    ``w0``: the last stable value below the first unstable one."""
    lo, hi, d = coarse
    xs = np.arange(lo, hi + d / 2, d)
    ok = stable_mask(spec, xs, 3000, w0)
    first_bad = int(np.argmin(ok)) if not ok.all() else len(xs) - 1
    x0 = xs[max(first_bad - 1, 0)]
    fine = np.arange(max(x0 - 5 * d, fine_step), x0 + 5 * d, fine_step)
    ok = stable_mask(spec, fine, fine_steps, w0)
    if ok.all():
        return float(fine[-1])
    return float(fine[max(int(np.argmin(ok)) - 1, 0)])


# --- the transition matrix, from the equations ---------------------------------------------
def transition(x, k, mu=MU, rule="last", c=0.0):
    """The state (w_t, w_{t-1}, v_t, g_{t-1}, ..., g_{t-k}) -> the next state,
    with lr = 1 and h = x, Nesterov (PyTorch form: v' = mu v + G, step = G + mu v').

    rule: ``last`` (step = G + mu v'), ``spike`` (step = mu^(k+1) v' +
    (1 - mu^(k+1))/(1 - mu) G, the Nesterov spike compensation; heavy-ball SC
    with k + 1) or ``sync`` (k = 0: G = the fresh gradient). ``c``: the gradient
    g_t is taken at w_t + c (w_t - w_{t-1}) (linear weight prediction)."""
    n = 3 + k
    W, WP, V = 0, 1, 2
    g_now = np.zeros(n)                   # g_t as a row over the state
    g_now[W] = x * (1 + c)
    g_now[WP] = -x * c
    G = g_now if rule == "sync" else np.eye(n)[3 + k - 1]   # the arriving gradient
    v_new = mu * np.eye(n)[V] + G
    if rule == "spike":
        a = mu ** (k + 1)
        step = a * v_new + (1 - a) / (1 - mu) * G
    else:
        step = G + mu * v_new
    A = np.zeros((n, n))
    A[W] = np.eye(n)[W] - step
    A[WP] = np.eye(n)[W]
    A[V] = v_new
    if k:
        A[3] = g_now                      # the queue: g_t enters, g_{t-k} leaves
        for i in range(4, 3 + k):
            A[i] = np.eye(n)[i - 1]
    return A


def matrix_threshold(k, rule="last", c=0.0, hi=4.0):
    """Bisection on the spectral radius < 1 of :func:`transition` (to 1e-7);
    assumes stability on (0, threshold), as the tables show."""
    def stable(x):
        return max(abs(np.linalg.eigvals(transition(x, k, rule=rule, c=c)))) < 1
    lo = 1e-4
    while hi - lo > 1e-7:
        m = (lo + hi) / 2
        lo, hi = (m, hi) if stable(m) else (lo, m)
    return lo


#: (row label, spec or None for sync, staleness, the matrix model or None when nonlinear)
ROWS = [
    ("sync", "sync", 0, ("sync", 0.0)),
    ("last", "pseudo-sync:last:{k}", None, ("last", 0.0)),
    ("spike", "pseudo-sync:spike:{k}", None, ("spike", 0.0)),
    ("weight prediction, c = k/2", "pseudo-sync:spike:{k}:sc=false:lwp={c}", None, ("last", "k/2")),
    ("weight prediction, c = k", "pseudo-sync:spike:{k}:sc=false:lwp={k}", None, ("last", "k")),
    ("spike + weight prediction, c = k/2", "pseudo-sync:spike:{k}:lwp={c}", None, ("spike", "k/2")),
    ("dc-asgd (lambda0 = 2, adaptive)", "pseudo-sync:dc-asgd:{k}", None, None),
    ("gap-aware", "pseudo-sync:gap-aware:{k}", None, None),
]


def table() -> str:
    lines = ["| Nesterov 0.9, f = h w^2/2 | k = 1: code | matrix | k = 2: code | matrix |", "|---|---:|---:|---:|---:|"]
    for label, spec, k_fixed, model in ROWS:
        cells = []
        for k in (1, 2):
            kk = k if k_fixed is None else k_fixed
            s = spec.format(k=k, c=k / 2)
            cells.append(f"{code_threshold(s):.4f}")
            if model is None:
                cells.append("(nonlinear)")
            else:
                rule, c = model
                c = {"k/2": k / 2, "k": float(k)}.get(c, c)
                cells.append(f"{matrix_threshold(kk, rule, c):.4f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: the nonlinear rules, whose threshold may depend on the start amplitude w0
AMPLITUDE_ROWS = [
    ("dc-asgd", "pseudo-sync:dc-asgd:{k}"),
    ("dc-asgd lambda0 = 0.5", "pseudo-sync:dc-asgd:{k}:lambda0=0.5"),
    ("gap-aware", "pseudo-sync:gap-aware:{k}"),
    ("gap-aware beta = 0.9", "pseudo-sync:gap-aware:{k}:beta=0.9"),
]


def amplitude_table(amplitudes=(0.01, 1.0, 100.0)) -> str:
    """The largest stable h*lr of the nonlinear rules (code only) from the start w0."""
    lines = ["| start amplitude w_0 | " + " | ".join(f"{a:g}" for a in amplitudes) + " |",
             "|---|" + "---:|" * len(amplitudes)]
    for k in (1, 2):
        for label, spec in AMPLITUDE_ROWS:
            cells = [f"{code_threshold(spec.format(k=k), w0=a):.4f}" for a in amplitudes]
            lines.append(f"| {label}, k = {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(amplitude_table())
