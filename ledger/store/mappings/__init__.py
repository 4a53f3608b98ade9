"""How outside records map onto the ledger: Slurm accounts and billing TRES (``slurm_map``, ``slurm_billing``) and
a provider's invoice resources (``invoice_map``). Imports the store's root modules and ``catalog``."""
