"""Moving Fashion-MNIST captions: generator, vocabulary, HDF5, metrics, model, task, CLI."""
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from minips.data import moving_fmnist as C
from minips.data.moving_fmnist import VOCAB, Vocab
from minips.models import VideoCaptioner, build_model
from minips.tasks import TASKS
from minips.tasks.captioning import CaptioningTask, caption_metrics

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "data" / "fashion-mnist-mini.h5"


@pytest.fixture(autouse=True, scope="module")
def one_numba_thread():
    """Many small convolutions: on a shared 2-core machine a parallel region
    per call costs more than it saves (and these tests time nothing)."""
    import numba
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def block_garments():
    """Ten 28x28 solid blocks, one per class, of intensity 20 * (class + 1)."""
    images = np.stack([np.full((28, 28), 20 * (k + 1), np.uint8) for k in range(10)])
    return images, np.arange(10)


def first_column_class(frame):
    """Class of the block whose left edge is the leftmost lit column."""
    col = np.flatnonzero(frame.any(axis=0))[0]
    return int(frame[:, col].max()) // 20 - 1


# --- generator ----------------------------------------------------------------------------
def test_trajectory_bounces_off_both_walls():
    np.testing.assert_array_equal(C._trajectory(18, 3, 6, 20), [18, 19, 16, 13, 10, 7])
    np.testing.assert_array_equal(C._trajectory(1, -2, 4, 20), [1, 1, 3, 5])
    pos = C._trajectory(5, 3, 200, 20)
    assert pos.min() >= 0 and pos.max() <= 20


def test_generator_is_deterministic_and_seeded():
    images, labels = block_garments()
    a = C.generate_clips(images, labels, 20, seed=(3, 0), frames=6)
    b = C.generate_clips(images, labels, 20, seed=(3, 0), frames=6)
    c = C.generate_clips(images, labels, 20, seed=(4, 0), frames=6)
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]
    assert a[1] != c[1]
    assert a[0].shape == (20, 6, 1, 48, 48) and a[0].dtype == np.uint8


def test_caption_names_garments_left_to_right_with_their_first_move():
    images, labels = block_garments()
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(200):
        clip, caption = C.make_clip(rng, images, labels, frames=5)
        words = caption.split()
        parts = [words[i:i + 4] for i in range(0, len(words), 5)]
        assert all(p[0] == "a" and p[2] == "moves" for p in parts)
        assert words[4::5] == ["and"] * (len(parts) - 1)
        # The first noun is the garment at the left edge of frame 0.
        assert parts[0][1] == C.NOUNS[first_column_class(clip[0])]
        if len(parts) == 1:  # one garment: its bounding box moves as the caption says
            dx, dy = C.DIRECTIONS[parts[0][3]]
            x0, x1 = (np.flatnonzero(f.any(axis=0))[0] for f in clip[:2])
            y0, y1 = (np.flatnonzero(f.any(axis=1))[0] for f in clip[:2])
            assert np.sign(x1 - x0) == dx and np.sign(y1 - y0) == dy
        seen.add(len(parts))
    assert seen == {1, 2}


def test_build_dataset_uses_train_images_for_train_and_test_images_for_test():
    ds = C.build_dataset(n_train=30, n_test=20, seed=1, frames=4)
    assert ds.train_clips.shape == (30, 4, 1, 48, 48) and ds.test_clips.shape == (20, 4, 1, 48, 48)
    assert ds.train_ids.shape == (30, C.CAPTION_LEN) and ds.train_ids.dtype == np.int64
    import h5py
    with h5py.File(MINI) as f:
        tr = f["train/images"][...], f["train/labels"][...]
        te = f["test/images"][...], f["test/labels"][...]
    np.testing.assert_array_equal(ds.train_clips, C.generate_clips(*tr, 30, (1, 0), 4)[0])
    np.testing.assert_array_equal(ds.test_clips, C.generate_clips(*te, 20, (1, 1), 4)[0])
    assert not np.array_equal(ds.test_clips, C.generate_clips(*tr, 20, (1, 1), 4)[0])
    # The test set does not depend on the number of training clips.
    other = C.build_dataset(n_train=5, n_test=20, seed=1, frames=4)
    np.testing.assert_array_equal(other.test_clips, ds.test_clips)


