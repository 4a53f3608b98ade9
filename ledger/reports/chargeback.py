"""Chargeback statements: one per project, as XLSX and as a printable HTML page, and a summary CSV.

:func:`presented` rounds once, by the one rule of the metrics layer (:mod:`trainledger.money.metrics.rounding`;
docs/MONEY.md, "Rounding"): every figure and every line half-up to the cent on its own, so a run reads the same
cents here as in the monthly export and on every other surface. Where lines are shown beside a total they must
add up to and their cents do not, the difference is an explicit rounding line: ``rounding`` in the summary
(statements + idle not charged back + rounding = the month's spend) and in a statement's totals (runs + share of
idle + rounding = total), ``(rounding)`` as the last line of its Runs and Idle share tables. Every writer renders
that one structure: the same figures in every format.

Text cells a spreadsheet would run as a formula are escaped (``trainledger.reports.export.guard_formula``);
HTML is escaped. Output is deterministic: the same ledger and month give the same bytes.
"""

from __future__ import annotations

import hashlib
import html
import io
import re
from datetime import datetime, tzinfo
from decimal import Decimal
from typing import Any, Callable, Optional
from zoneinfo import ZoneInfo

from trainledger.money.account.chargeback import Chargeback, Statement
from trainledger.money.allocation.idle_share import NO_PROJECT
from trainledger.money.metrics.rounding import cents, rounding_line
from trainledger.reports.export import XLSX_ILLEGAL, LFWriter, _normalise_zip, guard_formula
from trainledger.reports.present import when
from trainledger.store.defaults import NOT_COSTED

RUN_COLUMNS = ["run_id", "name", "user", "status", "node_type", "offer", "start", "end", "gpu_hours", "cost",
               "lost_work_cost", "finality"]
IDLE_COLUMNS = ["fleet_offer", "charge_period_start", "charge_period_end", "policy", "ratio", "amount"]
SUMMARY_COLUMNS = ["statement", "runs", "gpu_hours", "run_cost", "idle_share", "total", "lost_work_cost"]
NOT_COSTED_COLUMNS = ["project", "run_id", "name", "user", "status", "node_type", "start", "end", "node_hours",
                      "gpu_hours", "cost", "reason"]
MONEY = {"cost", "lost_work_cost", "amount", "run_cost", "idle_share", "total", "spend", "idle_cost",
         "idle_shared", "idle_not_charged_back", "rounding"}
#: the first cell of a table's rounding line
ROUNDING_LINE = "(rounding)"
HOURS = Decimal("0.001")


def _hours(x: Decimal) -> str:
    return str(x.quantize(HOURS))


def _when(d: datetime) -> str:
    return d.isoformat()


def presented(cb: Chargeback) -> dict[str, Any]:
    """The statements rounded for people: ``{"summary", "statements": [{"project", "totals", "runs", "idle"}]}``
    (money as cent strings)."""
    spend = cents(cb.spend)
    unshared = cents(cb.unshared_idle)
    statements = [_statement(s) for s in cb.statements]
    shared = sum((p.amount for s in cb.statements for p in s.idle), Decimal(0))
    summary = {"month": cb.month, "currency": cb.currency, "timezone": cb.timezone}
    if cb.summary.get("is_partial"):
        summary["period"] = cb.summary["period"]
    summary.update({
        "spend": str(spend), "idle_cost": str(cents(cb.idle)), "idle_shared": str(cents(shared)),
        "idle_not_charged_back": str(unshared), "statements": len(statements),
        "idle_share_policies": [f"{c.offer.name} {c.start.date()}: {c.policy}" + (f" ({c.note})" if c.note else "")
                                for c in cb.sharing.charges],
    })
    if rest := rounding_line([s.total for s in cb.statements] + [cb.unshared_idle], cb.spend):
        summary["rounding"] = str(rest)  # statements + idle not charged back + rounding = spend, to the cent
    if cb.summary.get("fx_rates"):
        summary["fx_rates"] = cb.summary["fx_rates"]
    out = {"summary": summary, "statements": statements}
    if cb.not_costed:  # charged to no one, never as 0.00: listed with their node-hours (none: as before)
        summary["not_costed_runs"] = len(cb.not_costed)
        summary["not_costed_node_hours"] = _hours(sum((r.node_hours for r in cb.not_costed), Decimal(0)))
        out["not_costed"] = [_not_costed_row(r) for r in cb.not_costed]
        for st in statements:
            st["not_costed"] = [r for r in out["not_costed"] if r["project"] == st["project"]]
    return out


