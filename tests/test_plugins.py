"""Algorithms as plug-ins: the registry, the spec grammar, and a toy algorithm
(tests/toy_algorithm.py, one file + one table row) that train, compare, the
listing and the projection accept unchanged; ranks that hold different weights
(consensus distance, averaged-model evaluation, per-rank checkpoints that
resume bitwise)."""
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minips.distributed.algorithms import ALGORITHMS, describe_algorithms, parse_spec, resolve
from minips.distributed.costmodel import NetworkModel
from minips.labs.projection import StepProfile, project, step_time

from .conftest import ROOT, cli_on_ranks, run_cli, run_ranks, subprocess_env
from .toy_algorithm import ToyDrift

LAUNCH = str(Path(__file__).with_name("toy_launch.py"))
NET = NetworkModel(1e-6, 1e-9, "hand")
MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet", "--epochs", "1", "--batch-size", "16"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(ALGORITHMS, ToyDrift.name, ToyDrift)
    return ToyDrift


# --- the registry and the grammar --------------------------------------------------------
def test_registry_table_names_match_classes_and_each_has_a_cost_model():
    prof = StepProfile(forward=0.01, backward=0.02, grad_bytes=4e5)
    for name, cls in ALGORITHMS.items():
        assert cls.name == name and cls.family and cls.paper
        assert step_time(name, prof, 4, NET) >= prof.compute  # every registered algorithm has a model


@pytest.mark.parametrize("text,name,keyed,positional,label", [
    ("sync", "sync", {}, (), None),
    ("pseudo-sync:adaptive:2", "pseudo-sync", {}, ("adaptive", "2"), None),
    ("pseudo-sync:predictor=adaptive:staleness=2@lam0", "pseudo-sync", {"predictor": "adaptive", "staleness": "2"},
     (), "lam0"),
    ("overlap-sync:bucket-mb=4", "overlap-sync", {"bucket_mb": "4"}, (), None),
])
def test_spec_grammar(text, name, keyed, positional, label):
    p = parse_spec(text)
    assert (p.name, p.keyed, p.positional, p.label) == (name, keyed, positional, label)


def test_spec_forms_resolve_to_the_same_options():
    a = resolve("pseudo-sync:adaptive:2")
    b = resolve("pseudo-sync:predictor=adaptive:staleness=2")
    c = resolve("pseudo-sync", defaults={"predictor": "adaptive", "staleness": 2, "bucket_mb": 9.0})
    assert a.options_dict() == b.options_dict() == c.options_dict()
    assert a.options.staleness == 2 and isinstance(a.options.staleness, int)
    # a legacy flag fills what the spec leaves unset, must agree with what it sets,
    # and is ignored by an algorithm without that option (compare passes it to every run)
    assert resolve("pseudo-sync:staleness=3", defaults={"staleness": 3}).options.staleness == 3
    with pytest.raises(ValueError, match="--staleness 2 conflicts with staleness=3 in the spec; give the option once"):
        resolve("pseudo-sync:staleness=3", defaults={"staleness": 2})
    with pytest.raises(ValueError, match=r"\[predictor_options\] sets rho = 0.5 but the spec says rho=0.9"):
        resolve("pseudo-sync:rho=0.9", defaults={"predictor_options": {"rho": 0.5}})
    assert resolve("pseudo-sync:adaptive", defaults={"predictor_options": {"rho": 0.5}}).options.predictor_options \
        == {"rho": 0.5}
    with pytest.raises(ValueError, match="predictor 'local' has no option"):  # the default predictor has none
        resolve("pseudo-sync", defaults={"predictor_options": {"rho": 0.5}})
    assert resolve("sync", defaults={"staleness": 2}).options_dict() == {}
    # unknown keys go to the predictor, typed like its arguments
    d = resolve("pseudo-sync:predictor=adaptive:rho=0.95:adapt-lambda=false")
    assert d.options.predictor_options == {"rho": 0.95, "adapt_lambda": False}
    assert resolve("overlap-sync:bucket-mb=4@ddp").label == "ddp"
    assert resolve("pseudo-sync").run_label == "pseudo-sync:local"
    assert resolve("pseudo-sync", defaults={"predictor": "last", "staleness": 2}).run_label == "pseudo-sync:last:2"


