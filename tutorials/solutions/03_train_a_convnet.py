"""Reference solutions of step 3 (tutorials/03_train_a_convnet.py)."""
import numpy as np

import minips as mp


# Exercise 3.1
def accuracy(model, x, y, batch_size=500):
    was_training = model.training
    model.eval()                      # Dropout off
    correct = 0
    with mp.no_grad():                # no graph
        for i in range(0, len(x), batch_size):
            logits = model(mp.Tensor(x[i:i + batch_size])).data
            correct += int((logits.argmax(axis=1) == y[i:i + batch_size]).sum())
    model.train(was_training)
    return correct / len(x)


# Exercise 3.2
def sgd_momentum(w, d, v, lr, mu):
    """Return (new w, new v)."""
    v = np.array(d, copy=True) if v is None else mu * v + d   # heavy-ball buffer
    return w - lr * v, v
