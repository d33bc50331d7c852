"""gossip-pga and gossip-aga (Chen, Yuan et al., ICML 2021): gossip SGD with a
global average every H-th step (AGA: H driven by the training loss; the rule
is a reconstruction, see gossip_aga.py).

Pinned down: on 4 ranks (ring) both follow a float64 NumPy simulation of the
stated rule (AGA with given per-rank losses, so the period sequence is
checked); the consensus distance is 0 right after every global step and > 0
otherwise; period = 1 on any graph is synchronous SGD (float32 tolerance);
P = 1 is plain SGD bitwise; AGA's state resumes bitwise; bad options give one line.
"""
import numpy as np
import pytest

from minips.distributed.algorithms import resolve

from .gossip1_checks import TOL, consensus, launch, ring, simulate
from .local_sgd_checks import stop_resume_is_bitwise
from .test_mpi import ATOL, RTOL
from .test_mpi import launch as launch_mlp

RUN = {"steps": 12, "batch": 8}


def test_four_ranks_follow_the_rule_and_meet_at_global_steps(tmp_path):
    runs = [{"spec": "gossip-pga:period=3", "steps": 14},
            {"spec": "gossip-aga:h0=2:h-max=5:power=1", "steps": 20}]
    (pga, plog, pp, prep), (aga, alog, ap, arep) = launch(4, runs, tmp_path)
    np.testing.assert_allclose(pga, simulate(4, 14, ring(4), H=3), **TOL)
    np.testing.assert_allclose(aga, simulate(4, 20, ring(4), aga=(2, 5, 1.0)), **TOL)
    for w, log in ((pga, plog), (aga, alog)):
        c = consensus(w.astype(np.float64))[1:]
        glob = np.array([r["global"] for r in log], bool)
        assert glob.any() and np.all(c[glob] < 1e-12) and np.all(c[~glob] > 1e-6)
    assert [t for t, r in enumerate(plog) if r["global"]] == [2, 5, 8, 11]
    # loss(i, t) = 4 / (1 + t/2) + i/10 falls, so the period grows from h0 = 2 to h-max = 5
    periods = [r["period"] for r in alog if r["global"]]
    assert periods[0] == 2 and periods[-1] == 5 and periods == sorted(periods)
    assert arep["aga_global_steps"] == sum(r["global"] for r in alog) and pp == ap == 0
    assert prep["topology"]["topology"] == "ring"


def test_period_1_is_sync(tmp_path):
    sync, _ = launch_mlp(3, {"algo": "sync", **RUN}, tmp_path)
    run, _ = launch_mlp(3, {"algo": "gossip-pga:period=1", **RUN}, tmp_path)
    np.testing.assert_allclose(run["weights"], sync["weights"], rtol=RTOL, atol=ATOL)
    assert len(set(run["hashes"].tolist())) == 1


def test_one_rank_is_plain_sgd(tmp_path):
    plain, _ = launch_mlp(0, {"algo": "sync", **RUN}, tmp_path)
    for spec in ("gossip-pga:period=4", "gossip-aga"):
        run, _ = launch_mlp(0, {"algo": spec, **RUN}, tmp_path)
        assert np.array_equal(run["weights"], plain["weights"]), spec


def test_aga_resume_is_bitwise(tmp_path):
    """Stopped after step 5, mid-period (h0 = 2 grows): H, the next global
    step, L0 and the running loss come back from the checkpoint."""
    rows, _ = stop_resume_is_bitwise("gossip-aga:h0=2:h-max=6:power=1", tmp_path, 5, 9)
    assert any(r["global"] == "1" for r in rows) and rows[-1]["period"] != "2"


@pytest.mark.parametrize("text,message", [
    ("gossip-pga:period=0", "period must be >= 1 (H: steps per global average), got 0"),
    ("gossip-pga:topology=star", "option topology must be one of ring"),
    ("gossip-aga:h0=4:h-max=2", "h-max must be >= h0 = 4, got 2"),
    ("gossip-aga:power=-1", "power must be a finite number >= 0"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_spec_forms():
    assert resolve("gossip-pga:6").options == resolve("gossip-pga:period=6").options
    assert resolve("gossip-aga").run_label == "gossip-aga:h0=4" and not resolve("gossip-aga").replicated
