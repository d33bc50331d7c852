"""Worker for tests/test_edges.py: ``mpiexec -n 2 python tests/edge_worker.py MODE OUT``.

Runs ``python -m minips train`` through :func:`minips.cli.main` with one rank
failing once MPI is up:

- ``fail1``: rank 1 raises a ValueError in its third step (rank 0 holds the
  run folder's lock and is killed by rank 1's MPI_Abort).
"""
import sys


def main(mode: str, out: str) -> int:
    from minips import cli
    from minips.train import Trainer

    step = Trainer._train_step

    def step_then_fail(self, *a, **kw):
        if self.comm.rank == 1 and self.global_step == 3:
            raise ValueError("rank 1 fails on purpose at step 3")
        return step(self, *a, **kw)

    if mode == "fail1":
        Trainer._train_step = step_then_fail
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return cli.main(["train", "--model", "mlp", "--epochs", "5", "--quiet", "--out", out])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
