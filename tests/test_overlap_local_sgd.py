"""Overlap Local-SGD (minips/distributed/algorithms/overlap_local_sgd.py).

The method is one round stale by design, so "H = 1 equals sync" does not hold;
instead the MPI runs are checked against a one-process float64 simulation of
the stated rule with P simulated ranks and given gradients (the maths, not
only the plumbing). Also: P = 1 is plain SGD bitwise; nothing is pending after
finish(); merges shrink the consensus distance; a checkpoint taken with a
request in flight resumes bitwise; bad options give one clear line.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.costmodel import NetworkModel
from minips.labs.projection import StepProfile

from .conftest import cli_on_ranks, run_ranks

sys.path.insert(0, str(Path(__file__).parent))
from given_gradients import gradient, initial  # noqa: E402

WORKER = str(Path(__file__).with_name("overlap_local_worker.py"))
NAME = "overlap-local-sgd"
MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--batch-size", "16"]


def simulate(P, steps, H, rule, alpha, lr=0.1, mu=0.9, d=50):
    """The rule of the module docstring, P ranks in one process, float64.
    Returns (final weights per rank, consensus distance of each averaged set)."""
    W = [initial(d).astype(np.float64) for _ in range(P)]
    V = [None] * P
    posted, logged = None, []
    for t in range(steps):
        for i in range(P):
            g = gradient(W[i].astype(np.float32), i, t).astype(np.float64)
            V[i] = g if V[i] is None else mu * V[i] + g
            W[i] = W[i] - lr * V[i]
        if P > 1 and (t + 1) % H == 0:              # end of a round
            if posted is not None:                  # the average posted a round ago
                z = np.mean(posted, axis=0)
                logged.append(np.mean([np.sum((s - z) ** 2) for s in posted]))
                for i in range(P):
                    W[i] = W[i] - alpha * (W[i] - z) if rule == "pull" else z + (W[i] - posted[i])
            posted = [w.copy() for w in W]          # what this round posts
    return np.array(W), np.array(logged)


def launch(n, opts, tmp_path, timeout=60):
    """The worker on n virtual ranks (threads of this process)."""
    out = tmp_path / f"ol-{n}.npz"
    proc = run_ranks(n, WORKER, json.dumps(opts), str(out), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(out)


@pytest.mark.parametrize("P,rule,alpha,consensus", [(2, "pull", 0.5, "blocking"), (3, "delta", 1.0, "piggyback")])
def test_ranks_follow_the_stated_rule_and_merges_shrink_the_consensus(P, rule, alpha, consensus, tmp_path):
    """22 steps, H = 4: merges at steps 8, 12, 16, 20 (step 4 only posts); a
    request is in flight at the end and finish() completes it. The consensus
    of a merge's inputs is logged at that merge (blocking) or the next (piggyback)."""
    steps, H = 22, 4
    spec = f"{NAME}:period={H}:rule={rule}:alpha={alpha}:consensus={consensus}"
    r = launch(P, {"spec": spec, "steps": steps}, tmp_path)
    W, logged = simulate(P, steps, H, rule, alpha)
    np.testing.assert_allclose(r["weights"], W, rtol=1e-5, atol=1e-5)
    assert int(r["pending"]) == 0
    assert not np.array_equal(r["weights"][0], r["weights"][1])      # ranks differ in between
    if consensus == "blocking":
        np.testing.assert_array_equal(r["logged"][:, 0], [7, 11, 15, 19])  # 0-based steps of the merges
        np.testing.assert_allclose(r["logged"][:, 1], logged, rtol=1e-4)
    else:  # one round late: carried in float32 by the next round's allreduce
        np.testing.assert_array_equal(r["logged"][:, 0], [11, 15, 19])
        np.testing.assert_allclose(r["logged"][:, 1], logged[:3], rtol=1e-4)
    before, after = r["pairs"][:, 0], r["pairs"][:, 1]
    assert len(before) == 4 and np.all(before > 0) and np.all(after < before)
    if rule == "pull":  # the anchor is common to all ranks: deviations shrink by (1 - alpha)
        np.testing.assert_allclose(after, (1 - alpha) ** 2 * before, rtol=1e-3)


