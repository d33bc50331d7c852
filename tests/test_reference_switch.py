"""The reference switch (MINIPS_REFERENCE_KERNELS=1 / --reference-kernels):
with it, an edit to the readable NumPy code in kernels/reference.py changes
what the layers and the loss run; without it, the Numba kernels run and the
edit changes nothing. (The predictors of pseudo-sync are not switched: their
code always runs, tests/test_predictor_code.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from minips.kernels import REFERENCE_ENV, reference


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
