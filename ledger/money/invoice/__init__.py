"""Invoices: matching a provider's invoice lines to the ledger's expected charges, and the reconciliation."""
