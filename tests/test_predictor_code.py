"""Issue 25: the predictor code a student reads is the code that runs, and
pseudo-sync's default.

- Editing a rule (here: monkeypatching the function or method that holds its
  maths, as an instructor would edit the file) changes the trajectory; the
  reference switch (MINIPS_REFERENCE_KERNELS) no longer touches the predictors.
- The banner and summary.json name the predictor and the file and class that ran.
- ``local`` is the default predictor; on one process its rule is synchronous
  SGD and pseudo-sync takes the sync path (bitwise equal to ``--algo sync``).
"""
import json

import numpy as np
import pytest

from minips.distributed.algorithms import aesp, local_predictors, resolve
from minips.distributed.algorithms.local_predictors import AdaptiveLocalPredictor, LocalPredictor
from minips.labs.staleness import LeastSquares, run_stale_sgd
from minips.kernels import REFERENCE_ENV
from minips.train import TrainConfig, Trainer

from .test_local_predictors import noise_problem, simulate


def _aesp_run():
    return run_stale_sgd(LeastSquares(rotate=False), "adaptive", staleness=2, lr=0.05, steps=120, seed=1,
                         predictor_options={"lambda0": 1.0, "adapt_lambda": False})


def test_editing_aesp_changes_the_trajectory_and_the_reference_switch_does_not(monkeypatch):
    monkeypatch.delenv(REFERENCE_ENV, raising=False)
    base = _aesp_run()
    monkeypatch.setenv(REFERENCE_ENV, "1")  # switches the layers' twins, not the predictors
    np.testing.assert_array_equal(_aesp_run()["w"], base["w"])
    original = aesp.aesp_step

    def doubled(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max):
        """An instructor's edit: the correction term counted twice."""
        F, c = original(G, w_now, w_then, G_prev, w_prev, Sgw, Sww, h, lam, rho, eps, h_max)
        return (F + np.float32(lam) * c).astype(np.float32), c

    monkeypatch.setattr(aesp, "aesp_step", doubled)
    for switch in ("0", "1"):
        monkeypatch.setenv(REFERENCE_ENV, switch)
        edited = _aesp_run()
        gap = np.linalg.norm(edited["w"] - base["w"]) / np.linalg.norm(base["w"])
        assert gap > 1e-2, (switch, gap)


def test_editing_the_local_rules_changes_their_directions(monkeypatch):
    g = noise_problem(T=40, P=3, n=20)
    base_local, _, _ = simulate(LocalPredictor, g, 1)
    base_adaptive, _, _ = simulate(AdaptiveLocalPredictor, g, 1, warmup=2)

    def half_correction(self, G, w_now, w_then):  # d = G + (g_t - g_{t-k}) / 2
        g_new, g_old, _, _ = self._new_and_old()
        return G + np.float32(0.5) * (g_new - g_old)

    monkeypatch.setattr(LocalPredictor, "predict", half_correction)
    edited, _, _ = simulate(LocalPredictor, g, 1)
    assert np.abs(edited - base_local).max() > 1e-2
    monkeypatch.undo()
    loop = local_predictors._adaptive_local_loop

    def no_sums(G, g_new, g_old, c_old, lam_new, lam_old, d):  # an edit that drops the regression
        loop(G, g_new, g_old, c_old, lam_new, lam_old, d)
        return 0.0, 0.0, 0.0

    monkeypatch.setattr(local_predictors, "_adaptive_local_loop", no_sums)
    edited, lam, _ = simulate(AdaptiveLocalPredictor, g, 1, warmup=2)
    assert (lam == 1).all()  # no evidence: lambda stays at lambda0
    assert np.abs(edited - base_adaptive).max() > 1e-2


def test_no_fused_option_left():
    for name in ("adaptive", "local", "adaptive-local"):
        with pytest.raises(ValueError, match="has no option"):
            resolve(f"pseudo-sync:predictor={name}:fused=false")


