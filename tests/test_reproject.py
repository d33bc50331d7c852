"""A finished virtual run read on another network's time axis (issue 52, item 2):
report.projected_step_time / reprojected_curve, step x the algorithm's cost
model at the run's P on that network with compute interference phi. The
expected times are computed here from the ring allreduce formula
T = 2 (P-1) alpha + 2 (P-1)/P n beta, not by the cost model."""
import pytest

from minips import report
from minips.train import train

P = 2
STEPS = 9000 // P // 500  # 10 % of the 10,000 training images held out, batches of 500 per rank
NETS = {"1gbe": (50e-6, 8 / 1e9), "10gbe": (10e-6, 8 / 10e9)}  # alpha (s), beta (s/byte): the nominal presets


def ring(n, alpha, beta):
    return 2 * (P - 1) * alpha + 2 * (P - 1) / P * n * beta


pytestmark = pytest.mark.usefixtures("one_numba_thread")  # runs compared bit for bit (conftest.py)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproject")
    kw = dict(model="mlp", epochs=1, batch_size=500, val_fraction=0.1, eval_every=5, quiet=True, virtual_ranks=P)
    algos = ("sync", "overlap-sync:bucket-mb=0.001")
    return {a: train(**kw, algo=a, out=str(root / a.replace(":", "-"))) for a in algos}


def test_a_sync_run_on_each_network_is_steps_times_compute_plus_a_ring_allreduce(runs):
    s = runs["sync"]
    compute = sum(s["projected_profile_s"].values())
    n = s["projected_grad_bytes"]
    assert n == 4 * (784 * 256 + 256 + 256 * 10 + 10)  # the mlp (one hidden layer of 256), 4 bytes a parameter
    for net, (alpha, beta) in NETS.items():
        want = compute + ring(n, alpha, beta)
        assert report.projected_step_time(s, net, 0.0) == pytest.approx(want, rel=1e-12)
        assert report.projected_step_time(s, net, 1.0) == pytest.approx(want, rel=1e-12)  # nothing overlaps
        pts = report.reprojected_curve(s, net, 0.0, "val_accuracy")
        assert [p["step"] for p in pts] == [5, STEPS]  # one mid-epoch evaluation, then the epoch's
        assert [p["projected_time_s"] for p in pts] == pytest.approx([5 * want, STEPS * want], rel=1e-12)
        assert [p["val_accuracy"] for p in pts] == [r["val_accuracy"] for r in s["curve"]]
    # the run's own axis (its projected_network, phi = 0) is what train wrote
    own = report.reprojected_curve(s, s["projected_network"].replace(" ", "").lower(), 0.0)
    assert [p["projected_time_s"] for p in own] == [r["projected_time_s"] for r in s["curve"]]


def test_overlap_hides_buckets_behind_backward_unless_phi_charges_them(runs):
    s = runs["overlap-sync:bucket-mb=0.001"]
    buckets = s["projected_profile_extras"]["buckets"]  # read back from JSON
    assert len(buckets) > 1 and sum(buckets) == pytest.approx(s["projected_grad_bytes"])
    prof = s["projected_profile_s"]
    for net, (alpha, beta) in NETS.items():
        times = [ring(b, alpha, beta) for b in buckets]
        hidden = min(sum(times) - times[-1], prof["backward"])
        for phi in (0.0, 0.5, 1.0):
            want = sum(prof.values()) + phi * hidden + sum(times) - hidden
            assert report.projected_step_time(s, net, phi) == pytest.approx(want, rel=1e-12)


def test_a_run_without_a_projection_or_a_bad_network_is_refused_in_one_line(runs):
    s = {k: v for k, v in runs["sync"].items() if k != "projected_grad_bytes"}
    with pytest.raises(ValueError, match="--virtual-ranks") as e:
        report.projected_step_time(s, "1gbe")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="unknown network"):
        report.projected_step_time(runs["sync"], "2gbe")
    with pytest.raises(ValueError, match=r"interference must be in \[0, 1\]"):
        report.projected_step_time(runs["sync"], "1gbe", 1.5)
