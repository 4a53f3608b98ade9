"""``trainledger goodput idle`` (where the month's idle sits, hour by hour: trainledger.money.goodput.occupancy) and
``trainledger goodput advise`` (checkpoint intervals per run family: trainledger.money.outlook.advice)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, decimal_option, emit, session

CurrencyOpt = Annotated[Optional[str], typer.Option("--currency", help="Present money in this ISO 4217 currency (each charge period at its exchange rate). Default: the Settings currency once set, else the offers' own.")]


@command
def goodput_idle(month: Annotated[str, typer.Option(help="YYYY-MM (calendar month in the display time zone).")],
                 hours: Annotated[bool, typer.Option("--hours", help="Also list every hour (always in --json).")] = False,
                 currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Where idle sits: the owned and reserved fleets' held vs used node-hours per hour and the idle cost of each
    hour (display time zone); the hours add up to the monthly report's idle cost to the cent.

    Prints the fleets, each day and each hour of the day; --json adds every hour (the dashboard's heat map)."""
    from trainledger.money.goodput.occupancy import month_occupancy, occupancy_to_dict

    with session(db) as s:
        occ = month_occupancy(s, month, now=clock(now), currency=currency)
    emit(occupancy_to_dict(occ, hours=True), as_json, lambda d: _text(d, hours))


def _text(d: dict[str, Any], hours: bool) -> str:
    from trainledger.reports.present import key_values, table

    head = {"month": d["month"] + (f" ({d['period']})" if d["period"] else ""), "timezone": d["timezone"],
            "currency": d["currency"], "held_node_hours": d["held_node_hours"], "used_node_hours": d["used_node_hours"],
            "idle_node_hours": d["idle_node_hours"], "idle_cost": d["idle_cost"], "recovery_cost": d["recovery_cost"]}
    cols = ["held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost", "recovery_cost"]
    parts = [key_values(head),
             "\nfleets\n" + table(d["fleets"], ["offer", "kind", *cols[:4]]),
             "\nrecovery: idle the interrupted chains own (gap from the interruption to the resumed run)\n"
             + table(d["recovery"], ["chain", "run_id", "nodes", "start", "end", "recovery_cost"]),
             "\nper day\n" + table(d["days"], ["day", *cols, "costliest_hour"]),
             "\nper hour of the day (the month's hours added up)\n" + table(d["hours_of_day"], ["hour", *cols])]
    if hours:
        parts.append("\nevery hour\n" + table(d["hours"], ["start", "day", "hour", *cols]))
    return "\n".join(parts)


@command
def goodput_advise(month: Annotated[Optional[str], typer.Option(help="YYYY-MM: the last month of the window (default: this month, to date).")] = None,
                   months: Annotated[int, typer.Option("--months", help="Months in the window, ending with --month.")] = 3,
                   save_seconds: Annotated[Optional[str], typer.Option("--save-seconds", help="Assume this blocking checkpoint save time (seconds) instead of the measured one.")] = None,
                   currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Checkpoint advice per run family (node type × nodes): MTBI from the ledger's interruptions, the measured save
    time, the current and the Young/Daly interval sqrt(2 · MTBI · save time), and the lost-work and checkpoint
    cost per month each would have given over the window (docs/GOODPUT.md, "Checkpoint advice")."""
    from trainledger.money.outlook.advice import advise

    save = decimal_option(save_seconds, "--save-seconds") if save_seconds is not None else None
    with session(db) as s:
        out = advise(s, month, months=months, save_seconds=save, currency=currency, now=clock(now))
    emit(out, as_json, _advice_text)


def _advice_text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import key_values

    keys = ["runs", "interruptions", "exposure_hours", "mtbi_hours", "save_seconds", "save_seconds_basis",
            "current_interval_hours", "suggested_interval_hours", "current_monthly_lost_work_cost",
            "suggested_monthly_lost_work_cost", "current_monthly_checkpoint_cost", "suggested_monthly_checkpoint_cost",
            "monthly_saving_cost"]
    blocks = [f"months {', '.join(d['months'])} ({d['timezone']}), money in {d['currency']}; model: {d['model']}"]
    if not d["families"]:
        blocks.append("no run ended in these months: nothing to advise")
    for f in d["families"]:
        blocks.append(f"\n{f['node_type']} x {f['nodes']} nodes" + (f": {f['note']}" if f["note"] else "") + "\n"
                      + key_values({k: f[k] for k in keys}))
    return "\n".join(blocks)


def register_commands(group: typer.Typer) -> None:
    """Add ``idle`` and ``advise`` to the ``goodput`` command group."""
    group.command("idle")(goodput_idle)
    group.command("advise")(goodput_advise)
