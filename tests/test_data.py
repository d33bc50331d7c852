"""IDX -> HDF5 conversion, stratified subsets, sampler and loader."""
import gzip
import struct

import h5py
import numpy as np
import pytest

from minips.data import BatchLoader, DistributedSampler, fashion_mnist, load_image_dataset
from minips.data.datasets import resolve_h5

from .conftest import ROOT, run_cli


def write_idx(path, arr, magic, compress=False, truncate=0):
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape)
    raw = header + arr.astype(np.uint8).tobytes()
    raw = raw[:len(raw) - truncate] if truncate else raw
    if compress:
        raw = gzip.compress(raw)
        path = path.with_name(path.name + ".gz")
    path.write_bytes(raw)
    return path


def fake_fmnist(d, n_train=60000, n_test=10000, compress=True):
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("test", n_test)):
        prefix = "train" if split == "train" else "t10k"
        images = rng.integers(0, 256, (n, 28, 28))
        labels = np.arange(n) % 10
        write_idx(d / f"{prefix}-images-idx3-ubyte", images, 2051, compress)
        write_idx(d / f"{prefix}-labels-idx1-ubyte", labels, 2049, compress)


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("idx")
    fake_fmnist(d)
    return d


def test_convert_full_and_subset(fake_dir, tmp_path):
    out = tmp_path / "f.h5"
    counts = fashion_mnist.convert(fake_dir, out)
    assert counts == {"train": 60000, "test": 10000}
    with h5py.File(out) as f:
        assert f["train/images"].shape == (60000, 28, 28) and f["train/images"].dtype == np.uint8
        assert f["test/labels"].shape == (10000,)
        assert [c.decode() for c in f.attrs["class_names"]][7] == "Sneaker"
        assert f.attrs["license"] == "MIT"
    sub = tmp_path / "s.h5"
    fashion_mnist.convert(fake_dir, sub, train_subset=1000, test_subset=200, seed=3)
    with h5py.File(sub) as f:
        labels = f["train/labels"][...]
    assert np.bincount(labels).tolist() == [100] * 10  # stratified


def test_stratified_subset_rounding():
    labels = np.array([0] * 7 + [1] * 3)
    idx = fashion_mnist.stratified_subset(labels, 5, seed=0)
    assert len(idx) == 5 and len(set(idx)) == 5
    assert sorted(np.bincount(labels[idx]).tolist()) == [2, 3] or np.bincount(labels[idx]).tolist() == [4, 1]
    with pytest.raises(ValueError, match="between 1 and 10"):
        fashion_mnist.stratified_subset(labels, 11)


def test_bad_idx_files_are_explained(tmp_path):
    imgs = np.zeros((5, 28, 28))
    p = write_idx(tmp_path / "a", imgs, 2049)  # label magic on images
    with pytest.raises(fashion_mnist.IDXError, match="magic number 2049, expected 2051.*swap"):
        fashion_mnist.read_idx(p, "images")
    p = write_idx(tmp_path / "b", imgs, 2051, truncate=100)
    with pytest.raises(fashion_mnist.IDXError, match="truncated.*100 missing"):
        fashion_mnist.read_idx(p, "images")
    p = write_idx(tmp_path / "c", imgs, 2051, compress=True)
    assert fashion_mnist.read_idx(p, "images").shape == (5, 28, 28)
    p.write_bytes(p.read_bytes()[:30])  # corrupt gzip stream
    with pytest.raises(fashion_mnist.IDXError, match="cannot read"):
        fashion_mnist.read_idx(p, "images")
    p = write_idx(tmp_path / "d", np.zeros((5, 20, 20)), 2051)
    with pytest.raises(fashion_mnist.IDXError, match=r"\(20, 20\)"):
        fashion_mnist.read_idx(p, "images")
    p = write_idx(tmp_path / "e", np.full(5, 12), 2049)
    with pytest.raises(fashion_mnist.IDXError, match="label 12"):
        fashion_mnist.read_idx(p, "labels")


