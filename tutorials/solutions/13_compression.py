"""Reference solutions of step 13 (tutorials/13_compression.py)."""


# Exercise 13.1
def error_feedback_step(g, e, compress):
    v = g + e                 # add back what earlier steps did not send (a new array: g is untouched)
    sent = compress(v)        # once: a random compressor would give another answer on a second call
    e[...] = v - sent         # the residual, in place: the caller's memory array changes
    return sent
