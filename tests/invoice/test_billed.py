"""Billed cost in the reports (issue 41, item 4): a month's invoices beside the ledger's estimate in `report monthly`
and `cost compare`, and, for a reconciled month with `--cost-basis billed`, the rented lines at what was billed,
the savings and ROI recomputed from it and labelled."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates.costs import cents

from tests.invoice import scenario

D = Decimal
S = scenario
#: every run and the reservation billed at the ledger's prices, r4 one cent over (within 0.01 per line)
CLEAN = [("node-a1", "10", "hours", "2.40", "24.00", None, None), ("node-a2", "10", "hours", "2.40", "24.00", None, None),
         ("node-d1", "3.3", "hours", "2.40", "7.92", None, None), ("node-b1", "0.5", "hours", "2.40", "1.20", None, None),
         ("node-c1", "3", "hours", "2.40", "7.21", None, None), ("node-e1", "10", "hours", "2.80", "28.00", "CNY", "0.14"),
         ("reservation-1", "2", "node-months", "1500", "3000.00", None, None)]
EXPECTED = (20 + D("3.3") + D("0.5") + 3) * S.RATE + 10 * S.RATE_CNY * S.LEDGER_FX + 2 * S.RESERVED
NOW = ("--now", "2026-12-05T00:00:00Z")


def _summary(cli, *args) -> dict:
    res = cli("report", "monthly", "--month", "2026-11", "--currency", "USD", "--format", "json", *NOW, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["summary"]


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_a_reconciled_month_shows_billed_cost_and_can_use_it(cli, engine, tmp_path):
    S.ledger(cli, engine, tmp_path)
    before = _summary(cli)
    path = tmp_path / "clean.csv"
    path.write_text(S.focus_invoice(CLEAN))
    assert cli("invoice", "import", path).exit_code == 0
    s = _summary(cli)
    assert {k: v for k, v in s.items() if k not in before} == {
        "invoice_status": "reconciled (every line within 0.01 USD)", "expected_cost": str(cents(EXPECTED)),
        "billed_cost": str(cents(EXPECTED + D("0.01"))), "invoice_difference": "0.01",
        "cost_basis": "the ledger's estimate"}
    assert {k: v for k, v in s.items() if k in before} == before  # the estimate's figures unchanged
    assert s["actual_cost"] == str(cents(EXPECTED))  # every rented line is invoiced here
    with Session(engine) as ses:
        alt = monthly_report(ses, "2026-11", currency="USD").summary["alternative_cost"]
    billed = _summary(cli, "--cost-basis", "billed")
    actual = EXPECTED + D("0.01")
    assert (billed["actual_cost"], billed["cost_basis"]) == (str(cents(actual)),
                                                             "billed: the reconciled invoices for the rented lines")
    assert billed["savings_vs_alternative"] == str(cents(alt - actual))
    assert billed["roi"] == float(((alt - actual) / actual).quantize(D("0.0001")))
    res = cli("cost", "compare", "--month", "2026-11", "--currency", "USD", "--cost-basis", "billed", "--json", *NOW)
    assert res.exit_code == 0, res.output
    total = json.loads(res.output)["total"]
    assert (total["actual_cost"], total["billed_cost"], total["cost_basis"]) == (
        str(cents(actual)), str(cents(actual)), "billed: the reconciled invoices for the rented lines")


@pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)
def test_billed_cost_is_refused_until_the_month_is_reconciled(cli, engine, tmp_path):
    S.ledger(cli, engine, tmp_path)
    res = cli("report", "monthly", "--month", "2026-11", "--currency", "USD", "--cost-basis", "billed", *NOW)
    assert (res.exit_code, res.output.strip()) == (2, "error: --cost-basis billed: no invoice imported for 2026-11; "
                                                      "import it with `trainledger invoice import FILE`")
    path = tmp_path / "planted.csv"
    path.write_text(S.focus_invoice())
    assert cli("invoice", "import", path).exit_code == 0
    s = _summary(cli)
    assert s["invoice_status"] == f"7 differences totalling {cents(sum(a for _, _, a in S.PLANTED)):,.2f} USD"
    assert "billed_cost" not in s  # shown once the month is reconciled
    res = cli("report", "monthly", "--month", "2026-11", "--currency", "USD", "--cost-basis", "billed", *NOW)
    assert res.exit_code == 2 and res.output.startswith("error: --cost-basis billed: 2026-11 is not reconciled (7 ")
    res = cli("report", "monthly", "--month", "2026-11", "--currency", "CNY", "--format", "json", *NOW)
    assert json.loads(res.output)["summary"]["invoice_status"].endswith(
        "; the invoices are in USD: present the report in USD to compare")


@pytest.mark.parametrize("ledger_url", ["sqlite", "postgresql"], indirect=True)
def test_under_the_billed_basis_each_node_types_line_is_at_what_its_offers_billed(cli, engine, tmp_path):
    """--cost-basis billed moves the rented lines too: each node type's line of the report by its offers' invoice
    difference, and a line matched to no offer (within the tolerance: the month is still reconciled) is
    ``invoice_unattributed``, so the lines and it add up to the billed spend exactly."""
    from trainledger.money.invoice.billed import billed_node_types, month_billed

    S.ledger(cli, engine, tmp_path)
    path = tmp_path / "clean.csv"
    path.write_text(S.focus_invoice([*CLEAN, ("zzz-storage", "1", "GB-months", "0.009", "0.009", None, None)]))
    assert cli("invoice", "import", path).exit_code == 0
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)  # NOW
    with Session(engine) as ses:
        rep = monthly_report(ses, "2026-11", currency="USD", now=now)
        b = month_billed(ses, "2026-11", now)
    assert b.reconciled and b.by_node_type == {"rtx4090-8x": D("0.01")} and b.unattributed == D("0.009")
    lines = billed_node_types(rep.node_types, b, "billed")
    exact = {n.node_type: n.actual_cost for n in rep.node_types}
    assert lines == {"rtx4090-8x": exact["rtx4090-8x"] + D("0.01")}
    assert sum(({**exact, **lines}).values(), D(0)) + b.unattributed == rep.summary["actual_cost"] + D("0.019")

    res = cli("report", "monthly", "--month", "2026-11", "--currency", "USD", "--format", "json", *NOW,
              "--cost-basis", "billed")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    est = cli("report", "monthly", "--month", "2026-11", "--currency", "USD", "--format", "json", *NOW)
    before = {r["node_type"]: r for r in json.loads(est.output)["node_types"]}
    after = {r["node_type"]: r for r in out["node_types"]}
    assert {n for n in after if after[n] != before[n]} == {"rtx4090-8x"}
    assert after["rtx4090-8x"] == {**before["rtx4090-8x"], "actual_cost": str(cents(exact["rtx4090-8x"] + D("0.01")))}
    assert (out["summary"]["actual_cost"], out["summary"]["invoice_unattributed"]) == (
        str(cents(rep.summary["actual_cost"] + D("0.019"))), "0.01")
    assert "invoice_unattributed" not in json.loads(est.output)["summary"]  # the estimate: nothing moved
    res = cli("cost", "compare", "--month", "2026-11", "--currency", "USD", "--cost-basis", "billed", "--json", *NOW)
    assert res.exit_code == 0, res.output
    compared = {r["node_type"]: r["actual_cost"] for r in json.loads(res.output)["node_types"]}
    assert compared["rtx4090-8x"] == str(cents(exact["rtx4090-8x"] + D("0.01")))  # the same line as the report's
