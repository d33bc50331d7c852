"""Run a tutorial step's notebook as a script: what ``run_on_ranks`` launches under mpiexec.

    mpiexec -n 2 python tutorials/_run_notebook.py NOTEBOOK   # e.g. step 5's notebook, saved as .ipynb

A step opened in Jupyter runs on one process. To run it on several, the
notebook's code, as last saved (the student's answers included), has to run
in every rank: this script reads the notebook (an ``.ipynb``, or the step's
jupytext ``.py``), turns it into the script jupytext would write (IPython
magics such as ``%env`` or ``!cmd`` become comments), and runs it as
``__main__``, exactly as ``python`` runs the step's ``.py`` file. An
exercise that stops the step stops it here too, with its message.
"""
from __future__ import annotations

import linecache
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def notebook_code(path: Path) -> str:
    """The Python code of a notebook file, as jupytext writes it in the percent format."""
    if path.suffix == ".ipynb":
        import jupytext   # the notebooks extra (and the test extra) installs it

        return jupytext.writes(jupytext.read(path), fmt="py:percent")
    return path.read_text()


def main(argv: list) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python tutorials/_run_notebook.py NOTEBOOK (.ipynb or a step's .py)")
    path = Path(argv[0]).resolve()
    if not path.is_file():
        raise SystemExit(f"_run_notebook.py: no such file: {argv[0]}")
    code = notebook_code(path)
    name = f"<{path.name}>"                       # tracebacks show the converted code's lines
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    sys.argv = [str(path)]
    sys.path.insert(0, str(HERE))                 # `from _common import ...`, wherever the notebook is
    exec(compile(code, name, "exec"), {"__name__": "__main__", "__file__": str(path)})


if __name__ == "__main__":
    main(sys.argv[1:])
