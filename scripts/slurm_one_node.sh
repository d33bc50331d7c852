#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing the batch
# script examples/slurm_pseudo_sync.sh (tests/test_slurm.py):
#
#   scripts/slurm_one_node.sh start [DIR]   # start munged, slurmctld, slurmd; wait until the node is idle
#   scripts/slurm_one_node.sh stop  [DIR]   # end them (by the pids they wrote) and keep DIR's logs
#   scripts/slurm_one_node.sh env   [DIR]   # the line to eval before sbatch/squeue: export SLURM_CONF=...
#
# DIR (default /tmp/minips-slurm) holds everything: slurm.conf, the munge key
# and socket, the daemons' state, spool, pid and log files. The daemons listen
# on their own ports (MINIPS_SLURM_PORT and the next one; by default the first
# free pair from 16817 on) and read DIR/slurm.conf only, so they leave any other
# Slurm or munge on the machine alone (two clusters in two DIRs can run side by
# side); `sbatch` and friends find them through SLURM_CONF. Each start begins
# with an empty queue: the state of a cluster DIR held before is cleared; its jobs
# are numbered from an id that no start in the 6.9 days before used (MPICH names its
# shared memory after the job id: see first_job_id below).
#
# Made for short test jobs: a requeued job may start again after 5 s (Slurm's
# default is 120: AuthInfo's cred_expire), and the scheduler looks at pending
# jobs every 2 s (default 60, backfill 30). The time limits themselves are
# checked every 30 s, as on any Slurm: a job's --signal=B:SIG@N comes between
# N and N - 30 s before its limit. Jobs that ask for it (sbatch --oversubscribe)
# may share cores (OverSubscribe=YES: up to 4 jobs a core).
#
# Needs root (slurmd starts jobs as their user; munged and the daemons run as
# root here, which a real cluster would not do) and Debian's packages:
#   apt-get install --no-install-recommends slurmctld slurmd slurm-client munge libpmix-dev
# `start --install` runs that apt-get when the programs are missing. No systemd
# is needed: the daemons are started directly. Jobs are tracked by process
# (proctrack/linuxproc) and bound to cores by CPU affinity (task/affinity, so
# srun's --cpu-bind works), without cgroups: the node is this machine's cores
# as `slurmd -C` sees them. Open MPI's ranks under srun need Slurm's PMIx
# plugin (srun --mpi=pmix), which loads libpmix.so: Debian's libpmix-dev.
#
# Exit status of start: 0 when the node is up, 3 when it cannot be started here
# (the one-line reason on stderr: not root, packages missing, a daemon that
# did not come up, with its log's last lines), so that CI can skip the test.
set -euo pipefail
cmd=${1:?"usage: scripts/slurm_one_node.sh {start [--install]|stop|env} [DIR]"}
shift
install=0
if [ "${1:-}" = "--install" ]; then install=1; shift; fi
DIR=$(realpath -m "${1:-/tmp/minips-slurm}")
conf=$DIR/slurm.conf

cannot() { echo "slurm_one_node: cannot start Slurm here: $*" >&2; exit 3; }

stop_pidfile() {  # end the daemon whose pid is in $1, if it runs; wait for it
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

case "$cmd" in
  env)
    echo "export SLURM_CONF=$conf"
    exit 0 ;;
  stop)
    if [ -f "$conf" ]; then
      SLURM_CONF=$conf scancel --quiet --user="$(id -un)" 2>/dev/null || true
    fi
    stop_pidfile "$DIR/slurmd.pid"
    stop_pidfile "$DIR/slurmctld.pid"
    stop_pidfile "$DIR/munged.pid"
    exit 0 ;;
  start) ;;
  *) echo "slurm_one_node: unknown command '$cmd': give start, stop or env" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || cannot "it needs root (slurmd runs jobs as their user), and this is uid $(id -u)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
   || ! command -v munged >/dev/null; then
  if [ $install = 1 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      slurmctld slurmd slurm-client munge libpmix-dev >/dev/null 2>&1 \
      || cannot "apt-get install slurmctld slurmd slurm-client munge libpmix-dev failed"
  else
    cannot "slurmctld, slurmd, sbatch or munged not found: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge libpmix-dev (or start --install)"
  fi
fi

"$0" stop "$DIR"  # a previous cluster in DIR, if any
rm -rf "$DIR/state" "$DIR/spool"  # and its jobs
mkdir -p "$DIR"/{munge,state,spool}

free_pair() {  # the first port p >= $1 with p and p + 1 free on this machine
  python3 - "$1" <<'PY'
import socket, sys
p = int(sys.argv[1])
def free(q):
    with socket.socket() as s:
        try:
            s.bind(("", q))
            return True
        except OSError:
            return False
while not (free(p) and free(p + 1)):
    p += 2
print(p)
PY
}
PORT=${MINIPS_SLURM_PORT:-$(free_pair 16817)}
chmod 700 "$DIR/munge"

# munge: the key that signs every message between the commands and the daemons
[ -s "$DIR/munge/munge.key" ] || mungekey --create --keyfile="$DIR/munge/munge.key" \
  || dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$DIR/munge/munge.key"
munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
  --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munge.seed" \
  || cannot "munged did not start: $(tail -n 2 "$DIR/munged.log" 2>/dev/null | tr '\n' ' ')"

node=$(hostname -s)
# Job ids: each start clears the queue, and Slurm would number jobs from 1 again. MPICH names its
# shared-memory segment after the job (/dev/shm/mpich_shm_HASH_0, HASH of srun's PMI kvsname, "JOBID.STEP"),
# and a job killed before MPI_Finalize leaves it behind: the next start's job with that id opened it and
# failed in MPI_Init ("UCX ERROR failed to unpack address, invalid bandwidth 0.00", its other rank waiting;
# docs/bench/ci/slurm-stale-shm.txt). So each start numbers from its own block of 100 ids, from the
# clock: starts 1 s apart do not share an id (unless one submits 100 jobs or more), over 600,000 s (6.9
# days; the largest id, 60,000,000, is under Slurm's default MaxJobId, 67,043,328).
first_job_id=$(( $(date +%s) % 600000 * 100 + 100 ))
# this machine as slurmd sees it (CPUs, sockets, cores, threads, memory), less what slurmd prints besides
hw=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //')
cat > "$conf" <<EOF
# written by scripts/slurm_one_node.sh: one node, this machine
ClusterName=minips
MailProg=/bin/true
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=5
SchedulerParameters=sched_interval=2,bf_interval=2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# seconds between SIGTERM and SIGKILL at a time limit (Slurm's default)
KillWait=30
# a finished job stays visible to squeue/scontrol for 5 minutes
MinJobAge=300
# jobs numbered from here (see first_job_id above)
FirstJobId=$first_job_id
NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

export SLURM_CONF=$conf
slurmctld -i -f "$conf" || cannot "slurmctld did not start: $(tail -n 3 "$DIR/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
slurmd -f "$conf" -N "$node" || cannot "slurmd did not start: $(tail -n 3 "$DIR/slurmd.log" 2>/dev/null | tr '\n' ' ')"

for _ in $(seq 60); do
  state=$(sinfo --noheader --nodes="$node" --format=%T 2>/dev/null || true)
  case "$state" in
    idle*|mixed*|allocated*) echo "slurm_one_node: node $node $state (SLURM_CONF=$conf)"; exit 0 ;;
  esac
  sleep 1
done
cannot "node $node not idle after 60 s (state '${state:-none}'): $(tail -n 3 "$DIR/slurmd.log" 2>/dev/null | tr '\n' ' ')"
