"""The monthly export: CSV, XLSX and JSON from one presented report.

:func:`presented_report` rounds once, by the one rule of the metrics layer
(:mod:`trainledger.money.metrics.rounding`): every figure and every line half-up to the cent on its own, so a
run or a project shows the same cents here as on every other surface; where the lines of a table must add up
to a figure of the summary (run and project costs + idle = spend, run lost work = lost work) and their cents
do not, the difference is an explicit ``(rounding)`` line of the table (the JSON's ``rounding`` block). Every
writer, the CLI table and the dashboard use that same structure: the numbers are identical across formats.
Text cells that a spreadsheet would execute (starting with ``=``, ``+``, ``-``, ``@``, tab or CR) are prefixed
with a single quote (OWASP CSV injection guidance).

Output is deterministic: the same ledger and month give the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from trainledger.money.account.monthly import MonthlyReport
from trainledger.money.account.not_costed import COLUMNS as NOT_COSTED_COLUMNS
from trainledger.money.goodput.goodput_core import ZERO, Category, GoodputReport, MonthAccount
from trainledger.money.goodput.month_store import MonthTotals
from trainledger.money.goodput.waste import project_waste, run_waste, waste_by_reason, waste_cost
from trainledger.money.metrics.rounding import ROUNDING, cents, rounding_line
from trainledger.reports.present import jsonable
from trainledger.store.defaults import NOT_COSTED

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
#: control characters an XLSX cell cannot hold (openpyxl's ILLEGAL_CHARACTERS_RE); shown as U+FFFD
XLSX_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")

PROJECT_COLUMNS = ["project", "runs", "node_hours", "gpu_hours", "tokens", "cost", "cost_if_elastic",
                   "cost_if_own", "waste_cost", "tokens_per_1000", "useful_gpu_hours_per_1000", "co2e_kg"]
RUN_COLUMNS = ["run_id", "name", "project", "user", "status", "strategy", "node_type", "offer", "nodes",
               "gpus_per_node", "start", "end", "node_hours", "gpu_hours", "tokens", "gpu_util_mean",
               "util_source", "mfu", "cost", "cost_if_elastic", "cost_if_own", "split", "lost_gpu_hours",
               "lost_work_cost", "energy_kwh", "co2e_kg", "co2e_basis", "finality", "goodput_cost", "badput_cost"]
NODE_TYPE_COLUMNS = ["node_type", "node_hours", "gpu_hours", "peak_nodes", "actual_cost", "idle_cost",
                     "own_offer", "own_nodes", "own_nodes_from", "own_cost", "elastic_offer", "elastic_cost",
                     "reserved_offer", "reserved_cost"]


def guard_formula(text: str) -> str:
    """Neutralise spreadsheet formula injection in a text cell.

    A cell starting with ``= + - @``, tab or CR is prefixed with ``'`` unless
    it is a plain number (a negative amount such as ``-16077.30`` stays a number).
    """
    if text and text.startswith(FORMULA_PREFIXES):
        try:
            Decimal(text)
            return text
        except ArithmeticError:
            return "'" + text
    return text


#: the first column of a table's rounding line (in parentheses, as "(no project)": never a project's or run's name)
ROUNDING_LINE = "(rounding)"


def _own(values: list[Decimal | None]) -> list[str | None]:
    """Money lines, each half-up to the cent on its own (None stays None)."""
    return [None if v is None else str(cents(v)) for v in values]


def _rounding(lines: dict[str, tuple[list[Decimal], Decimal]]) -> dict[str, str]:
    """The rounding line of each column whose lines must add up to a summary figure: column → (exact lines,
    exact total); only the columns whose cents do not add up."""
    out = {k: rounding_line(parts, total) for k, (parts, total) in lines.items()}
    return {k: str(v) for k, v in out.items() if v}


def presented_report(rep: MonthlyReport, goodput: GoodputReport | None = None) -> dict[str, Any]:
    """The report rounded for people: JSON-ready dict with summary, node types, projects, runs and, where the
    lines' cents do not add up to the summary, their ``rounding`` lines. ``goodput``: the month's goodput account
    (``trainledger.money.goodput.goodput_ledger.report_account`` of ``rep``): with it the summary's waste
    (``waste_cost`` = badput + idle and ``waste_by_reason``, ``trainledger.money.goodput.waste``), each project's
    waste and each run line's goodput and badput, each rounded on its own. Without run lines the month's stored
    totals (``trainledger.money.goodput.month_store.MonthTotals``: its account and each project's waste) give the
    same figures without computing every run's account."""
    if isinstance(goodput, MonthTotals) and rep.runs:
        raise ValueError("presented_report: run lines need the month's whole goodput account (report_account)")
    s = rep.summary
    summary: dict[str, Any] = {}
    for k, v in jsonable(s).items():
        summary[k] = v
        if k == "lost_work_cost" and goodput is not None:  # the waste beside the lost work it includes
            summary.update(_waste(goodput.account if isinstance(goodput, MonthTotals) else goodput.months[0]))
    summary = {"month": rep.month, "timezone": rep.timezone, "currency": rep.currency, **summary}
    if isinstance(goodput, MonthTotals):
        split, by_project = {}, goodput.project_waste
    else:
        split = {a.run_id: (a.cost[Category.productive], run_waste(a)) for a in goodput.runs} if goodput else {}
        by_project = project_waste(goodput.runs) if goodput else {}
    projects = []
    for p in rep.projects:
        row = jsonable(p)
        row["waste_cost"] = str(cents(by_project.get(p["project"], ZERO))) if goodput else None
        projects.append({k: row.get(k) for k in PROJECT_COLUMNS})
    runs = []
    for r in rep.runs:
        row = _run_values(r)
        g = split.get(r.run_id)
        row.update(cost=str(cents(r.cost)), cost_if_elastic=_own([r.cost_elastic])[0], cost_if_own=_own([r.cost_own])[0],
                   lost_work_cost=str(cents(r.lost_work_cost)), goodput_cost=None if g is None else str(cents(g[0])),
                   badput_cost=None if g is None else str(cents(g[1])))
        runs.append({k: row.get(k) for k in RUN_COLUMNS})
    idle = [s["idle_cost"]]
    rounding = {"projects": _rounding({"cost": ([p["cost"] for p in rep.projects] + idle, s["actual_cost"])}),
                "runs": _rounding({"cost": ([r.cost for r in rep.runs] + idle, s["actual_cost"]),
                                   "lost_work_cost": ([r.lost_work_cost for r in rep.runs], s["lost_work_cost"])})}
    node_types = [{k: v for k, v in jsonable(n).items() if k in NODE_TYPE_COLUMNS} for n in rep.node_types]
    out = {"summary": summary, "node_types": node_types, "projects": projects, "runs": runs}
    if any(rounding.values()):  # a month whose cents add up: no rounding block
        out["rounding"] = {k: v for k, v in rounding.items() if v}
    if rep.not_costed:  # a month with none: the export is byte for byte what it was
        out["not_costed"] = [jsonable(r.row()) for r in rep.not_costed]
    return out


#: a run line's columns whose value :func:`presented_report` writes itself (money rounded on its own, goodput, badput)
_RUN_OWN = frozenset({"cost", "cost_if_elastic", "cost_if_own", "lost_work_cost", "goodput_cost", "badput_cost"})


def _run_values(r: Any) -> dict[str, Any]:
    """``jsonable(r)`` of a run line, only its :data:`RUN_COLUMNS` that :func:`presented_report` does not write itself
    (each field as ``jsonable`` presents it, under its own key): the export's thousands of lines skip the fields it
    drops (the charge periods' carbon intensities, the charge period)."""
    have = type(r).__dataclass_fields__
    return {k: jsonable(getattr(r, k), k) for k in RUN_COLUMNS if k in have and k not in _RUN_OWN}


def _waste(m: MonthAccount) -> dict[str, Any]:
    """The month's waste (badput + idle) and its reasons, each half-up to the cent on its own, and ``rounding``
    when their cents do not add up to the waste."""
    total, by = waste_cost(m), waste_by_reason(m)
    out = {k: str(cents(v)) for k, v in by.items()}
    rest = rounding_line(list(by.values()), total)
    return {"waste_cost": str(cents(total)), "waste_by_reason": {**out, ROUNDING: str(rest)} if rest else out}


def rounding_row(p: dict[str, Any], table: str, columns: list[str]) -> list[tuple[str, Any]] | None:
    """The table's rounding line as (column, value) cells, or None when its cents add up."""
    r = p.get("rounding", {}).get(table)
    if not r:
        return None
    return [(c, ROUNDING_LINE if i == 0 else r.get(c)) for i, c in enumerate(columns)]


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, Any]]:
    """The summary as (metric, value) rows; a breakdown (``waste_by_reason``) as ``waste_by_reason.lost_work`` …"""
    out: list[tuple[str, Any]] = []
    for k, v in summary.items():
        if isinstance(v, dict):
            out += [(f"{k}.{sub}", x) for sub, x in v.items()]
        else:
            out.append((k, v))
    return out


