"""``python -m trainledger.cli ARGS``: the same as ``trainledger ARGS``."""

from trainledger.cli import main

main()
