"""The Invoices page in real Chromium: the differences it shows are those of `trainledger invoice reconcile --json`
(the planted invoice of tests/invoice/scenario.py), and a difference's drill-down shows the runs behind it."""

from __future__ import annotations

import json

import pytest

from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle
from tests.invoice import scenario
from tests.invoice.test_reconcile import _import

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("ledger_url", ["sqlite"], indirect=True)]


def test_the_invoices_page_shows_the_differences_of_reconcile_json(cli, engine, tmp_path, ledger_url):
    from playwright.sync_api import expect, sync_playwright

    need_chromium()
    scenario.ledger(cli, engine, tmp_path)
    assert _import(cli, tmp_path, "csv").exit_code == 0
    doc = json.loads(cli("invoice", "reconcile", "--month", "2026-11", "--json").output)
    assert doc["differences_count"] == 7
    env = {"TRAINLEDGER_NOW": "2026-12-05T00:00:00Z"}
    with serve(tmp_path, ledger_url, env=env) as served, sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_context(viewport={"width": 1400, "height": 1400}).new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{served.base}/invoices?month=2026-11")
            page.wait_for_load_state()
            settle(page)
            expect(page.get_by_role("heading", name="Invoices", exact=True)).to_be_visible()
            expect(page.get_by_text(f"2026-11 (USD): {doc['status_text']}")).to_be_visible()
            table = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("class", exact=True))
            expect(table.get_by_text(doc["differences"][-1]["what"], exact=True)).to_have_count(1)
            # the grid's cells as its accessible table holds them (the canvas draws the same)
            shown = table.locator("tbody tr").evaluate_all(
                "rows => rows.map(tr => [...tr.querySelectorAll('td')].map(td => td.textContent))")
            assert [(r[0], r[1], r[2], r[4]) for r in shown] == [
                (d["what"], d["offer"] or "", d["resource"] or "(the offer)", f"{float(d['difference']):,.2f}")
                for d in doc["differences"]]
        finally:
            browser.close()