def summary_label(key: str, currency: Optional[str]) -> str:
    """A summary row's label as the dashboard shows it (the metrics layer's, money with its currency):
    ``waste_by_reason.lost_work`` → "Waste by reason: lost work (CNY)"."""
    from trainledger.reports.present import kind_of, label

    head, _, sub = key.partition(".")
    text = f"{label(head)}: {sub.replace('_', ' ')}" if sub else label(head)
    return f"{text} ({currency})" if currency and kind_of(head) in ("money", "unit_price") else text


def summary_definition(key: str) -> str:
    """What a summary row's figure is: the metrics layer's formula, a breakdown's part its facet (a waste reason:
    its goodput category), else empty (not a figure)."""
    from trainledger.money.metrics.catalog import FACETS
    from trainledger.money.metrics.registry import BY_KEY, help_text, sentence

    head, _, sub = key.partition(".")
    if sub:
        return sentence(FACETS.get(sub, ""))
    return help_text(head) if head in BY_KEY else ""


def to_json(p: dict[str, Any]) -> str:
    return json.dumps(p, indent=2, ensure_ascii=False) + "\n"


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return guard_formula(";".join(str(x) for x in v))
    if isinstance(v, str):
        return guard_formula(v)
    return v


class LFWriter:
    """``csv.writer`` with LF line ends that still quotes a field holding a CR: csv quotes only the
    characters of its line terminator, and a bare CR in a name would split the row for a reader."""

    def __init__(self, out: io.StringIO) -> None:
        self._out, self._line = out, io.StringIO()
        self._writer = csv.writer(self._line, lineterminator="\r\n")

    def writerow(self, row: list) -> None:
        self._line.seek(0)
        self._line.truncate()
        self._writer.writerow(row)
        self._out.write(self._line.getvalue()[:-2] + "\n")


