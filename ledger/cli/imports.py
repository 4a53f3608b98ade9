"""``trainledger import``: finished runs from our CSV or Slurm ``sacct`` output."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ledger.cli.common import DbOpt, JsonOpt, command, emit, session
from ledger.errors import LedgerInputError


@command
def import_(file: Annotated[Path, typer.Argument(help="Our runs CSV, or Slurm `sacct --parsable2` output.")],
            node_type: Annotated[Optional[str], typer.Option(help="Node type for rows without one (required for sacct).")] = None,
            offer: Annotated[Optional[str], typer.Option(help="Offer the runs were paid under (default: the fleet, else elastic rent).")] = None,
            tz: Annotated[Optional[str], typer.Option("--tz", help="Time zone of times without an offset (default: the ledger's display time zone).")] = None,
            fmt: Annotated[str, typer.Option("--format", help="auto | csv | sacct")] = "auto",
            cluster: Annotated[str, typer.Option(help="Slurm cluster name, to keep job ids of several clusters apart.")] = "",
            db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Import finished runs; one bad row rejects the whole file and nothing is written."""
    from ledger.sources.importer import import_runs
    from ledger.store.settings import display_timezone, parse_timezone

    if fmt not in ("auto", "csv", "sacct"):
        raise LedgerInputError(f"--format: expected auto, csv or sacct, got {fmt!r}")
    with session(db) as s:
        zone = parse_timezone(tz) if tz else display_timezone(s)
        res = import_runs(s, file, node_type=node_type, offer=offer, tz=zone, fmt=fmt, cluster=cluster)
    out = {"format": res.format, "imported": res.imported, "already_present": res.already_present, "skipped": res.skipped}

    def text(o):
        extra = "".join(f", skipped {n} {why}" for why, n in o["skipped"].items())
        return f"imported {o['imported']} runs ({o['format']}), {o['already_present']} already in the ledger{extra}"

    emit(out, as_json, text)


def register(root: typer.Typer) -> None:
    root.command("import")(import_)