def test_one_process_is_plain_sgd_bitwise():
    from minips.distributed.algorithms import build_algorithm
    from minips.distributed.comm import Comm
    from minips.nn.module import Parameter
    from minips.optim import SGD

    p, q = Parameter(initial(50)), Parameter(initial(50))
    algo = build_algorithm(f"{NAME}:period=2", [p], SGD([p], lr=0.1, momentum=0.9), Comm())
    algo.start()
    plain = SGD([q], lr=0.1, momentum=0.9)
    for t in range(9):
        algo.before_backward()
        algo.flat.grads[0][...] = gradient(algo.flat.weights, 0, t)
        algo.step()
        plain.step([gradient(q.data, 0, t)])
    algo.finish()
    assert np.array_equal(algo.flat.weights, q.data) and algo.comm.pending() == 0


@pytest.mark.parametrize("spec,words", [
    (f"{NAME}:period=0", "period must be >= 1"),
    (f"{NAME}:alpha=0", "alpha must be in (0, 1]"),
    (f"{NAME}:alpha=1.5", "alpha must be in (0, 1]"),
    (f"{NAME}:rule=average", "rule must be one of pull, delta"),
    (f"{NAME}:consensus=sometimes", "consensus must be one of piggyback, blocking, off"),
    (f"{NAME}:h=4", "has no option 'h'"),
])
def test_bad_options_give_one_clear_line(spec, words):
    with pytest.raises(ValueError) as e:
        resolve(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_cost_model_hides_the_allreduce_behind_a_round():
    net = NetworkModel(0.0, 1e-9, "hand")  # A = 2 (P-1)/P * bytes * 1e-9 for a ring
    prof = StepProfile(forward=0.01, backward=0.02, grad_bytes=4e7)
    C, A = prof.compute, net.allreduce_time(prof.grad_bytes, 4)
    for H in (1, 2, 8):
        spec = resolve(f"{NAME}:period={H}:consensus=off")
        assert spec.step_time(prof, 4, net) == pytest.approx(C + max(0.0, A - H * C) / H)
        assert spec.step_time(prof, 4, net, phi=1.0) == pytest.approx(C + A / H)
    blocking = resolve(f"{NAME}:period=2:consensus=blocking").step_time(prof, 4, net)
    assert blocking == pytest.approx(C + max(0.0, A - 2 * C) / 2 + net.allreduce_time(8, 4) / 2)
    assert A > C and resolve(f"{NAME}:period=8:consensus=off").step_time(prof, 4, net) == C


def test_checkpoint_with_a_request_in_flight_resumes_bitwise(tmp_path):
    """period 3: the average posted at step 5 is in flight at the checkpoint
    after step 6 (7 steps); drain() keeps it, the resumed run applies it at step 8."""
    from minips.checkpoint import load

    def train(steps, out, *extra):  # on 2 virtual ranks
        r = cli_on_ranks(2, ["train", *MLP, "--algo", f"{NAME}:period=3:rule=delta", "--lr", "0.05", "--max-steps",
                             steps, "--checkpoint-every", steps, "--out", out, *extra])
        assert r.returncode == 0, r.stderr[-3000:]

    full, part = tmp_path / "full", tmp_path / "part"
    train(12, full)
    train(7, part)
    mid = load(part / "checkpoint.h5")
    assert [int(s) for s in mid["ranks"][0]["algorithm"]["anchor_step"]] == [5]
    train(12, part, "--resume", str(part / "checkpoint.h5"))
    a, b = (load(d / "checkpoint.h5") for d in (full, part))
    assert int(a["step"]) == int(b["step"]) == 12
    wa = [np.asarray(x["weights"]) for x in a["ranks"]]
    assert not np.array_equal(wa[0], wa[1])
    for x, y in zip(a["ranks"], b["ranks"]):
        assert np.array_equal(np.asarray(x["weights"]), np.asarray(y["weights"]))
        assert np.array_equal(np.asarray(x["optimizer"]["buffers"][0]), np.asarray(y["optimizer"]["buffers"][0]))
        for k in ("anchor_z", "anchor_s", "anchor_total"):
            assert np.array_equal(np.asarray(x["algorithm"][k][0]), np.asarray(y["algorithm"][k][0]))
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["test_loss"] == sb["test_loss"] and sa["consensus_distance"] > 0
    header = (full / "trace.csv").read_text().splitlines()[0]
    assert "consensus_before_avg" in header and "period" in header
