#!/bin/bash
# Pseudo-synchronous SGD on a Slurm cluster: a batch job that survives its time limit.
#
#   sbatch examples/slurm_pseudo_sync.sh                          # srun starts the ranks
#   MINIPS_LAUNCHER=mpiexec sbatch examples/slurm_pseudo_sync.sh  # the MPI's own mpiexec starts them
#   sbatch examples/slurm_pseudo_sync.sh --epochs 20              # more `minips train` options (given last, they win)
#
# The job trains the ConvNet on Fashion-MNIST with the default method, pseudo-sync
# with the `local` predictor at staleness 1, at the settings docs/accuracy.md (section 9)
# found to train at 64 ranks: 16 images a rank, a fixed learning rate of 0.16 warmed up
# over half an epoch (with the linear scaling rule every pseudo-sync rule diverged from
# 32 ranks on), Nesterov momentum, a cosine schedule.
#
# At the time limit. Slurm sends SIGUSR1 to this script 180 s before the limit
# (--signal=B:USR1@180; it checks time limits every 30 s and sends the signal at
# the first check within 210 s of the limit, so 180 to 210 s before it; its
# documentation allows up to a minute early). The script passes it
# to the launcher, which forwards it to every rank (SIGUSR1 is the one stop signal
# that srun, MPICH's and Intel MPI's Hydra and Open MPI's mpiexec all forward; Open
# MPI's mpiexec kills the ranks on SIGTERM). The ranks finish their step, agree on
# the same last step, write checkpoint.h5 and exit 0; the script then requeues the
# job (scontrol requeue: Slurm requeues nothing at a time limit by itself), and the
# requeued job, which keeps its job id and so its run folder, resumes from the
# checkpoint on the same trajectory. A run that ends (finished, or failed without a
# stop) is not requeued. Should the stop not finish in time, Slurm's SIGTERM at the
# limit and SIGKILL KillWait seconds later end the job; its folder then keeps the
# last --checkpoint-every checkpoint (written atomically) for a resubmission with
# MINIPS_OUT=<the folder>.
#
# The layout comes from Slurm: the number of ranks (SLURM_NTASKS), the nodes, and
# the cores of each rank (SLURM_CPUS_PER_TASK, which srun is given again: since
# Slurm 22.05 srun does not inherit it); each rank runs that many threads
# (minips divides a node's cores among its ranks). The binding flags are those of
# docs/distributed.md's table of launchers, one core a rank or T cores a rank of T
# threads.
#
# Settings (environment variables, read when the job starts):
#   MINIPS_VENV      the virtual environment with minips and mpi4py (default ~/venvs/minips)
#   MINIPS_LAUNCHER  srun (default) or mpiexec
#   MINIPS_SRUN_MPI  srun's --mpi plugin, when the site's default (MpiDefault) does not
#                    fit the MPI that mpi4py was built with: pmix for Open MPI 5, pmi2
#                    for MPICH (and Intel MPI with I_MPI_PMI_LIBRARY=<Slurm's libpmi2.so>)
#   MINIPS_DATA      the data set: a name (found in MINIPS_DATA_DIR or data/) or an .h5
#                    path on a file system the compute nodes see (default fashion-mnist)
#   MINIPS_OUT       the run folder (default runs/<job name>-<job id>: a new submission
#                    starts a new run, a requeued job continues its own)
#   MINIPS_DRY_RUN=1 print the launch line and exit (to check the flags on a login node, with the
#                    layout given: MINIPS_DRY_RUN=1 SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=1 bash ...)
#
# Before the first run, install minips against the site's MPI (once, on a login node):
#   module load openmpi       # or the site's MPI
#   python -m venv ~/venvs/minips && . ~/venvs/minips/bin/activate
#   pip install -e ".[test]" && MPICC=mpicc pip install --no-binary mpi4py mpi4py
#   python -m minips data fashion-mnist --from /path/to/idx --out data/fashion-mnist.h5
#
#SBATCH --job-name=minips-psync
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=16
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --signal=B:USR1@180
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

set -uo pipefail
if [ "${MINIPS_DRY_RUN:-0}" != 1 ]; then
    module load openmpi 2>/dev/null || true
    # shellcheck disable=SC1090
    . "${MINIPS_VENV:-$HOME/venvs/minips}/bin/activate" || exit 1
fi

