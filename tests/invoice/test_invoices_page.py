"""The dashboard's Invoices page (AppTest): its differences are `invoice reconcile --json`'s, its downloads the CLI's
bytes, and the drill-down shows the runs and lines behind a difference."""

from __future__ import annotations

import json

import pytest

from tests.app.helpers import make_app, plain, run_page
from tests.invoice import scenario
from tests.invoice.test_reconcile import _import

pytestmark = pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)


def _table(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_the_invoices_page_shows_the_clis_reconciliation(cli, engine, tmp_path, app_env, ledger_url, monkeypatch):
    scenario.ledger(cli, engine, tmp_path)
    assert _import(cli, tmp_path, "csv").exit_code == 0
    monkeypatch.setenv("TRAINLEDGER_NOW", "2026-12-05T00:00:00Z")
    doc = json.loads(cli("invoice", "reconcile", "--month", "2026-11", "--json").output)
    app_env(ledger_url)
    at = run_page(make_app("2026-11"), "invoices")
    assert [plain(e.value) for e in at.error] == [f"2026-11 (USD): {doc['status_text']}"]
    shown = _table(at, "class")
    assert plain(shown.columns[-1]) == "difference (billed − expected) (USD)"
    assert list(zip(shown["class"], shown["offer"], shown[shown.columns[-1]])) == [
        (d["what"], d["offer"] or "", f"{float(d['difference']):,.2f}") for d in doc["differences"]]
    charges = _table(at, "to")
    assert list(charges[charges.columns[-1]]) == [f"{float(r['difference']):,.2f}" for r in doc["charges"]]
    # the drill-down: the rate difference on node-a1 is r1's half and the provider's line
    i = [d["class"] for d in doc["differences"]].index("rate")
    at.selectbox(key="invoice_drill").set_value(i).run()
    runs = _table(at, "run")
    assert list(runs["run"]) == ["r1"]
    lines = _table(at, "line")
    assert list(lines["resource"]) == ["node-a1"]
    out = tmp_path / "cli.csv"
    cli("invoice", "reconcile", "--month", "2026-11", "-o", out)
    assert [b.label for b in at.get("download_button")] == ["Download CSV", "Download XLSX"]
    from trainledger.app.queries import invoices

    assert invoices.download(ledger_url, "2026-11", "csv") == out.read_bytes()


def test_the_invoices_page_without_invoices(app_env, ledger_url, engine):
    app_env(ledger_url)
    at = run_page(make_app("2026-11"), "invoices")
    assert [plain(i.value) for i in at.info][-1].startswith("No invoice imported yet")


def test_roi_and_rent_vs_own_say_which_cost_they_use(cli, engine, tmp_path, app_env, ledger_url):
    from tests.invoice.test_round_trip import _export, _ledger

    _ledger(cli, engine)
    assert cli("invoice", "import", _export(cli, tmp_path, "csv", None), "--provider", "ledger").exit_code == 0
    summary = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json").output)["summary"]
    app_env(ledger_url)
    for page in ("roi", "rent_vs_own"):
        at = run_page(make_app("2025-11"), page)
        notes = [plain(c.value) for c in at.caption if "Cost basis" in c.value]
        assert notes == [f"Cost basis: the ledger's estimate. 2025-11's invoices: {summary['invoice_status']}; billed "
                         f"{float(summary['billed_cost']):,.2f} CNY against the ledger's "
                         f"{float(summary['expected_cost']):,.2f} (`trainledger report monthly --month 2025-11 "
                         "--cost-basis billed`)."], page
