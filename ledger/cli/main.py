"""``trainledger``: the command line (SPEC §9).

One module per command group registers its commands here; no command module
imports another (what they share is in :mod:`trainledger.cli.common`). Every
command has ``--help``, ``--db URL`` and, where it prints figures, ``--json``;
exit status 0 on success, 2 with a one-line reason on bad input, 1 when the
ledger cannot be reached.

The global options come before the command (``trainledger -q report monthly
...``): ``--version``, ``--config PATH`` (:mod:`trainledger.store.config`),
``-q/--quiet``, ``-v/--verbose`` (``-vv``; :mod:`trainledger.cli.logs`),
``--no-progress``, and Typer's ``--install-completion`` / ``--show-completion``.
The root callback only records them: it reads no file and imports no heavy
library, so every ``--help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli import (
    budget,
    carbon,
    config,
    costs,
    db,
    demo,
    exporter,
    fleet,
    forecast,
    fx,
    goodput,
    goodput_ops,
    imports,
    metrics,
    plan,
    pricing,
    progress,
    reports,
    runs,
    settings,
    slurm,
    track,
)
from trainledger.cli.common import OneLineUsageErrors, fail, start_invocation

app = typer.Typer(help="trainledger: cost and resource accounting for distributed LLM training. Every command has --help; "
                       "global options (-q, -v, --config, --no-progress) go before the command.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True, cls=OneLineUsageErrors)


def _print_version(value: bool) -> None:
    """``--version``: ``trainledger X.Y.Z`` (the installed package's version), exit 0."""
    if value:
        import trainledger

        typer.echo(f"trainledger {trainledger.__version__}")
        raise typer.Exit()


@app.callback()
def global_options(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version (trainledger X.Y.Z) and exit.")] = False,
    config_file: Annotated[Optional[Path], typer.Option("--config", metavar="PATH", show_default=False,
                                                        help="Config file (TOML; keys db, currency, timezone, node_type). Default: $TRAINLEDGER_CONFIG, else config.toml in the user config directory (`trainledger config show` names it), if it exists.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Errors only: no warnings, no progress bars.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, show_default=False,
                                         help="More log lines on stderr: -v INFO (trainledger's and the libraries'), -vv DEBUG.")] = 0,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="Draw no progress bars (also: TRAINLEDGER_NO_PROGRESS=1).")] = False,
) -> None:
    """Record the global options for the command that follows (logging levels, progress bars, config file)."""
    from trainledger.cli import logs
    from trainledger.store import config as config_store

    if quiet and verbose:
        fail("--quiet and --verbose: choose one")
    if config_file is not None and "\0" in str(config_file):
        fail("--config: contains a NUL character")
    start_invocation()
    config_store.set_path(config_file)
    logs.configure(-1 if quiet else verbose)
    progress.set_enabled(not (quiet or no_progress))



def _register_parts() -> None:
    """Commands that live with their part: ``train``/``data prepare`` in trainer/,
    ``dashboard`` in app/ (both importable without torch)."""
    from trainledger.app.cli import dashboard_command
    from trainledger.trainer.cli import data_app, train_command

    app.command("train")(train_command)
    app.command("dashboard")(dashboard_command)
    app.add_typer(data_app, name="data")


for _module in (db, demo, imports, runs, track, settings, config):
    _module.register(app)
_register_parts()
for _module in (metrics, costs, reports, forecast, budget, exporter, pricing, fx, carbon, fleet, plan, slurm):
    _module.register(app)
goodput.register(app)
goodput_ops.register_commands(goodput.app)  # `goodput idle` and `goodput advise` (issue #25, h25b)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