@pytest.mark.parametrize("text,message", [
    ("", "no algorithm name"),
    ("sync:", "empty option between colons"),
    ("sync@", "nothing after '@'"),
    ("gossip", "unknown algorithm 'gossip'; choose one of sync, overlap-sync, pseudo-sync"),
    ("sync:period=2", "sync has no option 'period'; its options: none"),
    ("overlap-sync:bucket-mb=big", "option bucket-mb must be a number, got 'big'"),
    ("overlap-sync:bucket-mb=-1", "bucket-mb must be >= 0"),
    ("pseudo-sync:staleness=0", "staleness must be >= 1"),
    ("pseudo-sync:adaptive:2:3", "too many positional values; pseudo-sync takes pseudo-sync:PREDICTOR:STALENESS"),
    ("pseudo-sync:staleness=2:staleness=3", "option 'staleness' given twice"),
    ("pseudo-sync:predictor=last:rho=0.9", "predictor 'last' has no option(s) rho"),
    ("pseudo-sync:predictor=adaptive:rho=high", "adaptive option rho must be a number"),
    ("sync@a@b", "more than one '@'"),
    ("overlap-sync:bucket-mb=nan", "option bucket-mb must be a finite number, got 'nan'"),
    ("pseudo-sync:predictor=oracle", "option predictor must be one of last, ema, holt, lookahead, adaptive"),
    ("pseudo-sync:predictor=adaptive:eps=0", "eps must be in (0, 1e-3), got 0"),
])
def test_bad_specs_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value)


