"""Run MPI exercises' checks on their reference solutions, wrong answers and other right answers.

``mpiexec -n 2 python tests/tutorial_check_worker.py EXERCISE_ID [EXERCISE_ID ...]`` (one launch for
all: each launch's ranks cost about 1.5 s of CPU to start); for each exercise every rank prints
``EXERCISE_ID: solution: passed``, ``EXERCISE_ID: wrong answers: rejected`` and ``EXERCISE_ID: other
right answers: accepted`` (tests/tutorial_right_answers.py), or what went wrong.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tutorials"))
sys.path.insert(0, str(HERE))


def main(exercise_ids):
    import _common

    comm = _common.mpi_setup()
    for exercise_id in exercise_ids:
        check_one(comm, exercise_id)


def check_one(comm, exercise_id):
    import _common
    import checks
    import tutorial_right_answers as right
    import tutorial_wrong_answers as wrong

    ex = checks.EXERCISES[exercise_id]
    ex.check(_common.solution(exercise_id), comm=comm)
    print(f"rank {comm.rank}: {exercise_id}: solution: passed", flush=True)
    for i, bad in enumerate(wrong.WRONG[exercise_id]()):
        try:
            ex.check(bad, comm=comm)
        except AssertionError as e:
            print(f"rank {comm.rank}: wrong answer {i} rejected: {e}", flush=True)
        else:
            raise SystemExit(f"rank {comm.rank}: wrong answer {i} was ACCEPTED by the check of {exercise_id}")
        comm.barrier()
    print(f"rank {comm.rank}: {exercise_id}: wrong answers: rejected", flush=True)
    for i, good in enumerate(right.RIGHT[exercise_id]()):
        try:
            ex.check(good, comm=comm)
        except AssertionError as e:
            raise SystemExit(f"rank {comm.rank}: right answer {i} ({good.__name__}) was REJECTED by the check of "
                             f"{exercise_id}: {e}") from None
        comm.barrier()
    print(f"rank {comm.rank}: {exercise_id}: other right answers: accepted", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
