"""``trainledger goodput``: what the month's spend bought: goodput, badput by category, idle (trainledger.money.goodput.account).

A group: ``trainledger goodput [--month ...]`` (or ``goodput show``) prints the account; more subcommands
(``advise``, ``idle``) join it.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, emit, session

app = typer.Typer(help="Goodput in money: what every paid node-hour bought, by category (docs/GOODPUT.md).",
                  invoke_without_command=True, no_args_is_help=False)

MonthOpt = Annotated[Optional[str], typer.Option("--month", help="YYYY-MM (default: the current month; with --run: the run's months).")]
ProjectOpt = Annotated[Optional[str], typer.Option("--project", help="Only this project's runs (the month's totals stay whole).")]
RunOpt = Annotated[Optional[str], typer.Option("--run", help="Only this run.")]
CurrencyOpt = Annotated[Optional[str], typer.Option("--currency", help="Present money in this ISO 4217 currency (rates of `trainledger fx`).")]
TopOpt = Annotated[int, typer.Option("--top", help="Runs listed, most badput first.")]


def goodput_data(db: Optional[str], month: Optional[str], project: Optional[str], run: Optional[str],
                 currency: Optional[str], now: Optional[str]) -> dict[str, Any]:
    """The account as printed by ``--json``."""
    from trainledger.money.goodput.account import goodput_account, report_to_dict
    from trainledger.store.ids import validate_run_id

    if run is not None:
        validate_run_id(run, "--run")
    if currency is not None:
        from trainledger.store.catalog.fx import check_currency

        currency = check_currency(currency, "--currency")
    with session(db) as s:
        rep = goodput_account(s, month=month, project=project, run_id=run, currency=currency, now=clock(now))
        return report_to_dict(rep)


def _money(v: Any) -> str:
    from trainledger.reports.present import fmt_cell

    return fmt_cell("cost", v)


def _node_seconds(v: Any) -> str:
    """Node-seconds to 0.1 s (half-up), beside the money: a small run's categories round to 0.00 but keep their time."""
    from decimal import ROUND_HALF_UP, Decimal

    return f"{Decimal(v).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP):,}"


def goodput_text(d: dict[str, Any], top: int = 10) -> str:
    from trainledger.money.goodput.account import CATEGORIES
    from trainledger.reports.present import fmt_cell, table

    cur = d["currency"]
    lines = []
    for m in d["months"]:
        pct = fmt_cell("goodput_pct", m["goodput_pct"])
        lines.append(f"{m['month']} {m['period']}".strip() + f": of {_money(m['spend'])} {cur}, "
                     f"{_money(m['goodput_cost'])} bought kept training progress ({pct}); badput "
                     f"{_money(m['badput_cost'])}, idle less recovery {_money(m['account_idle_cost'])}; ETTR {fmt_cell('ettr', m['ettr'])}")
    t = d["totals"]
    if t["scope"] != "month":
        lines.append(f"{t['scope']}: {_money(t['spend'])} {cur}, goodput {_money(t['goodput_cost'])} "
                     f"({fmt_cell('goodput_pct', t['goodput_pct'])}), ETTR {fmt_cell('ettr', t['ettr'])}")
    rows = [{"category": c.value, f"cost ({cur})": _money(t["cost"][c.value]),
             "node-hours": fmt_cell("node_hours", t["node_hours"][c.value]),
             "node-seconds": _node_seconds(t["node_seconds"][c.value])} for c in CATEGORIES]
    lines += ["", table(rows)]
    ranked = sorted(d["runs"], key=lambda r: (-(r["total_cost"] - r["cost"]["productive"]), r["run_id"]))[:top]
    if ranked:
        lines += ["", f"runs, most badput first (top {len(ranked)} of {len(d['runs'])}):", table([
            {"run": r["run_id"], "month": r["month"], "project": r["project"] or "(none)", "status": r["status"],
             f"cost ({cur})": _money(r["total_cost"]), "goodput": fmt_cell("goodput_pct", r["goodput_pct"]),
             "badput": _money(r["total_cost"] - r["cost"]["productive"]),
             "badput node-seconds": _node_seconds(sum(v for c, v in r["node_seconds"].items() if c != "productive")),
             "biggest badput": max((c for c in r["cost"] if c != "productive"),
                                   key=lambda c: (r["cost"][c], r["node_seconds"][c]))}
            for r in ranked])]
    notes = [f"{r['run_id']}: {q}" for r in d["runs"] for q in r["data_quality"]]
    if notes:
        lines += ["", "data quality:"] + [f"  {n}" for n in notes[:20]]
    return "\n".join(lines)


@command
def show_command(month: MonthOpt = None, project: ProjectOpt = None, run: RunOpt = None, currency: CurrencyOpt = None,
                 top: TopOpt = 10, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """The goodput account: the month's spend split into goodput (kept training progress), badput by category
    and idle; goodput % and ETTR per month, chain and project; runs ranked by badput."""
    emit(goodput_data(db, month, project, run, currency, now), as_json, lambda d: goodput_text(d, top))


@app.callback()
def goodput_callback(ctx: typer.Context, month: MonthOpt = None, project: ProjectOpt = None, run: RunOpt = None,
                     currency: CurrencyOpt = None, top: TopOpt = 10, db: DbOpt = None, as_json: JsonOpt = False,
                     now: NowOpt = None) -> None:
    """Goodput in money: `trainledger goodput [--month YYYY-MM] [--project P] [--run ID] [--json]` (= `goodput show`)."""
    if ctx.invoked_subcommand is None:
        show_command(month=month, project=project, run=run, currency=currency, top=top, db=db, as_json=as_json,
                     now=now)


app.command("show")(show_command)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="goodput")