def _trainer(tmp_path, algo, name, **kw):
    cfg = TrainConfig(model="mlp", data="fashion-mnist-mini", epochs=1, batch_size=100, max_steps=20, algo=algo,
                      quiet=False, out=str(tmp_path / name), **kw)
    return Trainer(cfg)


def test_banner_and_summary_name_the_predictor_and_its_code(tmp_path, capsys):
    summary = _trainer(tmp_path, "pseudo-sync:adaptive", "aesp").run()
    banner = capsys.readouterr().out
    code = "minips/distributed/algorithms/aesp.py::AdaptivePredictor (Numba loop)"
    assert summary["predictor"] == "adaptive" and summary["predictor_code"] == code
    assert f"predictor=adaptive: {code}" in banner
    on_disk = json.loads((tmp_path / "aesp" / "summary.json").read_text())
    assert on_disk["predictor_code"] == code


def test_default_predictor_is_local():
    spec = resolve("pseudo-sync")
    assert spec.options.predictor == "local" and spec.run_label == "pseudo-sync:local"
    assert not spec.replicated  # ranks drift: the Trainer evaluates the average and logs the consensus
    import tomllib
    from pathlib import Path
    main = tomllib.loads((Path(__file__).parents[1] / "configs" / "main.toml").read_text())
    assert resolve(main["algo"]).options.predictor == "local"


def test_default_on_one_process_is_bitwise_sync(tmp_path, capsys, monkeypatch):
    # one Numba thread for both runs: the Trainer picks the count from the machine's load, and
    # two runs whose parallel reductions split differently differ in the last bits
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    ts = _trainer(tmp_path, "sync", "sync")
    ts.run()
    tp = _trainer(tmp_path, "pseudo-sync", "ps")
    summary = tp.run()
    assert "one process: the sync path" in capsys.readouterr().out
    assert summary["predictor_code"] == "sync path (one process)"
    assert tp.algo.step_count == ts.algo.step_count == 20
    np.testing.assert_array_equal(tp.algo.flat.weights, ts.algo.flat.weights)
    # AESP keeps its pipeline on one process (a way to study staleness alone): not sync
    ta = _trainer(tmp_path, "pseudo-sync:adaptive", "aesp")
    ta.run()
    assert not np.array_equal(ta.algo.flat.weights, ts.algo.flat.weights)


@pytest.mark.mpi
def test_the_main_jobs_default_evaluates_the_average_logs_consensus_and_checkpoints_every_rank(tmp_path):
    """The README's main job with the new default, cut to 12 steps on the MLP: the
    ranks drift, so it evaluates the weights averaged over ranks (the test accuracy
    recomputed here from the checkpoint's per-rank weights), logs the consensus
    distance and checkpoints each rank's own weights."""
    import shutil
    import subprocess
    import sys

    import h5py

    from .conftest import ROOT, subprocess_env
    mpiexec = shutil.which("mpiexec")
    out = tmp_path / "main"
    r = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "minips", "train", "--model", "mlp",
                        "--max-steps", "12", "--checkpoint-every", "12", "--batch-size", "64", "--out", str(out)],
                       capture_output=True, text=True, timeout=240, env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "predictor=local: minips/distributed/algorithms/local_predictors.py::LocalPredictor" in r.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["algo"] == "pseudo-sync" and s["predictor"] == "local" and s["replicated"] is False
    assert s["consensus_distance"] > 0
    with h5py.File(out / "checkpoint.h5") as f:
        w = [f[f"ranks/{i}/weights"][()] for i in (0, 1)]
    assert not np.array_equal(w[0], w[1])
    # the reported accuracy is the averaged model's: evaluate mean(w0, w1) here
    from minips import random as mrandom
    from minips.distributed.flat import FlatParams
    from minips.models import build_model
    from minips.tasks import make_task
    task = make_task("fashion-mnist-mini")
    mrandom.seed(0)
    model = build_model("mlp", task)
    flat = FlatParams(model.parameters())
    flat.weights[...] = (w[0] + w[1]) / np.float32(2)
    assert task.evaluate(model, None, 1000)["test_accuracy"] == pytest.approx(s["test_accuracy"], abs=1e-9)