# --- the toy algorithm: listing, projection, train, compare ----------------------------
def test_listing_shows_a_new_algorithm(toy, capsys):
    from minips.cli import main
    assert main(["algorithms"]) == 0
    out = capsys.readouterr().out
    assert "toy-drift  [model averaging; ranks hold different weights]" in out
    assert "period" in out and "default 3 steps" in out
    assert main(["algorithms", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["toy-drift"]["replicated"] is False and rows["sync"]["replicated"] is True
    assert [o["name"] for o in rows["toy-drift"]["options"]] == ["period", "lr-scale", "micro", "rank0-batch"]
    assert {r["name"] for r in describe_algorithms()} == set(ALGORITHMS)


def test_projection_reads_the_toy_cost_model(toy):
    prof = StepProfile(forward=0.02, backward=0.03, grad_bytes=1e6)
    a4 = 6e-6 + 1.5e-3  # ring allreduce of 1 MB over 4 nodes at 1 us, 1 GB/s
    assert step_time("toy-drift:period=4", prof, 4, NET) == pytest.approx(0.05 + a4 / 4)
    res = project({"sync": prof, "toy-drift:period=8": prof}, NET, [1, 4], baseline="sync")
    assert res["toy-drift:period=8"]["step_s"][1] == pytest.approx(0.05 + a4 / 8)
    assert res["toy-drift:period=8"]["vs_baseline_1"][0] == pytest.approx(1.0)


def _launch(n, args, timeout=180):
    """``python -m minips ARGS`` with the toy algorithm registered, on n virtual ranks (0: one)."""
    return run_ranks(n, LAUNCH, *map(str, args), timeout=timeout)


def test_train_refuses_check_replicas_for_an_algorithm_whose_ranks_differ(tmp_path):
    r = _launch(2, ["train", *MLP, "--algo", "toy-drift", "--check-replicas", "1", "--max-steps", "2",
                    "--out", str(tmp_path / "r")], timeout=120)
    assert r.returncode != 0
    assert "--check-replicas compares weight hashes across ranks, but toy-drift lets ranks hold different" in r.stderr
    assert "Traceback" not in r.stderr


def _ckpt_ranks(path):
    from minips.checkpoint import load
    s = load(path)
    assert s["per_rank"] is True
    return s, [np.asarray(x["weights"]) for x in s["ranks"]]


@pytest.mark.slow
def test_non_replicated_resume_is_bitwise_and_evaluates_the_average(tmp_path):
    """A run whose ranks drift apart, checkpointed at step 7 and resumed to step
    12, ends bitwise equal to the uninterrupted run (every rank's weights,
    optimizer and the metrics); its evaluation is of the model averaged over
    ranks, as averaged here in one process."""
    common = [*MLP, "--algo", "toy-drift:period=5", "--lr", "0.05", "--consensus-every", "3"]
    full, part = tmp_path / "full", tmp_path / "part"
    r = _launch(2, ["train", *common, "--max-steps", "12", "--checkpoint-every", "12", "--out", str(full)])
    assert r.returncode == 0, r.stderr[-3000:]
    r = _launch(2, ["train", *common, "--max-steps", "7", "--checkpoint-every", "7", "--out", str(part)])
    assert r.returncode == 0, r.stderr[-3000:]
    r = _launch(2, ["train", *common, "--max-steps", "12", "--checkpoint-every", "12", "--out", str(part),
                    "--resume", str(part / "checkpoint.h5")])
    assert r.returncode == 0, r.stderr[-3000:]
    a, wa = _ckpt_ranks(full / "checkpoint.h5")
    b, wb = _ckpt_ranks(part / "checkpoint.h5")
    assert int(a["step"]) == int(b["step"]) == 12
    assert not np.array_equal(wa[0], wa[1])  # the ranks really hold different weights
    for x, y in zip(wa, wb):
        assert np.array_equal(x, y)
    for x, y in zip(a["ranks"], b["ranks"]):
        assert np.array_equal(np.asarray(x["optimizer"]["buffers"][0]), np.asarray(y["optimizer"]["buffers"][0]))
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (full, part))
    assert sa["replicated"] is False and sa["algo_options"]["period"] == 5
    assert sa["test_loss"] == sb["test_loss"] and sa["consensus_distance"] == sb["consensus_distance"] > 0
    trace = (full / "trace.csv").read_text().splitlines()
    assert "consensus_distance" in trace[0] and "average" in trace[0] and "bytes_sent" in trace[0]
    # The evaluation is of the averaged model: average in one process and evaluate.
    from minips import random as mrandom
    from minips.distributed.flat import FlatParams
    from minips.models import build_model
    from minips.tasks import make_task
    task = make_task("fashion-mnist-mini")
    mrandom.seed(0)
    model = build_model("mlp", task)
    flat = FlatParams(model.parameters())
    flat.weights[...] = (wa[0] + wa[1]) * np.float32(0.5)
    m = task.evaluate(model, None, 500)
    assert m["test_loss"] == pytest.approx(sa["test_loss"], rel=1e-5)
    assert m["test_accuracy"] == pytest.approx(sa["test_accuracy"], abs=1e-9)


def test_compare_runs_a_new_algorithm_beside_sync(tmp_path):
    out = tmp_path / "cmp"
    r = _launch(2, ["compare", *MLP, "--max-steps", "4", "--algos", "sync,toy-drift:period=2@toy",
                    "--out", str(out)], timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = json.loads((out / "compare.json").read_text())
    assert [s["label"] for s in runs] == ["sync", "toy"]
    assert runs[1]["algo"] == "toy-drift" and runs[1]["time_breakdown"]["average"] > 0
    assert runs[0]["bytes_sent_per_step"] > 0 and "| toy |" in (out / "compare.md").read_text()


def test_hooks_lr_micro_batches_and_batch_size(tmp_path):
    """One process: two micro-batches of 8 give the gradient of one batch of 16
    (to float rounding); lr-scale reaches the optimizer; rank0-batch sets the batch."""
    def run(spec, out):
        r = _launch(0, ["train", *MLP, "--algo", spec, "--max-steps", "6", "--schedule", "constant",
                        "--out", str(tmp_path / out)], timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads((tmp_path / out / "summary.json").read_text()), (tmp_path / out / "trace.csv")
    one, t1 = run("toy-drift", "one")
    two, _ = run("toy-drift:micro=2", "two")
    assert two["test_loss"] == pytest.approx(one["test_loss"], rel=1e-4)
    half, th = run("toy-drift:lr-scale=0.5", "half")
    import csv
    lrs = {float(row["lr"]) for row in csv.DictReader(open(th))}
    assert lrs == {0.025}
    b, _ = run("toy-drift:rank0-batch=8", "b8")
    assert b["batch_size_per_rank"] == 8 and b["global_batch_size"] == 8


def test_partition_reaches_the_sampler_and_the_summary(tmp_path):
    """--partition by-class:3 on 2 ranks: each rank trains on 3 classes (recorded
    in summary.json by rank 0); a bad partition is a one-line error."""
    out = tmp_path / "p"
    loud = [a for a in MLP if a != "--quiet"]  # the note about unseen classes is printed
    r = cli_on_ranks(2, ["train", *loud, "--algo", "sync", "--max-steps", "3", "--partition", "by-class:3",
                         "--out", out])
    assert r.returncode == 0, r.stderr[-3000:]
    part = json.loads((out / "summary.json").read_text())["partition"]
    assert part["spec"] == "by-class:3" and [len(r["class_counts"]) for r in part["ranks"]] == [3, 3]
    assert "no rank trains on class(es) 6, 7, 8, 9 (6 of 10 classes are seen)" in r.stdout
    r = subprocess.run([sys.executable, "-m", "minips", "train", *MLP, "--partition", "byclass:2",
                        "--out", str(tmp_path / "bad")], capture_output=True, text=True, timeout=60,
                       env=subprocess_env(), cwd=ROOT)
    assert r.returncode == 2 and "unknown partition 'byclass:2'" in r.stderr and "Traceback" not in r.stderr


def test_compare_refuses_train_only_flags(tmp_path):
    for flag, value, hint in (("--algo", "sync", "list the algorithms in --algos"),
                              ("--label", "x", "label an entry with SPEC@LABEL"),
                              ("--resume", "c.h5", "resume one run with train --resume")):
        r = run_cli(["compare", *MLP, "--algos", "sync", flag, value, "--out", str(tmp_path / "c")])
        assert r.returncode == 2 and f"compare does not take {flag}: {hint}" in r.stderr


def test_resume_from_a_directory_names_the_file(tmp_path):
    from minips.checkpoint import CheckpointError, load
    (tmp_path / "checkpoint.h5").write_bytes(b"")
    with pytest.raises(CheckpointError, match=f"{tmp_path} is a directory: pass the checkpoint file, e.g. "):
        load(tmp_path)


def test_what_an_algorithm_declares_reaches_the_outputs(toy, tmp_path, monkeypatch, capsys):
    """The toy algorithm's pre-run check, summary entries, trace column and
    profile extras reach summary.json, trace.csv, the projection and trace.png
    with nothing but its file and its (monkeypatched) table row: no generic
    file names it (tests/test_generic_layers.py)."""
    import matplotlib.pyplot as plt

    from minips import plots
    from minips.config import ConfigError
    from minips.distributed.costmodel import parse_network
    from minips.train import train

    opts = dict(model="mlp", data="fashion-mnist-mini", epochs=1, batch_size=16, quiet=True, virtual_ranks=2)
    # the pre-run check refuses before anything in --out is touched: 10000 / 2 / 16 = 312 steps
    refused = tmp_path / "refused"
    with pytest.raises(ConfigError, match="toy-drift: period 400 is longer than the run's 312 steps"):
        train(**opts, algo="toy-drift:period=400", out=str(refused))
    assert not refused.exists()
    # ... or warns (rank 0 prints it)
    train(**{**opts, "quiet": False}, algo="toy-drift:period=5", max_steps=2, out=str(tmp_path / "warned"))
    assert "warning: toy-drift: --max-steps 2 stops the run before its first average" in capsys.readouterr().out

    out = tmp_path / "run"
    s = train(**opts, algo="toy-drift:period=2", max_steps=6, network="1gbe", out=str(out))
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["toy_averages"] == s["toy_averages"] == 3                     # its report()
    assert on_disk["trace_columns"] == {"toy_weight_norm": {"title": "toy weights", "label": "||w|| after the step"}}
    trace = list(csv.DictReader(open(out / "trace.csv")))
    assert len(trace) == 6 and all(float(t["toy_weight_norm"]) > 0 for t in trace)
    # profile extras: its own averaging seconds and the model's tensors, and its cost model used them
    extras = on_disk["projected_profile_extras"]
    assert extras["toy_tensors"] == 4 and extras["toy_extra_s"] > 0               # mlp: 2 weights, 2 biases
    from minips.models import build_model
    from minips.tasks import make_task
    grad_bytes = 4.0 * sum(p.size for p in build_model("mlp", make_task("fashion-mnist-mini")).parameters())
    prof = StepProfile(**on_disk["projected_profile_s"], grad_bytes=grad_bytes, extras=extras)
    want = step_time("toy-drift:period=2", prof, 2, parse_network("1gbe"))
    assert on_disk["projected_step_time_s"] == pytest.approx(want)
    without = StepProfile(**on_disk["projected_profile_s"], grad_bytes=grad_bytes)
    assert want == pytest.approx(step_time("toy-drift:period=2", without, 2, parse_network("1gbe"))
                                 + extras["toy_extra_s"])
    # trace.png: a panel for the declared column, titled as declared
    figs = []
    monkeypatch.setattr(plots.style, "save", lambda fig, path: figs.append(fig))
    plots.plot_trace([{**plots.load_run(out), "dir": out, "name": "toy"}], tmp_path / "t.png")
    assert [ax.get_title() for ax in figs[0].axes] == ["training loss", "toy weights"]
    plt.close(figs[0])
