"""``--clip-norm``: global-norm clipping of the update direction in the optimizer (issue 43), as
``torch.nn.utils.clip_grad_norm_`` before ``optimizer.step()``, for every algorithm."""
import json

import numpy as np
import pytest

from minips import nn, optim

from .conftest import ROOT, cli_on_ranks, run_ranks


def _params(rng, shapes):
    return [nn.Parameter(rng.standard_normal(s), dtype=np.float64) for s in shapes]


def test_clip_scales_the_global_norm_before_weight_decay_and_momentum(rng):
    """By hand: the factor is min(1, C / (||(g_1, g_2)|| + 1e-6)) over both tensors together, applied
    before the L2 term and the momentum buffer; a direction below C is left alone."""
    shapes = [(3, 4), (5,)]
    ps = _params(rng, shapes)
    w = [p.data.copy() for p in ps]
    opt = optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, clip_norm=1.0)
    v = [None, None]
    for scale in (10.0, 0.01, 3.0):
        g = [scale * rng.standard_normal(s) for s in shapes]
        for p, gi in zip(ps, g):
            p.grad = gi.copy()
        opt.step()
        norm = np.sqrt(sum(np.sum(gi ** 2) for gi in g))
        c = min(1.0, 1.0 / (norm + 1e-6))
        assert opt.clip_factor == pytest.approx(c, rel=1e-12)
        for i in range(2):
            d = c * g[i] + 0.01 * w[i]
            v[i] = d if v[i] is None else 0.9 * v[i] + d
            w[i] = w[i] - 0.1 * (d + 0.9 * v[i])
            np.testing.assert_allclose(ps[i].data, w[i], rtol=1e-12)
    assert opt.clips == 2  # the norms 10 x and 3 x a unit Gaussian's were above 1, the 0.01 x one was not


