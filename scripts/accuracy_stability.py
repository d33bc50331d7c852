"""Largest stable h*lr of Nesterov SGD (mu = 0.9) on f = h w^2 / 2 when the applied
gradient mixes the fresh and the k-step-old one: g = lam h w_t + (1 - lam) h w_{t-k}
(adaptive-local's direction averaged over ranks; lam = 1 is local = sync, lam = 0 is last).

    python scripts/accuracy_stability.py > docs/bench/accuracy/stability_mix.txt

Exact from the spectral radius of the transition matrix of (w_t, ..., w_{t-k}, v_t):
a fine scan for the first unstable point, then bisection.
"""
import numpy as np


def transition(x, k, lam, mu=0.9):
    n = k + 2
    A = np.zeros((n, n))
    A[0, 0] = 1                                   # w' = w - x ((1 + mu) g + mu^2 v)
    for idx, coef in ((0, lam), (k, 1 - lam)):    # g = lam w_t + (1 - lam) w_{t-k}  (h = 1, lr = x)
        A[0, idx] -= x * (1 + mu) * coef
        A[n - 1, idx] += coef                     # v' = mu v + g
    A[0, n - 1] -= x * mu * mu
    A[n - 1, n - 1] = mu
    for j in range(1, k + 1):
        A[j, j - 1] = 1
    return A


def largest_stable(k, lam, mu=0.9):
    def radius(x):
        return max(abs(np.linalg.eigvals(transition(x, k, lam, mu))))
    grid = np.linspace(1e-4, 3, 3001)
    hi = grid[np.argmax([radius(x) >= 1 for x in grid])]
    lo = hi - (grid[1] - grid[0])
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if radius(mid) < 1 else (lo, mid)
    return lo


if __name__ == "__main__":
    lams = (1.0, 0.5, 0.25, 0.125, 0.0)
    print("largest stable h*lr, Nesterov mu = 0.9, g = lam*h*w_t + (1-lam)*h*w_{t-k}")
    print("k | " + " | ".join(f"lam={lam}" for lam in lams))
    for k in (1, 2):
        print(f"{k} | " + " | ".join(f"{largest_stable(k, lam):.3f}" for lam in lams))
