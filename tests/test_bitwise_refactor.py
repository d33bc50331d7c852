"""Every registered algorithm, given an explicit spec and seed, ends bitwise
where it ended before the structure refactors (issues 33 and 34): the final
weights of every rank after six steps, on one rank and on two virtual ranks,
against tests/fixtures/bitwise_digests.json (written by
tests/fixtures/make_bitwise_digests.py at the commit named in it, before the
change). Float32 GEMM bits depend on the BLAS kernel the CPU selects: on a
machine whose BLAS core differs from the fixture's, the check falls back to
rank 0's last loss within 1e-4 relative (and says so)."""
import json
import math
from pathlib import Path

import pytest

from .bitwise_specs import SPECS, STEPS, blas_core, run_specs

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "bitwise_digests.json").read_text())


def test_fixture_covers_every_registered_algorithm_predictor_and_compressor():
    from minips.distributed.algorithms import ALGORITHMS
    from minips.distributed.algorithms.pseudo_sync import PseudoSyncSGD  # noqa: F401  (fills the predictors)
    from minips.distributed.algorithms.predictors import PREDICTORS
    from minips.distributed.compression import COMPRESSORS
    named = {s.split(":")[0].split("@")[0] for s in SPECS}
    assert set(ALGORITHMS) <= named, f"no bitwise spec for {sorted(set(ALGORITHMS) - named)}"
    assert {f"predictor={p}" for p in PREDICTORS} <= {part for s in SPECS for part in s.split("@")[0].split(":")}
    assert {f"compressor={c}" for c in COMPRESSORS} <= {part for s in SPECS for part in s.split("@")[0].split(":")}
    assert FIXTURE["steps"] == STEPS and len(FIXTURE["runs"]["1"]) == len(SPECS) == len(FIXTURE["runs"]["2"])


@pytest.mark.parametrize("P", [1, 2])
def test_every_algorithm_ends_where_it_did_before_the_refactor(P, tmp_path):
    got = run_specs(SPECS, P, tmp_path)
    want = FIXTURE["runs"][str(P)]
    assert sorted(got) == sorted(want), "run folders differ from the fixture's"
    if blas_core() == FIXTURE["blas_core"]:
        changed = [k for k in want if got[k]["weights"] != want[k]["weights"]]
        assert not changed, f"{len(changed)} runs end at other weights than at {FIXTURE['commit'][:10]}: {changed}"
    else:  # another CPU kernel: the bits of float32 GEMMs legitimately differ
        far = [k for k in want if not math.isclose(float(got[k]["loss"]), float(want[k]["loss"]), rel_tol=1e-4)]
        assert not far, f"BLAS {blas_core()} (fixture: {FIXTURE['blas_core']}); losses moved in {far}"
