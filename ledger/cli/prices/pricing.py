"""``trainledger pricing``: the hardware catalog and the offers (prices), with their price history."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, group, session
from trainledger.errors import LedgerInputError

app = group("Hardware catalog and offers (prices), and their price history.")

FromOpt = Annotated[Optional[str], typer.Option("--from", help="When the new prices take effect: YYYY-MM-DD (start of that day in the display time zone) or an ISO date-time. Default: now.")]
RetroOpt = Annotated[bool, typer.Option("--retroactive", help="Allow a --from in the past: the months from then on are re-costed at the new prices (asks to confirm, naming them).")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="With --retroactive: do not ask for the confirmation.")]


@app.command("list")
@command
def pricing_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Node types and offers in the ledger."""
    from trainledger.money.rates.pricing import list_pricing
    from trainledger.reports.present import table

    with session(db) as s:
        data = list_pricing(s)
    emit(data, as_json, lambda d: "node types:\n" + table(d["node_types"], ["name", "gpu_model", "gpus_per_node", "gpu_memory_gb", "peak_bf16_tflops", "network", "source"])
         + "\n\noffers:\n" + table(d["offers"], ["name", "node_type", "kind", "currency", "hourly_rate", "full_month_cost", "source"]))


@app.command("show")
@command
def pricing_show(name: Annotated[str, typer.Argument(help="Offer or node type name.")], db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """One offer or node type with every field and its derived rates."""
    from trainledger.money.rates.pricing import show_pricing
    from trainledger.reports.present import key_values

    with session(db) as s:
        data = show_pricing(s, name)
    emit(data, as_json, key_values)


@app.command("import")
@command
def pricing_import(file: Annotated[Path, typer.Argument(help="TOML with [[node_type]] and/or [[offer]] tables (keys as in data/pricing.toml).")],
                   valid_from: FromOpt = None, retroactive: RetroOpt = False, yes: YesOpt = False,
                   db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add node types and offers; an existing offer with other prices gets a new price version (from
    --from, else now; an entry's own valid_from wins). Validated first, nothing written on error."""
    from trainledger.store.catalog.presets import import_pricing_file

    with session(db) as s:
        plans: list = []
        counts = import_pricing_file(s, file, valid_from=_from(s, valid_from), plans=plans)
        _confirm(s, plans, retroactive, yes)
    emit(counts, as_json, lambda c: f"imported {c['node_types']} node types and {c['offers']} offers from {file}")


@app.command("set")
@command
def pricing_set(name: Annotated[str, typer.Argument(help="Offer name.")],
                assignments: Annotated[list[str], typer.Argument(help="FIELD=VALUE, e.g. price_per_node_month=4380 (FIELD= clears a field).", show_default=False)],
                valid_from: FromOpt = None, retroactive: RetroOpt = False, yes: YesOpt = False,
                note: Annotated[str, typer.Option(help="Why the price changed (kept with the version).")] = "",
                db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Change an offer's prices from a date (default now): adds a price version; past months keep theirs."""
    from trainledger.money.rates.pricing import set_prices

    with session(db) as s:
        plans: list = []
        set_prices(s, name, assignments, _from(s, valid_from), plans, note)
        added = _confirm(s, plans, retroactive, yes)
    data = {"offer": name, "versions_added": added}
    emit(data, as_json, lambda d: f"{name}: no change (the prices in force are the same)" if not d["versions_added"] else
         "\n".join(f"{name}: new prices from {v['valid_from']:%Y-%m-%d %H:%M} UTC"
                   + (f"; re-costed {', '.join(v['months_changed'])}" if v["months_changed"] else "") for v in d["versions_added"]))


@app.command("history")
@command
def pricing_history(name: Annotated[str, typer.Argument(help="Offer name.")], db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """An offer's price versions: each with the instant it took effect and the next one's (valid to)."""
    from trainledger.reports.present import table
    from trainledger.store.catalog.prices import history
    from trainledger.store.models import PRICE_FIELDS

    with session(db) as s:
        data = history(s, name)
    cols = ["version", "valid_from", "valid_to", *[f for f in PRICE_FIELDS if any(v.get(f) is not None for v in data["versions"])], "note"]
    emit(data, as_json, lambda d: f"{d['offer']} ({d['kind']}, {d['currency']}; times UTC)\n" + table(d["versions"], cols))


def _from(s, text: Optional[str]):
    from trainledger.store.catalog.prices import parse_valid_from
    from trainledger.store.settings import display_timezone

    return parse_valid_from(text, display_timezone(s))


def _confirm(s, plans: list, retroactive: bool, yes: bool) -> list[dict[str, Any]]:
    """Refuse a past --from without --retroactive; with it, ask (naming the months) unless --yes."""
    from trainledger.money.rates.pricing import confirm_versions

    added = confirm_versions(s, plans, retroactive)
    months = sorted({m for v in added for m in v["months_changed"]})
    if months and not yes:
        try:
            ok = typer.confirm(f"The new prices re-cost {', '.join(months)}: their reports will change. Continue?", default=False, err=True)
        except typer.Abort:
            ok = False
        if not ok:
            raise LedgerInputError(f"--retroactive: not confirmed (it would re-cost {', '.join(months)}); nothing written; "
                                   "pass --yes to confirm without a prompt")
    return added


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="pricing")
