"""hetero-gossip: the reconstruction of EdgeGossip (Han et al., TPDS 2021).

Pinned down: the slowdown option's grammar and the batch split by speed; the
partner schedule is a matching, the same on every rank, that pairs fast ranks
more often; each pairwise average keeps sum_i n_i w_i and leaves both partners
bitwise equal; on 2 ranks with a 3x slower rank, plain gossip gives both ranks
the same batch every step (the fast rank is paced by the slow one: equal
samples per step), while hetero-gossip gives the fast rank 3x the samples of
the slow one in the same steps (a count, not a timing); stop + resume is bitwise.
"""
import json
from types import SimpleNamespace

import numpy as np
import pytest

from minips.distributed.algorithms import resolve
from minips.distributed.algorithms.hetero_gossip import HeteroGossip, parse_slowdown

from .gossip3_checks import launch3
from .local_sgd_checks import stop_resume_is_bitwise, trace, train


def test_slowdown_grammar_and_batch_split():
    assert parse_slowdown("1*3+2x1.5") == {1: 3.0, 2: 1.5} and parse_slowdown("") == {}
    o = resolve("hetero-gossip:slowdown=1*3").options
    assert HeteroGossip.batch_sizes(o, 2, 16) == [24, 8]
    assert HeteroGossip.batch_sizes(resolve("hetero-gossip:slowdown=1*3:balance=false").options, 2, 16) == [16, 16]


def test_partner_schedule_is_a_matching_favouring_fast_ranks():
    o = resolve("hetero-gossip:slowdown=3*4:topology=complete:balance=false").options
    s = HeteroGossip.speeds(o, 4)
    edges = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    counts = np.zeros((4, 4))
    for t in range(400):
        mates = [HeteroGossip.partner(SimpleNamespace(options=o, e=s, edges=edges,
                                                      comm=SimpleNamespace(size=4, rank=r)), t) for r in range(4)]
        for r, m in enumerate(mates):
            assert m == -1 or mates[m] == r
            if m >= 0:
                counts[r, m] += 1
    assert counts[0, 1] > 2 * counts[0, 3] > 0 and counts[3].sum() < counts[0].sum() / 2


def test_pairwise_average_keeps_the_sample_weighted_mean(tmp_path):
    r = launch3(4, {"mode": "mix", "topologies": ["ring"], "hetero": "hetero-gossip:slowdown=1*3:topology=complete"},
                tmp_path)
    assert r["weighted_err"] < 1e-5 and r["pair_diff"] == 0.0 and r["matched"] > 0


def test_slow_rank_paces_plain_gossip_and_hetero_gives_the_fast_rank_more_samples(tmp_path):
    got = {}
    for label, spec in (("plain", "hetero-gossip:slowdown=0*3:balance=false:favour-fast=false"),
                        ("hetero", "hetero-gossip:slowdown=0*3")):
        out = tmp_path / label
        r = train(2, ["--algo", spec, "--max-steps", 6, "--out", out])
        assert r.returncode == 0, r.stderr[-3000:]
        got[label] = (json.loads((out / "summary.json").read_text()), trace(out))
    (ps, prow), (hs, hrow) = got["plain"], got["hetero"]
    assert ps["batch_sizes"] == [16, 16] and hs["batch_sizes"] == [8, 24] and ps["speeds"][0] == pytest.approx(1 / 3)
    for rows, batch in ((prow, 16), (hrow, 8)):  # rank 0 (the slow one) slept every step and met rank 1
        assert len(rows) == 6 and all(int(r["batch"]) == batch and int(r["partner"]) == 1 for r in rows)
        assert all(float(r["slowdown_s"]) > 0 for r in rows)
    assert float(hrow[0]["mix_weight"]) == pytest.approx(24 / 32)  # the fast rank's share of the average
    # same steps on both ranks: samples per step are 16:16 (plain) and 8:24 (hetero)
    assert ps["steps"] == hs["steps"] == 6


def test_resume_is_bitwise(tmp_path):
    stop_resume_is_bitwise("hetero-gossip:slowdown=1*2", tmp_path, 3, 6)


@pytest.mark.parametrize("text,message", [
    ("hetero-gossip:slowdown=1-3", "slowdown item '1-3' is not RANK*FACTOR"),
    ("hetero-gossip:slowdown=1*0.5", "the factor must be >= 1"),
])
def test_bad_options_say_what_to_write(text, message):
    with pytest.raises(ValueError) as e:
        resolve(text)
    assert message in str(e.value) and "\n" not in str(e.value)
