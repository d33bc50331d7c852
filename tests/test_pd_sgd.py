"""pd-sgd (Li, Yang, Wang, Zhang 2019): I1 silent local steps, then I2 gossip steps.

Pinned down: on 4 ranks (ring) the run follows a float64 NumPy simulation of
the rule, with and without the I1 decay; I1 = 0 is d-psgd in adapt-then-combine
form (bitwise); on the complete graph with I2 = 1 it is local SGD with period
I1 + 1 (float32 tolerance); P = 1 is plain SGD bitwise; the cycle position
resumes bitwise; bad options give one line.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .gossip1_checks import TOL, launch, ring, simulate
from .local_sgd_checks import stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL
from .test_mpi import launch as launch_mlp

RUN = {"steps": 12, "batch": 8}


def test_four_ranks_follow_the_rule(tmp_path):
    runs = [{"spec": "pd-sgd:i1=2:i2=2", "steps": 14}, {"spec": "pd-sgd:i1=0:i2=1", "steps": 8},
            {"spec": "d-psgd:form=atc", "steps": 8}, {"spec": "pd-sgd:i1=4:i2=1:i1-decay=6:i1-min=1", "steps": 16}]
    res = launch(4, runs, tmp_path)
    np.testing.assert_allclose(res[0][0], simulate(4, 14, ring(4), i1=2, i2=2), **TOL)
    assert [r["gossip"] for r in res[0][1]] == [0, 0, 1, 1] * 3 + [0, 0]
    assert np.array_equal(res[1][0], res[2][0])  # I1 = 0: d-psgd's atc form, bitwise
    # decay: I1 = 4 >> (t // 6), read at each cycle's start: cycles start at t = 0 (I1 4), 5 (4), 10 (2), 13 (1)
    log = res[3][1]
    assert [r["gossip"] for r in log] == [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 0]
    assert [r["i1"] for r in log] == [4] * 10 + [2] * 3 + [1] * 3
    assert all(p == 0 for _, _, p, _ in res)


def test_complete_graph_with_one_gossip_step_is_local_sgd(tmp_path):
    local, _ = launch_mlp(3, {"algo": "local-sgd:period=3", **RUN}, tmp_path)
    run, _ = launch_mlp(3, {"algo": "pd-sgd:i1=2:i2=1:topology=complete", **RUN}, tmp_path)
    np.testing.assert_allclose(run["weights"], local["weights"], rtol=RTOL, atol=ATOL)


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch_mlp(0, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch_mlp(0, {"algo": "pd-sgd:i1=3:i2=2", **RUN}, tmp_path)
    assert np.array_equal(run["weights"], plain["weights"])


def test_resume_mid_cycle_is_bitwise(tmp_path):
    rows, _ = stop_resume_is_bitwise("pd-sgd:i1=3:i2=2:i1-decay=4", tmp_path, 4, 9)
    # I1 = 3 >> (t // 4) at each cycle's start: t = 0 (3), 5 (1), 8 (0); the stop after 4 steps is mid-cycle
    assert [r["gossip"] for r in rows] == ["0", "0", "0", "1", "1", "0", "1", "1", "1"]


@pytest.mark.parametrize("text,message", [
    ("pd-sgd:i1=-1", "i1 must be >= 0 (silent local steps per cycle; 0 = D-PSGD), got -1"),
    ("pd-sgd:i2=0", "i2 must be >= 1 (gossip steps per cycle), got 0"),
    ("pd-sgd:i1=2:i1-min=3", "i1-decay must be >= 0 and 0 <= i1-min <= i1"),
    ("pd-sgd:topology=hypercube", "option topology must be one of ring"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_spec_forms():
    assert resolve("pd-sgd:2:3").options == resolve("pd-sgd:i1=2:i2=3").options
    assert resolve("pd-sgd").run_label == "pd-sgd:i1=4:i2=1"