ranks=${SLURM_NTASKS:?"not inside a Slurm job: submit with sbatch"}
threads=${SLURM_CPUS_PER_TASK:-1}
out=${MINIPS_OUT:-runs/${SLURM_JOB_NAME:-minips}-${SLURM_JOB_ID:-0}}
launcher=${MINIPS_LAUNCHER:-srun}

# The MPI behind mpiexec, from what `mpiexec --version` prints (as minips'
# comm/mpi.py tells them apart): Open MPI, Intel MPI, else MPICH's Hydra.
mpi_of_mpiexec() {
    local v
    v=$(mpiexec --version 2>&1 || true)
    case "$v" in
        *"Open MPI"*|*OpenRTE*) echo openmpi ;;
        *"Intel(R) MPI"*) echo intel ;;
        *) echo mpich ;;
    esac
}

case "$launcher" in
    srun)
        # --kill-on-bad-exit=1: a rank that exits with an error (one that fails in MPI_Init, before
        # minips can abort the job) ends the others, which would otherwise wait out the time limit
        launch=(srun --ntasks="$ranks" --cpus-per-task="$threads" --cpu-bind=cores --kill-on-bad-exit=1)
        if [ -n "${MINIPS_SRUN_MPI:-}" ]; then launch+=(--mpi="$MINIPS_SRUN_MPI"); fi ;;
    mpiexec)
        # mpiexec reads the nodes and the ranks per node from the Slurm allocation
        case "$(mpi_of_mpiexec)" in
            mpich)   if [ "$threads" = 1 ]; then bind=(-bind-to core); else bind=(-bind-to "core:$threads"); fi ;;
            intel)   bind=(-genv I_MPI_PIN on -genv I_MPI_PIN_CELL core -genv I_MPI_PIN_DOMAIN)
                     if [ "$threads" = 1 ]; then bind+=(core); else bind+=("$threads"); fi ;;
            openmpi) if [ "$threads" = 1 ]; then bind=(--bind-to core)
                     else bind=(--map-by "slot:PE=$threads" --bind-to core); fi ;;
        esac
        launch=(mpiexec -n "$ranks" "${bind[@]}") ;;
    *) echo "MINIPS_LAUNCHER=$launcher: give srun or mpiexec" >&2; exit 2 ;;
esac

resume=()
if [ -f "$out/checkpoint.h5" ]; then
    resume=(--resume "$out/checkpoint.h5")   # a requeued job: continue the same trajectory
fi
train=(python -m minips train
    --model convnet --data "${MINIPS_DATA:-fashion-mnist}" --val-fraction 0.1
    --algo pseudo-sync:predictor=local:staleness=1
    --epochs 3 --batch-size 16 --lr 0.16 --no-scale-lr --warmup-epochs 0.5
    --momentum 0.9 --nesterov --schedule cosine
    --checkpoint-every 200 --quiet
    --out "$out" "${resume[@]}" "$@")

echo "job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NUM_NODES:-?} node(s) ${SLURM_JOB_NODELIST:-?}:" \
     "$ranks ranks of $threads thread(s); $(date -Is)"
echo "+ ${launch[*]} ${train[*]}"
if [ "${MINIPS_DRY_RUN:-0}" = 1 ]; then exit 0; fi

# The launcher runs in the background so that this shell can take Slurm's signal
# (bash runs a trap only between commands, and `wait` is one it interrupts).
stop_requested=0
trap 'stop_requested=1; echo "SIGUSR1 from Slurm at $(date -Is): stopping the ranks"; kill -USR1 "$pid" 2>/dev/null' USR1
"${launch[@]}" "${train[@]}" &
pid=$!
status=0
while true; do
    wait "$pid"; status=$?
    # a status above 128 may be the trap interrupting `wait`, with the launcher still running
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
done
wait "$pid" 2>/dev/null; last=$?; if [ "$last" != 127 ]; then status=$last; fi

stopped=$(python -c 'import json, sys; print(json.load(open(sys.argv[1])).get("stopped") or "")' \
          "$out/summary.json" 2>/dev/null || true)
echo "launcher exit $status; stopped: ${stopped:-null} ($out/summary.json); $(date -Is)"
if [ "$stop_requested" = 1 ] && { [ "$stopped" = signal ] || [ "$status" != 0 ]; } && [ -f "$out/checkpoint.h5" ]; then
    echo "requeueing job $SLURM_JOB_ID: it resumes from $out/checkpoint.h5"
    scontrol requeue "$SLURM_JOB_ID"
    exit 0
fi
exit "$status"
