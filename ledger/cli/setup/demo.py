"""``trainledger demo``: the seed scenario's demo history and a background strategy sweep."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from trainledger.cli import progress
from trainledger.cli.common import JsonOpt, command, emit, session

DemoDbOpt = Annotated[Optional[str], typer.Option("--db", help="Ledger URL to fill. Default: the demo's own ledger, demo.db in the user data dir (never $TRAINLEDGER_DB_URL or your ledger); `trainledger dashboard --demo` opens it.", show_default=False)]


@command
def demo(db: DemoDbOpt = None,
         end_month: Annotated[Optional[str], typer.Option(help="Last month of the history (YYYY-MM); default this month. A month before this one gets no sweep.")] = None,
         no_sweep: Annotated[bool, typer.Option("--no-sweep", help="Only the history: start no background strategy sweep.")] = False,
         as_json: JsonOpt = False) -> None:
    """Fill the demo's own ledger (demo.db in the user data dir, or an empty --db) with six months of clearly
    labelled demo history (seed scenario), then start a small real strategy sweep (dp, zero2, pp, tp, 3d; a few
    steps each) on this machine in the background. Open it with `trainledger dashboard --demo`."""
    from trainledger.demo import generate_demo, start_demo_sweep, sweep_unavailable
    from trainledger.money.rates.months import parse_month
    from trainledger.store.db import redact_url, resolve_url
    from trainledger.store.defaults import demo_ledger_url

    if end_month:
        parse_month(end_month)
    url = resolve_url(db) if db else demo_ledger_url()  # never the user's ledger unless --db names it
    with progress.bar("demo history", unit="steps") as bar, session(url) as s:
        result = generate_demo(s, end_month=end_month, progress=bar if bar.drawn else None)
    result = {**result, "ledger": redact_url(url)}
    sweep = None
    if result.get("already_present"):
        emit(result, as_json, lambda r: f"demo ledger {r['ledger']} already present ({r['runs']} runs); nothing added")
        return
    if not no_sweep:
        why = sweep_unavailable(end_month)
        sweep = {"started": False, "reason": why} if why else {"started": True, **start_demo_sweep(url)}
    result = {**result, "sweep": sweep}

    def text(r):
        out = (f"demo ledger {r['ledger']}: {r['runs']} runs over {r['months']} months on the 8-node RTX 4090 cluster "
               "(run ids demo-*), with every-month budgets for the team and both projects (`trainledger budget check`); open it with "
               f"`trainledger dashboard{'' if db else ' --demo'}`" + (f" --db {r['ledger']}" if db else ""))
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
