"""How jobs and bills reach the ledger from the command line: imports, Slurm sync, the run wrapper, launched runs and sweeps, invoices."""