def to_csv(p: dict[str, Any]) -> str:
    """Three blocks separated by a blank line: summary (metric,value), projects, runs; a fourth, the runs not
    costed (no node type, or no offer for it), when the month has any."""
    buf = io.StringIO()
    w = LFWriter(buf)
    w.writerow(["metric", "value"])
    for k, v in summary_rows(p["summary"]):
        w.writerow([k, _csv_value(v)])
    w.writerow([])
    w.writerow(PROJECT_COLUMNS)
    for row in p["projects"]:
        w.writerow([_csv_value(row[c]) for c in PROJECT_COLUMNS])
    if last := rounding_row(p, "projects", PROJECT_COLUMNS):
        w.writerow([_csv_value(v) for _, v in last])
    w.writerow([])
    w.writerow(RUN_COLUMNS)
    for row in p["runs"]:
        w.writerow([_csv_value(row[c]) for c in RUN_COLUMNS])
    if last := rounding_row(p, "runs", RUN_COLUMNS):
        w.writerow([_csv_value(v) for _, v in last])
    if p.get("not_costed"):  # a fourth block: runs no offer can cost, with their node-hours
        w.writerow([])
        w.writerow(NOT_COSTED_COLUMNS)
        for row in p["not_costed"]:
            w.writerow([_csv_value(row[c]) for c in NOT_COSTED_COLUMNS])
    return buf.getvalue()


