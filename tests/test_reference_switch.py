"""The reference switch (MINIPS_REFERENCE_KERNELS=1 / --reference-kernels):
with it, an edit to the readable NumPy code in kernels/reference.py changes
what runs; without it, the Numba kernels run and the edit changes nothing."""
from __future__ import annotations

import numpy as np
import pytest

from minips.distributed.staleness_lab import LeastSquares, run_stale_sgd
from minips.kernels import REFERENCE_ENV, reference


def _aesp(problem):
    return run_stale_sgd(problem, "adaptive", staleness=2, lr=0.05, steps=120, seed=1,
                         predictor_options={"lambda0": 1.0, "adapt_lambda": False})


def _patch_aesp(monkeypatch):
    """An instructor's edit of the readable rule: the correction term doubled."""
    original = reference.aesp_step

    def doubled(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max):
        F, c = original(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max)
        return (F + np.float32(lam) * c).astype(np.float32), c
    monkeypatch.setattr(reference, "aesp_step", doubled)


def test_patched_readable_predictor_changes_the_trajectory_only_under_the_switch(monkeypatch):
    problem = LeastSquares(rotate=False)
    monkeypatch.delenv(REFERENCE_ENV, raising=False)
    fused = _aesp(problem)
    monkeypatch.setenv(REFERENCE_ENV, "1")
    readable = _aesp(problem)
    # unpatched, the two paths agree to float32 rounding
    np.testing.assert_allclose(readable["w"], fused["w"], rtol=1e-3, atol=1e-5)
    _patch_aesp(monkeypatch)
    patched_on = _aesp(problem)
    monkeypatch.setenv(REFERENCE_ENV, "0")
    patched_off = _aesp(problem)
    # switch off: the Numba kernel runs, the edit has no effect (bitwise the same run)
    np.testing.assert_array_equal(patched_off["w"], fused["w"])
    # switch on: the edited rule runs, the weights move elsewhere
    gap = np.linalg.norm(patched_on["w"] - readable["w"]) / np.linalg.norm(readable["w"])
    assert gap > 1e-2, gap


def test_layers_and_loss_use_the_twins_under_the_switch(monkeypatch):
    """A patched twin of ReLU, max-pool and the loss changes a ConvNet's output
    and loss with the switch on, and nothing with it off; unpatched, the two
    paths give the same loss and gradients (to float32 rounding)."""
    from minips import random as mrandom
    from minips.models import build_model
    from minips.tasks import make_task
    task = make_task("fashion-mnist-mini")
    x, y = (a[:8] for a in task.train_arrays)

    def loss_and_grad():
        mrandom.seed(0)
        model = build_model("convnet", task)
        loss = model.loss((x, y))
        loss.backward()
        return float(loss.data), np.concatenate([p.grad.ravel() for p in model.parameters()])

    monkeypatch.delenv(REFERENCE_ENV, raising=False)
    l_fast, g_fast = loss_and_grad()
    monkeypatch.setenv(REFERENCE_ENV, "1")
    l_ref, g_ref = loss_and_grad()
    assert l_ref == pytest.approx(l_fast, rel=1e-5)
    np.testing.assert_allclose(g_ref, g_fast, rtol=1e-3, atol=1e-5)
    monkeypatch.setattr(reference, "relu_forward", lambda a: a.copy())  # "forgot" the max
    l_patched, _ = loss_and_grad()
    assert abs(l_patched - l_ref) > 1e-4
    monkeypatch.setenv(REFERENCE_ENV, "0")
    assert loss_and_grad()[0] == l_fast


def test_cli_flag_sets_the_switch_and_the_summary_records_it(tmp_path, monkeypatch):
    import json

    from minips.cli import main
    monkeypatch.setenv(REFERENCE_ENV, "0")  # recorded, so the flag's "1" is undone after the test
    assert main(["train", "--model", "mlp", "--epochs", "1", "--max-steps", "3", "--quiet",
                 "--reference-kernels", "--out", str(tmp_path / "r")]) == 0
    import os
    assert os.environ.get(REFERENCE_ENV) == "1"
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["reference_kernels"] is True
