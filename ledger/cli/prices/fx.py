"""``trainledger fx``: exchange rates for presenting money in another currency (``--currency``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session

app = group("Exchange rates: set, import and list them (reports convert each charge period at its rate).")

COLUMNS = ["base", "quote", "rate", "valid_from", "valid_to", "source"]


@app.command("set")
@command
def fx_set(base: Annotated[str, typer.Argument(help="ISO 4217 code of the currency converted from, e.g. CNY.")],
           quote: Annotated[str, typer.Argument(help="ISO 4217 code of the currency converted to, e.g. USD.")],
           rate: Annotated[str, typer.Argument(help="Units of QUOTE per 1 BASE, e.g. 0.1387 (> 0).")],
           valid_from: Annotated[str, typer.Option("--from", help="YYYY-MM-DD: the rate holds from the start of that day (display time zone) until the pair's next rate.")],
           source: Annotated[str, typer.Option(help="Where the rate comes from (kept with it).")] = "",
           db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Set 1 BASE = RATE QUOTE from a day (replaces the pair's rate of that day)."""
    from trainledger.store.catalog.fx import set_rate

    with session(db) as s:
        data = set_rate(s, base, quote, rate, valid_from, source)
    emit(data, as_json, lambda d: f"1 {d['base']} = {d['rate'].normalize():f} {d['quote']} from {d['valid_from']}")


@app.command("import")
@command
def fx_import(file: Annotated[Path, typer.Argument(help="CSV with a header base,quote,rate,valid_from[,source]; one rate per row.")],
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Import rates from a CSV: every row checked first, nothing written on error."""
    from trainledger.store.catalog.fx import import_rates

    with session(db) as s:
        data = import_rates(s, file)
    emit(data, as_json, lambda d: f"imported {d['rates']} rates from {file} ({d['added']} added, {d['replaced']} replaced)")


@app.command("list")
@command
def fx_list(base: Annotated[Optional[str], typer.Option(help="Only this base currency.")] = None,
            quote: Annotated[Optional[str], typer.Option(help="Only this quote currency.")] = None,
            db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Rates by pair and day (valid_to: the pair's next rate, exclusive)."""
    from trainledger.reports.present import table
    from trainledger.store.catalog.fx import list_rates

    with session(db) as s:
        rows = list_rates(s, base, quote)
    emit(rows, as_json, lambda r: table(r, COLUMNS) if r else "no exchange rates: add one with `trainledger fx set CNY USD 0.1387 --from 2026-11-01`")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="fx")
