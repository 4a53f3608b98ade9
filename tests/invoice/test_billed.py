"""Billed cost in the reports (issue 41, item 4): a month's invoices beside the ledger's estimate in `report monthly`
and `cost compare`, and, for a reconciled month with `--cost-basis billed`, the rented lines at what was billed,
the savings and ROI recomputed from it and labelled."""

from __future__ import annotations

import json
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
