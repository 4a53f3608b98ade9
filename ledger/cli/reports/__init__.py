"""What the ledger says, from the command line: the reports, chargeback, goodput, the glossary, collected metrics and the exporter."""
