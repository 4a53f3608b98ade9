"""``trainledger report``: the monthly export and the daily and weekly reports."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from trainledger.cli import progress
from trainledger.cli.common import DbOpt, JsonOpt, NowOpt, clock, command, emit, group, session, warn
from trainledger.errors import LedgerInputError
from trainledger.store.files import is_stdout

app = group("Reports and the monthly export.")

CurrencyOpt = Annotated[Optional[str], typer.Option("--currency", help="Present money in this ISO 4217 currency (each charge period at its exchange rate, see `trainledger fx`). Default: the Settings currency once set, else the offers' own.")]


@app.command("monthly")
@command
def report_monthly(month: Annotated[str, typer.Option(help="YYYY-MM (calendar month in the display time zone).")],
                   fmt: Annotated[str, typer.Option("--format", help="csv | xlsx | json")] = "csv",
                   output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write (default: stdout for csv/json); an existing file needs --force. -: the file's bytes on standard output (xlsx: not to a terminal).")] = None,
                   force: Annotated[bool, typer.Option("--force", help="Replace an existing --output file.")] = False,
                   own: Annotated[Optional[str], typer.Option(help="Own offer for the comparison.")] = None,
                   rent: Annotated[Optional[str], typer.Option(help="Elastic rent offer for the comparison.")] = None,
                   cost_basis: Annotated[str, typer.Option("--cost-basis", help="estimate (the ledger's) | billed: a reconciled month's rented lines at what its invoices billed (docs/INVOICES.md).")] = "estimate",
                   currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """The monthly export: summary (own vs rent, savings, ROI, idle, waste, energy and CO2e), per project, per run.

    A month that has not ended is reported to date ("to date (3 of 31 days)" in the summary). A month with
    imported invoices shows their status, and once reconciled the billed cost beside the ledger's estimate."""
    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.money.invoice.billed import month_billed
    from trainledger.reports.export import presented_report
    from trainledger.reports.invoices import with_billed
    from trainledger.reports.present import key_values
    from trainledger.store.files import check_output, write_output

    if fmt not in ("csv", "xlsx", "json"):
        raise LedgerInputError(f"--format: expected csv, xlsx or json, got {fmt!r}")
    if fmt == "xlsx" and output is None:
        raise LedgerInputError("--output: xlsx needs a file, e.g. -o report.xlsx (or -o - > report.xlsx)")
    if output is not None:
        check_output(output, force=force, binary=fmt == "xlsx")  # before any work; `-`: standard output
    from trainledger.money.allocation.capacity import capacity_warnings, warning_text
    from trainledger.reports.quality import render_report, with_warnings

    with session(db) as s:
        rep = monthly_report(s, month, own=own, rent=rent, now=clock(now), currency=currency)
        p = presented_report(rep, report_account(s, rep, clock(now)))  # the month's goodput account, once
        p = with_billed(p, rep.summary, month_billed(s, month, clock(now)), cost_basis, month, rep.currency,
                        rep.node_types)
        warnings = capacity_warnings(s, month, now=clock(now))
    p = with_warnings(p, warnings)  # none: the report is byte for byte what it was
    data = render_report(p, "json" if as_json and output is None else fmt)  # --json: JSON, whatever --format
    if output is None or is_stdout(output):  # `-o -`: the file's bytes, and nothing else, on standard output
        for w in warnings:
            warn(warning_text(w))
        if output is None:
            sys.stdout.write(data.decode("utf-8"))
        else:
            write_output(output, data, binary=fmt == "xlsx")
        return
    write_output(output, data, force=force)  # whole or not at all; never through a planted link
    summary = {**p["summary"], "data_quality": p["data_quality"]} if warnings else p["summary"]
    emit(summary, as_json, lambda d: key_values(p["summary"]) + "".join(f"\nwarning: {warning_text(w)}" for w in warnings)
         + f"\n\nwrote {output} ({fmt}, {len(p['runs'])} run lines)")


