"""The ``trainledger`` command line: :mod:`trainledger.cli.main` registers one module per command group."""


def main() -> None:
    """Entry point of the ``trainledger`` console script."""
    from trainledger.cli.main import main as run

    run()
