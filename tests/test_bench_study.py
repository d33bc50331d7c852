"""bench study: grid parsing, aggregation, and a tiny resumable run (mlp, 1 epoch)."""
import json

import pytest

from minips.bench.study import StudyError, aggregate, expand, load_grid, markdown_report, train_command

from .conftest import run_cli

GRID = """
ranks = [1, 2]
seeds = [0]
algos = ["sync", "pseudo-sync:last:1", "pseudo-sync:adaptive:2@fixed"]
timeout_s = 120

[train]
model = "mlp"
data = "fashion-mnist-mini"
epochs = 1
batch-size = 100
nesterov = true

[lr.base]
lr = 0.05
scale-lr = false

[lr.huge]
lr = 1000.0
scale-lr = false

[variants.fixed]
adapt_lambda = false
lambda0 = 0.5

[env]
NUMBA_NUM_THREADS = "1"
"""


def write(tmp_path, text=GRID):
    p = tmp_path / "grid.toml"
    p.write_text(text)
    return p


def test_load_and_expand(tmp_path):
    g = load_grid(write(tmp_path))
    specs = expand(g)
    assert len(specs) == 2 * 2 * 3
    # seeds outermost, then lr setting, then ranks, then algorithm
    assert [(s.lr_name, s.P, s.label) for s in specs[:4]] == [
        ("base", 1, "sync"), ("base", 1, "pseudo-sync:last:1"), ("base", 1, "pseudo-sync:adaptive:2@fixed"),
        ("base", 2, "sync")]
    s = specs[2]
    # the spec goes to train without the variant; the variant's options through variant.toml
    assert s.flags["algo"] == "pseudo-sync:adaptive:2" and s.flags["lr"] == 0.05
    assert s.variant_options == {"adapt_lambda": False, "lambda0": 0.5}
    cmd = train_command(s, tmp_path / "o", "mpiexec")
    assert cmd[:3] == ["mpiexec", "-n", "1"] and "--nesterov" in cmd and "--no-scale-lr" in cmd
    assert cmd[cmd.index("--config") + 1] == str(tmp_path / "o" / "variant.toml")
    assert len(expand(g, ranks=[2], lrs=["huge"])) == 3


@pytest.mark.parametrize("text,msg", [
    ("ranks = [1]\n", "missing key 'seeds'"),
    (GRID.replace('"sync",', '"sync::",'), "empty option between colons"),
    (GRID.replace('"sync",', '"synk",'), "unknown algorithm 'synk'"),
    (GRID.replace("adaptive:2@fixed", "adaptive:2:rho=x@fixed"), "rho"),
    (GRID.replace("ranks = [1, 2]", "ranks = [0]"), "ranks must be"),
    ("bogus = 1\n" + GRID, "unknown key"),
    ("target_acuracy = 0.8\n" + GRID, r"unknown key\(s\) target_acuracy; a grid's keys are .*target_accuracy"),
    ("target_accuracy = 82\n" + GRID, r"target_accuracy = 82: .*\(0, 1\].*did you mean 0.82\?"),
    ("target_accuracy = 'abc'\n" + GRID, r"target_accuracy = 'abc': give the test_accuracy to reach"),
    ("target_accuracy = 0\n" + GRID, r"target_accuracy = 0: "),
    ("target_accuracy = 120\nmetric = 'bleu'\n" + GRID, r"target_accuracy = 120: give the bleu .*\(0, 100\]"),
    (GRID.replace("ranks = [1, 2]", "ranks = 2"), r"ranks = 2: give a non-empty list of integers, e.g. ranks = "),
    (GRID.replace("seeds = [0]", "seeds = ['0']"), r"seeds = \['0'\]: give a non-empty list of integers"),
    (GRID.replace('algos = ["sync", "pseudo-sync:last:1", "pseudo-sync:adaptive:2@fixed"]', "algos = []"),
     r"algos = \[\]: give a non-empty list of algorithm specs"),
])
def test_bad_grids(tmp_path, text, msg):
    with pytest.raises(StudyError, match=msg):
        load_grid(write(tmp_path, text))


def test_a_bleu_target_may_exceed_one(tmp_path):
    assert load_grid(write(tmp_path, "target_accuracy = 30\nmetric = 'bleu'\n" + GRID)).target_accuracy == 30


def test_report_only_on_a_folder_without_runs_says_what_to_do(tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "missing"):
        r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(out), "--report-only"], timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"--report-only: {out} holds no runs folder" in r.stderr and "without --report-only" in r.stderr
    assert not (tmp_path / "missing").exists()  # nothing was created


def test_a_seed_that_is_not_a_number_is_named(tmp_path):
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(tmp_path / "o"), "--seeds", "x", "--dry-run"],
                timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "error: --seeds x: give comma-separated integers, e.g. --seeds 0,1" in r.stderr


@pytest.mark.parametrize("flag,value,fix", [("--ranks", "0", ">= 1, e.g. --ranks 2,4"),
                                            ("--ranks", "-2", ">= 1, e.g. --ranks 2,4"),
                                            ("--virtual-ranks", "0", ">= 1, e.g. --virtual-ranks 2,4"),
                                            ("--seeds", "-1", ">= 0, e.g. --seeds 0,1")])
