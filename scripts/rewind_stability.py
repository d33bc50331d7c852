"""Largest stable h*lr (Nesterov, mu = 0.9, f = h w^2 / 2, every rank on the same
data, k = 1) of ``local-rewind`` when its fresh step is shrunk towards the
arrived average: apply u_t = lam g_t + (1 - lam) G_{t-1}, and when G_t arrives
swap u_t for G_t in momentum and weights (as local-rewind swaps g_t).
lam = 1 is local-rewind (= sync here). Issue 31: why the confidence was not put
inside the rewind.

    python scripts/rewind_stability.py > docs/bench/accuracy/gaps/rewind_stability.txt

Exact: the spectral radius of the transition matrix of (w_t, v_t, u_{t-1},
G_{t-1}), built column by column from the update; a scan for the first
unstable point on a grid of step 0.001.
"""
import numpy as np

MU = 0.9


def update(state, x, lam):
    """One step (h = 1, lr = x) of the rule on the state (w, v, u_prev, G_prev)."""
    w, v, u_prev, G_prev = state
    g = w                                   # every rank on the same data: g_t = G_t = h w_t
    delta = G_prev - u_prev                 # swap u_{t-1} for G_{t-1}: v and w as if G_{t-1} had been applied
    v, w = v + delta, w - x * (1 + MU) * delta
    u = lam * g + (1 - lam) * G_prev        # this step's direction
    v = MU * v + u
    w = w - x * (u + MU * v)                # Nesterov, as minips.optim
    return np.array([w, v, u, g])


def radius(x, lam):
    A = np.column_stack([update(e, x, lam) for e in np.eye(4)])
    return max(abs(np.linalg.eigvals(A)))


def largest_stable(lam):
    for x in np.arange(0.001, 3.0, 0.001):
        if radius(x, lam) > 1 + 1e-9:
            return x - 0.001
    return None


if __name__ == "__main__":
    print("largest stable h*lr, Nesterov mu = 0.9, k = 1: local-rewind with the fresh step "
          "lam g_t + (1 - lam) G_{t-1} (swapped for G_t on arrival)")
    print("| lam | " + " | ".join(str(lam) for lam in (1.0, 0.5, 0.25, 0.125, 0.0)) + " |")
    print("|---|---:|---:|---:|---:|---:|")
    print("| largest stable h*lr | " + " | ".join(f"{largest_stable(lam):.3f}"
                                                    for lam in (1.0, 0.5, 0.25, 0.125, 0.0)) + " |")