def _not_costed_row(r: Any) -> dict[str, Any]:
    """A run no offer can cost, as the statements show it (:data:`NOT_COSTED_COLUMNS`)."""
    return {"project": r.project or NO_PROJECT, "run_id": r.run_id, "name": r.name, "user": r.user,
            "status": r.status, "node_type": r.node_type, "start": _when(r.start), "end": _when(r.end),
            "node_hours": _hours(r.node_hours), "gpu_hours": _hours(r.gpu_hours), "cost": NOT_COSTED,
            "reason": r.reason}


def _statement(s: Statement) -> dict[str, Any]:
    """One statement: every line and total half-up to the cent on its own, and the rounding lines its tables need."""
    runs = [{"run_id": r.run_id, "name": r.name, "user": r.user, "status": r.status, "node_type": r.node_type,
             "offer": r.offer, "start": _when(r.start), "end": _when(r.end), "gpu_hours": _hours(r.gpu_hours),
             "cost": str(cents(r.cost)), "lost_work_cost": str(cents(r.lost_work_cost)), "finality": r.finality}
            for r in s.runs]
    idle = [{"fleet_offer": p.offer, "charge_period_start": _when(p.start), "charge_period_end": _when(p.end),
             "policy": p.policy, "ratio": str(p.ratio), "amount": str(cents(p.amount))} for p in s.idle]
    run_cost, idle_share = sum((r.cost for r in s.runs), Decimal(0)), sum((p.amount for p in s.idle), Decimal(0))
    totals = {"runs": len(s.runs), "gpu_hours": _hours(s.gpu_hours), "run_cost": str(cents(run_cost)),
              "idle_share": str(cents(idle_share)), "total": str(cents(s.total)),
              "lost_work_cost": str(cents(s.lost_work))}
    rounding = {"totals": rounding_line([run_cost, idle_share], s.total),
                "runs": rounding_line([r.cost for r in s.runs], run_cost),
                "lost_work_cost": rounding_line([r.lost_work_cost for r in s.runs], s.lost_work),
                "idle": rounding_line([p.amount for p in s.idle], idle_share)}
    if rounding["totals"]:
        totals["rounding"] = str(rounding["totals"])
    if rounding["runs"] or rounding["lost_work_cost"]:
        runs.append({**{c: None for c in RUN_COLUMNS}, "run_id": ROUNDING_LINE, "cost": str(rounding["runs"]),
                     "lost_work_cost": str(rounding["lost_work_cost"])})
    if rounding["idle"]:
        idle.append({**{c: None for c in IDLE_COLUMNS}, "fleet_offer": ROUNDING_LINE, "amount": str(rounding["idle"])})
    return {"project": s.project, "totals": totals, "runs": runs, "idle": idle}


# --- files ---------------------------------------------------------------------------------

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_stem(month: str, project: str, taken: set[str]) -> str:
    """``<month>-<project>``: the name made safe for a file (a short hash keeps two names apart)."""
    slug = "no-project" if project == NO_PROJECT else _UNSAFE.sub("_", project).strip("._") or "project"
    stem = f"{month}-{slug[:60]}"
    if stem.lower() in taken or slug != project and project != NO_PROJECT:
        stem = f"{stem}-{hashlib.sha256(project.encode()).hexdigest()[:8]}"
    taken.add(stem.lower())
    return stem


