"""Data partitions across ranks: iid, by-class:N, dirichlet:ALPHA (no MPI needed:
every rank's sampler is built in this one process)."""
import json

import numpy as np
import pytest

from minips.data import BatchLoader, DistributedSampler, Partition, parse_partition, partition_indices
from minips.data.partition import PARTITION_FORMS

C = 10  # classes in the synthetic label sets
SCHEMES = ["iid", "by-class:1", "by-class:2", "by-class:3", "by-class:5", "dirichlet:0.1", "dirichlet:0.5",
           "dirichlet:1000"]


def balanced_labels(per_class=300, classes=C, seed=0):
    """int64 (classes*per_class,), every class equally often, in shuffled order."""
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(classes), per_class))


def covered(spec, P):
    """Do the shards of ``spec`` over P ranks cover every class (so every index)?"""
    p = parse_partition(spec)
    return p.kind != "by-class" or P * p.parameter >= C


def samplers(n, P, spec, labels, seed=0, **kw):
    return [DistributedSampler(n, r, P, seed=seed, partition=spec, labels=labels, **kw) for r in range(P)]


def tv_from_global(labels, shard):
    """Total-variation distance of a shard's label histogram from the whole set's."""
    glob = np.bincount(labels, minlength=C) / len(labels)
    return 0.5 * np.abs(np.bincount(labels[shard], minlength=C) / len(shard) - glob).sum()


# --- iid: exactly the sampler before partitions existed -------------------------------------

