"""Reference solutions of step 1 (tutorials/01_tensors_and_autograd.py)."""
import numpy as np

import minips as mp


# Exercise 1.1
class Softplus(mp.Function):
    def forward(self, a):
        self.a = a
        return np.logaddexp(0.0, a)

    def backward(self, g):
        # d/da log(1 + e^a) = e^a / (1 + e^a) = sigmoid(a); computed from exp(-|a|),
        # which never overflows (the same trick as minips.ops._sigmoid).
        e = np.exp(-np.abs(self.a))
        sig = np.where(self.a >= 0, 1 / (1 + e), e / (1 + e))
        return g * sig


# Exercise 1.2
def predicted_grad(x0):
    # The first backward leaves d(sum x^2)/dx = 2 x in x.grad; the second ADDS d(sum 3x)/dx = 3.
    return 2 * np.asarray(x0) + 3
