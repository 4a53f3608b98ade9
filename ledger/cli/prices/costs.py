"""``trainledger cost``: rent vs own comparisons."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from trainledger.cli.common import (
    DbOpt,
    JsonOpt,
    NowOpt,
    clock,
    command,
    decimal_option,
    emit,
    group,
    session,
)
from trainledger.errors import LedgerInputError

app = group("Rent vs own comparisons.")


@app.command("compare")
@command
def cost_compare(node_type: Annotated[Optional[str], typer.Option(help="Compare one node-month of this node type.")] = None,
                 utilization: Annotated[str, typer.Option(help="Time utilization 0..1 for --node-type.")] = "1",
                 month: Annotated[Optional[str], typer.Option(help="Compare the ledger's real usage of this month (YYYY-MM).")] = None,
                 own: Annotated[Optional[str], typer.Option(help="Own offer (default: the node type's).")] = None,
                 rent: Annotated[Optional[str], typer.Option(help="Elastic rent offer (default: the node type's).")] = None,
                 reserved: Annotated[Optional[str], typer.Option(help="Reserved rent offer, with --month.")] = None,
                 currency: Annotated[Optional[str], typer.Option("--currency", help="Present money in this ISO 4217 currency (see `trainledger fx`); default: the Settings currency once set.")] = None,
                 cost_basis: Annotated[str, typer.Option("--cost-basis", help="With --month: estimate (the ledger's) | billed: a reconciled month's rented lines at what its invoices billed.")] = "estimate",
                 db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Own vs rent: per node-month at a utilization (--node-type), or for a month of real usage (--month)."""
    from trainledger.money.account.compare import compare_month, compare_node_type
    from trainledger.reports.present import key_values, table

    if bool(node_type) == bool(month):
        raise LedgerInputError("cost compare: pass exactly one of --node-type NAME or --month YYYY-MM")
    with session(db) as s:
        if node_type:
            data = compare_node_type(s, node_type, decimal_option(utilization, "--utilization"), own=own, rent=rent,
                                     currency=currency)
        else:
            data = compare_month(s, month, own=own, rent=rent, reserved=reserved, now=clock(now), currency=currency)
            data = _with_billed(s, data, cost_basis, clock(now))

    def text(d):
        if "node_types" not in d:
            lines = [key_values(d)]
            if d["renting_always_cheaper"]:
                lines.append(f"\nRenting ({d['rent_offer']}) is cheaper at every utilization: owning costs more even at full use.")
            else:
                lines.append(f"\nOwning ({d['own_offer']}) wins above a time utilization of {float(d['break_even_utilization']):.1%}.")
            return "\n".join(lines)
        cols = ["node_type", "node_hours", "peak_nodes", "own_nodes", "actual_cost", "own_cost", "elastic_cost", "reserved_cost", "cheapest"]
        period = f" {d['period']}" if d.get("is_partial") else ""
        return f"{d['month']}{period} ({d['timezone']}, {d['currency']})\n" + table(d["node_types"], cols) + "\n\ntotal:\n" + key_values(d["total"])

    emit(data, as_json, text)


def _with_billed(s, data: dict, basis: str, now) -> dict:
    """The month's comparison with its invoices beside its total (``--cost-basis``, docs/INVOICES.md)."""
    from trainledger.money.invoice.billed import billed_node_types, month_billed, with_cost_basis

    billed = month_billed(s, data["month"], now)
    out = {**data, "total": with_cost_basis(data["total"], billed, basis, data["month"], data["currency"])}
    lines = billed_node_types(data.get("node_types") or [], billed, basis)  # each node type's line, billed
    if lines:
        out["node_types"] = [{**r, "actual_cost": lines[r["node_type"]]} if r.get("node_type") in lines else r
                             for r in data["node_types"]]
    return out


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="cost")
