"""dng: D-NG (Jakovetic, Xavier, Moura 2014), the reconstruction of the
accelerated gossip gradient method.

Pinned down: with P = 1, rule=constant and a constant learning rate it is
Nesterov SGD (the project's SGD with nesterov=True, whose weights are D-NG's
extrapolated point y), and with a step schedule it is Nesterov with the step
size inside the velocity, not SGD(nesterov=True); on 4
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


def test_mean_iterate_follows_the_averaged_gradient_step(tmp_path):
    r = launch3(4, {"algo": "dng:topology=ring", **RUN}, tmp_path)
    assert len(r["dng_err"]) == RUN["steps"] and r["dng_err"].max() < 1e-5, r["dng_err"]
    assert not np.array_equal(r["all_weights"][0], r["all_weights"][1])


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


def _dng_one_rank(lrs, d=12):
    """dng:rule=constant:momentum=0.9 on one rank, one flat parameter, the
    given gradients of tests/given_gradients.py, the learning rate of step k
    set to lrs[k] (as the Trainer's schedule does): y after every step."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from given_gradients import gradient, initial
    from minips.distributed.algorithms import make_algorithm
    from minips.distributed.comm import Comm
    from minips.nn.module import Parameter
    from minips.optim import SGD
    p = Parameter(initial(d))
    opt = SGD([p], lr=lrs[0], momentum=0.9)
    algo = make_algorithm("dng", [p], opt, Comm(), rule="constant", momentum=0.9)
    algo.start()
    ys = []
    for k, lr in enumerate(lrs):
        opt.lr = lr
        with algo.compute_point():
            algo.before_backward()
            algo.flat.grads[0][...] = gradient(algo.flat.weights, 0, k)
        algo.step()
        ys.append(algo.y.astype(np.float64).copy())
    return np.array(ys)


def _nesterov_by_hand(lrs, form, mu=0.9, d=12):
    """Nesterov SGD's weights after every step, float64. form "sgd": the
    project's (and PyTorch's) SGD(nesterov=True): v = mu v + g (v = g first),
    w -= lr (g + mu v), the learning rate outside the buffer. form "inside":
    the step size inside the velocity, u = mu u - lr g, x += u, w = x + mu u."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from given_gradients import gradient, initial
    w = initial(d).astype(np.float64)
    x, v, u, out = w.copy(), np.zeros(d), np.zeros(d), []
    for k, lr in enumerate(lrs):
        g = gradient(w.astype(np.float32), 0, k).astype(np.float64)
        if form == "sgd":
            v = g if k == 0 else mu * v + g
            w = w - lr * (g + mu * v)
        else:
            u = mu * u - lr * g
            x = x + u
            w = x + mu * u
        out.append(w.copy())
    return np.array(out)


def test_one_rank_equals_nesterov_sgd_only_for_a_constant_learning_rate():
    """What dng's docstring states: with a constant step size, one rank of
    rule=constant is SGD(nesterov=True) (y = its weights); with a schedule it
    is Nesterov with the step size inside the velocity (x^k - x^{k-1} carries
    the past alphas), which SGD's buffer of raw gradients is not."""
    const = [0.05] * 10
    np.testing.assert_allclose(_dng_one_rank(const), _nesterov_by_hand(const, "sgd"), rtol=1e-5, atol=1e-6)
    step = [0.05] * 5 + [0.01] * 5                        # a step schedule: the lr drops 5x at step 5
    got = _dng_one_rank(step)
    np.testing.assert_allclose(got, _nesterov_by_hand(step, "inside"), rtol=1e-5, atol=1e-6)
    assert np.abs(got[5:] - _nesterov_by_hand(step, "sgd")[5:]).max() > 1e-2