def files(p: dict[str, Any], project: str | None = None,
          progress: Optional[Callable[[int, Optional[int]], None]] = None) -> dict[str, bytes]:
    """File name → bytes: each statement (or only ``project``'s) as XLSX and HTML, and the month's summary CSV.
    ``progress(files rendered, files to render)`` is called after each statement and at the end."""
    out: dict[str, bytes] = {}
    taken: set[str] = set()
    month = p["summary"]["month"]
    total = 1 + 2 * sum(1 for st in p["statements"] if project is None or st["project"] == project)
    for st in p["statements"]:
        stem = file_stem(month, st["project"], taken)
        if project is not None and st["project"] != project:
            continue
        out[f"{stem}.xlsx"] = to_xlsx(p["summary"], st)
        out[f"{stem}.html"] = to_html(p["summary"], st).encode("utf-8")
        if progress:
            progress(len(out), total)
    out[f"{month}-chargeback-summary.csv"] = summary_csv(p).encode("utf-8")
    if progress:
        progress(len(out), total)
    return out


def summary_rows(p: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per statement, then the idle not charged back and the month's spend (their sum)."""
    rows = [{"statement": st["project"], **{k: st["totals"][k] for k in SUMMARY_COLUMNS[1:]}} for st in p["statements"]]
    s = p["summary"]
    rows.append({"statement": "idle (not charged back)", "runs": None, "gpu_hours": None, "run_cost": None,
                 "idle_share": None, "total": s["idle_not_charged_back"], "lost_work_cost": None})
    if s.get("rounding"):
        rows.append({"statement": "rounding", "runs": None, "gpu_hours": None, "run_cost": None, "idle_share": None,
                     "total": s["rounding"], "lost_work_cost": None})
    rows.append({"statement": "spend", "runs": None, "gpu_hours": None, "run_cost": None, "idle_share": None,
                 "total": s["spend"], "lost_work_cost": None})
    return rows


def summary_csv(p: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = LFWriter(buf)
    w.writerow(SUMMARY_COLUMNS)
    for row in summary_rows(p):
        w.writerow(["" if row[c] is None else guard_formula(str(row[c])) for c in SUMMARY_COLUMNS])
    if p.get("not_costed"):  # a second block: the runs charged to no one (no node type, or no offer for it)
        w.writerow([])
        w.writerow(NOT_COSTED_COLUMNS)
        for row in p["not_costed"]:
            w.writerow([guard_formula(str(row[c])) for c in NOT_COSTED_COLUMNS])
    return buf.getvalue()


def _statement_rows(summary: dict[str, Any], st: dict[str, Any]) -> list[tuple[str, Any]]:
    t = st["totals"]
    rows = [("project", st["project"]), ("month", summary["month"])]
    if summary.get("period"):
        rows.append(("period", summary["period"]))
    return rows + [("currency", summary["currency"]), ("runs", t["runs"]), ("gpu_hours", t["gpu_hours"]),
                   ("run_cost", t["run_cost"]), ("idle_share", t["idle_share"]),
                   *([("rounding", t["rounding"])] if t.get("rounding") else []), ("total", t["total"]),
                   ("lost_work_cost", t["lost_work_cost"])]


def _cell(key: str, v: Any) -> Any:
    if v is None:
        return None
    if (key in MONEY and v != NOT_COSTED) or key in ("gpu_hours", "node_hours", "ratio"):
        return Decimal(v)
    if isinstance(v, str):
        return guard_formula(XLSX_ILLEGAL.sub("\ufffd", v))
    return v


def to_xlsx(summary: dict[str, Any], st: dict[str, Any]) -> bytes:
    """A workbook with Statement, Runs and Idle share sheets (money as numbers, 2 decimals)."""
    from openpyxl import Workbook

    wb = Workbook()
    fixed = datetime(2000, 1, 1)
    wb.properties.creator = "trainledger"
    wb.properties.created = fixed
    wb.properties.modified = fixed

    def sheet(ws, header: list[str], rows: list[list[tuple[str, Any]]]) -> None:
        ws.append(header)
        for r_idx, row in enumerate(rows, start=2):
            ws.append([_cell(k, v) for k, v in row])
            for c_idx, (k, v) in enumerate(row, start=1):
                if k in MONEY and v is not None and v != NOT_COSTED:
                    ws.cell(row=r_idx, column=c_idx).number_format = "#,##0.00"

    ws = wb.active
    ws.title = "Statement"
    sheet(ws, ["item", "value"], [[("item", k), (k, v)] for k, v in _statement_rows(summary, st)])
    sheet(wb.create_sheet("Runs"), RUN_COLUMNS, [[(c, r[c]) for c in RUN_COLUMNS] for r in st["runs"]])
    sheet(wb.create_sheet("Idle share"), IDLE_COLUMNS, [[(c, r[c]) for c in IDLE_COLUMNS] for r in st["idle"]])
    if st.get("not_costed"):
        sheet(wb.create_sheet("Not costed"), NOT_COSTED_COLUMNS,
              [[(c, r[c]) for c in NOT_COSTED_COLUMNS] for r in st["not_costed"]])
    raw = io.BytesIO()
    wb.save(raw)
    return _normalise_zip(raw.getvalue())


_CSS = """body{font-family:sans-serif;margin:2em;color:#111}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #999;padding:.25em .5em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}tr.total td{font-weight:bold}p.note{font-size:.85em;color:#444}
@media print{body{margin:0}h2{page-break-after:avoid}table{page-break-inside:auto}tr{page-break-inside:avoid}}"""


#: instants of the statement's tables: ISO in CSV, XLSX and JSON (for machines), minutes in its time zone on the
#: printable page (for people)
TIME_KEYS = {"start", "end", "charge_period_start", "charge_period_end"}


def _td(key: str, v: Any, tz: Optional[tzinfo] = None) -> str:
    text = "" if v is None else when(v, tz) if key in TIME_KEYS else str(v)
    cls = ' class="n"' if key in MONEY or key in ("gpu_hours", "ratio", "runs") else ""
    return f"<td{cls}>{html.escape(text)}</td>"


def _table(columns: list[str], rows: list[dict[str, Any]], tz: Optional[tzinfo] = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_td(c, r[c], tz) for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(summary: dict[str, Any], st: dict[str, Any], team: bool = True) -> str:
    """A printable page: the totals, the runs, the share of idle, and how the month adds up (``team`` False: a
    statement for a project-scoped dashboard user, whose note names none of the team's totals)."""
    cur, t = summary["currency"], st["totals"]
    title = f"Chargeback statement: {st['project']}, {summary['month']}"
    period = f" ({summary['period']})" if summary.get("period") else ""
    totals = "".join(
        f'<tr{" class=total" if k == "total" else ""}><td>{html.escape(label)}</td>{_td(k, t[k])}</tr>'
        for k, label in (("runs", "Runs"), ("gpu_hours", "GPU-hours"), ("run_cost", f"Runs ({cur})"),
                         ("idle_share", f"Share of idle ({cur})"),
                         *((("rounding", f"Rounding ({cur})"),) if t.get("rounding") else ()), ("total", f"Total ({cur})"),
                         ("lost_work_cost", f"of which lost work ({cur})")))
    tz = ZoneInfo(summary["timezone"])
    runs = _table(RUN_COLUMNS, st["runs"], tz) if st["runs"] else "<p>No run of this project in the month.</p>"
    idle = (_table(IDLE_COLUMNS, st["idle"], tz) if st["idle"]
            else "<p>No idle is charged back to this project (its fleets' policy is none, or it drew on no shared fleet).</p>")
    adds = ("every statement of "
            f"{html.escape(summary['month'])} plus idle not charged back ({html.escape(summary['idle_not_charged_back'])})"
            + (f" plus rounding ({html.escape(summary['rounding'])})" if summary.get("rounding") else "")
            + f" adds up to the month's spend ({html.escape(summary['spend'])})") if team else \
        "the statements of the month's other projects and its idle not charged back make up the month's spend"
    note = (f"Money in {html.escape(cur)}, each figure rounded half-up to the cent on its own; {adds}. "
            "Lost work is part of the runs' cost. Made by trainledger "
            f"(`trainledger report chargeback --month {html.escape(summary['month'])}`).")
    return (f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n<h1>{html.escape(title)}{html.escape(period)}</h1>\n"
            f"<table>{totals}</table>\n<h2>Runs</h2>\n{runs}\n<h2>Share of idle</h2>\n{idle}\n"
            + (f"<h2>Not costed</h2>\n<p>No offer can cost these runs (no node type, or none for it): they are in "
               f"no figure above.</p>\n{_table(NOT_COSTED_COLUMNS, st['not_costed'])}\n" if st.get("not_costed") else "")
            + f"<p class=note>{note}</p>\n</body></html>\n")
