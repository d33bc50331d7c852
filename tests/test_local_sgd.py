"""local-sgd (Lin et al. ICLR 2020; Stich ICLR 2019): local steps, weights averaged every H steps.

What holds exactly (in real arithmetic) and is tested to float32 summation
tolerance: with H = 1 the weights after N steps equal synchronous SGD's, both
with average-momentum (each rank's momentum buffer is sync's buffer) and
without it (the buffers differ per rank, but their mean obeys sync's recursion
V = mu V + mean_i g_i, and the averaged weights only see the mean). With
P = 1 it is plain SGD, bitwise.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .local_sgd_checks import WEIGHT_BYTES, check_meetings, stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL, launch

RUN = {"steps": 12, "batch": 8}  # mpi_worker: MLP on synthetic data, SGD lr 0.1, momentum 0.9


@pytest.mark.mpi
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


@pytest.mark.mpi
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