def _xlsx_cell(key: str, v: Any) -> Any:
    from trainledger.reports.present import kind_of

    if v is None:
        return None
    if isinstance(v, list):
        v = ";".join(str(x) for x in v)
    if isinstance(v, str):
        if kind_of(key) == "money" and v != NOT_COSTED:
            return Decimal(v)  # a numeric cell, shown with a 2-decimal format
        return guard_formula(XLSX_ILLEGAL.sub("\ufffd", v))
    return v


def to_xlsx(p: dict[str, Any]) -> bytes:
    """An XLSX workbook with Summary, Projects and Runs sheets (deterministic bytes)."""
    from openpyxl import Workbook
    from openpyxl.utils import get_column_letter
    from trainledger.reports.present import kind_of

    wb = Workbook()
    fixed = datetime(2000, 1, 1)
    wb.properties.creator = "trainledger"
    wb.properties.created = fixed
    wb.properties.modified = fixed

    def sheet(ws, header: list[str], rows: list[list[tuple[str, Any]]]):
        ws.append(header)
        for row in rows:
            ws.append([_xlsx_cell(k, v) for k, v in row])
        for ci, name in enumerate(header, start=1):
            ws.column_dimensions[get_column_letter(ci)].width = max(10, min(40, len(name) + 2))
        for r_idx, row in enumerate(rows, start=2):
            for c_idx, (k, v) in enumerate(row, start=1):
                if kind_of(k) == "money" and v is not None and v != NOT_COSTED:
                    ws.cell(row=r_idx, column=c_idx).number_format = "#,##0.00"

    ws = wb.active
    ws.title = "Summary"
    cur = p["summary"].get("currency")
    sheet(ws, ["metric", "value", "label", "definition"],
          [[("metric", k), (k, v), ("label", summary_label(k, cur)), ("definition", summary_definition(k))]
           for k, v in summary_rows(p["summary"])])
    for name, table, columns in (("Projects", "projects", PROJECT_COLUMNS), ("Runs", "runs", RUN_COLUMNS)):
        last = rounding_row(p, table, columns)
        sheet(wb.create_sheet(name), columns, [[(c, r[c]) for c in columns] for r in p[table]] + ([last] if last else []))
    if p.get("not_costed"):
        sheet(wb.create_sheet("Not costed"), NOT_COSTED_COLUMNS,
              [[(c, r[c]) for c in NOT_COSTED_COLUMNS] for r in p["not_costed"]])
    raw = io.BytesIO()
    wb.save(raw)
    return _normalise_zip(raw.getvalue())


def _normalise_zip(data: bytes) -> bytes:
    """Rewrite a zip with fixed timestamps so identical content gives identical bytes."""
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            zi = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o600 << 16
            body = src.read(info.filename)
            if info.filename == "docProps/core.xml":  # openpyxl stamps "modified" with the wall clock
                body = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>2000-01-01T00:00:00Z", body)
            dst.writestr(zi, body)
    return out.getvalue()


def render(p: dict[str, Any], fmt: str) -> bytes:
    """Bytes of the export in ``fmt`` (csv | xlsx | json)."""
    if fmt == "csv":
        return to_csv(p).encode("utf-8")
    if fmt == "json":
        return to_json(p).encode("utf-8")
    if fmt == "xlsx":
        return to_xlsx(p)
    raise ValueError(f"--format: expected csv, xlsx or json, got {fmt!r}")
