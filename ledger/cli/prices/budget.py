"""``trainledger budget set|list|remove|check``: spending limits per project or team-wide.

``budget check`` prints one line per budget of the month and exits 1 when any is
at risk (the month-end forecast is above it, or spent to date has reached its
``--threshold`` percent) or over (spent to date above it), so that cron can mail
the lines::

    0 8 * * *  trainledger budget check || true   # cron mails what it prints
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, emit, group, session
from trainledger.errors import LedgerInputError

app = group("Budgets per project or for the whole team, and where the month stands against them.")

ProjectOpt = Annotated[Optional[str], typer.Option("--project", help="The project (leave out for a team-wide budget).")]
STATE_TEXT = {"ok": "ok", "at_risk": "AT RISK", "over": "OVER"}


@app.command("set")
@command
def budget_set(amount: Annotated[Optional[str], typer.Argument(help="The budget, in --currency (default: the ledger's currency).", show_default=False)] = None,
               project: ProjectOpt = None,
               month: Annotated[Optional[str], typer.Option(help="YYYY-MM: a budget for that month only (it replaces the every-month one there).")] = None,
               monthly: Annotated[Optional[str], typer.Option("--monthly", help="AMOUNT: a budget for every month (the default when AMOUNT is given alone).", show_default=False)] = None,
               currency: Annotated[Optional[str], typer.Option(help="The amount's currency (default: the offers'); another needs an exchange rate to theirs (`trainledger fx set`).")] = None,
               threshold: Annotated[Optional[str], typer.Option("--threshold", metavar="PCT", help="Alert threshold, 1 to 100 percent of the amount: the budget is at risk once spent to date reaches it (default 100: only when the month-end forecast is above the amount).", show_default=False)] = None,
               db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Add or replace a budget: `budget set 20000 --project llm --month 2026-12 --threshold 80`, `budget set --monthly 60000`."""
    from trainledger.money.outlook.budgets import set_budget
    from trainledger.reports.present import key_values

    if monthly is not None and month is not None:
        raise LedgerInputError("--monthly: a budget is for every month (--monthly AMOUNT) or for one (--month YYYY-MM AMOUNT), not both")
    if (amount is None) == (monthly is None):
        raise LedgerInputError("AMOUNT: give the amount once: `budget set AMOUNT [--month YYYY-MM]` or `budget set --monthly AMOUNT`")
    with session(db) as s:
        row = set_budget(s, amount if amount is not None else monthly, project=project, month=month, currency=currency,
                         threshold=threshold)
    emit(row, as_json, lambda r: key_values(r))


@app.command("list")
@command
def budget_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every budget: scope, period (monthly or YYYY-MM), amount, currency, alert threshold (percent)."""
    from trainledger.money.outlook.budgets import list_budgets
    from trainledger.reports.present import table

    with session(db) as s:
        rows = list_budgets(s)
    emit(rows, as_json, lambda r: table([{**x, "project": x["project"] or "(team)"} for x in r],
                                        ["project", "period", "amount", "currency", "threshold_pct", "updated_at"])
         if r else "no budgets; add one with `trainledger budget set AMOUNT [--project P] [--month YYYY-MM]`")


@app.command("remove")
@command
def budget_remove(project: ProjectOpt = None,
                  month: Annotated[Optional[str], typer.Option(help="YYYY-MM: that month's budget (default: the every-month one).")] = None,
                  db: DbOpt = None) -> None:
    """Remove a budget (the every-month one unless --month is given)."""
    from trainledger.money.outlook.budgets import remove_budget

    with session(db) as s:
        remove_budget(s, project=project, month=month)
    typer.echo(f"removed the {'every-month' if month is None else month} budget of {project or 'the team'}")


def check_lines(d: dict[str, Any]) -> list[str]:
    """One line per budget: state, spent to date (of its threshold when one is set), the forecast and the crossing day."""
    from trainledger.reports.present import fmt_cell

    out = []
    for b in d["budgets"]:
        scope = b["project"] or "(team)"
        pct = b.get("threshold_pct", 100)
        threshold = f", threshold {pct}%" if pct < 100 else ""
        c = {k: fmt_cell("cost", v) for k, v in b["cost"].items()}
        line = (f"{STATE_TEXT[b['state']]:<7} {scope}  {d['month']} {d['period']}: spent {c['to_date']} "
                f"of {fmt_cell('cost', b['amount'])} {b['currency']} ({fmt_cell('used_pct', b['used_pct'])}{threshold}); month end "
                f"{c['expected']} expected (p10 {c['p10']}, p90 {c['p90']})")
        if b["state"] == "over" and b["crossed_on"]:
            line += f"; over since {b['crossed_on']}"
        elif b["state"] == "at_risk" and b["crossed_on"]:
            line += f"; crosses the budget on {b['crossed_on']}"
        elif b["p90_above"] and not b.get("threshold_reached"):
            line += "; p90 above the budget"
        if b["state"] == "at_risk" and b.get("threshold_reached"):
            line += f"; spent to date has reached its {pct}% threshold"
        out.append(line)
    return out


@app.command("check")
@command
def budget_check(month: Annotated[Optional[str], typer.Option(help="YYYY-MM (default: the current month).")] = None,
                 window: Annotated[int, typer.Option("--window", help="Days of run rate the forecast uses.", min=1, max=90)] = 7,
                 currency: Annotated[Optional[str], typer.Option(help="Present money in this currency (budgets set in another converted at today's rate); default: the Settings currency, else the offers'.")] = None,
                 db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """One line per budget (ok / AT RISK / OVER); exit 1 when any budget is at risk or over (for cron)."""
    from trainledger.money.outlook.budgets import budget_status

    with session(db) as s:
        data = budget_status(s, month, now=clock(now), window_days=window, currency=currency)
    emit(data, as_json, lambda d: "\n".join(check_lines(d)) or
         f"no budget applies to {d['month']}; add one with `trainledger budget set AMOUNT [--project P]`")
    if data["worst"] != "ok":
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="budget")
