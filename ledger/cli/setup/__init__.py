"""The ledger itself from the command line: create and upgrade it (``db``), the config file (``config``), its settings and the demo."""
