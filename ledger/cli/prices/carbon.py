"""``trainledger carbon``: grid carbon intensity per node type (its site) or for the whole ledger."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session

app = group("Grid carbon intensity (gCO2e/kWh) for CO2e per run; without one, a labelled default is assumed.")

COLUMNS = ["scope", "g_per_kwh", "location", "valid_from", "valid_to", "assumed", "source"]


@app.command("set")
@command
def carbon_set(g_per_kwh: Annotated[str, typer.Argument(help="Grams of CO2e per kWh drawn (> 0), e.g. 581.")],
               valid_from: Annotated[str, typer.Option("--from", help="YYYY-MM-DD: from the start of that day (display time zone).")],
               node_type: Annotated[Optional[str], typer.Option(help="Only this node type (the grid of its site); default: every node type without its own.")] = None,
               location: Annotated[str, typer.Option(help="Site or grid region, e.g. CN or CN-North (shown in model cards).")] = "",
               source: Annotated[str, typer.Option(help="Where the figure comes from.")] = "",
               db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Set the grid carbon intensity from a day (replaces the one of that day and scope)."""
    from trainledger.store.catalog.carbon import set_intensity

    with session(db) as s:
        data = set_intensity(s, g_per_kwh, valid_from, node_type, location, source)
    emit(data, as_json, lambda d: f"{d['scope']}: {d['g_per_kwh'].normalize():f} gCO2e/kWh from {d['valid_from']}"
         + (f" ({d['location']})" if d["location"] else ""))


@app.command("list")
@command
def carbon_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The intensities set, and the default assumed where none is."""
    from trainledger.reports.present import table
    from trainledger.store.catalog.carbon import list_intensities

    with session(db) as s:
        rows = list_intensities(s)
    emit(rows, as_json, lambda r: table(r, COLUMNS))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="carbon")
