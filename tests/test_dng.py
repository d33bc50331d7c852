"""dng: D-NG (Jakovetic, Xavier, Moura 2014), the reconstruction of the
accelerated gossip gradient method.

Pinned down: with P = 1 and rule=constant it is Nesterov SGD (the project's
SGD with nesterov=True, whose weights are D-NG's extrapolated point y); on 4
ranks the mean iterate follows mean(x_new) = mean(y_old) - alpha_k mean(g) at
every step (the gossip step keeps the mean), with the paper's alpha_k = c/(k+1),
beta_k = k/(k+3) logged; a stopped and resumed run is bitwise equal to an
uninterrupted one; bad options give one-line messages.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .gossip3_checks import RUN, launch3
from .local_sgd_checks import stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL


def test_one_rank_constant_rule_is_nesterov_sgd(tmp_path):
    nag = launch3(0, {"algo": "sync", "nesterov": True, "momentum": 0.9, **RUN}, tmp_path)
    r = launch3(0, {"algo": "dng:rule=constant:momentum=0.9", **RUN}, tmp_path)
    np.testing.assert_allclose(r["y"], nag["weights"], rtol=RTOL, atol=ATOL)
    assert not np.allclose(r["weights"], nag["weights"], rtol=RTOL, atol=ATOL)  # x is not y


@pytest.mark.mpi
def test_mean_iterate_follows_the_averaged_gradient_step(tmp_path):
    r = launch3(4, {"algo": "dng:topology=ring", **RUN}, tmp_path)
    assert len(r["dng_err"]) == RUN["steps"] and r["dng_err"].max() < 1e-5, r["dng_err"]
    assert not np.array_equal(r["all_weights"][0], r["all_weights"][1])


@pytest.mark.mpi
def test_resume_is_bitwise_and_logs_the_paper_rule(tmp_path):
    rows, _ = stop_resume_is_bitwise("dng:c=0.5", tmp_path, 4, 7)
    for k, row in enumerate(rows):
        assert float(row["alpha"]) == pytest.approx(0.5 / (k + 1)) and float(row["beta"]) == pytest.approx(k / (k + 3))


@pytest.mark.parametrize("text,message", [
    ("dng:rule=fast", "option rule must be one of"),
    ("dng:c=-1", "c must be >= 0"),
    ("dng:momentum=1", "momentum must be in [0, 1)"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
