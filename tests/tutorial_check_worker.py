"""Run one MPI exercise's check on its reference solution and on wrong answers.

``mpiexec -n 2 python tests/tutorial_check_worker.py EXERCISE_ID``; every rank
prints ``solution: passed``, ``wrong answers: rejected`` and ``other right
answers: accepted`` (tests/tutorial_right_answers.py), or what went wrong.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tutorials"))
sys.path.insert(0, str(HERE))


def main(exercise_id):
    import _common
    import checks
    import tutorial_right_answers as right
    import tutorial_wrong_answers as wrong

    comm = _common.mpi_setup()
    ex = checks.EXERCISES[exercise_id]
    ex.check(_common.solution(exercise_id), comm=comm)
    print(f"rank {comm.rank}: solution: passed", flush=True)
    for i, bad in enumerate(wrong.WRONG[exercise_id]()):
        try:
            ex.check(bad, comm=comm)
        except AssertionError as e:
            print(f"rank {comm.rank}: wrong answer {i} rejected: {e}", flush=True)
        else:
            raise SystemExit(f"rank {comm.rank}: wrong answer {i} was ACCEPTED by the check of {exercise_id}")
        comm.barrier()
    print(f"rank {comm.rank}: wrong answers: rejected", flush=True)
    for i, good in enumerate(right.RIGHT[exercise_id]()):
        try:
            ex.check(good, comm=comm)
        except AssertionError as e:
            raise SystemExit(f"rank {comm.rank}: right answer {i} ({good.__name__}) was REJECTED by the check of "
                             f"{exercise_id}: {e}") from None
        comm.barrier()
    print(f"rank {comm.rank}: other right answers: accepted", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
