"""The reconciliation as the CLI, the JSON and the CSV show it (``trainledger invoice reconcile``).

One dict (:func:`reconciliation_dict`) is what ``--json`` prints and what the text, the CSV and the dashboard are
made from; money keys are the metrics layer's (``expected_cost``, ``billed_cost``, ``difference``), rounded to the
cent only when shown (:mod:`trainledger.reports.present`).
"""

from __future__ import annotations

import io
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from trainledger.money.invoice.matching import Billed, Charge
from trainledger.money.invoice.reconcile import CLASSES, Difference, Reconciliation, billed_cost, expected_cost
from trainledger.money.metrics.registry import label
from trainledger.money.rates.costs import ZERO
from trainledger.reports.export import LFWriter, _normalise_zip, _xlsx_cell, guard_formula
from trainledger.reports.present import table


def _line(b: Billed) -> dict[str, Any]:
    ln = b.line
    return {"invoice": b.invoice, "line": ln.line_no, "resource": ln.resource, "description": ln.description,
            "period_start": ln.period_start, "period_end": ln.period_end, "quantity": ln.quantity, "unit": ln.unit,
            "unit_price": ln.unit_price, "amount": ln.amount}


def _charge(c: Charge) -> dict[str, Any]:
    return {"run_id": c.run_id, "offer": c.offer, "share": c.share, "used_node_hours": c.node_hours * c.share,
            "billed_node_hours": c.billed_hours * c.share, "expected_cost": c.cost * c.share}


def difference_dict(d: Difference) -> dict[str, Any]:
    return {"class": d.cls, "what": CLASSES[d.cls], "offer": d.offer, "charge_period_start": d.start,
            "charge_period_end": d.end, "resource": d.resource or None, "difference": d.amount,
            "lines": [_line(b) for b in d.lines], "runs": [_charge(c) for c in d.charges]}


def _charges_table(rec: Reconciliation) -> list[dict[str, Any]]:
    """Per offer and charge period: expected, billed, their difference."""
    rows: dict[tuple, dict[str, Any]] = {}
    for cell in rec.cells:
        row = rows.setdefault((cell.offer, cell.start), {
            "offer": cell.offer, "charge_period_start": cell.start, "charge_period_end": cell.end,
            "expected_cost": ZERO, "billed_cost": ZERO, "expected_node_hours": ZERO, "billed_lines": 0, "runs": 0})
        row["expected_cost"] += expected_cost(cell)
        row["billed_cost"] += billed_cost(cell)
        row["expected_node_hours"] += sum((c.billed_hours * c.share for c in cell.charges), ZERO)
        row["billed_lines"] += len(cell.lines)
        row["runs"] += len({c.run_id for c in cell.charges if c.run_id})
    out = sorted(rows.values(), key=lambda r: (r["offer"], r["charge_period_start"]))
    for r in out:
        r["difference"] = r["billed_cost"] - r["expected_cost"]
    return out


def reconciliation_dict(rec: Reconciliation) -> dict[str, Any]:
    """Everything the reconciliation found, as the JSON prints it."""
    expected, billed = rec.totals()
    by_class: dict[str, Decimal] = defaultdict(Decimal)
    for d in rec.differences:
        by_class[d.cls] += d.amount
    return {
        "month": rec.month, "currency": rec.currency, "provider": rec.provider, "tolerance": rec.tolerance,
        "status": "reconciled" if rec.reconciled else "differences", "status_text": rec.status_text(),
        "expected_cost": expected, "billed_cost": billed, "difference": billed - expected,
        "differences_count": len(rec.differences), "differences_total": sum((d.amount for d in rec.differences), ZERO),
        "difference_by_class": {k: by_class[k] for k in CLASSES if k in by_class},
        "within_tolerance": {"count": len(rec.small), "amount": sum((d.amount for d in rec.small), ZERO)},
        "invoices": rec.invoices, "charges": _charges_table(rec),
        "differences": [difference_dict(d) for d in rec.differences],
    }


def reconciliation_text(d: dict[str, Any]) -> str:
    """The CLI's text: the month's status, the charges per offer and charge period, then each difference."""
    cur = d["currency"]
    head = f"{d['month']} ({cur}): {d['status_text']}"
    charges = table([{"offer": r["offer"], "from": r["charge_period_start"], "to": r["charge_period_end"],
                      "runs": r["runs"], "lines": r["billed_lines"], "expected_cost": r["expected_cost"],
                      "billed_cost": r["billed_cost"], "difference": r["difference"]} for r in d["charges"]])
    out = [head, "", charges]
    if d["differences"]:
        out += ["", table([{"class": x["what"], "offer": x["offer"] or "—", "resource": x["resource"] or "(offer)",
                            "from": x["charge_period_start"], "lines": len(x["lines"]), "runs": len(x["runs"]),
                            "difference": x["difference"]} for x in d["differences"]])]
    return "\n".join(out)


#: the columns of the differences in the CSV and the XLSX: one row per difference (money exact, not rounded)
DIFF_COLUMNS = ("class", "what", "offer", "charge_period_start", "charge_period_end", "resource", "difference",
                "invoice_lines", "runs")
