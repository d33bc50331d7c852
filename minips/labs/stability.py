"""Noise-free stability thresholds of stale updates on a quadratic (the staleness lab's analysis,
issues 42 and 43): the transition matrices of synchronous SGD, of a rank's difference from the
ranks' mean under ``local``, and of both loops of a correction weight, on ``f(w) = h w^2 / 2`` with
``lr = 1`` and ``h = x`` (so a threshold is the largest stable ``h * lr``), for
:class:`minips.optim.SGD`'s momentum rule. :mod:`minips.labs.staleness` simulates the same rules
with noise and P ranks, and re-exports these functions.

A correction weight (issue 43's second candidate, docs/accuracy.md section 11): with
``d^i_t = G_{t-k} + lambda (g^i_t - g^i_{t-k})`` (``adaptive-local`` with its confidence held at
``lambda``) two loops run at once. The ranks' mean steps along ``lambda G_t + (1 - lambda) G_{t-k}``,
part fresh and part k steps stale (:func:`mean_transition`: ``lambda = 1`` is sync, 0 the naive
stale update ``last``); a rank's difference from the mean along ``lambda h (e^i_t - e^i_{t-k})``
plus noise (:func:`deviation_transition` with ``lam``), whose largest stable step is ``1 / lambda``
times ``local``'s. The first loop wants ``lambda`` near 1, the second small;
:func:`stability_weight` is the ``lambda`` that maximizes the smaller of the two largest stable
steps, noise-free (0.625 for k = 1 and Nesterov 0.9, where both loops hold to about 1.09 against
``local``'s 0.679: :func:`largest_stable_steps`). Whether that carries over to a network trained
with noise is what the screen measures. (Our analysis: no paper gives this weight.)
"""
from __future__ import annotations

import numpy as np

__all__ = ["sync_transition", "deviation_transition", "mean_transition", "pull_deviation_transition",
           "stability_weight", "largest_stable_steps", "weights_table", "pulls_table"]


def sync_transition(x: float, mu: float = 0.9, nesterov: bool = True) -> np.ndarray:
    """Synchronous SGD on ``f = h w^2 / 2`` with lr = 1, h = x: the state (w, v) ->
    the next (minips.optim.SGD: v' = mu v + d; w' = w - (d + mu v') with Nesterov,
    w - v' without), d = x w."""
    d = np.array([x, 0.0])
    v_new = np.array([0.0, mu]) + d
    w_new = np.array([1.0, 0.0]) - (d + mu * v_new if nesterov else v_new)
    return np.array([w_new, v_new])


def deviation_transition(x: float, k: int = 1, mu: float = 0.9, nesterov: bool = True,
                         lam: float = 1.0) -> np.ndarray:
    """A rank's difference from the ranks' mean under ``local`` on ``f = h w^2 / 2``
    (lr = 1, h = x), without the noise that drives it: the direction is
    ``lam x (e_t - e_{t-k})`` (``lam``: the correction weight; 1 is ``local``).
    The state is (s_{t-1}, ..., s_{t-k}, v_t) with s the steps e_{j+1} - e_j (the
    difference itself is their sum, so a constant offset, which the rule neither
    restores nor grows, is left out). float64 (k + 1, k + 1).

    Raises:
        ValueError: k < 1, or lam outside [0, 1].
    """
    _check_k_lam(k, lam)
    n = k + 1
    d = np.zeros(n)
    d[:k] = lam * x                              # e_t - e_{t-k} = s_{t-1} + ... + s_{t-k}
    v_new = mu * np.eye(n)[k] + d
    step = -(d + mu * v_new) if nesterov else -v_new
    A = np.zeros((n, n))
    A[0] = step
    for i in range(1, k):
        A[i] = np.eye(n)[i - 1]
    A[k] = v_new
    return A


def _check_k_lam(k: int, lam: float) -> None:
    if k < 1:
        raise ValueError(f"staleness k must be >= 1, got {k}")
    if not 0 <= lam <= 1:
        raise ValueError(f"the correction weight lambda must be in [0, 1], got {lam}")


