"""ssd-sgd (reconstruction of Xu et al. 2020, docs/specifications.md section 18): sync
warm-up, then one Iallreduce of the accumulated gradient every k steps, applied
k - 1 steps later, GLU steps (repeat the last global move) in between.

Pinned down: k = 1, and a warm-up covering the whole run, equal synchronous
SGD bitwise (2 ranks: the two-term sum is the same in any order); on 3 ranks
with given gradients every rank's weights after every step follow a float64
NumPy simulation of the docstring's pseudo-code; the ranks stay identical;
P = 1 with k = 1 is plain SGD bitwise; a run stopped with a reduction in
flight and per-rank accumulated gradients resumes bitwise; the bytes each step
sends are one gradient allreduce on the posting steps and nothing otherwise;
bad options give one clear line.
"""
import csv

import numpy as np
import pytest

from minips.checkpoint import load
from minips.distributed.algorithms import resolve

from .given_gradients import gradient, initial
from .gossip1_checks import TOL, launch
from .local_sgd_checks import WEIGHT_BYTES, train
from .test_mpi import launch as launch_mlp

RUN = {"steps": 12, "batch": 8}  # mpi_worker: MLP on synthetic data, SGD lr 0.1, momentum 0.9


def test_period_1_and_full_warmup_equal_sync_bitwise(tmp_path):
    sync, _ = launch_mlp(2, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("ssd-sgd:period=1:warmup=0", "ssd-sgd:period=4:warmup=12", "ssd-sgd:period=3:warmup=100"):
        run, _ = launch_mlp(2, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], sync["weights"]), spec
        assert len(set(run["hashes"].tolist())) == 1 and int(run["pending"]) == 0, spec
    delayed, _ = launch_mlp(2, {"algo": "ssd-sgd:period=4:warmup=3", **RUN}, tmp_path)  # the check can fail
    assert not np.allclose(delayed["weights"], sync["weights"], atol=1e-3)
    assert len(set(delayed["hashes"].tolist())) == 1 and int(delayed["pending"]) == 0


def simulate(P, steps, k, tw, lr=0.1, mu=0.9, d=20):
    """The docstring's rule in float64 with the given gradients: (steps+1, d)."""
    w = initial(d).astype(np.float64)
    x, v, D, acc, posted = w.copy(), None, np.zeros(d), np.zeros((P, d)), None
    out = [w.copy()]
    for t in range(steps):
        acc += np.array([gradient(w.astype(np.float32), i, t) for i in range(P)], np.float64)
        kt = 1 if t < tw else k
        j = 0 if t < tw else (t - tw) % kt
        if j == kt - 1:
            posted, acc = acc.sum(axis=0), np.zeros((P, d))
        if j == (kt - 2) % kt and posted is not None:
            G, posted, x0 = posted / (P * kt), None, x.copy()
            for _ in range(kt):
                v = G.copy() if v is None else mu * v + G
                x = x - lr * v
            D, w = (x0 - x) / kt, x.copy()
        else:
            w = w - D
        out.append(w.copy())
    return np.array(out)


def test_three_ranks_follow_the_rule(tmp_path):
    runs = [{"spec": "ssd-sgd:period=3:warmup=2", "steps": 14}, {"spec": "ssd-sgd:period=2:warmup=0", "steps": 9},
            {"spec": "ssd-sgd:period=5:warmup=1", "steps": 13}]
    res = launch(3, runs, tmp_path)
    for (traj, logs, pending, report), (k, tw, steps) in zip(res, [(3, 2, 14), (2, 0, 9), (5, 1, 13)]):
        assert np.all(traj == traj[:, :1]), "ranks differ"
        np.testing.assert_allclose(traj[:, 0], simulate(3, steps, k, tw), **TOL)
        assert pending == 0 and report == {"warmup_steps": tw}
        updates = [t for t, row in enumerate(logs) if row["global_update"]]
        want = list(range(tw)) + [t for t in range(tw, steps) if (t - tw) % k == (k - 2) % k and t - tw >= k]
        assert updates == want and [row["period"] for row in logs] == [1] * tw + [k] * (steps - tw)