def test_missing_files_and_wrong_counts(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing .*t10k-labels.*dataset-fashion-mnist"):
        d = tmp_path / "part"
        d.mkdir()
        fake_fmnist(d)
        (d / "t10k-labels-idx1-ubyte.gz").unlink()
        fashion_mnist.find_idx_files(d)
    d = tmp_path / "small"
    d.mkdir()
    fake_fmnist(d, n_train=100, n_test=10)
    with pytest.raises(fashion_mnist.IDXError, match="100 images, Fashion-MNIST has 60000"):
        fashion_mnist.convert(d, tmp_path / "x.h5")


def test_data_cli(fake_dir, tmp_path):
    out = tmp_path / "cli.h5"
    r = run_cli(["data", "fashion-mnist", "--from", str(fake_dir), "--out", str(out),
                 "--train-subset", "500", "--test-subset", "100"])
    assert r.returncode == 0, r.stderr
    assert "train 500 images" in r.stdout
    r = run_cli(["data", "fashion-mnist", "--from", str(tmp_path / "nope"), "--out", str(out)])
    assert r.returncode == 2 and "is not a directory" in r.stderr and "Traceback" not in r.stderr


def test_committed_mini_dataset():
    ds = load_image_dataset("fashion-mnist-mini")
    assert ds.train_x.shape == (10000, 1, 28, 28) and ds.train_x.dtype == np.float32
    assert ds.test_x.shape == (2000, 1, 28, 28)
    assert np.bincount(ds.train_y).tolist() == [1000] * 10
    assert abs(ds.train_x.mean()) < 1e-3 and abs(ds.train_x.std() - 1) < 1e-3
    assert ds.class_names[0] == "T-shirt/top"
    assert (ROOT / "data" / "README.md").read_text().count("--train-subset 10000 --test-subset 2000") == 1


def test_unknown_dataset_message():
    with pytest.raises(FileNotFoundError, match="unknown data set 'mnist'.*fashion-mnist-mini"):
        resolve_h5("mnist")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_h5("/nonexistent/x.h5")
    # the captioner's data set is a valid --data name too, so the tasks layer
    # (which knows every name; the data layer imports no tasks) lists it
    from minips.tasks import make_task
    with pytest.raises(FileNotFoundError, match="unknown data set 'mnist'; known: fashion-mnist, "
                                                "fashion-mnist-mini, moving-fmnist-captions, or a path"):
        make_task("mnist")
    with pytest.raises(FileNotFoundError, match="does not exist.*moving-fmnist-captions"):
        make_task("/nonexistent/x.h5")


def test_data_layer_imports_no_tasks():
    """minips.data sits below the tasks layer: importing it must not load tasks."""
    import subprocess
    import sys
    code = "import sys, minips.data; print(sorted(m for m in sys.modules if m.startswith('minips.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "minips.tasks" not in out and "minips.captioning" not in out, out


def test_missing_data_file_lists_each_directory_once(tmp_path, monkeypatch):
    from minips.data.datasets import DATASETS, data_dirs

    monkeypatch.setitem(DATASETS, "nothing-here", ("nothing-here.h5", "build it"))  # found nowhere
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINIPS_DATA_DIR", str(tmp_path / "data"))  # the same folder as ./data
    assert data_dirs().count(tmp_path / "data") == 1
    with pytest.raises(FileNotFoundError) as e:
        resolve_h5("nothing-here")
    assert "nothing-here.h5 not found in" in str(e.value)
    assert str(e.value).count(str(tmp_path / "data")) == 1


@pytest.mark.parametrize("n,P", [(10, 1), (10, 3), (101, 4), (8, 8)])
def test_distributed_sampler_partitions(n, P):
    parts = [DistributedSampler(n, r, P, seed=5, epoch=2).indices() for r in range(P)]
    assert len({len(p) for p in parts}) == 1 and len(parts[0]) == n // P
    flat = np.concatenate(parts)
    assert len(set(flat.tolist())) == len(flat)  # disjoint
    perm = DistributedSampler(n, 0, P, seed=5, epoch=2).permutation()
    assert set(flat.tolist()) == set(perm[:len(flat)].tolist())


def test_sampler_epochs_differ_and_are_shared():
    a = DistributedSampler(50, 0, 2, seed=1)
    b = DistributedSampler(50, 1, 2, seed=1)
    e0 = a.permutation()
    a.set_epoch(1)
    assert not np.array_equal(e0, a.permutation())
    b.set_epoch(1)
    assert np.array_equal(a.permutation(), b.permutation())
    with pytest.raises(ValueError, match="rank 2 is not in"):
        DistributedSampler(10, 2, 2)


def test_sharded_batches_union_is_the_big_batch():
    """Per-rank batch j over P ranks == batch j of size P*b on one process."""
    n, P, b = 97, 3, 4
    x = np.arange(n)
    one = BatchLoader(x, x, P * b, DistributedSampler(n, 0, 1, seed=9))
    ranks = [BatchLoader(x, x, b, DistributedSampler(n, r, P, seed=9)) for r in range(P)]
    for j, (big, _) in enumerate(one):
        if j >= len(ranks[0]):
            break
        small = [list(r.batches(j))[0][0] for r in ranks]
        assert sorted(np.concatenate(small).tolist()) == sorted(big.tolist())


def test_loader_drop_last_and_errors():
    x = np.arange(10)
    assert [len(b[0]) for b in BatchLoader(x, x, 4, drop_last=True)] == [4, 4]
    assert [len(b[0]) for b in BatchLoader(x, x, 4, drop_last=False)] == [4, 4, 2]
    with pytest.raises(ValueError, match="10 inputs but 9 targets"):
        BatchLoader(x, x[:9], 4)
    with pytest.raises(ValueError, match="larger than this rank's share"):
        BatchLoader(x, x, 11)
    loader = BatchLoader(x, x, 2, seed=3)
    assert [b[0].tolist() for b in loader.batches(3)] == [b[0].tolist() for b in list(loader)[3:]]
