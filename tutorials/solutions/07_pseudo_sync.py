"""Reference solutions of step 7 (tutorials/07_pseudo_sync.py)."""
from collections import deque

import numpy as np


# Exercise 7.1
def stale_sgd(grad_fn, w0, k, lr, momentum, steps):
    w = np.array(w0, dtype=np.float32, copy=True)
    v = None
    in_flight = deque()
    for t in range(steps):
        in_flight.append(grad_fn(w, t))   # post the fresh gradient
        if len(in_flight) > k:            # the one from k steps ago has arrived
            g = in_flight.popleft()
            v = g.copy() if v is None else momentum * v + g
            w -= lr * v
        # else: pipeline fill, no update
    return w


# Exercise 7.2
def predicted_step_time(t_compute, t_comm, algo):
    if algo == "sync":
        return t_compute + t_comm        # wait for the whole allreduce after computing
    return max(t_compute, t_comm)         # pseudo-sync, k = 1: overlapped with the next step
