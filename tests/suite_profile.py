"""A pytest plugin that records where the suite's time goes, test by test.

Load it with ``-p tests.suite_profile --suite-profile FILE.jsonl`` (the
``scripts/suite_times.py`` report reads the files). For every test it writes
one JSON line:

- ``wall_s``: seconds of wall time for setup, call and teardown;
- ``cpu_self_s``: user + system CPU seconds of the test process itself (the
  threads of virtual ranks included);
- ``cpu_children_s``: user + system CPU seconds of the child processes the test
  waited for (``subprocess.run``, ``mpiexec`` and the ranks under it);
- ``compile_s``: CPU seconds of the test process while Numba compiled (its
  ``numba:compile`` events; a kernel loaded from the cache costs nothing here);
- ``launches``: the processes the test started with :mod:`subprocess`, counting
  ``mpiexec -n N`` as N (each a Python that imports NumPy and Numba: about
  1.3 s of CPU before it does anything);
- ``worker``: the pytest-xdist worker (``"main"`` without xdist).

Under pytest-xdist each worker appends to ``FILE.<worker>`` so that no two
processes write one file. The plugin changes nothing a test sees.
"""
from __future__ import annotations

import json
import os
import resource
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--suite-profile", default=None, metavar="FILE",
                     help="append one JSON line per test (wall, CPU, children's CPU, Numba compile) to FILE")


class _CompileClock:
    """Sums the CPU seconds of Numba's outermost ``numba:compile`` events in this
    process (a compile nested in another, of a function the first one calls, is
    counted once; Numba compiles under one global lock)."""

    def __init__(self):
        self.total = 0.0
        self._depth, self._t0 = 0, 0.0
        try:
            from numba.core import event
        except ImportError:  # pragma: no cover - numba is a dependency
            return

        clock = self

        class Listener(event.Listener):
            def on_start(self, ev):
                if clock._depth == 0:
                    clock._t0 = time.process_time()
                clock._depth += 1

            def on_end(self, ev):
                clock._depth -= 1
                if clock._depth == 0:
                    clock.total += time.process_time() - clock._t0

        event.register("numba:compile", Listener())


def _cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class _LaunchCounter:
    """Counts the processes started through ``subprocess.Popen`` (``mpiexec -n N``: N)."""

    def __init__(self):
        import subprocess
        self.count = 0
        counter, original = self, subprocess.Popen.__init__

        def counting_init(popen, args, *a, **kw):
            argv = [str(x) for x in (args if isinstance(args, (list, tuple)) else [args])]
            n = 1
            if argv and os.path.basename(argv[0]).startswith("mpiexec") and "-n" in argv[:-1]:
                try:
                    n = int(argv[argv.index("-n") + 1])
                except ValueError:
                    pass
            counter.count += n
            original(popen, args, *a, **kw)

        subprocess.Popen.__init__ = counting_init


class SuiteProfile:
    def __init__(self, path, worker):
        self.path, self.worker = path, worker
        self.clock = _CompileClock()
        self.launches = _LaunchCounter()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        wall0, (me0, kids0), comp0, n0 = time.perf_counter(), _cpu(), self.clock.total, self.launches.count
        yield
        wall1, (me1, kids1) = time.perf_counter(), _cpu()
        rec = {"nodeid": item.nodeid, "wall_s": round(wall1 - wall0, 4), "cpu_self_s": round(me1 - me0, 4),
               "cpu_children_s": round(kids1 - kids0, 4), "compile_s": round(self.clock.total - comp0, 4),
               "launches": self.launches.count - n0, "worker": self.worker,
               "mpi": item.get_closest_marker("mpi") is not None}
        with open(self.path, "a") as f:  # its folder is made in pytest_configure
            f.write(json.dumps(rec) + "\n")


def pytest_configure(config):
    path = config.getoption("--suite-profile")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None and getattr(config.option, "dist", "no") != "no":
        return  # the xdist controller runs no test; its workers write the lines
    if worker:
        path = f"{path}.{worker}"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)  # e.g. runs/suite/ on a fresh clone
    config.pluginmanager.register(SuiteProfile(path, worker or "main"), "suite-profile")
