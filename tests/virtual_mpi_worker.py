"""``mpiexec -n P python tests/virtual_mpi_worker.py NAME OUTDIR``: run
``tests/virtual_checks.NAME(comm)`` on every rank and pickle its result to
``OUTDIR/rank{r}.pkl`` (the MPI side of tests/test_virtual.py)."""
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minips.distributed.comm import get_comm, run_or_abort  # noqa: E402
from tests import virtual_checks  # noqa: E402


def main(name, outdir):
    c = get_comm()
    got = getattr(virtual_checks, name)(c)
    Path(outdir, f"rank{c.rank}.pkl").write_bytes(pickle.dumps(got))


if __name__ == "__main__":
    run_or_abort(main, sys.argv[1], sys.argv[2])
