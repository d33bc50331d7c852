"""Given gradients for MPI workers whose runs a one-process NumPy simulation
reproduces exactly (tests/gossip1_worker.py, tests/overlap_local_worker.py):
rank i's gradient at step t at weights w is ``w - c_i + noise(i, t)``, a
quadratic pulling rank i towards its own centre c_i plus seeded noise."""
import numpy as np


def centre(i, d):
    return np.random.default_rng(100 + i).standard_normal(d).astype(np.float32)


def noise(i, t, d):
    return (0.1 * np.random.default_rng(1000 * i + t).standard_normal(d)).astype(np.float32)


def gradient(w, i, t):
    """Rank i's gradient at step t at weights w (float32)."""
    return w - centre(i, w.size) + noise(i, t, w.size)


def initial(d, i=0, spread=0.0):
    """The start: the same d floats on every rank, moved by ``spread * i`` on rank i."""
    return (np.random.default_rng(7).standard_normal(d) + spread * i).astype(np.float32)
