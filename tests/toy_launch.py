"""``python tests/toy_launch.py ARGS...`` = ``python -m minips ARGS...`` with the
toy algorithm (tests/toy_algorithm.py) added to the registry table: what a user
who writes a new algorithm does (one file, one row)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from toy_algorithm import ToyDrift  # noqa: E402

from minips.distributed.algorithms import ALGORITHMS  # noqa: E402

ALGORITHMS[ToyDrift.name] = ToyDrift

if __name__ == "__main__":
    from minips.cli import main
    sys.exit(main(sys.argv[1:]))
