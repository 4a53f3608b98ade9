"""Round trip: the ledger's own FOCUS export of a month, imported as an invoice, reconciles with zero differences;
editing one BilledCost, removing one row and adding one row are found as exactly those three differences, with
their amounts. SQLite and PostgreSQL; CSV, Parquet and a month presented in another currency."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.rates.costs import cents
from trainledger.store.models import RunStatus

from tests.focus.test_focus import _read
from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc


def _ledger(cli, engine) -> None:
    """November 2025: an owned fleet, elastic runs (one across a price change on Nov 15), a reserved offer sized by
    peak use, a failed run (as in tests/focus/test_focus.py)."""
    with Session(engine) as s:
        add_fleet(s, 4, valid_from=date(2025, 1, 1))
        add_run(s, "own-a", datetime(2025, 11, 3, tzinfo=UTC), 50, nodes=4)
        add_run(s, "own-b", datetime(2025, 11, 20, tzinfo=UTC), 30, nodes=2, status=RunStatus.failed, project="p2")
        add_run(s, "rent-across", datetime(2025, 11, 14, 18, tzinfo=UTC), 12.5, nodes=2, offer_name="rtx4090-rent")
        add_run(s, "rent-late", datetime(2025, 11, 28, tzinfo=UTC), 3, nodes=1, offer_name="rtx4090-rent")
        add_run(s, "rent-short", datetime(2025, 11, 5, tzinfo=UTC), 0.25, nodes=3, offer_name="rtx4090-rent")
        add_run(s, "reserved", datetime(2025, 11, 10, tzinfo=UTC), 100, nodes=3, offer_name="rtx4090-reserved")
        s.commit()
    for args in (("pricing", "set", "rtx4090-rent", "price_per_node_month=4380", "--from", "2025-11-15",
                  "--retroactive", "--yes"), ("fx", "set", "CNY", "USD", "0.1389", "--from", "2025-01-01")):
        res = cli(*args)
        assert res.exit_code == 0, res.output


def _export(cli, tmp_path, fmt: str, currency, version: str = "1.2"):
    out = tmp_path / f"nov.{fmt}"
    res = cli("report", "focus", "--month", "2025-11", "--format", fmt, "-o", out, "--focus-version", version,
              *(("--currency", currency) if currency else ()))
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.parametrize("fmt,currency,version", [("csv", None, "1.2"), ("parquet", None, "1.2"), ("csv", "USD", "1.2"),
                                                  ("csv", None, "1.3")])
def test_the_ledgers_own_focus_export_reconciles_with_zero_differences(cli, engine, tmp_path, fmt, currency, version):
    _ledger(cli, engine)
    out = _export(cli, tmp_path, fmt, currency, version)
    res = cli("invoice", "import", out, "--provider", "ledger", "--json")
    assert res.exit_code == 0, res.output
    res = cli("invoice", "reconcile", "--month", "2025-11", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    report = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json",
                            *(("--currency", currency) if currency else ())).output)
    assert (doc["status"], doc["differences"], doc["currency"]) == ("reconciled", [], currency or "CNY")
    assert doc["expected_cost"] == doc["billed_cost"] == report["summary"]["actual_cost"]
    # the elastic offer is reconciled per charge period: the price change cuts November in two
    assert [(r["offer"], r["charge_period_start"][:10]) for r in doc["charges"] if r["offer"] == "rtx4090-rent"] == [
        ("rtx4090-rent", "2025-11-01"), ("rtx4090-rent", "2025-11-15")]


def test_an_edited_a_removed_and_an_added_row_are_exactly_three_differences(cli, engine, tmp_path):
    _ledger(cli, engine)
    header, rows = _read(_export(cli, tmp_path, "csv", None))
    edited = next(r for r in rows if r["x_RunId"] == "rent-across" and r["ChargePeriodStart"].startswith("2025-11-01"))
    edited["BilledCost"] = str(D(edited["BilledCost"]) + D("12.34"))
    removed = next(r for r in rows if r["x_RunId"] == "rent-late")
    rows.remove(removed)
    added = {**removed, "ResourceId": "trainledger/runs/not-in-the-ledger", "x_RunId": "not-in-the-ledger",
             "BilledCost": "250.00", "PricingQuantity": "50"}
    rows.append(added)
    buf = io.StringIO()
    w = csv.DictWriter(buf, header, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    path = tmp_path / "edited.csv"
    path.write_text(buf.getvalue())
    assert cli("invoice", "import", path, "--provider", "ledger").exit_code == 0
    res = cli("invoice", "reconcile", "--month", "2025-11", "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    found = sorted((d["class"], d["resource"], d["difference"]) for d in doc["differences"])
    assert found == sorted([("rate", "run:rent-across", "12.34"),
                            ("runs_without_billing", None, str(cents(-D(removed["BilledCost"])))),
                            ("billed_without_runs", "run:not-in-the-ledger", "250.00")])
    assert doc["status_text"] == f"3 differences totalling {cents(D('12.34') - D(removed['BilledCost']) + 250):,.2f} CNY"
    gone = next(d for d in doc["differences"] if d["class"] == "runs_without_billing")
    assert [r["run_id"] for r in gone["runs"]] == ["rent-late"]