@app.command("focus")
@command
def report_focus(month: Annotated[str, typer.Option(help="YYYY-MM (the billing period: a calendar month in the display time zone).")],
                 output: Annotated[Path, typer.Option("--output", "-o", help="File to write; an existing file needs --force. -: standard output (parquet: not to a terminal).")],
                 fmt: Annotated[str, typer.Option("--format", help="csv | parquet")] = "csv",
                 force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")] = False,
                 focus_version: Annotated[str, typer.Option("--focus-version", help="1.2 (default) | 1.3: adds the split cost allocation columns, filled where a fleet shares its idle (`fleet set --idle-share`).")] = "1.2",
                 currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """The month as a FOCUS 1.2 dataset (FinOps Open Cost and Usage Specification): one row per run and
    charge period, plus each fleet's purchase and idle; x_ columns carry tokens, MFU, GPU-hours, energy and CO2e.
    With --focus-version 1.3, idle shared back to projects is split into allocated charges."""
    from trainledger.reports.focus import FOCUS_VERSIONS, focus_export, render
    from trainledger.store.files import check_output, write_output

    if fmt not in ("csv", "parquet"):
        raise LedgerInputError(f"--format: expected csv or parquet, got {fmt!r}")
    if focus_version not in FOCUS_VERSIONS:
        raise LedgerInputError(f"--focus-version: expected {' or '.join(FOCUS_VERSIONS)}, got {focus_version!r}")
    check_output(output, force=force, binary=fmt == "parquet")
    with session(db) as s:
        export = focus_export(s, month, currency=currency, version=focus_version)
    data = render(export, fmt)
    write_output(output, data, force=force, binary=fmt == "parquet")
    if is_stdout(output):  # `-o -`: the file's bytes, and nothing else, on standard output
        return
    total = sum((r["EffectiveCost"] for r in export.rows), Decimal(0))
    summary = {"month": month, "focus_version": export.version, "format": fmt, "rows": len(export.rows),
               "currency": export.currency, "effective_cost": total, "billed_cost": sum((r["BilledCost"] for r in export.rows), Decimal(0)),
               "output": str(output)}
    emit(summary, as_json, lambda d: f"wrote {output} (FOCUS {d['focus_version']}, {fmt}, {d['rows']} rows; "
         f"EffectiveCost {d['effective_cost']:,.2f} {d['currency']} = the monthly report's actual cost)")


@app.command("chargeback")
@command
def report_chargeback(month: Annotated[str, typer.Option(help="YYYY-MM (calendar month in the display time zone).")],
                      output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the statements to (made if missing; its parent must exist); not - (several files).")],
                      project: Annotated[Optional[str], typer.Option(help="Only this project's statement (the totals still cover every project).")] = None,
                      force: Annotated[bool, typer.Option("--force", help="Replace statements already in the folder.")] = False,
                      currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Chargeback statements: one per project (its runs with GPU-hours and cost, its share of idle, lost work,
    total) as XLSX and a printable HTML page, and a summary CSV; they add up to the month's spend to the cent.

    Idle is charged back under each fleet's policy (`trainledger fleet set NAME --idle-share proportional`);
    the default, none, leaves it its own line."""
    from trainledger.cli.reports.chargeback import write_statements

    if is_stdout(output):
        raise LedgerInputError("--output: chargeback writes a folder of statements (XLSX and HTML per project, a "
                               "summary CSV), which cannot go to standard output; give a folder, e.g. -o statements")
    with session(db) as s, progress.bar(f"chargeback {month}", unit="files") as bar:
        summary = write_statements(s, month, output, project=project, currency=currency, force=force, now=clock(now),
                                   progress=bar if bar.drawn else None)
    emit(summary, as_json, lambda d: "\n".join(
        [f"{r['statement']}: {r['total']} {d['currency']}" for r in d["lines"]]
        + [f"wrote {len(d['files'])} files to {d['output']} (statements + idle not charged back = spend "
           f"{d['spend']} {d['currency']})"]
        + ([f"not costed, charged to no one: {d['not_costed_runs']} runs, {d['not_costed_node_hours']} node-hours "
            "(no node type, or no offer for it; listed in the summary CSV)"] if d.get("not_costed_runs") else [])))


@app.command("weekly")
@command
def report_weekly(sweep: Annotated[Optional[str], typer.Option(help="Sweep id (default: the latest sweep).")] = None,
                  days: Annotated[Optional[int], typer.Option(help="Instead of a sweep: runs of the last N days.", min=1, max=36500)] = None,
                  currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Strategy comparison: time per epoch, memory per GPU, comm share, GPU-Util, MFU, cost per 1M tokens."""
    from trainledger.reports.present import table
    from trainledger.reports.weekly import strategy_comparison

    with session(db) as s:
        data = strategy_comparison(s, sweep_id=sweep, days=days, currency=currency)

    def text(d):
        if not d["rows"] and not d["not_measured"]:
            return f"{d['scope']}: nothing to compare; run `trainledger sweep CONFIG --strategies dp,zero2,...` first"
        offers = sorted({o for r in d["rows"] for o in r["cost_per_1m_tokens"]})
        flat = []
        for r in d["rows"]:
            row = {"": "*" if r["cheapest"] else "", "strategy": r["strategy"], "run_id": r["run_id"],
                   "tokens_per_s": r["tokens_per_s"], "time_per_epoch_hours": r["time_per_epoch_hours"],
                   "peak_mem_per_gpu_GiB": r["peak_mem_per_gpu_bytes"] / 2**30 if r["peak_mem_per_gpu_bytes"] else None,
                   "comm_share": r["comm_share"],
                   "gpu_util_mean": r["gpu_util_mean"], "util_source": r["util_source"], "mfu": r["mfu"],
                   "measured_gpu_util_mean": r.get("measured_gpu_util_mean"),
                   "measured_energy_kwh": r.get("measured_energy_kwh")}
            for o in offers:
                row[f"cost_per_1m_{o}"] = r["cost_per_1m_tokens"].get(o)
            if any(x["not_costed"] for x in d["rows"]):
                row["not_costed"] = r["not_costed"] or ""
            flat.append(row)
        out = f"{d['scope']} (* cheapest; GPU-Util source 'cpu' = process CPU share on a CPU-only run)\n" + table(flat)
        if d["not_measured"]:
            out += "\n\nnot measured: " + ", ".join(f"{x['strategy']} ({x['status']})" for x in d["not_measured"])
        return out

    emit(data, as_json, text)


def _period_text(d: dict[str, Any]) -> str:
    from trainledger.reports.periods import FIGURES
    from trainledger.reports.present import fmt_cell, table

    span = f"{d['from']} to {d['to']}"
    head = (f"{d['period']}{'' if d['period'] == span else ': ' + span} ({d['timezone']}, {d['currency']}"
            f"{', to date' if d['is_partial'] else ''}); months: {', '.join(d['months']) or 'none'}"
            + (f"; days: {len(d['days'])}" if d["days"] else ""))
    prev = d.get("previous")
    rows = [{"figure": k, "value": d["summary"][k],
             **({"before": prev["summary"][k], "change_pct": d["change"].get(f"{k}_pct")} if prev else {})}
            for k in FIGURES]
    out = head + ("" if not prev else f"\nbefore: {prev['period']} ({prev['from']} to {prev['to']})")
    if d.get("previous_missing"):
        out += f"\nno change shown: {d['previous_missing']}"
    out += "\n" + table(rows)
    if not d["whole_months"]:
        out += "\nidle, waste, the alternatives, ROI, tokens and CO2e: only for whole months (the daily report does not split them)"
    if d["summary"].get("not_costed_runs"):
        out += (f"\nnot costed: {d['summary']['not_costed_runs']} runs, "
                f"{fmt_cell('node_hours', d['summary']['not_costed_node_hours'])} node-hours (no node type, or no offer "
                "for it; in no figure above): `trainledger report monthly` lists them")
    return out


#: monthly and daily reports (of the period and of the one before) from which `report period` draws a progress bar
LONG_PERIOD = 6


@app.command("period")
@command
def report_period(from_: Annotated[str, typer.Option("--from", help="First day, YYYY-MM-DD, or a month YYYY-MM (its first day); display time zone.")],
                  to: Annotated[str, typer.Option("--to", help="Last day (included), YYYY-MM-DD, or a month YYYY-MM (its last day). A quarter: --from 2026-10 --to 2026-12; the year to date: --from 2026-01 --to today's date.")],
                  fmt: Annotated[str, typer.Option("--format", help="table | csv | json")] = "table",
                  currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """A period's totals (spend, idle, waste, alternatives, ROI, GPU-hours, utilizations) and their change against
    the period before of the same length; what the dashboard's Period selector shows.

    Whole months are their monthly reports (to date for one that has not ended), days left over at either end
    their daily reports; idle, waste, alternatives, ROI, tokens and CO2e only for whole months."""
    from trainledger.money.rates.periods import parse_range
    from trainledger.reports.periods import period_csv, period_json, period_report, presented_period

    if fmt not in ("table", "csv", "json"):
        raise LedgerInputError(f"--format: expected table, csv or json, got {fmt!r}")
    from trainledger.store.settings import display_timezone

    with session(db) as s, progress.bar(f"period {from_} to {to}", unit="reports",
                                        min_items=LONG_PERIOD) as bar:
        period = parse_range(from_, to, today=clock(now).astimezone(display_timezone(s)).date())
        data = presented_period(period_report(s, period, now=clock(now), currency=currency,
                                              progress=bar if bar.drawn else None))
    if fmt in ("csv", "json") or as_json:  # --json: JSON, whatever --format (as `report monthly`)
        sys.stdout.write((period_json(data) if as_json or fmt == "json" else period_csv(data)).decode("utf-8"))
        return
    emit(data, False, _period_text)


def _anomalies_text(d: dict[str, Any]) -> str:
    from trainledger.money.outlook.anomalies import MEASURES
    from trainledger.reports.present import fmt_cell

    judged = sum(x["judged"] for x in d["days"])
    head = f"{d['month']} ({d['timezone']}, {d['currency']}): {judged} of {len(d['days'])} whole days judged; rule: {d['rule']}"
    lines = [f"{f['date']}  {MEASURES[f['measure']]} {fmt_cell('cost', f['value'])} above {fmt_cell('cost', f['threshold'])} "
             f"(median {fmt_cell('cost', f['median'])}, MAD {fmt_cell('cost', f['mad'])} over {f['baseline_days']} days); "
             f"its runs: trainledger report anomalies --day {f['date']}" for f in d["flagged"]]
    return "\n".join([head, *(lines or ["no anomalies"])])


@app.command("anomalies")
@command
def report_anomalies(month: Annotated[Optional[str], typer.Option(help="YYYY-MM (default: the current month in the display time zone).")] = None,
                     day: Annotated[Optional[str], typer.Option(help="YYYY-MM-DD: list the runs of that day instead (node-hours within it).")] = None,
                     currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Days of the month whose spend or idle cost is far above the 28 days before them (median + max(3 MAD, a floor))."""
    from trainledger.money.outlook.anomalies import anomalies, parse_day, runs_on_day
    from trainledger.reports.present import table

    with session(db) as s:
        if day is not None:
            rows = runs_on_day(s, parse_day(day), now=clock(now))
            emit(rows, as_json, lambda r: table(r, ["id", "name", "project", "user", "status", "nodes", "started_at",
                                                     "node_hours"]) if r else f"no run ran on {day}")
            return
        data = anomalies(s, month, now=clock(now), currency=currency)
    emit(data, as_json, _anomalies_text)


def _daily_text(d: dict[str, Any]) -> str:
    from trainledger.reports.present import key_values, table

    head = f"{d['date']} ({d['timezone']}, {d['currency']}{', so far' if d['partial'] else ''}); GPU-Util sources: {', '.join(d['summary']['gpu_util_sources']) or 'none measured'}"
    parts = [head, key_values({k: v for k, v in d["summary"].items() if k != "gpu_util_sources"})]
    if d["fleets"]:
        parts += ["", "fleets:", table(d["fleets"], ["offer", "nodes", "available_node_hours", "used_node_hours", "idle_node_hours",
                                                     "time_utilization", "nodes_never_used", "cost", "idle_cost", "power_basis"])]
    if d["runs"]:
        parts += ["", "runs:", table(d["runs"], ["run_id", "status", "offer", "nodes", "node_hours", "gpu_util_mean", "util_source", "cost"])]
    if d.get("not_costed"):
        parts += ["", "not costed (in no figure above but the counts):",
                  table(d["not_costed"], ["run_id", "status", "node_type", "nodes", "node_hours", "cost", "reason"])]
    return "\n".join(parts)


@app.command("daily")
@command
def report_daily(date_: Annotated[Optional[str], typer.Option("--date", help="YYYY-MM-DD, today or yesterday (default) in the display time zone.")] = None,
                 currency: CurrencyOpt = None, db: DbOpt = None, as_json: JsonOpt = False, now: NowOpt = None) -> None:
    """Daily cluster utilization: node-hours used vs available, time utilization, GPU-Util (with its source), idle nodes, spend."""
    from trainledger.reports.daily import daily_report

    with session(db) as s:
        data = daily_report(s, date_, now=clock(now), currency=currency)
    emit(data, as_json, _daily_text)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="report")
