"""Invoices with one planted difference of each class are reconciled to exactly those differences, to the cent,
on SQLite and PostgreSQL: a FOCUS 1.2 CSV and a provider CSV read through a mapping file (tests/invoice/scenario.py)."""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.invoice.reconcile import reconcile
from trainledger.money.rates.costs import cents

from tests.invoice import scenario

D = Decimal


def _import(cli, tmp_path, fmt: str):
    if fmt == "focus":
        path = tmp_path / "invoice.csv"
        path.write_text(scenario.focus_invoice())
        return cli("invoice", "import", path, "--json")
    path, mapping = tmp_path / "gpuhub.csv", tmp_path / "gpuhub.toml"
    path.write_text(scenario.mapped_invoice())
    mapping.write_text(scenario.MAPPING)
    return cli("invoice", "import", path, "--mapping", mapping, "--json")


@pytest.mark.parametrize("fmt", ["focus", "csv"])
def test_each_planted_difference_is_found_with_its_amount(cli, engine, tmp_path, fmt):
    scenario.ledger(cli, engine, tmp_path)
    res = _import(cli, tmp_path, fmt)
    assert res.exit_code == 0, res.output
    receipt = json.loads(res.output)
    assert (receipt["status"], receipt["lines"], receipt["currency"]) == ("imported", 8, "USD")
    assert receipt["provider"] == ("GPU Hub" if fmt == "focus" else "gpuhub")
    assert receipt["billed_cost"] == str(cents(sum(D(line[4]) for line in scenario.LINES)))
    with Session(engine) as s:
        rec = reconcile(s, "2026-11", now=None)
    found = sorted((d.cls, d.resource or None, d.amount) for d in rec.differences)
    assert found == scenario.PLANTED  # exact decimals, not only cents
    assert rec.small == [] or all(abs(d.amount) < D("1e-9") for d in rec.small)

    res = cli("invoice", "reconcile", "--month", "2026-11", "--json")
    assert res.exit_code == 1, res.output  # differences remain
    doc = json.loads(res.output)
    assert sorted((d["class"], d["resource"], d["difference"]) for d in doc["differences"]) == sorted(
        (c, r, str(cents(a))) for c, r, a in scenario.PLANTED)
    total = sum(a for _, _, a in scenario.PLANTED)
    assert (doc["status"], doc["differences_count"], doc["differences_total"]) == ("differences", 7, str(cents(total)))
    # Σ differences = billed − expected, the month's whole difference
    billed = sum(D(line[4]) for line in scenario.LINES)
    expected = (20 * scenario.RATE + D("3.3") * scenario.RATE + D("0.5") * scenario.RATE + 3 * scenario.RATE
                + 10 * scenario.RATE_CNY * scenario.LEDGER_FX + 2 * scenario.RESERVED)
    assert (doc["billed_cost"], doc["expected_cost"]) == (str(cents(billed)), str(cents(expected)))
    assert doc["difference"] == str(cents(billed - expected)) == str(cents(total))
    # the reservation's monthly commitment line matches the reserved term: no difference on it
    reserved = next(r for r in doc["charges"] if r["offer"] == "hub-reserved")
    assert reserved["expected_cost"] == reserved["billed_cost"] == "3000.00" and reserved["difference"] == "0.00"
    # drill-down: the runs and lines behind a difference
    rate = next(d for d in doc["differences"] if d["class"] == "rate")
    assert [(r["run_id"], r["billed_node_hours"]) for r in rate["runs"]] == [("r1", 10.0)]
    assert [(ln["resource"], ln["amount"]) for ln in rate["lines"]] == [("node-a1", "25.00")]
    missing = next(d for d in doc["differences"] if d["class"] == "runs_without_billing")
    assert [r["run_id"] for r in missing["runs"]] == ["r4"] and missing["lines"] == []

    text = cli("invoice", "reconcile", "--month", "2026-11")
    assert text.exit_code == 1
    assert text.output.splitlines()[0] == f"2026-11 (USD): 7 differences totalling {cents(total):,.2f} USD"