def test_clipset_renders_on_indexing_like_an_array():
    images, labels = block_garments()
    clips, captions = C.generate_clips(images, labels, 7, seed=5, frames=3)
    full = np.asarray(clips)
    assert full.shape == clips.shape == (7, 3, 1, 48, 48) and full.dtype == np.uint8 and len(clips) == 7
    np.testing.assert_array_equal(clips[2], full[2])
    np.testing.assert_array_equal(clips[np.array([4, 1, 4])], full[[4, 1, 4]])
    np.testing.assert_array_equal(clips[1:6:2], full[1:6:2])
    assert captions == [C.caption_of(t, labels) for t in clips.tables]


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_train=0), "at least one train"),
    (dict(frames=1), "at least 2 frames"),
    (dict(source="no-such-set"), "unknown data set"),
])
def test_build_dataset_errors(kwargs, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        C.build_dataset(**{"n_train": 3, "n_test": 3, **kwargs})


# --- vocabulary --------------------------------------------------------------------------------
def test_vocab_roundtrip_specials_and_unknown_words():
    assert len(VOCAB) == 25 and VOCAB.words[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    text = "a sneaker moves up and a bag moves down-left"
    ids = VOCAB.encode(text, 12)
    assert ids[0] == Vocab.BOS and ids[10] == Vocab.EOS and ids[11] == Vocab.PAD
    assert VOCAB.decode(ids) == text
    assert VOCAB.decode(VOCAB.encode("A Hat moves up")) == "a <unk> moves up"
    assert VOCAB.decode([Vocab.BOS, 4, Vocab.EOS, 5, 6]) == "a"  # stops at <eos>


def test_vocab_errors():
    with pytest.raises(ValueError, match="token id 25 is not in the vocabulary"):
        VOCAB.decode([1, 25])
    with pytest.raises(ValueError, match="needs 6 tokens"):
        VOCAB.encode("a bag moves up", 5)


# --- HDF5 ------------------------------------------------------------------------------------------
def test_hdf5_roundtrip_and_cache(tmp_path):
    src = tmp_path / "mini.h5"
    shutil.copy(MINI, src)
    ds = C.load_dataset(str(src), n_train=6, n_test=4, seed=2, frames=3)
    cached = list((tmp_path / "cache").glob("*.h5"))
    assert len(cached) == 1
    again = C.read_h5(cached[0])
    np.testing.assert_array_equal(again.train_clips, ds.train_clips)
    np.testing.assert_array_equal(again.test_ids, ds.test_ids)
    assert again.train_text == ds.train_text and again.meta["seed"] == 2
    assert C.load_dataset(str(src), n_train=6, n_test=4, seed=2, frames=3).test_text == ds.test_text
    with pytest.raises(ValueError, match="is not a moving-fmnist-captions file"):
        C.read_h5(src)


# --- metrics -----------------------------------------------------------------------------------------
def test_caption_metrics():
    refs = ["a bag moves up", "a sneaker moves left and a coat moves up"]
    assert caption_metrics(refs, refs) == {"bleu": pytest.approx(100.0), "exact_match": 1.0}
    hyps = ["a bag moves up", "a sneaker moves left and a bag moves up"]
    m = caption_metrics(hyps, refs)
    assert m["exact_match"] == 0.5
    # 12/13 unigrams, 9/11 bigrams, 6/9 trigrams, 4/7 4-grams match; same length.
    want = 100 * np.exp(np.mean(np.log([12 / 13, 9 / 11, 6 / 9, 4 / 7])))
    assert m["bleu"] == pytest.approx(want, rel=1e-6)
    assert caption_metrics(["x"], ["a bag moves up"])["bleu"] == 0.0


# --- model ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_task():
    return CaptioningTask(C.build_dataset(n_train=64, n_test=12, seed=0, frames=4))


def test_model_loss_backward_and_decode(small_task):
    model = build_model("captioner", small_task)
    clips, ids = (a[:8] for a in small_task.train_arrays)
    loss = model.loss((clips, ids))
    assert loss.shape == () and 2.5 < float(loss.data) < 4.0  # about log(25) = 3.2 at the start
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and np.isfinite(p.grad).all() and p.grad.any(), name
    out = model.greedy_decode(clips)
    assert out.shape == (8, C.CAPTION_LEN - 1) and out.min() >= 0 and out.max() < len(VOCAB)


def test_model_overfits_a_small_batch(small_task):
    from minips import random as mrandom
    from minips.optim import SGD
    mrandom.seed(0)
    model = VideoCaptioner(len(VOCAB), frame_features=32, hidden=64, embed=16)  # small: a fast test
    batch = tuple(a[:16] for a in small_task.train_arrays)
    opt = SGD(model.parameters(), lr=0.3, momentum=0.9)
    first = None
    for _ in range(40):
        model.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        opt.step()
        first = first if first is not None else float(loss.data)
    assert float(loss.data) < 0.5 * first


def test_model_input_errors(small_task):
    model = build_model("captioner", small_task)
    clips, ids = (a[:2] for a in small_task.train_arrays)
    with pytest.raises(ValueError, match=r"clips must be \(N, T, 1, 48, 48\)"):
        model.loss((clips[:, :, 0], ids))
    with pytest.raises(ValueError, match="2 clips but 1 captions"):
        model.loss((clips, ids[:1]))
    with pytest.raises(ValueError, match="token id 99 is outside"):
        model.loss((clips, np.full_like(ids, 99)))


def test_captioner_needs_captioning_data():
    class Images:
        kind = "classification"
    with pytest.raises(ValueError, match="needs a captioning data set"):
        build_model("captioner", Images())


# --- task ---------------------------------------------------------------------------------------------
def test_task_is_registered():
    assert "moving-fmnist-captions" in TASKS


def test_evaluate_metrics(small_task):
    model = build_model("captioner", small_task)
    m = small_task.evaluate(model, batch_size=5)
    assert set(m) == {"test_loss", "token_accuracy", "bleu", "exact_match"}
    assert 0 <= m["token_accuracy"] <= 1 and 0 <= m["exact_match"] <= 1 and 0 <= m["bleu"] <= 100
    assert m["test_loss"] > 0 and model.training


class ThreadComm:
    """Two 'ranks' as threads: just enough of minips.distributed.comm.Comm for evaluate()."""

    def __init__(self, rank, shared):
        self.rank, self.size, self.shared = rank, 2, shared

    def _exchange(self, value):
        s = self.shared
        s["slots"][self.rank] = value
        s["barrier"].wait()
        out = list(s["slots"])
        s["barrier"].wait()
        return out

    def allreduce_scalar(self, x, op="sum"):
        return sum(self._exchange(x))

    def allgather(self, obj):
        return self._exchange(obj)


def test_evaluate_sharded_over_two_ranks_equals_one_process(small_task):
    model = build_model("captioner", small_task)
    whole = small_task.evaluate(model, batch_size=4)
    shared = {"slots": [None, None], "barrier": threading.Barrier(2)}
    results = [None, None]

    def rank(r):
        results[r] = small_task.evaluate(model, ThreadComm(r, shared), batch_size=4)
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] == results[1]
    for k, v in whole.items():
        assert results[0][k] == pytest.approx(v, rel=1e-5), k


# --- command line ------------------------------------------------------------------------------------
def _cli(args, env=None, timeout=240):
    e = dict(os.environ, **(env or {}))
    e.pop("PMI_RANK", None)
    return subprocess.run([sys.executable, "-m", "minips", *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=ROOT)


def test_cli_data_builds_hdf5(tmp_path):
    out = tmp_path / "caps.h5"
    r = _cli(["data", "moving-fmnist-captions", "--out", str(out), "--train-subset", "12", "--test-subset", "5"])
    assert r.returncode == 0, r.stderr
    ds = C.read_h5(out)
    assert len(ds.train_text) == 12 and len(ds.test_text) == 5


def test_cli_train_writes_bleu_and_exact_match(tmp_path):
    # The data set is generated from a copy of the mini set, so its cache goes to tmp_path.
    shutil.copy(MINI, tmp_path / "fashion-mnist-mini.h5")
    r = _cli(["train", "--model", "captioner", "--data", "moving-fmnist-captions", "--algo", "sync",
              "--epochs", "1", "--max-steps", "3", "--batch-size", "8", "--out", str(tmp_path / "run"), "--quiet",
              "--clip-norm", "0.01"],  # the LSTM's global-norm clipping (issue 43): every direction clipped
             env={"MINIPS_DATA_DIR": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for k in ("bleu", "exact_match", "token_accuracy", "test_loss"):
        assert isinstance(summary[k], float), k
    assert summary["clip_norm"] == 0.01 and summary["clipped_steps"] == [3]
    assert list((tmp_path / "cache").glob("moving-fmnist-captions_*.h5"))
