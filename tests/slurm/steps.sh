#!/bin/sh
# The batch script of tests/slurm/test_slurm_steps.py: `sbatch steps.sh PROGRAM ARGS...` runs
# `srun PROGRAM ARGS...` twice, as two sequential steps of one job (arguments passed as they are).
srun "$@"
srun "$@"
