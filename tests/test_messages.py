"""One-line messages naming the file or flag and the fix, never a traceback
(issue 13, "Messages")."""
import os
import shutil
import sys

import h5py
import pytest

from minips import rundir

from .conftest import ROOT, run_cli

MLP = ["train", "--model", "mlp", "--epochs", "1", "--quiet"]


def one_line_error(r, *parts):
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1, r.stderr
    for p in parts:
        assert p in lines[0], (p, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("ck")
    r = run_cli([*MLP, "--batch-size", "500", "--max-steps", "3", "--checkpoint-every", "3", "--out", str(out)])
    assert r.returncode == 0, r.stderr
    return out / rundir.CHECKPOINT


def test_truncated_data_file(tmp_path):
    bad = tmp_path / "mini.h5"
    bad.write_bytes((ROOT / "data" / "fashion-mnist-mini.h5").read_bytes()[:3000])
    r = run_cli([*MLP, "--data", str(bad), "--out", str(tmp_path / "x")])
    one_line_error(r, f"data file {bad} is corrupt or truncated", "build or copy it again")


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_damaged_checkpoint(damage, ckpt, tmp_path):
    bad = tmp_path / "bad.h5"
    data = bytearray(ckpt.read_bytes())
    if damage == "truncated":
        data = data[:5000]
    else:  # the B-tree / heap area after the superblock (h5py: "wrong B-tree signature", "addr overflow")
        data[1000:1064] = b"\xff" * 64
    bad.write_bytes(bytes(data))
    r = run_cli([*MLP, "--batch-size", "500", "--resume", str(bad), "--out", str(tmp_path / "x")])
    one_line_error(r, f"checkpoint {bad} is corrupt or truncated", "resume from an earlier checkpoint")


def test_checkpoint_missing_a_key(ckpt, tmp_path):
    bad = tmp_path / "nostep.h5"
    shutil.copy(ckpt, bad)
    with h5py.File(bad, "a") as f:
        del f.attrs["step"]
    r = run_cli([*MLP, "--batch-size", "500", "--resume", str(bad), "--out", str(tmp_path / "x")])
    one_line_error(r, f"checkpoint {bad} lacks 'step'", "start again without --resume")


def test_predictor_option_of_the_wrong_type(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('model = "mlp"\nalgo = "pseudo-sync:adaptive"\n[predictor_options]\nrho = "high"\n')
    r = run_cli(["train", "--config", str(cfg), "--out", str(tmp_path / "x")])
    one_line_error(r, "adaptive option rho must be a number, got 'high'")


def test_config_that_is_a_folder(tmp_path):
    r = run_cli([*MLP, "--config", str(tmp_path), "--out", str(tmp_path / "x")])
    one_line_error(r, f"{tmp_path} is a directory, not a TOML file")


def test_config_that_is_not_utf8(tmp_path):
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes('label = "caf\u00e9"\n'.encode("latin-1"))
    r = run_cli([*MLP, "--config", str(cfg), "--out", str(tmp_path / "x")])
    one_line_error(r, f"{cfg}: not UTF-8 text (byte 0xe9", "save it as UTF-8")


def test_negative_seed(tmp_path):
    r = run_cli([*MLP, "--seed", "-5", "--out", str(tmp_path / "x")])
    one_line_error(r, "--seed must be >= 0", "got -5")


def test_damaged_numba_cache(tmp_path):
    """A Numba cache index cut short (a kill while Numba wrote it): the error
    names the file and says to delete the cache folder."""
    import importlib.util
    import subprocess

    from minips import cli

    mod = tmp_path / "cached_kernel.py"
    mod.write_text("from numba import njit\n\n@njit(cache=True)\ndef twice(x):\n    return 2 * x\n")
    r = subprocess.run([sys.executable, "-c", "import cached_kernel; assert cached_kernel.twice(3) == 6"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    index = sorted(tmp_path.rglob("*.nbi"))
    assert index, "Numba wrote no cache"
    for f in index:
        f.write_bytes(f.read_bytes()[:10])
    spec = importlib.util.spec_from_file_location("cached_kernel_again", mod)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    with pytest.raises(Exception) as e:  # noqa: B017 - what Numba raises is the point
        m.twice(3)
    msg = cli._numba_cache_message(e.value)
    assert msg is not None, repr(e.value)
    assert str(index[0]) in msg and "is damaged" in msg and f"delete the cache folder {index[0].parent}" in msg
    assert cli._numba_cache_message(ValueError("x")) is None


def test_more_numba_threads_than_cores_warns(monkeypatch):
    """NUMBA_NUM_THREADS far above the cores (64 threads on 2 cores made steps
    80x slower): the Trainer warns, naming the variable and the value to use."""
    import types

    from minips.train import Trainer

    cores = len(os.sched_getaffinity(0))
    said = []
    for threads, ranks in ((4 * cores, 1), (cores, 2), (1, 1)):
        said.clear()
        monkeypatch.setenv("NUMBA_NUM_THREADS", str(threads))
        fake = types.SimpleNamespace(threads=threads, comm=types.SimpleNamespace(local_size=ranks),
                                     _say=said.append)
        Trainer._warn_if_busy(fake)
        assert bool(said) == (threads * ranks > cores), (threads, ranks, said)
        if said:
            assert said[0].startswith(f"warning: NUMBA_NUM_THREADS={threads} gives {threads} threads per rank x "
                                      f"{ranks} rank(s) = {threads * ranks} threads on {cores} cores")
            assert f"set NUMBA_NUM_THREADS={max(1, cores // ranks)}" in said[0]


def test_diverged_trace_is_written_without_a_temporary_file(tmp_path, monkeypatch):
    """Another rank's abort can kill this one mid-write: the diverged trace must
    not go through atomic_write's .tmp file, which would then be left behind."""
    from minips.train import TrainConfig, Trainer

    atomic_write = rundir.atomic_write

    def no_tmp(path, *a, **k):
        if "trace-diverged" in str(path):
            raise AssertionError("the diverged trace must not be written through a temporary file")
        return atomic_write(path, *a, **k)  # metrics.csv is (its header, then a row per epoch)
    monkeypatch.setattr(rundir, "atomic_write", no_tmp)
    out = tmp_path / "nan"
    t = Trainer(TrainConfig(model="mlp", epochs=1, algo="sync", lr=1e4, momentum=0.99, quiet=True, out=str(out)))
    with pytest.raises(FloatingPointError, match="trace-diverged-rank0.csv"):
        t.run()
    lines = (out / "trace-diverged-rank0.csv").read_text().splitlines()
    assert lines[0].startswith("step,") and len(lines) > 1
    assert not list(out.glob("*.tmp"))
