#!/bin/sh
# The batch script of the wrapped jobs: `sbatch srun.sh [--wait-for FILE] PROGRAM ARGS...` waits until FILE
# exists (if given; a job doing its set-up), then runs `srun PROGRAM ARGS...` with the arguments as passed.
if [ "$1" = "--wait-for" ]; then
  while [ ! -e "$2" ]; do sleep 0.2; done
  shift 2
fi
exec srun "$@"
