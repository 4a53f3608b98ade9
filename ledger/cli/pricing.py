"""``trainledger pricing``: the hardware catalog and the offers (prices)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ledger.cli.common import DbOpt, JsonOpt, command, emit, group, session

app = group("Hardware catalog and offers (prices).")


@app.command("list")
@command
def pricing_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Node types and offers in the ledger."""
    from ledger.money.pricing import list_pricing
    from ledger.reports.present import table

    with session(db) as s:
        data = list_pricing(s)
    emit(data, as_json, lambda d: "node types:\n" + table(d["node_types"], ["name", "gpu_model", "gpus_per_node", "gpu_memory_gb", "peak_bf16_tflops", "network", "source"])
         + "\n\noffers:\n" + table(d["offers"], ["name", "node_type", "kind", "currency", "hourly_rate", "full_month_cost", "source"]))


@app.command("show")
@command
def pricing_show(name: Annotated[str, typer.Argument(help="Offer or node type name.")], db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """One offer or node type with every field and its derived rates."""
    from ledger.money.pricing import show_pricing
    from ledger.reports.present import key_values

    with session(db) as s:
        data = show_pricing(s, name)
    emit(data, as_json, key_values)


@app.command("import")
@command
def pricing_import(file: Annotated[Path, typer.Argument(help="TOML with [[node_type]] and/or [[offer]] tables (keys as in data/pricing.toml).")],
                   db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add or replace node types and offers; validated first, nothing written on error."""
    from ledger.store.presets import import_pricing_file

    with session(db) as s:
        counts = import_pricing_file(s, file)
    emit(counts, as_json, lambda c: f"imported {c['node_types']} node types and {c['offers']} offers from {file}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="pricing")
