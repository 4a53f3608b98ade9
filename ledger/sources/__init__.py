"""What feeds the ledger: our CSV and Slurm ``sacct`` import, Prometheus collect, the run journal."""
