"""``python -m minips ...``: see :mod:`minips.cli`."""
import sys

from .cli import main

sys.exit(main())
