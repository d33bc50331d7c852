"""Finite-difference gradient checks.

``gradcheck(fn, inputs)`` compares the analytic gradient (backward) of
``sum(fn(*inputs) * w)`` for a random fixed weight ``w`` with central
differences ``(f(x + eps) - f(x - eps)) / (2 eps)`` in float64, one element at
a time. Same idea as ``torch.autograd.gradcheck``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tensor import Tensor

__all__ = ["gradcheck", "GradcheckError", "GradcheckReport"]


class GradcheckError(AssertionError):
    """Raised when an analytic gradient disagrees with finite differences."""


@dataclass
class GradcheckReport:
    """Worst disagreement found: input index, element index, both values."""
    input_index: int
    element: tuple
    analytic: float
    numeric: float
    abs_error: float

    def __str__(self):
        return (f"input {self.input_index}, element {self.element}: analytic {self.analytic:.6g}, "
                f"numeric {self.numeric:.6g}, |diff| {self.abs_error:.3g}")


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-4,
              seed: int = 0, raise_on_failure: bool = True) -> GradcheckReport | None:
    """Check ``fn``'s backward against central finite differences.

    Args:
        fn: callable taking Tensors and returning a Tensor (or a tuple of
            Tensors, all checked through one random projection).
        inputs: list of float64 arrays or Tensors. Those with
            ``requires_grad=True`` (all arrays, by default) are checked.
        eps: finite-difference step.
        atol, rtol: an element passes if ``|a - n| <= atol + rtol * |n|``.
        seed: seed of the random projection weights.
        raise_on_failure: raise :class:`GradcheckError` on a mismatch (else
            return the report).

    Returns:
        The report of the worst element (largest ``|a - n| - rtol*|n|``).

    Raises:
        TypeError: an input is not float64 (float32 differences are too noisy).
        ValueError: nothing to check: no input requires a gradient, or no
            output of ``fn`` does (it detached them), so a check would pass
            without testing anything.
        GradcheckError: some element differs; the message names the worst one.
    """
    tensors = []
    for i, x in enumerate(inputs):
        t = x if isinstance(x, Tensor) else Tensor(np.array(x), requires_grad=True)
        t.data = np.ascontiguousarray(t.data)  # perturbed in place through a flat view
        if t.requires_grad and t.dtype != np.float64:
            raise TypeError(f"gradcheck input {i} has dtype {t.dtype}; use float64 "
                            "(finite differences in float32 are too noisy)")
        tensors.append(t)
    rng = np.random.default_rng(seed)

    def outputs(ts):
        out = fn(*ts)
        return out if isinstance(out, tuple) else (out,)

    outs = outputs(tensors)
    weights = [rng.standard_normal(o.shape) for o in outs]

    def scalar(ts):
        return sum(float((o.data * w).sum()) for o, w in zip(outputs(ts), weights))

    # Analytic: backprop the projection weights.
    for t in tensors:
        t.grad = None
    total = None
    for o, w in zip(outs, weights):
        if o.requires_grad:
            term = (o * Tensor(w)).sum()
            total = term if total is None else total + term
    if total is None or not any(t.requires_grad for t in tensors):
        raise ValueError("gradcheck: nothing to check: no input has requires_grad=True or no output of fn "
                         "requires a gradient (does fn detach, or run under no_grad?)")
    total.backward()

    worst, worst_score = None, -np.inf
    for i, t in enumerate(tensors):
        if not t.requires_grad:
            continue
        analytic = t.grad if t.grad is not None else np.zeros_like(t.data)
        flat = t.data.reshape(-1)  # view: perturb in place
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            fp = scalar(tensors)
            flat[j] = orig - eps
            fm = scalar(tensors)
            flat[j] = orig
            numeric = (fp - fm) / (2 * eps)
            a = analytic.reshape(-1)[j]
            err = abs(a - numeric)
            score = err - rtol * abs(numeric)
            if score > worst_score:
                worst_score = score
                where = tuple(int(v) for v in np.unravel_index(j, t.shape))
                worst = GradcheckReport(i, where, float(a), float(numeric), float(err))
    if raise_on_failure and worst is not None and worst_score > atol:
        raise GradcheckError(f"gradcheck failed: {worst} (atol {atol}, rtol {rtol})")
    return worst
