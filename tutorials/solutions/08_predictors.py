"""Reference solutions of step 8 (tutorials/08_predictors.py)."""
import numpy as np

from minips.distributed.algorithms.predictors import Predictor


# Exercise 8.1
class MyEMA(Predictor):
    name = "my-ema"

    def __init__(self, staleness=1, alpha=0.5):
        super().__init__(staleness)
        self.alpha = alpha
        self.S = None

    def forecast(self, G, w_now, w_then):
        if self.S is None:
            self.S = G.copy()
        else:
            self.S = self.alpha * G + (1 - self.alpha) * self.S
        return self.S.astype(np.float32, copy=True)


# Exercise 8.2
class MyHolt(Predictor):
    name = "my-holt"

    def __init__(self, staleness=1, alpha=0.5, beta=0.1):
        super().__init__(staleness)
        self.alpha, self.beta = alpha, beta
        self.L = self.B = None

    def forecast(self, G, w_now, w_then):
        if self.L is None:
            self.L, self.B = G.copy(), np.zeros_like(G)
        else:
            L_prev = self.L
            self.L = self.alpha * G + (1 - self.alpha) * (L_prev + self.B)   # level
            self.B = self.beta * (self.L - L_prev) + (1 - self.beta) * self.B  # trend
        return (self.L + self.k * self.B).astype(np.float32)                 # k steps ahead
