#!/bin/bash
# Pseudo-synchronous SGD on a Slurm cluster with the cluster's own MPI.
#
#   sbatch examples/slurm_pseudo_sync.sh            # first submission
#   (requeued jobs resume from runs/slurm-$SLURM_JOB_NAME/checkpoint.h5)
#
# Before the first run, install minips against the site's MPI (once, on a login node):
#   module load openmpi
#   python -m venv ~/venvs/minips && . ~/venvs/minips/bin/activate
#   pip install -e ".[test]" && MPICC=mpicc pip install --no-binary mpi4py mpi4py
#   python -m minips data fashion-mnist --from /path/to/idx --out data/fashion-mnist.h5
#
#SBATCH --job-name=minips-psync
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=16          # one rank per core; minips gives each rank cores/ranks threads
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120             # SIGTERM 2 min before the limit: ranks checkpoint and exit 0
#SBATCH --requeue
#SBATCH --output=%x-%j.out

set -euo pipefail
module load openmpi 2>/dev/null || true
. ~/venvs/minips/bin/activate

OUT=runs/slurm-$SLURM_JOB_NAME
RESUME=()
if [ -f "$OUT/checkpoint.h5" ]; then
    RESUME=(--resume "$OUT/checkpoint.h5")   # continue the same trajectory after a requeue
fi

# srun starts the ranks through PMI/PMIx; minips sees them as an MPI job.
# --cpu-bind=cores pins each rank to its core (unbound ranks run at uneven speeds).
srun --cpu-bind=cores python -m minips train \
    --model convnet --data fashion-mnist \
    --algo pseudo-sync --predictor adaptive --staleness 1 \
    --epochs 10 --batch-size 32 --lr 0.01 --scale-lr --warmup-epochs 1 \
    --checkpoint-every 200 --check-replicas 500 --quiet \
    --out "$OUT" "${RESUME[@]}"

# The same with the MPI's own launcher instead of srun:
#   mpiexec -n $SLURM_NTASKS -bind-to core python -m minips train ...