def test_one_rank(tmp_path):
    plain, _ = launch_mlp(0, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch_mlp(0, {"algo": "ssd-sgd:period=1:warmup=0", **RUN}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])
    run, _ = launch_mlp(0, {"algo": "ssd-sgd:period=3:warmup=2", **RUN}, tmp_path)
    assert np.all(np.isfinite(run["weights"])) and not np.array_equal(run["weights"], plain["weights"])


def _trace(out):
    with open(out / "trace.csv") as f:
        return list(csv.DictReader(f))


def test_resume_with_a_reduction_in_flight_is_bitwise_and_bytes_are_one_allreduce_per_period(tmp_path):
    """period 4, warm-up 2: posts after steps 1, 2 (warm-up, applied at once),
    5 and 9; the stop after 7 steps has step 5's reduction in flight and g_6
    accumulated (different on each rank)."""
    spec, full, part = "ssd-sgd:period=4:warmup=2", tmp_path / "full", tmp_path / "part"
    r = train(2, ["--algo", spec, "--max-steps", 11, "--checkpoint-every", 11, "--out", full, "--check-replicas", 1])
    assert r.returncode == 0, r.stderr[-3000:]
    r = train(2, ["--algo", spec, "--max-steps", 7, "--checkpoint-every", 7, "--out", part])
    assert r.returncode == 0, r.stderr[-3000:]
    mid = load(part / "checkpoint.h5")
    assert mid["per_rank"] is True  # identical weights, but acc_i differs: every rank's state is kept
    (s0, s1) = (r["algorithm"] for r in mid["ranks"])
    assert s0["arrived"] is not None and np.array_equal(s0["arrived"], s1["arrived"])
    assert np.any(s0["acc"] != s1["acc"]) and np.any(s0["acc"] != 0)
    r = train(2, ["--algo", spec, "--max-steps", 11, "--checkpoint-every", 11, "--out", part,
                  "--resume", part / "checkpoint.h5"])
    assert r.returncode == 0, r.stderr[-3000:]
    for a, b in zip(load(full / "checkpoint.h5")["ranks"], load(part / "checkpoint.h5")["ranks"]):
        assert np.array_equal(a["weights"], b["weights"])
        assert np.array_equal(a["optimizer"]["buffers"][0], b["optimizer"]["buffers"][0])
        for key in ("x", "D", "acc"):
            assert np.array_equal(a["algorithm"][key], b["algorithm"][key])
    rows = _trace(full)
    sent = {int(r["step"]): int(r["bytes_sent"]) for r in rows}
    assert sent == {t: WEIGHT_BYTES if t in (0, 1, 5, 9) else 0 for t in range(11)}
    assert [int(r["global_update"]) for r in rows] == [1 if t in (0, 1, 8) else 0 for t in range(11)]


@pytest.mark.parametrize("text,message", [
    ("ssd-sgd:period=0", "period must be >= 1 (k steps between global reductions; 1 = synchronous SGD), got 0"),
    ("ssd-sgd:warmup=-2", "warmup must be >= 0 (synchronous steps first) or -1"),
    ("ssd-sgd:delay=2", "ssd-sgd has no option 'delay'; its options: period, warmup"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_spec_forms_and_cost_model():
    from minips.distributed.costmodel import NetworkModel
    from minips.labs.projection import StepProfile
    assert resolve("ssd-sgd:2").options == resolve("ssd-sgd:period=2").options
    assert resolve("ssd-sgd").run_label == "ssd-sgd:period=2" and resolve("ssd-sgd").replicated
    net, prof = NetworkModel(alpha=1e-4, beta=1e-8), StepProfile(forward=0.02, backward=0.03, grad_bytes=4_000_000)
    a = net.allreduce_time(4_000_000, 8)
    assert resolve("ssd-sgd:period=1:warmup=0").step_time(prof, 8, net) == pytest.approx(
        resolve("sync").step_time(prof, 8, net))
    # k = 4: the allreduce (a < 3 compute steps) is hidden; phi = 1 charges it back, / k
    assert resolve("ssd-sgd:period=4:warmup=0").step_time(prof, 8, net) == pytest.approx(0.05)
    assert resolve("ssd-sgd:period=4:warmup=0").step_time(prof, 8, net, phi=1.0) == pytest.approx(0.05 + a / 4)
