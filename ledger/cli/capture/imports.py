"""``trainledger import``: runs from our CSV or Slurm ``sacct`` output, with a receipt."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli import progress
from trainledger.cli.common import DbOpt, JsonOpt, command, emit

DstOpt = Annotated[Optional[str], typer.Option("--dst", help="How to read a local time that a DST change skips or repeats: earliest | latest. Default: a sacct record is skipped and counted in the receipt (--strict: the file is refused); our CSV is refused, naming the row.", show_default=False)]


@command
def import_(file: Annotated[Path, typer.Argument(help="Our runs CSV, or Slurm `sacct --parsable2` output; - reads standard input.")],
            node_type: Annotated[Optional[str], typer.Option(help="One node type for every row (the shortcut; else the CSV's node_type column, or for sacct the Slurm mapping: `trainledger slurm map`).")] = None,
            offer: Annotated[Optional[str], typer.Option(help="Offer the runs were paid under (default: the fleet, else elastic rent).")] = None,
            tz: Annotated[Optional[str], typer.Option("--tz", help="Time zone of times without an offset (default: the ledger's display time zone).")] = None,
            fmt: Annotated[str, typer.Option("--format", help="auto | csv | sacct")] = "auto",
            cluster: Annotated[str, typer.Option(help="Slurm cluster name, to keep job ids of several clusters apart (run ids slurm-CLUSTER-JOBID).")] = "",
            strict: Annotated[bool, typer.Option("--strict", help="Refuse the whole file if any row cannot be costed (no mapping, uneven GPU spread, unknown state), instead of skipping it with a reason.")] = False,
            dst: DstOpt = None,
            by_node: Annotated[bool, typer.Option("--by-node", help="With --node-type: cost sacct jobs by whole nodes (uneven GPU spreads and jobs without GPUs too).")] = False,
            db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Import runs and print a receipt (read, imported, updated, already present, skipped by reason).

    The file is validated whole before anything is written: a malformed file
    (bad header, unparsable time, wrong column count, a bad value) is refused
    with FILE:LINE and nothing is imported. A well-formed Slurm record that
    cannot be costed is skipped and listed in the receipt (--strict: refused).
    """
    from trainledger.sources.imports import csv_import, importer, slurm
    from trainledger.store.db import get_engine
    from trainledger.store.settings import parse_timezone

    opts = importer.ImportOptions(node_type=node_type, offer=offer, tz=parse_timezone(tz) if tz else None, fmt=fmt,
                                  cluster=cluster, strict=strict, dst=_dst(dst), by_node=by_node)
    name = "stdin" if str(file) == "-" else file.name
    with progress.bar(f"reading {name}") as bar:
        report = bar.staged({"read": f"reading {name}", "write": f"writing {name}"})
        receipt = importer.import_file(get_engine(db), file, opts, {"csv": csv_import.parse_csv, "sacct": slurm.parse_sacct},
                                       progress=report if bar.drawn else None)
    emit(receipt.as_dict(), as_json, importer.receipt_text)


def _dst(value: Optional[str]) -> str:
    from trainledger.errors import LedgerInputError

    if value is None:
        return "report"  # sacct: skipped with a counted reason (--strict refuses); our CSV: refused
    if value not in ("earliest", "latest"):
        raise LedgerInputError(f"--dst: expected earliest or latest, got {value!r}")
    return value


def register(root: typer.Typer) -> None:
    root.command("import")(import_)
