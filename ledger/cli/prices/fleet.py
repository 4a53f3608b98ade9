"""``trainledger fleet``: the clusters held under own or reserved offers (list, add or change, remove)."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session
from trainledger.errors import LedgerInputError

app = group("Fleets: clusters held under own or reserved offers (their capacity is paid whether used or not).")

FLEET_COLUMNS = ["name", "offer", "kind", "node_count", "valid_from", "valid_to", "idle_share"]


def _date(value: Optional[str], flag: str) -> Optional[date]:
    if value is None or value == "":
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise LedgerInputError(f"{flag}: expected YYYY-MM-DD such as 2026-01-01, got {value!r}") from None


@app.command("list")
@command
def fleet_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every fleet: its offer, nodes and the dates it is held (valid to is exclusive; empty = still held)."""
    from trainledger.reports.present import table
    from trainledger.store.catalog.fleets import list_fleets

    with session(db) as s:
        rows = list_fleets(s)
    emit(rows, as_json, lambda r: table(r, FLEET_COLUMNS) if r else "no fleets; add one with `trainledger fleet set`")


@app.command("set")
@command
def fleet_set(name: Annotated[str, typer.Argument(help="Fleet name (a new name adds a fleet).")],
              offer: Annotated[Optional[str], typer.Option(help="Own or rent_reserved offer it is held under.")] = None,
              nodes: Annotated[Optional[int], typer.Option(help="Nodes held.", min=1, max=100000)] = None,
              valid_from: Annotated[Optional[str], typer.Option("--from", help="First day held (YYYY-MM-DD).")] = None,
              valid_to: Annotated[Optional[str], typer.Option("--to", help="Day it is no longer held (YYYY-MM-DD, exclusive); '' = still held.")] = None,
              idle_share: Annotated[Optional[str], typer.Option("--idle-share", help="How its idle is charged back: none (default: idle is its own line) | proportional | even | weights:<project=w,...> (docs/MONEY.md).")] = None,
              db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add a fleet, or change one: options left out keep the fleet's current values (all but --to are needed to add one)."""
    from trainledger.money.allocation.idle_share import check_policy, set_fleet_policy
    from trainledger.store.catalog.fleets import list_fleets, save_fleet

    with session(db) as s:
        current = next((f for f in list_fleets(s) if f["name"] == name), None)
        if current is None:
            missing = [flag for flag, v in (("--offer", offer), ("--nodes", nodes), ("--from", valid_from)) if v is None]
            if missing:
                raise LedgerInputError(f"{missing[0]}: needed to add the new fleet {name!r} (see `trainledger fleet set --help`)")
        else:
            offer = offer if offer is not None else current["offer"]
            nodes = nodes if nodes is not None else current["node_count"]
        if idle_share is not None:
            check_policy(s, idle_share)  # before anything is written
        start = _date(valid_from, "--from") or current["valid_from"]
        end = _date(valid_to, "--to") if valid_to is not None else (current["valid_to"] if current else None)
        result = save_fleet(s, name, offer, nodes, start, end, original=name if current else None)
        if idle_share is not None:
            set_fleet_policy(s, name, idle_share)
        row = next(f for f in list_fleets(s) if f["name"] == name)
    emit({"result": result, "fleet": row}, as_json,
         lambda d: f"{d['result']} fleet {name}: {d['fleet']['node_count']} nodes under {d['fleet']['offer']} "
                   f"from {d['fleet']['valid_from']}" + (f" to {d['fleet']['valid_to']}" if d["fleet"]["valid_to"] else "")
                   + f"; idle share: {d['fleet']['idle_share']}")


@app.command("remove")
@command
def fleet_remove(name: Annotated[str, typer.Argument(help="Fleet name.")], db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a fleet (every month it was held is reported without it; to stop holding one, use `fleet set NAME --to DATE`)."""
    from trainledger.store.catalog.fleets import remove_fleet

    with session(db) as s:
        remove_fleet(s, name)
    emit({"removed": name}, as_json, lambda d: f"removed fleet {d['removed']}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="fleet")
