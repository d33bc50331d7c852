"""local-sgd (Lin et al. ICLR 2020; Stich ICLR 2019): local steps, weights averaged every H steps.

What holds exactly (in real arithmetic) and is tested to float32 summation
tolerance: with H = 1 the weights after N steps equal synchronous SGD's, both
with average-momentum (each rank's momentum buffer is sync's buffer) and
without it (the buffers differ per rank, but their mean obeys sync's recursion
V = mu V + mean_i g_i, and the averaged weights only see the mean). With
P = 1 it is plain SGD, bitwise. With H = 3 each form, momentum averaging on
and off, equals its rule written in NumPy, rank by rank and step by step.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .local_sgd_checks import WEIGHT_BYTES, check_meetings, stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL, launch

RUN = {"steps": 12, "batch": 8}  # mpi_worker: MLP on synthetic data, SGD lr 0.1, momentum 0.9


def test_period_1_equals_sync_with_and_without_momentum_averaging(tmp_path):
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("local-sgd:period=1", "local-sgd:period=1:average-momentum=true"):
        run, _ = launch(2, {"algo": spec, **RUN}, tmp_path)
        np.testing.assert_allclose(run["weights"], sync["weights"], rtol=RTOL, atol=ATOL, err_msg=spec)
        assert len(set(run["hashes"].tolist())) == 1  # the run ended on an average
    four, _ = launch(2, {"algo": "local-sgd:period=4", **RUN}, tmp_path)  # the check can fail: H = 4 is not sync
    assert not np.allclose(four["weights"], sync["weights"], rtol=RTOL, atol=ATOL)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("local-sgd:period=3", "local-sgd:period=5:average-momentum=true"):
        run, _ = launch(0, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], plain["weights"]), spec


def test_replicas_meet_at_each_average_and_resume_is_bitwise(tmp_path):
    """H = 3 on 2 ranks for 8 steps: identical right after steps 3 and 6 (trace
    rows 2 and 5), apart in between; a run stopped after step 6 (on an average:
    with average-momentum the momentum buffers agree too) and resumed ends
    bitwise equal to the uninterrupted one."""
    rows, (_, w, v) = stop_resume_is_bitwise("local-sgd:period=3:average-momentum=true", tmp_path, 6, 8)
    check_meetings(rows, {2, 5}, 2 * WEIGHT_BYTES + 8)  # weights + momentum + the consensus scalar
    assert {r["period"] for r in rows} == {"3"}
    assert np.array_equal(w[0], w[1]) and np.array_equal(v[0], v[1])


@pytest.mark.parametrize("text,message", [
    ("local-sgd:period=0", "period must be >= 1 (H steps between averages; 1 = every step), got 0"),
    ("local-sgd:period=often", "option period must be an integer, got 'often'"),
    ("local-sgd:average-momentum=maybe", "option average-momentum must be true or false"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_spec_forms():
    assert resolve("local-sgd:4").options == resolve("local-sgd:period=4").options
    assert resolve("local-sgd").run_label == "local-sgd:period=8" and not resolve("local-sgd").replicated


def _local_sgd_by_hand(P, steps, H, average_momentum, lr=0.1, mu=0.9, d=20):
    """Every rank's weights after every step, (steps + 1, P, d), float64: heavy
    ball per rank (v = g on the first step, then v = mu v + g; w -= lr v), the
    weights averaged after every H-th step, and the buffers too with
    average-momentum."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from given_gradients import gradient, initial
    w = np.array([initial(d) for _ in range(P)], np.float64)
    v = np.zeros_like(w)
    out = [w.copy()]
    for t in range(steps):
        g = np.array([gradient(w[i].astype(np.float32), i, t) for i in range(P)], np.float64)
        v = g if t == 0 else mu * v + g
        w = w - lr * v
        if (t + 1) % H == 0:
            w[:] = w.mean(axis=0)
            if average_momentum:
                v[:] = v.mean(axis=0)
        out.append(w.copy())
    return np.array(out)


def test_momentum_averaging_on_and_off_follow_their_rules(tmp_path):
    """3 ranks, H = 3, 10 steps with given gradients (tests/gossip1_worker.py):
    each run equals its NumPy rule (averaging the buffers or not) to float32
    rounding, and the two runs differ per rank on the steps after an average,
    where the averaged buffers act (so swapping or dropping the option fails).
    Their averages agree: with these gradients (the same Hessian on every
    rank) the mean of the weights sees only the mean of the buffers."""
    from .gossip1_checks import TOL, launch as launch_given
    runs = launch_given(3, [{"spec": "local-sgd:period=3", "steps": 10},
                            {"spec": "local-sgd:period=3:average-momentum=true", "steps": 10}], tmp_path)
    for (traj, _, pending, _), avg in zip(runs, (False, True)):
        np.testing.assert_allclose(traj, _local_sgd_by_hand(3, 10, 3, avg), **TOL, err_msg=f"average-momentum={avg}")
        assert pending == 0
    off, on = runs[0][0], runs[1][0]
    assert np.array_equal(off[:4], on[:4])              # identical until the first average has been used
    for t in (4, 5, 7, 8):                              # apart per rank between averages
        assert np.abs(off[t] - on[t]).max() > 1e-2, t


def test_stl_sgd_and_adaptive_batch_build_on_local_sgd():
    """The local step, the period test and the average exist once, in LocalSGD:
    STL-SGD and adaptive-batch subclass it and call none of them themselves
    (their numerics are held by tests/test_bitwise_refactor.py)."""
    import inspect

    from minips.distributed.algorithms.adaptive_batch import AdaptiveBatchLocalSGD
    from minips.distributed.algorithms.local_sgd import LocalSGD
    from minips.distributed.algorithms.stl_sgd import STLSGD
    for cls in (STLSGD, AdaptiveBatchLocalSGD):
        assert issubclass(cls, LocalSGD), cls
        src = inspect.getsource(inspect.getmodule(cls))
        for own in ("apply_update(", "average_model(", "% o.period", "% self.period"):
            assert own not in src, f"{cls.__name__} re-implements {own!r}"
