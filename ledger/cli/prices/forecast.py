"""``trainledger forecast``: the month-end projection, and its back-test on the ledger's history."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, emit, session
from trainledger.errors import LedgerInputError

FIGURE_LABELS = {"spend": "spend", "idle_cost": "idle cost", "gpu_hours": "GPU-hours", "node_hours": "node-hours"}


def _parse_days(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise LedgerInputError(f"--days: comma-separated days of the month such as 7,14,21, got {text!r}") from None


def _forecast_text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import fmt_cell, table

    period = d["period"] if d["is_partial"] else "(ended: actual figures)"
    head = (f"{d['month']} {period} ({d['timezone']}, {d['currency']}); forecast at "
            f"{fmt_cell('now', d['now'])} UTC")
    cols = {"to_date": "to date", "expected": "month end (expected)", "p10": "p10", "p90": "p90"}
    rows = []
    for key, label in FIGURE_LABELS.items():
        kind = "cost" if key in ("spend", "idle_cost") else key
        rows.append({"figure": label, **{cols[c]: fmt_cell(kind, d[key][c]) for c in cols}})
    projects = [{"project": p["project"] or "(none)", **{cols[c]: fmt_cell("cost", p["cost"][c]) for c in cols}}
                for p in d["projects"]]
    parts = [head, table(rows), "", "cost per project:", table(projects)]
    parts += ["", f"running runs: {d['running_runs']}", f"method: {d['method']['text']}"]
    return "\n".join(parts)


def _backtest_text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import fmt_cell, table

    head = (f"back-test of the forecast ({d['window_days']}-day window) on {', '.join(d['months'])} "
            f"({d['timezone']}), from days {', '.join(map(str, d['days']))} of each month")
    spend = [{**r, **{k: fmt_cell("cost", r[k]) for k in ("forecast", "p10", "p90", "actual")}}
             for r in d["rows"] if r["figure"] == "spend"]
    return "\n".join([head, table(d["summary"]), "", "spend:",
                      table(spend, ["month", "day", "forecast", "p10", "p90", "actual", "error_pct", "in_range"])])


@command
def forecast_command(
        month: Annotated[Optional[str], typer.Option(help="YYYY-MM (default: the current month in the display time zone).")] = None,
        project: Annotated[Optional[str], typer.Option(help="Show this project only.")] = None,
        window: Annotated[int, typer.Option("--window", help="Days of run rate the rest of the month is projected from.")] = 7,
        backtest: Annotated[bool, typer.Option("--backtest", help="Instead: forecast every ended month from its first --days days and compare with what it cost.")] = False,
        days: Annotated[str, typer.Option(help="With --backtest: days of the month to forecast from.")] = "7,14,21",
        currency: Annotated[Optional[str], typer.Option(help="Present money in this currency (to date at each charge period's rate, the rest at today's; needs `trainledger fx set`); default: the Settings currency, else the offers'.")] = None,
        db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Month-end spend, idle cost, GPU-hours and cost per project: to date + the rest of the month at the
    run rate of the last --window days, with a p10-p90 range (method printed)."""
    from trainledger.money.outlook.forecast import forecast
    from trainledger.reports.backtest import backtest as run_backtest

    at = clock(now)
    with session(db) as s:
        if backtest:
            if month or project or currency:
                raise LedgerInputError("--backtest: tests every ended month; leave out --month, --project and --currency")
            data = run_backtest(s, days=_parse_days(days), window_days=window, now=at)
        else:
            data = forecast(s, month, now=at, window_days=window, project=project, currency=currency)
    emit(data, as_json, _backtest_text if backtest else _forecast_text)


def register(root: typer.Typer) -> None:
    root.command("forecast")(forecast_command)
