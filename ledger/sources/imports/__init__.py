"""Jobs that reach the ledger from outside: CSV and Slurm (sacct) imports, a live Slurm sync, local time zones of imported files and the admission of imported rows."""