def test_rank_counts_below_one_and_negative_seeds_are_refused(tmp_path, flag, value, fix):
    """``--ranks 0`` used to launch ``mpiexec -n 0`` (one process) and report it as P=0."""
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(tmp_path / "o"), flag, value, "--dry-run"],
                timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: {flag} {value}: every value must be {fix}" in r.stderr


def test_virtual_ranks_replace_the_grids_ranks_and_launcher(tmp_path):
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(tmp_path / "o"), "--virtual-ranks", "16,64",
                 "--dry-run"], timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 12 and all("mpiexec" not in ln for ln in lines)
    assert sum("--virtual-ranks 64" in ln for ln in lines) == 6 and "/runs/P16-virtual/" in lines[0]
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(tmp_path / "o"), "--virtual-ranks", "4",
                 "--ranks", "2", "--dry-run"], timeout=60)
    assert r.returncode == 2 and "not both" in r.stderr
    with pytest.raises(StudyError, match="virtual = 1: give true"):
        load_grid(write(tmp_path, GRID.replace("ranks = [1, 2]", "ranks = [1, 2]\nvirtual = 1")))


def test_a_run_killed_without_a_word_says_by_which_signal(tmp_path, monkeypatch):
    """A training process killed by SIGKILL (the kernel's out-of-memory killer, as three stability-map
    runs and one of issue 43's screen were: docs/bench/scale/map/oom-kills.txt) leaves stderr empty; its
    record says what ended it, as does mpiexec's 128 + 9 for a killed rank, and a plain exit status."""
    import subprocess
    from types import SimpleNamespace

    from minips.bench.study import runner
    grid = load_grid(write(tmp_path))
    spec = expand(grid)[0]
    logged = []
    for rc, want in ((-9, "killed by SIGKILL, nothing on stderr: often the kernel's out-of-memory killer"),
                     (137, "exit status 137: a rank killed by SIGKILL, nothing on stderr: often the kernel's"),
                     (-15, "killed by SIGTERM, nothing on stderr"), (3, "exit status 3, nothing on stderr")):
        monkeypatch.setattr(subprocess, "run",
                            lambda *a, rc=rc, **k: SimpleNamespace(returncode=rc, stderr="", stdout=""))
        rec = runner.run_one(spec, tmp_path / f"o{rc}", grid, "mpiexec", logged.append)
        assert rec["status"] == "failed" and rec["message"][0].startswith(want), rec["message"]
    assert "out-of-memory" not in " ".join(rec["message"])
    assert runner._silent_end("timeout", 600) == ["stopped at the grid's time limit (600 s), nothing on stderr"]


def test_dry_run_counts_the_runs_on_stderr(tmp_path):
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(tmp_path / "o"), "--dry-run"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 12 and "12 runs (dry run: nothing started)" in r.stderr
    assert not (tmp_path / "o").exists()


def test_at_name_without_a_variant_table_is_a_label(tmp_path):
    g = load_grid(write(tmp_path, GRID.replace("@fixed", "@mine")))
    s = [x for x in expand(g) if x.label.endswith("@mine")][0]
    assert s.flags["algo"] == "pseudo-sync:adaptive:2@mine" and s.variant_options == {}


def test_aggregate_and_report(tmp_path):
    g = load_grid(write(tmp_path))
    recs = [{"P": 2, "lr": "base", "label": "sync", "seed": s, "status": "ok", "metric": m}
            for s, m in enumerate([0.80, 0.82, 0.84])]
    recs += [{"P": 2, "lr": "base", "label": "pseudo-sync:last:1", "seed": 0, "status": "ok", "metric": 0.78},
             {"P": 2, "lr": "base", "label": "pseudo-sync:last:1", "seed": 2, "status": "ok", "metric": 0.1},
             {"P": 2, "lr": "base", "label": "pseudo-sync:last:1", "seed": 1, "status": "diverged", "metric": None}]
    a = aggregate(recs)
    s = a[("base", "sync", 2)]
    assert s["mean"] == pytest.approx(0.82) and s["std"] == pytest.approx(0.02) and (s["min"], s["max"]) == (0.8, 0.84)
    last = a[("base", "pseudo-sync:last:1", 2)]
    assert last["n"] == 3 and last["n_ok"] == 2 and last["diverged"] == 1 and last["collapsed"] == 0
    # with the chance level, the run at 0.1 collapsed: counted, and out of the mean (issue 42)
    at_chance = aggregate(recs, chance=0.1)[("base", "pseudo-sync:last:1", 2)]
    assert (at_chance["n_ok"], at_chance["collapsed"], at_chance["mean"]) == (1, 1, 0.78)
    md = markdown_report(g, recs + [{"P": 4, "lr": "base", "label": "sync", "seed": 0, "status": "ok",
                                      "metric": 0.75}])
    assert "| 0.7500 (1 seed) |" in md  # no made-up spread from one seed
    # mean ± half-width of the 95 % t interval: 4.303 (t, 2 degrees of freedom) * 0.02 / sqrt(3) = 0.0497
    assert "0.8200 ± 0.0497 (0.8000-0.8400, 3 seeds)" in md
    assert "0.7800 (1 seed) [1 div, 1 collapsed: not in the mean]" in md
    # paired by seed with sync: seed 0 only (seed 1 diverged, seed 2 collapsed): 0.78 - 0.80 in points
    assert "| base | 2 | pseudo-sync:last:1 | 1 | -2.00 (1 seed; left out: 1 of 3 collapsed, 1 of 3 diverged) |" in md