def mean_transition(x: float, k: int = 1, lam: float = 1.0, mu: float = 0.9, nesterov: bool = True) -> np.ndarray:
    """The ranks' mean under a correction weight ``lam`` on ``f = h w^2 / 2`` (lr = 1,
    h = x): its direction is ``lam x w_t + (1 - lam) x w_{t-k}``; the state is
    (w_t, w_{t-1}, ..., w_{t-k}, v_t). ``lam = 1`` is synchronous SGD (:func:`sync_transition`
    with k delayed copies), ``lam = 0`` the naive stale update. float64 (k + 2, k + 2).

    Raises:
        ValueError: k < 1, or lam outside [0, 1].
    """
    _check_k_lam(k, lam)
    n = k + 2
    d = np.zeros(n)
    d[0] += lam * x
    d[k] += (1 - lam) * x                        # the direction, a row over the state
    v_new = mu * np.eye(n)[n - 1] + d
    A = np.zeros((n, n))
    A[0] = np.eye(n)[0] - (d + mu * v_new if nesterov else v_new)
    for j in range(1, k + 1):
        A[j, j - 1] = 1                          # the older weights shift down
    A[n - 1] = v_new
    return A


def pull_deviation_transition(x: float, k: int = 1, pull: float = 0.5, lam: float = 1.0, mu: float = 0.9,
                              nesterov: bool = True) -> np.ndarray:
    """A rank's difference from the ranks' mean under ``local-pull`` on ``f = h w^2 / 2`` (lr = 1,
    h = x), noise-free: the direction ``lam x (e_t - e_{t-k})`` and, after the step, the pull
    ``- pull e_{t-k}`` (:mod:`minips.distributed.algorithms.local_pull`). The pull acts on the
    difference itself, so the state is (e_t, e_{t-1}, ..., e_{t-k}, v_t). ``pull = 0`` is
    :func:`deviation_transition` plus an eigenvalue 1 (the constant offset, which nothing then
    restores). The ranks' mean is not pulled (the pulls sum to zero): :func:`mean_transition`.
    float64 (k + 2, k + 2).

    Raises:
        ValueError: k < 1, lam outside [0, 1], or pull outside [0, 1].
    """
    _check_k_lam(k, lam)
    if not 0 <= pull <= 1:
        raise ValueError(f"the pull must be in [0, 1], got {pull}")
    n = k + 2
    d = np.zeros(n)
    d[0] += lam * x
    d[k] -= lam * x                              # lam x (e_t - e_{t-k})
    v_new = mu * np.eye(n)[n - 1] + d
    A = np.zeros((n, n))
    A[0] = np.eye(n)[0] - (d + mu * v_new if nesterov else v_new)
    A[0, k] -= pull                              # the pull towards the mean of k steps ago
    for j in range(1, k + 1):
        A[j, j - 1] = 1
    A[n - 1] = v_new
    return A


def _first_unstable(matrix, hi: float = 8.0, grid: int = 800) -> float:
    """The largest x below which ``matrix`` has spectral radius < 1 on all of (0, x): a scan for the
    first unstable point (the radius of a mixed fresh and stale direction is not monotonic in x),
    then bisection to 1e-7."""
    def stable(x):
        return max(abs(np.linalg.eigvals(matrix(x)))) < 1
    xs = np.linspace(hi / grid, hi, grid)
    bad = next((i for i, x in enumerate(xs) if not stable(x)), None)
    if bad is None:
        return hi
    lo, up = (0.0 if bad == 0 else xs[bad - 1]), xs[bad]
    while up - lo > 1e-7:
        m = (lo + up) / 2
        lo, up = (m, up) if stable(m) else (lo, m)
    return lo


def stability_weight(k: int = 1, mu: float = 0.9, nesterov: bool = True) -> float:
    """The correction weight ``lambda`` on a grid of step 1/64 in [1/16, 1] that maximizes
    ``min(mean loop's, deviation loop's largest stable step)`` (:func:`mean_transition`,
    :func:`deviation_transition`), noise-free. float; 0.625 for k = 1, Nesterov 0.9.

    Raises:
        ValueError: k < 1.
    """
    _check_k_lam(k, 1.0)
    lams = np.arange(4, 65) / 64
    return float(max(lams, key=lambda lam: min(
        _first_unstable(lambda x: mean_transition(x, k, lam, mu, nesterov)),
        _first_unstable(lambda x: deviation_transition(x, k, mu, nesterov, lam)))))