def test_a_clean_invoice_reconciles_and_the_tolerance_is_per_line(cli, engine, tmp_path):
    scenario.ledger(cli, engine, tmp_path)
    clean = [("node-a1", "10", "hours", "2.40", "24.00", None, None), ("node-a2", "10", "hours", "2.40", "24.00", None, None),
             ("node-d1", "3.3", "hours", "2.40", "7.92", None, None), ("node-b1", "0.5", "hours", "2.40", "1.20", None, None),
             ("node-c1", "3", "hours", "2.40", "7.21", None, None),  # one cent over: within 0.01 per line
             ("node-e1", "10", "hours", "2.80", "28.00", "CNY", "0.14"),
             ("reservation-1", "2", "node-months", "1500", "3000.00", None, None)]
    path = tmp_path / "clean.csv"
    path.write_text(scenario.focus_invoice(clean))
    assert cli("invoice", "import", path).exit_code == 0
    res = cli("invoice", "reconcile", "--month", "2026-11", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (doc["status"], doc["differences_count"], doc["differences"]) == ("reconciled", 0, [])
    assert doc["within_tolerance"] == {"count": 1, "amount": "0.01"}
    strict = cli("invoice", "reconcile", "--month", "2026-11", "--tolerance", "0.001", "--json")
    assert strict.exit_code == 1
    assert [(d["class"], d["resource"], d["difference"]) for d in json.loads(strict.output)["differences"]] == [
        ("rounding", "node:node-c1", "0.01")]


def test_the_differences_csv_is_exact_and_guarded(cli, engine, tmp_path):
    scenario.ledger(cli, engine, tmp_path)
    lines = scenario.LINES + [("=HYPERLINK(\"x\")", "1", "hours", "1", "1.00", None, None)]
    path = tmp_path / "invoice.csv"
    path.write_text(scenario.focus_invoice(lines))
    assert cli("invoice", "import", path).exit_code == 0
    out = tmp_path / "diff.csv"
    res = cli("invoice", "reconcile", "--month", "2026-11", "-o", out)
    assert res.exit_code == 1, res.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 8
    injected = next(r for r in rows if r["class"] == "unmatched" and r["resource"] != "support")
    assert injected["resource"] == "'=HYPERLINK(\"x\")"
    fx = next(r for r in rows if r["class"] == "fx")
    assert D(fx["Difference (billed − expected) (USD)"]) == D("30.00") - 10 * scenario.RATE_CNY * scenario.LEDGER_FX


def test_provider_scope_and_no_invoice(cli, engine, tmp_path):
    scenario.ledger(cli, engine, tmp_path)
    res = cli("invoice", "reconcile", "--month", "2026-11")
    assert (res.exit_code, res.output.strip()) == (2, "error: --month: no invoice imported for 2026-11; import one "
                                                      "with `trainledger invoice import FILE`")
    assert _import(cli, tmp_path, "csv").exit_code == 0
    other = cli("invoice", "reconcile", "--month", "2026-11", "--provider", "GPU Hub", "--json")
    assert other.exit_code == 2 and "no invoice of GPU Hub imported for 2026-11" in other.output
    mine = json.loads(cli("invoice", "reconcile", "--month", "2026-11", "--provider", "gpuhub", "--json").output)
    assert mine["differences_count"] == 7


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_an_invoice_in_a_currency_without_a_rate_is_one_line(cli, engine, tmp_path):
    scenario.ledger(cli, engine, tmp_path)
    path = tmp_path / "eur.csv"
    path.write_text(scenario.focus_invoice([("node-a1", "10", "hours", "2.40", "24.00", None, None)]).replace("USD", "EUR"))
    assert cli("invoice", "import", path).exit_code == 0
    res = cli("invoice", "reconcile", "--month", "2026-11")
    assert res.exit_code == 2
    assert res.output.startswith("error: --month: the invoices of 2026-11 are in EUR: no USD→EUR exchange rate in "
                                 "force on 2026-11-01"), res.output


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_a_run_billed_node_by_node_adds_up_exactly(cli, engine, tmp_path):
    from datetime import datetime, timedelta, timezone

    from trainledger.store.models import RunNode

    from tests.helpers import add_run
    from tests.invoice.test_billed import CLEAN

    scenario.ledger(cli, engine, tmp_path)
    with Session(engine) as s:  # 3 nodes × 1 h 20 min: a third of its charge on each node
        run = add_run(s, "r6", datetime(2026, 11, 12, tzinfo=timezone.utc), 0, nodes=3, offer_name="hub-h100")
        run.ended_at = run.heartbeat_at = run.started_at + timedelta(minutes=80)
        s.add_all([run] + [RunNode(run_id="r6", hostname=f"node-f{i}") for i in (1, 2, 3)])
        s.commit()
    third = str(D(80) / 60)[:8]
    lines = CLEAN + [(f"node-f{i}", third, "hours", "2.40", str(cents(D(80) / 60 * scenario.RATE)), None, None)
                     for i in (1, 2, 3)]
    path = tmp_path / "invoice.csv"
    path.write_text(scenario.focus_invoice(lines))
    assert cli("invoice", "import", path).exit_code == 0
    with Session(engine) as s:
        rec = reconcile(s, "2026-11")
    assert rec.reconciled
    nodes = [c for c in rec.cells if c.resource.startswith("node:node-f")]
    assert sum(c.charges[0].share for c in nodes) == 1 and len(nodes) == 3
    assert not [c for c in rec.cells if c.offer == "hub-h100" and c.resource == ""]  # nothing left to the offer
