"""The ``trainledger`` command line: :mod:`ledger.cli.main` registers one module per command group."""


def main() -> None:
    """Entry point of the ``trainledger`` console script."""
    from ledger.cli.main import main as run

    run()


def __getattr__(name: str):
    """``from ledger.cli import app`` (the Typer application), as before this was a package."""
    if name == "app":
        import importlib

        return importlib.import_module("ledger.cli.main").app
    raise AttributeError(f"module 'ledger.cli' has no attribute {name!r}")
