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
import typer.main
from trainledger.cli import progress
from trainledger.cli.common import OneLineUsageErrors, defer_coercion, fail, start_invocation

#: each top-level command → the module of :mod:`trainledger.cli` that registers it, by its sub-room (``setup``: the
#: ledger itself; ``capture``: how jobs and bills get in; ``prices``: what things cost; ``reports``: what the ledger
#: says; ``parts``: the trainer's and the dashboard's own commands), in the order ``--help`` lists them. A command's module is imported
#: when that command runs, so ``trainledger run`` does not load the other twenty (tests/test_cli.py checks
#: that this table is what the modules register).
COMMANDS = {"demo": "setup.demo", "import": "capture.imports", "launch": "capture.runs", "sync": "capture.runs",
            "sweep": "capture.runs", "run": "capture.track", "settings": "setup.settings", "train": "parts",
            "dashboard": "parts", "collect": "reports.metrics", "forecast": "prices.forecast",
            "exporter": "reports.exporter", "db": "setup.db", "runs": "capture.runs", "config": "setup.config",
            "audit": "setup.audit", "users": "setup.users",
            "data": "parts", "cost": "prices.costs", "report": "reports.reports", "budget": "prices.budget",
            "pricing": "prices.pricing", "fx": "prices.fx", "carbon": "prices.carbon", "fleet": "prices.fleet",
            "plan": "prices.plan", "slurm": "capture.slurm", "goodput": "reports.goodput",
            "glossary": "reports.glossary", "invoice": "capture.invoice"}


def _register(module: str, root: typer.Typer) -> None:
    """Register one module's commands on ``root``."""
    import importlib

    if module == "parts":  # commands that live with their part (both importable without torch)
        from trainledger.app.serving.cli import dashboard_command
        from trainledger.trainer.cli import data_app, train_command

        root.command("train")(train_command)
        root.command("dashboard")(dashboard_command)
        root.add_typer(data_app, name="data")
        return
    mod = importlib.import_module(f"trainledger.cli.{module}")
    mod.register(root)
    if module == "reports.goodput":
        from trainledger.cli.reports import goodput_ops

        goodput_ops.register_commands(mod.app)  # `goodput idle` and `goodput advise` (issue #25, h25b)


_LOADED: dict[str, dict] = {}  # module → its click commands by name


def _click_commands(module: str) -> dict:
    """The click commands ``module`` registers, built once per process."""
    if module not in _LOADED:
        holder = typer.Typer(add_completion=False)
        holder.callback()(lambda: None)  # a group, even for a module with one command
        _register(module, holder)
        _LOADED[module] = {name: defer_coercion(cmd) for name, cmd in typer.main.get_command(holder).commands.items()}
    return _LOADED[module]


class LazyCommands(OneLineUsageErrors):
    """The root group: lists :data:`COMMANDS` and loads a command's module only when it is asked for."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str):
        if name not in self.commands and name in COMMANDS:
            self.commands.update({k: v for k, v in _click_commands(COMMANDS[name]).items() if k not in self.commands})
        return self.commands.get(name)

app = typer.Typer(help="trainledger: cost and resource accounting for distributed LLM training. Every command has --help; "
                       "global options (-q, -v, --config, --no-progress) go before the command.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=True, cls=LazyCommands)


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



def main() -> None:
    app()


if __name__ == "__main__":
    main()
