"""The train command: outputs, config files, errors a user can cause,
checkpoint/resume on the same trajectory, SIGTERM, NaN."""
import csv
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from minips import checkpoint

from .conftest import ROOT, run_cli, stop_signal, subprocess_env

MLP = ["--model", "mlp", "--data", "fashion-mnist-mini", "--quiet"]
MPIEXEC = shutil.which("mpiexec")


def test_train_writes_metrics_and_summary(tmp_path):
    out = tmp_path / "run"
    r = run_cli(["train", *MLP, "--epochs", "2", "--batch-size", "256", "--algo", "sync", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    assert [int(x["epoch"]) for x in rows] == [1, 2]
    assert {"train_loss", "test_loss", "test_accuracy", "seconds"} <= set(rows[0])
    s = json.loads((out / "summary.json").read_text())
    for key in ("test_accuracy", "test_loss", "epochs", "steps", "wall_time_s", "world_size", "algo", "model",
                "data", "seed", "images_per_s", "time_breakdown", "trace_columns"):
        assert key in s, key
    # keys only pseudo-sync fills are its own (docs/outputs.md): a sync run has none of them
    assert not {"predictor", "staleness", "predictor_options", "predictor_code"} & set(s)
    assert s["trace_columns"] == {}  # sync declares no trace column for figures
    assert s["steps"] == 2 * (10000 // 256) and s["world_size"] == 1 and s["algo"] == "sync"
    assert s["test_accuracy"] > 0.7
    # the machine the times were taken on: the CPU as /proc/cpuinfo names it, and the load
    fields = dict(line.split(":", 1) for line in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines()
                  if ":" in line) if sys.platform == "linux" else {}
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if "cpu family" in fields:
        assert f"family {fields['cpu family']} model {fields['model']}" in s["cpu"]
        assert s["cpu"].startswith(fields["model name"])
    assert len(s["load_average_end"]) == 3 and "cpu" in s["units"]
    trace = list(csv.DictReader(open(out / "trace.csv")))
    assert len(trace) == s["steps"] and "wait_s" in trace[0]  # phase columns in seconds


def test_config_file_and_flag_override(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('model = "mlp"\nepochs = 1\nbatch-size = 500\nlr = 0.01\nalgo = "sync"\nquiet = true\n')
    out = tmp_path / "run"
    r = run_cli(["train", "--config", str(cfg), "--lr", "0.02", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["lr"] == 0.02 and s["batch_size_per_rank"] == 500 and s["steps"] == 20
    assert "predictor_options" not in s  # sync has no predictor
    # a predictor's options, defaults included, are recorded with the run
    cfg.write_text('model = "mlp"\nepochs = 1\nmax-steps = 3\nalgo = "pseudo-sync:adaptive"\nquiet = true\n'
                   '[predictor_options]\nrho = 0.5\n')
    r = run_cli(["train", "--config", str(cfg), "--staleness", "2", "--out", str(out), "--overwrite"])
    assert r.returncode == 0, r.stderr
    opts = json.loads((out / "summary.json").read_text())["predictor_options"]
    assert opts["rho"] == 0.5 and opts["staleness"] == 2
    assert opts["h_max"] == 10.0 and opts["lambda0"] == 0.0  # the documented defaults
    cfg.write_text('model = "mlp"\nlearning_rate = 0.1\n')
    r = run_cli(["train", "--config", str(cfg)])
    assert r.returncode == 2
    assert "unknown key 'learning_rate'" in r.stderr and "lr" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args,message", [
    (["--algo", "magic"], "unknown algorithm 'magic'; choose one of sync, overlap-sync, pseudo-sync"),
    (["--staleness", "0"], "--staleness must be >= 1"),
    (["--data", "missing.h5"], "data file missing.h5 does not exist"),
    (["--data", "cifar"], "unknown data set 'cifar'"),
    (["--model", "resnet"], "unknown model 'resnet'"),
    (["--predictor", "oracle"], "option predictor must be one of last, ema, holt, lookahead, adaptive, local, "
                                "adaptive-local, local-rewind, layerwise-local, local-pull, spike, dc-asgd, gap-aware, "
                                "got 'oracle'"),
    (["--network", "wifi"], "unknown network 'wifi'"),
    (["--batch-size", "20000"], "larger than this rank's share"),
    (["--resume", "nope.h5"], "checkpoint nope.h5 does not exist"),
])
def test_bad_input_gives_a_clear_message(args, message, tmp_path):
    r = run_cli(["train", *MLP, "--epochs", "1", "--out", str(tmp_path / "x"), *args])
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_nan_loss_stops_with_the_step(tmp_path):
    r = run_cli(["train", *MLP, "--epochs", "1", "--algo", "sync", "--lr", "1e4", "--momentum", "0.99",
                 "--out", str(tmp_path / "x")])
    assert r.returncode == 2
    assert "training diverged" in r.stderr and "at step" in r.stderr
    # the trace up to the divergence is kept, ending at the last finite step
    trace = (tmp_path / "x" / "trace-diverged-rank0.csv").read_text().splitlines()
    assert "trace-diverged-rank0.csv" in r.stderr
    step = int(r.stderr.split("at step ")[1].split()[0])
    assert trace[0].startswith("step,") and len(trace) == 1 + step
    assert int(trace[-1].split(",")[0]) == step - 1


def _weights(path):
    return np.asarray(checkpoint.load(path)["weights"])


@pytest.mark.parametrize("algo", ["pseudo-sync", "sync"])
def test_resume_continues_the_same_trajectory(algo, tmp_path):
    # 2 epochs of 20 steps; the cut at step 25 is inside the second epoch
    common = [*MLP, "--epochs", "2", "--batch-size", "500", "--algo", algo, "--predictor", "adaptive",
              "--staleness", "2"]
    full, part = tmp_path / "full", tmp_path / "part"
    r = run_cli(["train", *common, "--checkpoint-every", "1000", "--out", str(full)])
    assert r.returncode == 0, r.stderr
    r = run_cli(["train", *common, "--checkpoint-every", "10", "--max-steps", "25", "--out", str(part)])
    assert r.returncode == 0, r.stderr
    assert checkpoint.load(part / "checkpoint.h5")["step"] == 25
    r = run_cli(["train", *common, "--resume", str(part / "checkpoint.h5"), "--checkpoint-every", "1000",
                 "--out", str(part)])
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(_weights(full / "checkpoint.h5"), _weights(part / "checkpoint.h5"))
    a = json.loads((full / "summary.json").read_text())
    b = json.loads((part / "summary.json").read_text())
    assert a["test_accuracy"] == b["test_accuracy"] and len(b["history"]) == 2


def test_resume_refuses_a_different_configuration(tmp_path):
    out = tmp_path / "a"
    r = run_cli(["train", *MLP, "--epochs", "1", "--max-steps", "5", "--checkpoint-every", "5", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    r = run_cli(["train", *MLP, "--epochs", "1", "--lr", "0.5", "--resume", str(out / "checkpoint.h5")])
    assert r.returncode == 2 and "different run configuration" in r.stderr and "lr: checkpoint 0.05" in r.stderr
    # a validation split held out of the training set changes the trajectory; --eval-every the curve
    r = run_cli(["train", *MLP, "--epochs", "1", "--val-fraction", "0.1", "--resume", str(out / "checkpoint.h5")])
    assert r.returncode == 2 and "val_fraction: checkpoint 0.0, now 0.1" in r.stderr
    out = tmp_path / "b"
    r = run_cli(["train", *MLP, "--epochs", "1", "--max-steps", "5", "--checkpoint-every", "5", "--val-fraction",
                 "0.1", "--eval-every", "2", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    r = run_cli(["train", *MLP, "--epochs", "1", "--val-fraction", "0.1", "--eval-every", "3", "--resume",
                 str(out / "checkpoint.h5")])
    assert r.returncode == 2 and "eval_every: checkpoint 2, now 3" in r.stderr


@pytest.mark.mpi
def test_mpi_resume_equals_the_uncut_run(tmp_path):
    """A pseudo-sync run cut at step 17 under mpiexec and resumed there ends with the weights of
    the uncut run. The uncut run is trained here on 2 virtual ranks (the same run bit for bit as
    ``mpiexec -n 2``: tests/test_virtual_equals_mpi.py), which spares a launch; a resume with
    another number of ranks is refused by the same check of the checkpoint's world size
    (tests/test_virtual.py::test_another_number_of_virtual_ranks_is_refused_on_resume)."""
    from minips.cli import main
    env = subprocess_env()

    def mpirun(n, args):
        return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "minips", "train", *args],
                              capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)
    common = [*MLP, "--epochs", "1", "--batch-size", "128", "--check-replicas", "5", "--algo", "pseudo-sync:adaptive"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(["train", *common, "--checkpoint-every", "1000", "--out", str(full), "--virtual-ranks", "2"]) == 0
    r = mpirun(2, [*common, "--max-steps", "17", "--checkpoint-every", "17", "--out", str(part)])
    assert r.returncode == 0, r.stderr
    r = mpirun(2, [*common, "--resume", str(part / "checkpoint.h5"), "--checkpoint-every", "1000",
                   "--out", str(part)])
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(_weights(full / "checkpoint.h5"), _weights(part / "checkpoint.h5"))


@pytest.mark.mpi
def test_sigterm_checkpoints_and_exits_zero(tmp_path):
    env = subprocess_env()
    out = tmp_path / "sig"
    proc = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "minips", "train", *MLP,
                             "--epochs", "20", "--algo", "pseudo-sync", "--checkpoint-every", "20",
                             "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    trace = out / "trace.csv"
    deadline = time.time() + 120
    # wait for an event, not a fixed time: the first checkpoint (step 20) shows
    # that training runs, with the stop protocol's signal handlers installed
    while not (out / "checkpoint.h5").exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.time() < deadline, "no checkpoint within the deadline"
        time.sleep(0.05)
    proc.send_signal(stop_signal())  # SIGTERM, which Hydra forwards to every rank; SIGUSR1 under Open MPI
    try:
        stdout, stderr = proc.communicate(timeout=max(5, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, stderr
    s = json.loads((out / "summary.json").read_text())
    # 10,000 images / 2 ranks / batch 32 = 156 steps per epoch: stopped before the 20 epochs ended
    assert s["stopped"] == "signal" and 0 < s["steps"] < 20 * 156
    state = checkpoint.load(out / "checkpoint.h5")
    assert state["step"] == s["steps"] and trace.exists()


def test_failed_run_restores_signal_handlers_and_drains():
    """In a notebook a failed run must not leave handlers or requests behind."""
    from minips.train import TrainConfig, Trainer

    before = signal.getsignal(signal.SIGTERM)
    t = Trainer(TrainConfig(model="mlp", epochs=1, lr=1e4, momentum=0.99, algo="pseudo-sync", quiet=True,
                            trace=False, out=str(ROOT / "runs" / "test-nan"), overwrite=True))
    with pytest.raises(FloatingPointError, match="at step"):
        t.run()
    assert signal.getsignal(signal.SIGTERM) is before
    assert t.comm.pending() == 0


def test_configs_main_toml_is_the_default_run():
    """The README points to configs/main.toml as the main job written out."""
    from minips.train import TrainConfig, load_config

    cfg = load_config(ROOT / "configs" / "main.toml")
    algo = cfg.pop("algo")
    assert dataclasses.replace(TrainConfig(), **cfg) == dataclasses.replace(TrainConfig(), out=cfg["out"])
    # the spec written out names the default algorithm with its default options
    written, default = TrainConfig(algo=algo).resolve_algo(), TrainConfig().resolve_algo()
    assert (written.name, written.options_dict()) == (default.name, default.options_dict())
    # ... and it composes: another predictor from the command line, or in the spec
    assert TrainConfig(algo="pseudo-sync:last").resolve_algo().options.predictor == "last"


@pytest.mark.parametrize("line,message", [
    ('epochs = "one"', "'epochs' must be an integer, got 'one' (a string)"),
    ('lr = "0.1"', "'lr' must be a number, got '0.1' (a string); write lr = 0.1 without quotes"),
    ('trace = "false"', "'trace' must be true or false, got 'false' (a string); write trace = false"),
    ('nesterov = "yes"', "'nesterov' must be true or false, got 'yes' (a string)"),
    ("epochs = true", "'epochs' must be an integer, got true (a boolean)"),
    ("batch-size = 1.5", "'batch-size' must be an integer, got 1.5 (a float)"),
    ("model = 3", "'model' must be a string, got 3 (an integer)"),
    ("predictor_options = 3", "'predictor_options' must be a table"),
])
def test_config_value_of_the_wrong_type_is_named(line, message, tmp_path):
    from minips.train import ConfigError, load_config

    cfg = tmp_path / "config.toml"
    cfg.write_text(line + "\n")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert f"{cfg}: {message}" in str(e.value)


def test_config_types_that_fit_are_accepted(tmp_path):
    from minips.train import load_config

    cfg = tmp_path / "config.toml"
    cfg.write_text('lr = 1\nepochs = 2\ntrace = false\nnetwork = "1gbe"\n[predictor_options]\nrho = 0.5\n')
    assert load_config(cfg) == {"lr": 1, "epochs": 2, "trace": False, "network": "1gbe",
                                "predictor_options": {"rho": 0.5}}


def test_config_type_error_on_the_command_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('model = "mlp"\nepochs = "one"\n')
    r = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "x")])
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and "'epochs' must be an integer, got 'one' (a string)" in r.stderr
    assert "Traceback" not in r.stderr
    # the unknown-key message lists the flag spellings (dashes), underscores still work
    cfg.write_text('model = "mlp"\nbatchsize = 5\n')
    r = run_cli(["train", "--config", str(cfg)])
    assert r.returncode == 2 and "batch-size" in r.stderr and "weight-decay" in r.stderr
    assert "batch_size" not in r.stderr


def test_out_that_is_a_file_is_a_clear_error(tmp_path):
    f = tmp_path / "notes.md"
    f.write_text("hello\n")
    for out in (f, f / "run"):
        r = run_cli(["train", *MLP, "--epochs", "1", "--max-steps", "2", "--out", str(out)])
        assert r.returncode == 2, r.stderr
        assert "is a file, not a directory; give --out a directory" in r.stderr
        assert "Traceback" not in r.stderr
    assert f.read_text() == "hello\n"


def test_final_line_is_formatted():
    from minips.train import Trainer

    assert Trainer.format_final({"test_accuracy": 0.812345678}) == "final test accuracy: 0.8123"
    # BLEU is stored on sacrebleu's 0..100 scale (docs/captioning.md reports e.g. 64.3)
    line = Trainer.format_final({"bleu": 0.06358589375266897, "exact_match": 0.0, "test_accuracy": None})
    assert line == "final BLEU-4 (0-100): 0.06, exact match 0.0000"
    assert Trainer.format_final({"bleu": 64.2987, "exact_match": 0.45}) == \
        "final BLEU-4 (0-100): 64.30, exact match 0.4500"
    assert Trainer.format_final({"test_accuracy": None}) == "final test accuracy: n/a"
