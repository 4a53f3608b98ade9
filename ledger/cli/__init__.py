"""The ``trainledger`` command line: :mod:`trainledger.cli.commands` registers one module per command group."""


def main() -> None:
    """Entry point of the ``trainledger`` console script (and of ``python -m trainledger.cli``)."""
    from trainledger.process import tune_gc

    tune_gc()  # before the imports of the command it runs
    from trainledger.cli.commands import main as run

    run()
