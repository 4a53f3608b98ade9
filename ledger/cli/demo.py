"""``trainledger demo``: the seed scenario's demo history and a background strategy sweep."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, command, emit, session


@command
def demo(db: DbOpt = None,
         end_month: Annotated[Optional[str], typer.Option(help="Last month of the history (YYYY-MM); default this month. A month before this one gets no sweep.")] = None,
         no_sweep: Annotated[bool, typer.Option("--no-sweep", help="Only the history: start no background strategy sweep.")] = False,
         as_json: JsonOpt = False) -> None:
    """Fill an empty ledger with six months of clearly labelled demo history (seed scenario), then start a
    small real strategy sweep (dp, zero2, pp, tp, 3d; a few steps each) on this machine in the background."""
    from trainledger.demo import generate_demo, start_demo_sweep, sweep_unavailable
    from trainledger.money.months import parse_month
    from trainledger.store.db import resolve_url

    if end_month:
        parse_month(end_month)
    with session(db) as s:
        result = generate_demo(s, end_month=end_month)
    sweep = None
    if result.get("already_present"):
        emit(result, as_json, lambda r: f"demo ledger already present ({r['runs']} runs); nothing added")
        return
    if not no_sweep:
        why = sweep_unavailable(end_month)
        sweep = {"started": False, "reason": why} if why else {"started": True, **start_demo_sweep(resolve_url(db))}
    result = {**result, "sweep": sweep}

    def text(r):
        out = (f"demo ledger: {r['runs']} runs over {r['months']} months on the 8-node RTX 4090 cluster (run ids demo-*), "
               "with every-month budgets for the team and both projects (`trainledger budget check`)")
        sw = r["sweep"]
        if sw and sw["started"]:
            out += (f"\nstrategy sweep {sw['sweep_id']} ({', '.join(sw['strategies'])}; {sw['steps']} steps each) "
                    f"running in the background (pid {sw['pid']}, log {sw['log']}): see the dashboard's Strategies page, "
                    f"or `trainledger report weekly --sweep {sw['sweep_id']}` when it is done")
        elif sw:
            out += f"\nno strategy sweep: {sw['reason']}"
        return out

    emit(result, as_json, text)


def register(root: typer.Typer) -> None:
    root.command("demo")(demo)
