"""The stability map (scripts/stability_map.py, docs/accuracy.md section 10): the committed table
rebuilds from the committed raw runs unchanged; outcomes, boundary cells and resuming."""
import json
from pathlib import Path

import pytest

from .conftest import load_script

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "docs" / "bench" / "scale" / "map"


@pytest.fixture(scope="module")
def sm():
    return load_script("stability_map")


def test_the_committed_table_rebuilds_from_the_committed_runs(sm):
    cfg = sm.load_config(ROOT / "configs" / "stability-map.toml")
    md, js, done = sm.report_text(cfg, RAW)
    assert done, "no raw runs under docs/bench/scale/map"
    assert md == (RAW / "map.md").read_text()
    assert json.loads(json.dumps(js)) == json.loads((RAW / "map.json").read_text())


@pytest.mark.parametrize("config", sorted((ROOT / "configs").glob("screen-43-*.toml")), ids=lambda p: p.stem)
def test_each_screen_table_rebuilds_from_its_committed_runs(sm, config):
    """Issue 43's screen (docs/accuracy.md section 11): one config and one raw folder per candidate."""
    raw = ROOT / "docs" / "bench" / "scale" / "screen-43" / config.stem.removeprefix("screen-43-")
    md, _, done = sm.report_text(sm.load_config(config), raw)
    assert done, f"no raw runs under {raw}"
    assert md == (raw / "map.md").read_text()


def test_a_collapse_is_a_failure_not_an_accuracy(sm):
    assert sm.outcome({"status": "diverged"}, 0.11) == "diverged"
    assert sm.outcome({"val_accuracy": 0.1000, "test_accuracy": 0.1}, 0.11) == "collapsed"
    assert sm.outcome({"val_accuracy": 0.85, "test_accuracy": 0.84}, 0.11) == "trains"
    runs = {0: {"outcome": "trains", "val": 0.9}, 1: {"outcome": "collapsed", "val": 0.1}}
    assert sm.cell_outcome(runs) == "mixed"
    assert sm.cell_outcome({0: {"outcome": "collapsed", "val": 0.1}}) == "fails"


def test_a_run_stopped_by_a_signal_is_not_a_cell(sm, tmp_path, monkeypatch):
    """`minips train` ends with status 0 on a stop signal (a checkpoint is kept): the driver must not
    copy it as a finished cell (one was, with no validation accuracy, and crashed the report)."""
    with pytest.raises(sm.MapError, match="did not finish"):
        sm.outcome({"stopped": "signal", "steps": 23, "val_accuracy": None}, 0.11)
    # --max-steps in [train] ends a run as asked: a finished cell
    assert sm.outcome({"stopped": "max_steps", "steps": 30, "val_accuracy": 0.8}, 0.11) == "trains"
    done = tmp_path / "done.json"
    done.write_text(json.dumps({"stopped": "max_steps", "steps": 30, "val_accuracy": 0.8}))
    assert sm.stopped_early(done) is None
    cfg, raw, out = _cfg(sm, tmp_path), tmp_path / "raw", tmp_path / "out"
    cell = sm.Cell("sync", 16, 0.32, 0)
    import minips.bench.study.runner as runner

    def stopped_run(spec, root, grid, launcher, say):
        d = spec.out(root)
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"stopped": "signal", "steps": 23}))
        return {"status": "ok"}
    monkeypatch.setattr(runner, "run_one", stopped_run)
    lines = []
    assert sm.run_cell(cfg, cell, out, raw, lines.append, commit=False) == "stopped"
    assert not (raw / cell.rel).exists() and "stopped (signal) at step 23" in lines[-1]
    assert not (out / cell.rel / "run").exists()  # the next attempt trains it again, not finds it "finished"


def _cfg(sm, tmp_path):
    f = tmp_path / "grid.toml"
    f.write_text('ranks = [16, 32]\nrules = ["sync", "pseudo-sync:local:1"]\nseeds = [0]\nboundary_seeds = [1]\n'
                 'centre_lr = 0.64\n[lrs]\n16 = [0.16, 0.32, 0.64]\n32 = [0.16, 0.32, 0.64]\n[train]\nepochs = 3\n'
                 'batch-size = 16\n')
    return sm.load_config(f)


def _write(sm, raw, cell, summary):
    d = raw / cell.rel
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "command.txt").write_text(f"python -m minips train --algo {cell.rule} --lr {cell.lr} --seed {cell.seed}\n")


