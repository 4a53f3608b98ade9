"""``python -m ledger.cli ARGS``: the same as ``trainledger ARGS``."""

from ledger.cli.main import main

main()