def largest_stable_steps(k: int = 1, mu: float = 0.9, nesterov: bool = True, lam: float | None = None,
                         pull: float | None = None) -> dict:
    """The largest stable ``h * lr`` on ``f = h w^2 / 2``: ``synchronous`` (also
    the ranks' mean under ``local``) and ``local_deviation`` (a rank's difference
    from the mean under ``local`` with staleness k), from the transition matrices;
    with a correction weight ``lam``, also ``weighted_mean`` and ``weighted_deviation``
    (the two loops of ``d = G_{t-k} + lam (g_t - g_{t-k})``); with a ``pull`` > 0,
    also ``pulled_deviation`` (``local-pull``'s difference loop, with ``lam`` or 1; its
    mean loop is ``weighted_mean``'s, or synchronous at lam = 1)."""
    out = {"synchronous": _first_unstable(lambda x: sync_transition(x, mu, nesterov)),
           "local_deviation": _first_unstable(lambda x: deviation_transition(x, k, mu, nesterov))}
    if lam is not None:
        out["weighted_mean"] = _first_unstable(lambda x: mean_transition(x, k, lam, mu, nesterov))
        out["weighted_deviation"] = _first_unstable(lambda x: deviation_transition(x, k, mu, nesterov, lam))
    if pull:
        out["pulled_deviation"] = _first_unstable(
            lambda x: pull_deviation_transition(x, k, pull, 1.0 if lam is None else lam, mu, nesterov))
    return out


def weights_table(k: int = 1, mu: float = 0.9, lams=(1.0, 0.9, 0.75, 0.625, 0.5, 0.25, 0.0)) -> str:
    """docs/accuracy.md section 11's table: for a correction weight ``lambda`` (``d = G_{t-k} +
    lambda (g_t - g_{t-k})``), the largest stable ``h * lr`` of the ranks' mean and of a rank's
    difference from it, noise-free, Nesterov ``mu``; and :func:`stability_weight`."""
    sync = largest_stable_steps(k, mu)["synchronous"]
    lines = [f"k = {k}, Nesterov {mu}: largest stable h * lr (synchronous {sync:.3f}); "
             f"stability weight {stability_weight(k, mu):.4f}", "",
             "| lambda | ranks' mean | a rank's difference | the smaller |", "|---:|---:|---:|---:|"]
    for lam in lams:
        t = largest_stable_steps(k, mu, True, lam=lam)
        m, d = t["weighted_mean"], t["weighted_deviation"]
        dev = "no limit (lambda = 0: no step)" if lam == 0 else f"{d:.3f}"
        lines.append(f"| {lam:g} | {m:.3f} | {dev} | {min(m, d):.3f} |")
    return "\n".join(lines)


def pulls_table(k: int = 1, mu: float = 0.9, pulls=(0.25, 0.5, 0.75, 0.9), lams=(1.0, 0.8, 0.7, 0.625, 0.5)) -> str:
    """docs/accuracy.md section 11's table for ``local-pull``: for a pull and a correction weight
    ``lambda``, the largest stable ``h * lr`` of the ranks' mean (the pull leaves it alone:
    :func:`mean_transition`) and of a rank's difference from it (:func:`pull_deviation_transition`),
    noise-free, Nesterov ``mu``, and the smaller of the two."""
    sync = largest_stable_steps(k, mu)["synchronous"]
    lines = [f"k = {k}, Nesterov {mu}: largest stable h * lr, ranks' mean / a rank's difference (the smaller in "
             f"bold); synchronous {sync:.3f}, local's difference {largest_stable_steps(k, mu)['local_deviation']:.3f}",
             f"(the pull's own loop, a restoring force k steps late, damps only below 2 sin(pi / (4k + 2)) = "
             f"{2 * np.sin(np.pi / (4 * k + 2)):.3f}: at the bound a rank's offset, which the gradient does not "
             f"restore, is no longer damped, as under local; above it, it grows, and local-pull refuses it)",
             "", "| pull | " + " | ".join(f"lambda {lam:g}" for lam in lams) + " |",
             "|---:|" + "---:|" * len(lams)]
    for pull in pulls:
        cells = []
        for lam in lams:
            t = largest_stable_steps(k, mu, True, lam=lam, pull=pull)
            m, d = t["weighted_mean"], t["pulled_deviation"]
            cells.append(f"{m:.2f} / {d:.2f} (**{min(m, d):.2f}**)")
        lines.append(f"| {pull:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