def test_boundary_cells_get_the_second_seed_and_finished_cells_are_skipped(sm, tmp_path):
    cfg, raw = _cfg(sm, tmp_path), tmp_path / "raw"
    ok, div = {"val_accuracy": 0.9, "test_accuracy": 0.9}, {"status": "diverged", "stderr_tail": ["at step 7"]}
    # local at P = 16: trains at 0.16, diverges at 0.32 and 0.64; everything else trains
    for P in (16, 32):
        for lr in (0.16, 0.32, 0.64):
            for rule in cfg["rules"]:
                bad = rule != "sync" and P == 16 and lr > 0.2
                _write(sm, raw, sm.Cell(rule, P, lr, 0), div if bad else ok)
    edge = sm.boundary_cells(cfg, sm.read_raw(raw, cfg["chance"]))
    local = "pseudo-sync:local:1"
    # next to a boundary: 0.16 / 0.32 at P = 16 (learning rate), 0.32 and 0.64 at P = 16 and 32 (ranks)
    assert edge == {(local, 16, 0.16), (local, 16, 0.32), (local, 16, 0.64), (local, 32, 0.32), (local, 32, 0.64)}
    todo, final = sm.pending(cfg, raw)
    assert final and sorted(todo, key=lambda c: (c.P, c.lr)) == [
        sm.Cell(local, 16, 0.16, 1), sm.Cell(local, 16, 0.32, 1), sm.Cell(local, 16, 0.64, 1),
        sm.Cell(local, 32, 0.32, 1), sm.Cell(local, 32, 0.64, 1)]
    assert [c.lr for c in todo] == [0.64, 0.64, 0.32, 0.32, 0.16]       # from the top down
    _write(sm, raw, sm.Cell(local, 16, 0.64, 1), div)
    assert sm.Cell(local, 16, 0.64, 1) not in sm.pending(cfg, raw)[0]     # resumed: done cells are skipped
    md, js = sm.tables(cfg, sm.read_raw(raw, cfg["chance"]))
    assert "| 0.64 | **0.9000** | div@7 / div@7 |" in md
    assert js["largest_stable"][local] == {"16": 0.16, "32": 0.64}


def test_status_names_the_code_that_ran_and_a_dead_workers_claim_is_not_running(sm, tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "map.log").write_text(
        "[t] [1] worker started: grid, code 1047715, out o, raw r\n"
        "[t] [1]   P=16 lr=0.64 sync seed 0: diverged: loss is nan at step 81\n"
        "[t] [1] P=16 lr=0.64 sync seed 0: diverged step 81 (158 s; load [1.0] -> [2.0]; code 1047715)\n"
        "[t] [2] P=16 lr=0.32 sync seed 0: trains val 0.9137 test 0.9096 (2106 s; load [1.0] -> [2.0]; code abc1234)\n")
    assert sm.codes_run(raw) == ["1047715", "abc1234"]
    cell = sm.Cell("sync", 16, 0.32, 0)
    assert sm.running(out, cell) is None
    assert sm.claim(out, cell)                         # this process holds it: running
    assert sm.running(out, cell) == __import__("os").getpid()
    (out / cell.rel / "claim").write_text("999999999")  # a worker that is gone: not running, and taken over
    assert sm.running(out, cell) is None and sm.claim(out, cell)


def test_the_diagnosis_table_rebuilds_from_its_raw_files():
    import csv
    import statistics
    dd = load_script("divergence_diagnosis")
    folder = ROOT / "docs" / "bench" / "scale" / "diagnosis"
    local, sync = dd._load(folder / "local-P32-lr0.32"), dd._load(folder / "sync-P32-lr0.32")
    assert dd.report_text(local, sync) + "\n" + dd.thresholds_text(folder) == (folder / "diagnosis.md").read_text()
    # where rank 9 leaves, read from ranks.csv directly: its update first exceeds twice the others' median at
    # step 45 and stays above it, and the run stops on a NaN loss at step 54
    rows = list(csv.DictReader(open(folder / "local-P32-lr0.32" / "ranks.csv")))
    apart = {}
    for t in sorted({int(r["step"]) for r in rows}):
        at = [r for r in rows if int(r["step"]) == t]
        mine = next(float(r["dw_norm"]) for r in at if r["rank"] == "9")
        apart[t] = mine > 2 * statistics.median(float(r["dw_norm"]) for r in at if r["rank"] != "9")
    assert not apart[44] and all(apart[t] for t in apart if t >= 45)
    assert dd.leaves(local)[:2] == (9, 45) and "at step 54" in local["error"]
    assert dd.leaves(sync) is None


def test_a_figure_under_an_ignored_folder_does_not_stop_the_commit(sm, tmp_path, capsys):
    """A screen run with its figure under runs/ (ignored): the raw files are committed without it.
    Before, `git add` refused the ignored path and the driver committed nothing, silently."""
    import subprocess
    git = ["git", "-C", str(tmp_path)]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/runs/\n")
    raw, fig = tmp_path / "raw", tmp_path / "runs" / "map.png"
    raw.mkdir()
    fig.parent.mkdir()
    (raw / "map.md").write_text("| a |\n")
    fig.write_bytes(b"png")
    subprocess.run([*git, "config", "user.name", "t"], check=True)   # the driver's own commit needs an identity
    subprocess.run([*git, "config", "user.email", "t@t"], check=True)
    sm._git_commit(raw, "a run", [fig])
    log = subprocess.run([*git, "log", "--name-only", "--format=%s"], capture_output=True, text=True).stdout
    assert "a run" in log and "raw/map.md" in log and "map.png" not in log, log
    assert "could not commit" not in capsys.readouterr().err
