"""``trainledger``: the command line (SPEC §9).

One module per command group registers its commands here; no command module
imports another (what they share is in :mod:`trainledger.cli.common`). Every
command has ``--help``, ``--db URL`` and, where it prints figures, ``--json``;
exit status 0 on success, 2 with a one-line reason on bad input, 1 when the
ledger cannot be reached.
"""

from __future__ import annotations

import typer
from trainledger.cli import (
    budget,
    carbon,
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
    reports,
    runs,
    settings,
    slurm,
    track,
)
from trainledger.cli.common import OneLineUsageErrors

app = typer.Typer(help="trainledger: cost and resource accounting for distributed LLM training. Every command has --help.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False, cls=OneLineUsageErrors)



def _register_parts() -> None:
    """Commands that live with their part: ``train``/``data prepare`` in trainer/,
    ``dashboard`` in app/ (both importable without torch)."""
    from trainledger.app.cli import dashboard_command
    from trainledger.trainer.cli import data_app, train_command

    app.command("train")(train_command)
    app.command("dashboard")(dashboard_command)
    app.add_typer(data_app, name="data")


for _module in (db, demo, imports, runs, track, settings):
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
