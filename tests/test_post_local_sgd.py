"""post-local-sgd (Lin et al. ICLR 2020, section 3): synchronous SGD (gradient
averaging) for steps t < t', local SGD with period H from t' on.

Before the switch it runs sync's exact operations, so it equals sync bitwise;
after it, H = 1 equals sync to float32 summation tolerance (see test_local_sgd.py
for why, with per-rank momentum buffers)."""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.base import StepContext
from minips.distributed.algorithms.post_local_sgd import PostLocalSGD

from .local_sgd_checks import WEIGHT_BYTES, check_meetings, stop_resume_is_bitwise, train
from .test_mpi import ATOL, RTOL, launch

RUN = {"steps": 12, "batch": 8}


def test_synchronous_before_the_switch_and_period_1_after_it_equal_sync(tmp_path):
    sync, _ = launch(2, {"algo": "sync", **RUN}, tmp_path)
    before, _ = launch(2, {"algo": "post-local-sgd:switch-step=12:period=4", **RUN}, tmp_path)
    assert np.array_equal(before["weights"], sync["weights"])  # all 12 steps before the switch
    after, _ = launch(2, {"algo": "post-local-sgd:switch-step=5:period=1", **RUN}, tmp_path)
    np.testing.assert_allclose(after["weights"], sync["weights"], rtol=RTOL, atol=ATOL)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch(0, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch(0, {"algo": "post-local-sgd:switch-step=4:period=3", **RUN}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def test_identical_until_the_switch_then_meet_every_H_and_resume_is_bitwise(tmp_path):
    """t' = 3, H = 2, 9 steps on 2 ranks: rows 0-2 synchronous (identical, the
    gradient allreduced), then apart except right after the averages at rows 4,
    6, 8; stopped after the 6th step (row 5, between averages) and resumed, bitwise."""
    rows, (_, w, _) = stop_resume_is_bitwise("post-local-sgd:switch-step=3:period=2", tmp_path, 6, 9)
    for r in rows[:3]:
        assert float(r["consensus_distance"]) == 0.0 and int(r["bytes_sent"]) == WEIGHT_BYTES and r["period"] == "1"
    check_meetings(rows[3:], {4, 6, 8}, WEIGHT_BYTES + 8)
    assert {r["period"] for r in rows[3:]} == {"2"}
    assert not np.array_equal(w[0], w[1])


def test_default_switch_is_half_of_the_planned_steps():
    from minips.models import MLP
    from minips.optim import SGD
    model = MLP(20, (8,), 4)
    algo = PostLocalSGD(model.parameters(), SGD(model.parameters(), lr=0.1), None)
    algo.ctx = StepContext(planned_steps=101)
    assert algo.switch_at() == 50 and algo.period_now() == 1
    algo.load_state_dict({"step_count": 60, "switch_step": 50})
    assert algo.period_now() == 16 and algo.state_dict() == {"step_count": 60, "switch_step": 50}
    fresh = PostLocalSGD(model.parameters(), SGD(model.parameters(), lr=0.1), None)  # outside the Trainer
    with pytest.raises(ValueError, match="switch-step=-1 .half of training. needs the planned number of steps"):
        fresh.switch_at()


def test_a_switch_after_the_end_is_a_one_line_error(tmp_path):
    r = train(0, ["--algo", "post-local-sgd:switch-step=100000", "--max-steps", "2", "--out", tmp_path / "x"])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error: post-local-sgd: switch-step=100000 is at or after the end of training (" in r.stderr
    assert "planned steps); give a step below" in r.stderr


@pytest.mark.parametrize("text,message", [
    ("post-local-sgd:switch-step=-2", "switch-step must be >= 0 (a step index) or -1 (half of the planned steps)"),
    ("post-local-sgd:period=0", "period must be >= 1"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError, match=None) as e:
        resolve(text)
    assert message in str(e.value)
