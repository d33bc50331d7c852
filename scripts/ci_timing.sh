#!/usr/bin/env bash
# What scripts/mpi_tests.sh costs, for .ci/run's choice of MPI tests (docs/bench/ci/):
#
#   scripts/ci_timing.sh MPI LABEL [pytest arguments]    # -> runs/ci/MPI-LABEL.txt
#
# e.g. scripts/ci_timing.sh openmpi subset $(grep -v '^#' scripts/ci_mpi_subset.txt)
# The file holds the command, `uptime` before and after (the load: on a shared
# machine say it with every time), /usr/bin/time -v's report (wall clock, and
# the CPU of the processes waited for) and the CPU seconds of a cgroup (cgroup
# v1 cpuacct, as root) that holds the command and everything it starts,
# mpiexec's ranks and daemons included, whoever reaps them. Runs at nice 10.
set -uo pipefail
cd "$(dirname "$0")/.."
mpi=${1:?"usage: scripts/ci_timing.sh MPI LABEL [pytest arguments]"}; label=${2:?"give a LABEL"}; shift 2
mkdir -p runs/ci
out=runs/ci/$mpi-$label.txt
cg=/sys/fs/cgroup/cpuacct/minips-ci-timing-$mpi-$label
rmdir "$cg" 2>/dev/null; mkdir "$cg" || { echo "ci_timing: cannot make the cgroup $cg (root and cgroup v1 cpuacct needed)" >&2; exit 2; }
{
  echo "date: $(date -Is)"
  echo "host: $(.venv-mpi/$mpi/bin/python -c 'from minips.kernels.cpuinfo import describe; print(describe())' 2>/dev/null || nproc)"
  echo "command: nice -n 10 /usr/bin/time -v scripts/mpi_tests.sh $mpi $*"
  echo "uptime before: $(uptime)"
} > "$out"
( echo $BASHPID > "$cg/tasks"; exec nice -n 10 /usr/bin/time -v scripts/mpi_tests.sh "$mpi" "$@" ) >> "$out" 2>&1
echo "exit: $?" >> "$out"
echo "uptime after: $(uptime)" >> "$out"
sleep 5  # orphaned ranks, if any, end
echo "cpuacct (the command and every process it started): usage $(cat "$cg/cpuacct.usage") ns; $(tr '\n' ' ' < "$cg/cpuacct.stat")(USER_HZ=$(getconf CLK_TCK)); tasks left: $(wc -l < "$cg/tasks")" >> "$out"
rmdir "$cg" 2>/dev/null || true