def test_clip_matches_torch_clip_grad_norm():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (7,), (2, 2, 3)]
    ps = _params(rng, shapes)
    tp = [torch.nn.Parameter(torch.from_numpy(p.data.copy())) for p in ps]
    opt = optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3, clip_norm=0.7)
    topt = torch.optim.SGD(tp, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)
    for scale in (5.0, 0.02, 1.0, 20.0):
        g = [scale * rng.standard_normal(s) for s in shapes]
        for p, t, gi in zip(ps, tp, g):
            p.grad = gi.copy()
            t.grad = torch.from_numpy(gi.copy())
        opt.step()
        torch.nn.utils.clip_grad_norm_(tp, 0.7)
        topt.step()
        for p, t in zip(ps, tp):
            np.testing.assert_allclose(p.data, t.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_clip_of_one_flat_direction_and_nonfinite():
    p = nn.Parameter(np.zeros(4, np.float32))
    opt = optim.SGD([p], lr=1.0, clip_norm=2.0)
    opt.apply(0, p.data, np.array([3.0, 4.0, 0.0, 0.0], np.float32))  # norm 5 -> 2
    np.testing.assert_allclose(p.data, [-1.2, -1.6, 0, 0], rtol=1e-5)
    assert opt.clip_coefficient([np.array([np.nan, 1.0])]) != opt.clip_coefficient([np.array([np.nan, 1.0])])
    assert opt.clip_coefficient([np.array([np.inf, 1.0])]) == 0.0  # as torch: inf norm -> factor 0
    with pytest.raises(ValueError, match="clip_norm must be a finite number >= 0"):
        optim.SGD([p], lr=0.1, clip_norm=-1.0)
    with pytest.raises(RuntimeError, match="call step"):
        optim.SGD([p, nn.Parameter(np.zeros(2))], lr=0.1, clip_norm=1.0).apply(0, p.data, p.data)


def test_clip_state_roundtrip_and_old_state():
    p = nn.Parameter(np.ones(3, np.float32))
    opt = optim.SGD([p], lr=0.1, momentum=0.9, clip_norm=0.1)
    opt.apply(0, p.data, np.ones(3, np.float32))
    state = opt.state_dict()
    assert state["clip_norm"] == 0.1 and state["clips"] == 1
    again = optim.SGD([nn.Parameter(np.ones(3, np.float32))], lr=0.1, momentum=0.9, clip_norm=0.1)
    again.load_state_dict(state)
    assert again.clips == 1
    del state["clips"], state["clip_norm"]  # a checkpoint written before clipping existed
    again.load_state_dict(state)
    assert again.clips == 0


def test_every_algorithm_clips_and_replicas_share_the_norm(tmp_path):
    """Every algorithm of the registry on 3 ranks with their own data: every rank clipped every
    direction it applied; the rules that keep replicas identical still do (each rank computed the
    same norm of the same averaged direction); with plain SGD a synchronous or pseudo-synchronous
    step moves the weights by at most lr * C."""
    out = tmp_path / "clip.npz"
    r = run_ranks(3, ROOT / "tests" / "clip_norm_worker.py", out, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    z = np.load(out)
    from minips.distributed.algorithms import ALGORITHMS, resolve
    specs = [k[6:] for k in z.files if k.startswith("clips_")]
    assert set(ALGORITHMS) <= set(specs)
    for spec in specs:
        assert (z[f"clips_{spec}"] > 0).all(), f"{spec}: a rank never clipped: {z[f'clips_{spec}']}"
        if spec in ("sync", "pseudo-sync:local:1"):  # a direction applied at every step, every one above C
            assert (z[f"clips_{spec}"] == 6).all(), (spec, z[f"clips_{spec}"])
        s = resolve(spec)
        if s.cls.keeps_replicas(s.options):
            assert z[f"same_{spec}"].all(), f"{spec}: the replicas differ under clipping"
        if s.name in ("sync", "pseudo-sync"):
            # (float32 weights: their difference carries rounding of about 1e-4 of so small a move)
            assert (z[f"moves_{spec}"] <= 0.1 * 1e-3 * (1 + 2e-3)).all(), (spec, z[f"moves_{spec}"])


MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--batch-size", "16",
       "--lr", "0.05"]


def test_local_rewind_refuses_clip_norm_in_one_line(tmp_path):
    """local-rewind swaps g_{t-k} for G_{t-k} in the weights and the buffer at the weight g_{t-k} went
    in with; a clipped direction went in with another, so the pair is refused when it is built."""
    with pytest.raises(ValueError, match="predictor local-rewind does not take --clip-norm") as e:
        _build("pseudo-sync:local-rewind:1")
    assert "\n" not in str(e.value)


def _build(spec):
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import get_comm
    from minips.models import MLP as Net
    from minips.optim import SGD
    model = Net(20, (16,), 4)
    build_algorithm(spec, model.parameters(), SGD(model.parameters(), lr=0.1, clip_norm=1.0), get_comm())


def test_cli_clip_norm_summary_checkpoint_and_errors(tmp_path):
    out = tmp_path / "run"
    r = cli_on_ranks(2, ["train", *MLP, "--algo", "sync", "--clip-norm", "0.05", "--max-steps", "4",
                         "--checkpoint-every", "4", "--out", out])
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["clip_norm"] == 0.05 and s["clipped_steps"] == [4, 4]
    # a checkpoint resumes only with the same --clip-norm
    r = cli_on_ranks(2, ["train", *MLP, "--algo", "sync", "--clip-norm", "0.5", "--max-steps", "6",
                         "--resume", out / "checkpoint.h5", "--out", tmp_path / "again"])
    assert r.returncode != 0 and "clip_norm: checkpoint 0.05, now 0.5" in r.stderr
    r = cli_on_ranks(0, ["train", *MLP, "--clip-norm", "-1", "--out", tmp_path / "bad"])
    assert r.returncode != 0 and "--clip-norm must be a finite number >= 0" in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2


def test_checkpoint_without_clip_norm_resumes_unclipped(tmp_path):
    """A checkpoint written before --clip-norm existed (no clip_norm in its config) continues as a
    run without clipping, and refuses one with it."""
    from minips.checkpoint import ADDED_LATER, TRAJECTORY_KEYS
    assert "clip_norm" in TRAJECTORY_KEYS and ADDED_LATER["clip_norm"] == 0.0
    from minips.checkpoint import load, save
    out = tmp_path / "run"
    r = cli_on_ranks(0, ["train", *MLP, "--algo", "sync", "--max-steps", "2", "--checkpoint-every", "2",
                         "--out", out])
    assert r.returncode == 0, r.stderr
    state = load(out / "checkpoint.h5")
    cfg = json.loads(state["config"])
    del cfg["clip_norm"]
    state["config"] = json.dumps(cfg)
    save(out / "checkpoint.h5", state)
    r = cli_on_ranks(0, ["train", *MLP, "--algo", "sync", "--max-steps", "3", "--resume", out / "checkpoint.h5",
                         "--out", tmp_path / "cont"])
    assert r.returncode == 0, r.stderr
    r = cli_on_ranks(0, ["train", *MLP, "--algo", "sync", "--max-steps", "3", "--clip-norm", "1",
                         "--resume", out / "checkpoint.h5", "--out", tmp_path / "clipped"])
    assert r.returncode != 0 and "clip_norm: checkpoint 0.0, now 1.0" in r.stderr