def test_a_run_stopped_at_a_signal_continues_from_its_checkpoint(tmp_path, monkeypatch):
    """A study stopped with its driver (SIGTERM to the process group) leaves each run in progress
    stopped at the signal, with summary.json ("stopped": "signal") and a checkpoint: not finished.
    The next study continues it with ``train --resume`` in the same folder (no --overwrite, which
    would start it again), starts it again when it has no checkpoint, and skips a finished run;
    --report-only leaves a stopped run out."""
    import subprocess
    from types import SimpleNamespace

    from minips.bench.study import runner
    grid = load_grid(write(tmp_path))
    spec = expand(grid)[0]
    root = tmp_path / "study"
    out = spec.out(root)
    out.mkdir(parents=True)
    started = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: ("train" in cmd and started.append(cmd)) or SimpleNamespace(
        returncode=0, stderr="", stdout="mpiexec (MPICH)"))  # the training commands only (not mpiexec's probe)
    (out / "summary.json").write_text(json.dumps({"stopped": "signal", "steps": 59}))
    (out / "checkpoint.h5").write_bytes(b"")
    assert not runner.finished(out) and runner.stopped_by_signal(out)
    r = run_cli(["bench", "study", str(write(tmp_path)), "--out", str(root), "--report-only"])
    assert r.returncode != 0 and "no finished runs yet" in r.stdout + r.stderr
    runner.run_one(spec, root, grid, "mpiexec", print)
    assert len(started) == 1 and "--overwrite" not in started[0]
    i = started[0].index("--resume")
    assert started[0][i + 1] == str(out / "checkpoint.h5") and started[0][started[0].index("--out") + 1] == str(out)
    (out / "checkpoint.h5").unlink()  # stopped before its first checkpoint: from the start
    runner.run_one(spec, root, grid, "mpiexec", print)
    assert "--overwrite" in started[1] and "--resume" not in started[1]
    (out / "summary.json").write_text(json.dumps({"stopped": None, "steps": 60}))
    assert runner.finished(out)
    (out / "summary.json").write_text(json.dumps({"stopped": "max_steps", "steps": 60}))  # --max-steps: done
    assert runner.finished(out)
    (out / "summary.json").write_text(json.dumps({"status": "diverged"}))  # a diverged run's record: done
    assert runner.finished(out)


def test_study_smoke_resumes_and_records_divergence(tmp_path):
    """On virtual ranks (grid key virtual = true: the study's bookkeeping is under
    test, not MPI): runs in runs/P2-virtual, the report says VIRTUAL, a rerun
    skips what finished, a huge lr is recorded as diverged."""
    grid = write(tmp_path, GRID.replace('ranks = [1, 2]', 'ranks = [2]\nvirtual = true'))
    out = tmp_path / "study"
    args = ["bench", "study", str(grid), "--out", str(out), "--algos", "sync,pseudo-sync:adaptive:2@fixed"]
    r = run_cli(args + ["--lr", "base"], timeout=240)
    assert r.returncode == 0, r.stderr + r.stdout
    res = json.loads((out / "grid.json").read_text())
    assert {x["label"] for x in res["runs"]} == {"sync", "pseudo-sync:adaptive:2@fixed"}
    assert all(x["status"] == "ok" and x["metric"] > 0.5 and x["virtual"] for x in res["runs"])
    assert all(x["projected_step_time_s"] > 0 for x in res["runs"])
    run = out / "runs/P2-virtual/base/pseudo-sync-adaptive-2_fixed/seed0"
    assert (run / "variant.toml").read_text().count("=") == 2
    cmd = (run / "command.txt").read_text()
    assert "--virtual-ranks 2" in cmd and "mpiexec" not in cmd
    assert "VIRTUAL: the runs at P = 2 ran as threads of one process" in (out / "grid.md").read_text()
    assert (out / "grid-base.png").exists() and "sync" in (out / "grid.md").read_text()
    r = run_cli(args + ["--lr", "base"], timeout=60)       # everything done: nothing reruns
    assert r.returncode == 0 and "/2 P=" not in r.stdout
    for f in [*out.glob("*.png"), out / "grid.md"]:
        f.unlink()
    r = run_cli(["bench", "study", str(grid), "--out", str(out), "--report-only", "--no-figures"], timeout=60)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "sync" in (out / "grid.md").read_text() and not list(out.glob("*.png"))  # the report, no figure
    r = run_cli(args + ["--lr", "huge", "--algos", "sync"], timeout=240)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "diverged" in r.stdout
