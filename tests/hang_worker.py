"""Worker for tests/test_hangs.py and tests/test_edges.py:
``mpiexec -n 2 python tests/hang_worker.py MODE OUT``.

Runs ``python -m minips train`` through :func:`minips.cli.main` with one rank
misbehaving once MPI is up:

- ``sigint``: rank 1 gets a real SIGINT after building the model, before the
  stop protocol installs its handler (Ctrl-C reaching one process early), so
  Python raises KeyboardInterrupt there;
- ``exit``: rank 1 calls ``sys.exit(0)`` in its third step;
- ``fail1``: rank 1 raises a ValueError in its third step (rank 0 holds the
  run folder's lock and is killed by rank 1's MPI_Abort).

The job must end (every rank), not hang with rank 0 waiting in a collective.
"""
import os
import signal
import sys


def main(mode: str, out: str) -> int:
    from minips import cli
    from minips.train import Trainer

    build, step = Trainer.build, Trainer._train_step

    def build_then_sigint(self):
        build(self)
        if self.comm.rank == 1:
            os.kill(os.getpid(), signal.SIGINT)  # the default handler raises KeyboardInterrupt here

    def step_then_exit(self, *a, **kw):
        if self.comm.rank == 1 and self.global_step == 3:
            sys.exit(0)
        return step(self, *a, **kw)

    def step_then_fail(self, *a, **kw):
        if self.comm.rank == 1 and self.global_step == 3:
            raise ValueError("rank 1 fails on purpose at step 3")
        return step(self, *a, **kw)

    if mode == "sigint":
        Trainer.build = build_then_sigint
    elif mode == "exit":
        Trainer._train_step = step_then_exit
    elif mode == "fail1":
        Trainer._train_step = step_then_fail
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return cli.main(["train", "--model", "mlp", "--epochs", "5", "--quiet", "--out", out])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
