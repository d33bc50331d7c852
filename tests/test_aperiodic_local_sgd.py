"""aperiodic-local-sgd (a reconstruction: the paper was not found): local SGD
averaging after a non-uniform set of step counts, growing gaps
ceil(h0 (r+1)^gamma) or an explicit list. A uniform schedule is local-sgd
step for step (bitwise); period 1 is sync to float32 summation tolerance."""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.aperiodic_local_sgd import averaging_times

from .local_sgd_checks import WEIGHT_BYTES, check_meetings, stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL, launch

RUN = {"steps": 12, "batch": 8}


def test_uniform_schedules_equal_local_sgd_and_period_1_equals_sync(tmp_path):
    local, _ = launch(2, {"algo": "local-sgd:period=3", **RUN}, tmp_path)
    for spec in ("aperiodic-local-sgd:h0=3:gamma=0", "aperiodic-local-sgd:schedule=3+6+9+12"):
        run, _ = launch(2, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], local["weights"]), spec
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    every, _ = launch(2, {"algo": "aperiodic-local-sgd:h0=1:gamma=0", **RUN}, tmp_path)
    np.testing.assert_allclose(every["weights"], sync["weights"], rtol=RTOL, atol=ATOL)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch(0, {"algo": "aperiodic-local-sgd:h0=2:gamma=1", **RUN}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def test_replicas_meet_after_the_listed_steps_and_resume_is_bitwise(tmp_path):
    """schedule 2+3+6 on 2 ranks for 8 steps: identical right after steps 2, 3
    and 6 (trace rows 1, 2, 5), apart otherwise and for good after the list
    ends; the period column is the gap of the round in progress (0 after the
    list); stopped after step 4 (mid-round) and resumed, bitwise."""
    rows, (_, w, _) = stop_resume_is_bitwise("aperiodic-local-sgd:schedule=2+3+6", tmp_path, 4, 8)
    check_meetings(rows, {1, 2, 5}, WEIGHT_BYTES + 8)
    assert [int(r["period"]) for r in rows] == [2, 2, 1, 3, 3, 3, 0, 0]
    assert not np.array_equal(w[0], w[1])


def test_growing_schedule():
    opts = resolve("aperiodic-local-sgd:h0=2:gamma=1").options
    assert averaging_times(opts, 4) == [2, 6, 12, 20]               # gaps 2, 4, 6, 8
    assert averaging_times(resolve("aperiodic-local-sgd").options, 6) == [4, 10, 17, 25, 34, 44]  # 4 ceil(sqrt(r+1))
    assert averaging_times(resolve("aperiodic-local-sgd:h0=5:gamma=0").options, 3) == [5, 10, 15]
    assert averaging_times(resolve("aperiodic-local-sgd:schedule=1;4;9").options) == [1, 4, 9]


@pytest.mark.parametrize("text,message", [
    ("aperiodic-local-sgd:schedule=10+5+20", "schedule must be strictly increasing, got 10+5+20 (5 after 10)"),
    ("aperiodic-local-sgd:schedule=3+3", "schedule must be strictly increasing"),
    ("aperiodic-local-sgd:schedule=0+4", "schedule: step counts start at 1"),
    ("aperiodic-local-sgd:schedule=grow", "schedule must be 'growing' or step counts joined by '+', e.g. "
                                          "schedule=10+20+40, got 'grow'"),
    ("aperiodic-local-sgd:h0=0", "h0 must be >= 1"),
    ("aperiodic-local-sgd:gamma=-1", "gamma must be >= 0"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