CHARGE_COLUMNS = ("offer", "charge_period_start", "charge_period_end", "runs", "billed_lines", "expected_node_hours",
                  "expected_cost", "billed_cost", "difference")


def difference_rows(d_raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The differences flat, as the CSV and the XLSX write them: lines as ``#INVOICE:LINE``, runs by id."""
    return [{"class": x["class"], "what": x["what"], "offer": x["offer"] or "",
             "charge_period_start": _iso(x["charge_period_start"]), "charge_period_end": _iso(x["charge_period_end"]),
             "resource": x["resource"] or "", "difference": x["difference"],
             "invoice_lines": "; ".join(f"#{ln['invoice']}:{ln['line']}" for ln in x["lines"]),
             "runs": "; ".join(sorted({r["run_id"] for r in x["runs"] if r["run_id"]}))}
            for x in d_raw["differences"]]


def _header(column: str, currency: str) -> str:
    return label("invoice_difference", currency) if column == "difference" else column


def to_csv(d_raw: dict[str, Any]) -> bytes:
    """One row per difference, text guarded against formula injection; exact amounts."""
    buf = io.StringIO()
    w = LFWriter(buf)
    w.writerow([_header(c, d_raw["currency"]) for c in DIFF_COLUMNS])
    for row in difference_rows(d_raw):
        w.writerow([format(row[c], "f") if c == "difference" else guard_formula(row[c]) for c in DIFF_COLUMNS])
    return buf.getvalue().encode("utf-8")


def to_xlsx(d_raw: dict[str, Any]) -> bytes:
    """A workbook: Summary (the month's status and totals), Charges (per offer and charge period) and Differences;
    money as numbers shown to the cent, text guarded (deterministic bytes)."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.properties.creator = "trainledger"
    wb.properties.created = wb.properties.modified = datetime(2000, 1, 1)
    cur = d_raw["currency"]
    summary = [("month", d_raw["month"]), ("currency", cur), ("status", d_raw["status_text"]),
               ("expected_cost", d_raw["expected_cost"]), ("billed_cost", d_raw["billed_cost"]),
               ("difference", d_raw["difference"]), ("differences_count", d_raw["differences_count"]),
               ("tolerance", d_raw["tolerance"])]
    _sheet(wb.active, "Summary", ["figure", "value"], [[("figure", k), (k, v)] for k, v in summary])
    charges = [{**r, "charge_period_start": _iso(r["charge_period_start"]),
                "charge_period_end": _iso(r["charge_period_end"])} for r in d_raw["charges"]]
    _sheet(wb.create_sheet(), "Charges", [_header(c, cur) for c in CHARGE_COLUMNS],
           [[(c, r[c]) for c in CHARGE_COLUMNS] for r in charges])
    _sheet(wb.create_sheet(), "Differences", [_header(c, cur) for c in DIFF_COLUMNS],
           [[(c, r[c]) for c in DIFF_COLUMNS] for r in difference_rows(d_raw)])
    raw = io.BytesIO()
    wb.save(raw)
    return _normalise_zip(raw.getvalue())


def _sheet(ws, title: str, header: list[str], rows: list[list[tuple[str, Any]]]) -> None:
    from trainledger.reports.present import kind_of

    ws.title = title
    ws.append(header)
    for row in rows:
        ws.append([v if isinstance(v, Decimal) else _xlsx_cell(k, v) for k, v in row])
    for r_idx, row in enumerate(rows, start=2):
        for c_idx, (k, v) in enumerate(row, start=1):
            if isinstance(v, Decimal) and kind_of(k) == "money":
                ws.cell(row=r_idx, column=c_idx).number_format = "#,##0.00"


def _iso(v: Any) -> str:
    return v.isoformat() if v is not None else ""



def with_billed(p: dict[str, Any], raw_summary: dict[str, Any], billed: Any, basis: str, month: str,
                currency: str, raw_node_types: Optional[list[Any]] = None) -> dict[str, Any]:
    """A presented report (or comparison) ``p`` with the month's invoices beside its figures and its cost basis
    (:func:`trainledger.money.invoice.billed.with_cost_basis` on the exact ``raw_summary``; only the keys it adds or
    changes are presented, each rounded once); under ``billed`` each node type's line (``p["node_types"]``, from
    the exact ``raw_node_types``) at its offers' billed cost. A month without invoices under the estimate: ``p`` as
    it was."""
    from trainledger.money.invoice.billed import billed_node_types, with_cost_basis
    from trainledger.reports.present import jsonable, present

    raw = with_cost_basis(raw_summary, billed, basis, month, currency)
    changed = {k: v for k, v in raw.items() if k not in raw_summary or raw_summary[k] is not v}
    if not changed:
        return p
    key = "summary" if "summary" in p else "total"
    out = {**p, key: {**p[key], **jsonable(changed)}}
    lines = billed_node_types(raw_node_types or [], billed, basis)
    if lines and "node_types" in p:
        out["node_types"] = [{**r, "actual_cost": present("actual_cost", lines[r["node_type"]])}
                             if r.get("node_type") in lines else r for r in p["node_types"]]
    return out