@pytest.mark.parametrize("n,P", [(10, 1), (10, 3), (101, 4), (997, 5), (8, 8)])
def test_iid_is_bit_identical_to_the_old_strided_share(n, P):
    labels = np.arange(n) % 3
    for seed in (0, 5):
        for epoch in (0, 1, 7):
            # the old formula, written out here: one shared permutation per epoch,
            # rank r takes perm[r::P], truncated to n // P
            perm = np.random.default_rng((seed, epoch)).permutation(n)
            for r in range(P):
                expected = perm[r::P][:n // P]
                for kw in ({}, {"partition": "iid"}, {"partition": Partition("iid"), "labels": labels}):
                    s = DistributedSampler(n, r, P, seed=seed, **kw)
                    s.set_epoch(epoch)
                    got = s.indices()
                    assert got.dtype == expected.dtype and np.array_equal(got, expected)


def test_iid_unshuffled_is_the_identity_share():
    s = DistributedSampler(10, 1, 3, shuffle=False, partition="iid")
    assert s.indices().tolist() == [1, 4, 7]


# --- every scheme: disjoint shards, full coverage, determinism, equal counts ----------------

@pytest.mark.parametrize("spec", SCHEMES)
@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_shards_are_disjoint_and_cover_the_data(spec, P):
    labels = balanced_labels()
    shards = partition_indices(labels, P, spec, seed=3)
    assert len(shards) == P and all(s.dtype == np.int64 for s in shards)
    flat = np.concatenate(shards)
    assert len(np.unique(flat)) == len(flat)  # disjoint
    if covered(spec, P):
        assert np.array_equal(np.sort(flat), np.arange(len(labels)))
    else:  # the classes no rank holds are left out, nothing else
        held = np.unique(labels[flat])
        assert np.array_equal(np.sort(flat), np.flatnonzero(np.isin(labels, held)))


@pytest.mark.parametrize("spec", SCHEMES)
def test_partition_is_deterministic_given_the_seed(spec):
    labels = balanced_labels()
    a = partition_indices(labels, 4, spec, seed=11)
    b = partition_indices(labels, 4, spec, seed=11)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = partition_indices(labels, 4, spec, seed=12)
    same = all(np.array_equal(x, y) for x, y in zip(a, c))
    # another seed gives other shards, except by-class with no class shared by two
    # ranks (P*N <= C): then a shard is whole classes, fixed by the deterministic rule
    p = parse_partition(spec)
    assert same == (p.kind == "by-class" and 4 * p.parameter <= C)
    # the samplers agree too, epoch by epoch
    for s1, s2 in zip(samplers(len(labels), 4, spec, labels, seed=11), samplers(len(labels), 4, spec, labels, seed=11)):
        for e in (0, 3):
            s1.set_epoch(e), s2.set_epoch(e)
            assert np.array_equal(s1.indices(), s2.indices())


@pytest.mark.parametrize("spec", SCHEMES)
@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_every_rank_takes_the_iid_count_each_epoch(spec, P):
    labels = balanced_labels(per_class=37)  # n = 370: not a multiple of most P
    n = len(labels)
    ranks = samplers(n, P, spec, labels, seed=2)
    for epoch in (0, 1):
        for s in ranks:
            s.set_epoch(epoch)
            idx = s.indices()
            assert len(s) == len(idx) == n // P and idx.dtype == np.int64
            if s.shard is not None:
                assert np.isin(idx, s.shard).all()  # only its own samples
                # cycled when the shard is small: every shard sample at least quota // shard times
                if len(s.shard) <= n // P:
                    counts = np.bincount(idx, minlength=n)[s.shard]
                    assert counts.min() >= (n // P) // len(s.shard)
    # the loaders built on them take the same number of steps on every rank
    x = np.arange(n)
    assert len({len(BatchLoader(x, labels, 8, s)) for s in ranks}) == 1


def test_shard_order_is_reshuffled_each_epoch_and_differs_by_rank():
    labels = balanced_labels()
    s = DistributedSampler(len(labels), 1, 3, seed=4, partition="dirichlet:1", labels=labels)
    e0 = s.indices()
    s.set_epoch(1)
    assert not np.array_equal(e0, s.indices())
    flat = DistributedSampler(len(labels), 1, 3, seed=4, partition="dirichlet:1", labels=labels, shuffle=False)
    idx = flat.indices()
    assert np.isin(idx, flat.shard).all() and len(idx) == len(labels) // 3


# --- by-class:N ---------------------------------------------------------------------------

@pytest.mark.parametrize("N", [1, 2, 3, 5, 10])
@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_by_class_gives_each_rank_exactly_n_classes(N, P):
    labels = balanced_labels()
    shards = partition_indices(labels, P, f"by-class:{N}", seed=0)
    for r, s in enumerate(shards):
        classes = np.unique(labels[s])
        assert len(classes) == N
        # the documented rule: rank r holds classes (r*N + j) mod C
        assert sorted(classes.tolist()) == sorted((r * N + j) % C for j in range(N))


def test_by_class_splits_a_shared_class_evenly():
    labels = balanced_labels(per_class=301)
    shards = partition_indices(labels, 4, "by-class:5", seed=0)  # 20 slots over 10 classes: 2 ranks a class
    for c in range(C):
        sizes = [int((labels[s] == c).sum()) for s in shards if (labels[s] == c).any()]
        assert len(sizes) == 2 and sum(sizes) == 301 and max(sizes) - min(sizes) <= 1


def test_by_class_classes_are_the_distinct_label_values():
    labels = np.repeat(np.array([3, 7, 42]), 20)  # not 0..C-1
    shards = partition_indices(labels, 3, "by-class:1", seed=0)
    assert [np.unique(labels[s]).tolist() for s in shards] == [[3], [7], [42]]


# --- dirichlet:ALPHA ------------------------------------------------------------------------

@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_dirichlet_small_alpha_is_skewed_large_alpha_is_close_to_iid(P):
    labels = balanced_labels(per_class=600)
    for seed in range(3):
        skewed = [tv_from_global(labels, s) for s in partition_indices(labels, P, "dirichlet:0.1", seed)]
        near_iid = [tv_from_global(labels, s) for s in partition_indices(labels, P, "dirichlet:1000", seed)]
        # measured over 20 seeds with 6000 labels: alpha 0.1 gives a mean TV of 0.36-0.73,
        # alpha 1000 a per-rank TV of at most ~0.015 (sampling noise)
        assert np.mean(skewed) > 0.3, skewed
        assert max(near_iid) < 0.05, near_iid


def test_dirichlet_empty_shard_is_an_error_naming_the_fix():
    labels = np.array([0, 0, 1, 1, 2, 2])  # 6 samples, 5 ranks, very skewed: ranks 0 and 1 get none
    assert [len(s) for s in partition_indices(labels, 5, "dirichlet:0.01", seed=0)].count(0) > 0
    for rank in range(5):  # every rank fails alike, also the ranks whose own shard is not empty
        with pytest.raises(ValueError, match=r"leaves rank 0 with no samples; use a larger ALPHA or fewer ranks"):
            DistributedSampler(6, rank, 5, seed=0, partition="dirichlet:0.01", labels=labels)


# --- parsing and errors ---------------------------------------------------------------------

@pytest.mark.parametrize("text,kind,parameter", [
    ("iid", "iid", None), (" IID ", "iid", None), ("by-class:2", "by-class", 2),
    ("dirichlet:0.5", "dirichlet", 0.5), ("dirichlet:1e3", "dirichlet", 1000.0)])
def test_parse_partition(text, kind, parameter):
    p = parse_partition(text)
    assert (p.kind, p.parameter) == (kind, parameter)
    assert parse_partition(str(p)) == p and parse_partition(p) is p
    with pytest.raises(AttributeError):
        p.kind = "iid"  # frozen


@pytest.mark.parametrize("text,message", [
    ("byclass:2", "unknown partition 'byclass:2'; use iid, by-class:N (N classes per rank) or dirichlet:ALPHA"),
    ("", "unknown partition ''"),
    ("iid:3", "unknown partition 'iid:3'"),
    ("by-class", "unknown partition 'by-class'"),
    ("by-class:0", "N must be a whole number >= 1"),
    ("by-class:-1", "N must be a whole number >= 1"),
    ("by-class:2.5", "N must be a whole number >= 1"),
    ("by-class:x", "N must be a whole number >= 1"),
    ("dirichlet:0", "ALPHA must be a number > 0"),
    ("dirichlet:-0.5", "ALPHA must be a number > 0"),
    ("dirichlet:nan", "ALPHA must be a number > 0"),
    ("dirichlet:inf", "ALPHA must be a number > 0"),
    ("dirichlet:", "ALPHA must be a number > 0"),
])
def test_bad_specs_give_one_line_errors_naming_the_forms(text, message):
    with pytest.raises(ValueError) as e:
        parse_partition(text)
    assert message in str(e.value) and PARTITION_FORMS in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="use iid, by-class:N"):
        DistributedSampler(100, 0, 2, partition=text, labels=np.zeros(100, int))


def test_by_class_more_classes_than_exist():
    labels = balanced_labels()
    with pytest.raises(ValueError, match="by-class:11 asks for 11 classes per rank but the labels have only "
                                         "10 classes; use by-class:N with N <= 10"):
        DistributedSampler(len(labels), 0, 2, partition="by-class:11", labels=labels)


@pytest.mark.parametrize("labels,message", [
    (None, "needs the class labels"),
    (np.zeros((100, 7), np.int64), r"one class label per sample \(a 1-D array\), got targets of shape \(100, 7\)"),
    (np.zeros(100, np.float32), "needs integer class labels"),
    (np.zeros(99, np.int64), "99 labels for 100 samples"),
])
def test_non_iid_needs_integer_labels(labels, message):
    with pytest.raises(ValueError, match=message) as e:
        DistributedSampler(100, 0, 2, partition="by-class:1", labels=labels)
    assert "use --partition iid" in str(e.value)


def test_iid_needs_no_labels_and_checks_given_ones():
    DistributedSampler(100, 0, 2, partition="iid")
    with pytest.raises(ValueError, match="99 labels for 100 samples"):
        DistributedSampler(100, 0, 2, labels=np.zeros(99, int))
    # caption targets (n, T) have no single label: iid takes them and counts no classes
    s = DistributedSampler(100, 0, 2, labels=np.zeros((100, 7), np.int64))
    assert s.describe()["class_counts"] is None and len(s.indices()) == 50


def test_partition_validates_on_construction():
    assert str(Partition("by-class", 3)) == "by-class:3" and str(Partition("dirichlet", 0.5)) == "dirichlet:0.5"
    for kind, parameter, message in [("by-class", 0, "N must be"), ("by-class", 2.0, "N must be"),
                                     ("dirichlet", 0.0, "ALPHA must be"), ("iid", 3, "unknown partition"),
                                     ("magic", None, "unknown partition 'magic'")]:
        with pytest.raises(ValueError, match=message):
            Partition(kind, parameter)


# --- describe() ----------------------------------------------------------------------------

def test_describe_reports_the_spec_shard_and_class_counts():
    labels = balanced_labels()
    s = DistributedSampler(len(labels), 1, 4, seed=0, partition="by-class:2", labels=labels)
    d = json.loads(json.dumps(s.describe()))  # JSON-serialisable for summary.json
    assert d["partition"] == "by-class:2" and d["rank"] == 1 and d["world_size"] == 4
    assert d["samples_per_epoch"] == len(labels) // 4 and d["shard_size"] == len(s.shard)
    assert set(d["class_counts"]) == {"2", "3"} and sum(d["class_counts"].values()) == d["shard_size"]
    iid = DistributedSampler(len(labels), 0, 4, partition="iid").describe()
    assert iid["partition"] == "iid" and iid["shard_size"] == len(labels) and iid["class_counts"] is None
    assert DistributedSampler(20, 0, 2, labels=np.arange(20) % 2).describe()["class_counts"] == {"0": 10, "1": 10}


# --- property test ---------------------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(labels=st.lists(st.integers(0, 5), min_size=5, max_size=120), P=st.integers(1, 5),
                  scheme=st.sampled_from(["iid", "by-class:1", "by-class:2", "dirichlet:0.3", "dirichlet:50"]),
                  seed=st.integers(0, 2**31))
def test_property_disjoint_cover_and_equal_counts(labels, P, scheme, seed):
    labels = np.array(labels)
    hypothesis.assume(len(labels) >= P)
    p = parse_partition(scheme)
    classes = len(np.unique(labels))
    if p.kind == "by-class" and p.parameter > classes:
        with pytest.raises(ValueError, match="classes per rank"):
            partition_indices(labels, P, p, seed)
        return
    shards = partition_indices(labels, P, p, seed)
    flat = np.concatenate(shards)
    assert len(np.unique(flat)) == len(flat)
    if p.kind != "by-class" or P * p.parameter >= classes:
        assert np.array_equal(np.sort(flat), np.arange(len(labels)))
    try:
        ranks = samplers(len(labels), P, p, labels, seed=seed)
    except ValueError as e:  # only an empty shard may stop the sampler
        assert "with no samples" in str(e) and any(len(s) == 0 for s in shards)
        return
    assert {len(s.indices()) for s in ranks} == {len(labels) // P}
