"""The Goodput page in headless Chromium (`trainledger dashboard` on the demo ledger): reached from the sidebar,
its figures are the CLI's (`trainledger goodput --json`, `trainledger goodput idle --json`) and the heat map draws."""

from __future__ import annotations

import json
import re

import pytest
from trainledger.reports.present import fmt_cell
from typer.testing import CliRunner

from tests.app.conftest import RUN_ENV
from tests.app.helpers import DEMO_NOW, MONTH, build_ledger
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle
from tests.app.test_dashboard_browser import ARTIFACTS

pytestmark = pytest.mark.slow


def _cli(url: str, *args: str) -> dict:
    from trainledger.cli.commands import app

    r = CliRunner().invoke(app, [*args, "--db", url, "--json", "--now", DEMO_NOW.isoformat()])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_goodput_page_in_the_browser(tmp_path_factory):
    from playwright.sync_api import expect, sync_playwright

    need_chromium()
    tmp = tmp_path_factory.mktemp("e2e-goodput")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    idle = _cli(url, "goodput", "idle", "--month", MONTH)
    env = {**RUN_ENV, "TRAINLEDGER_JOURNAL_DIR": str(tmp / "journal"), "XDG_DATA_HOME": str(tmp / "xdg"),
           "TRAINLEDGER_NOW": DEMO_NOW.isoformat()}
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(tmp, url, env=env) as served, sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{served.base}/overview?month={MONTH}")
            settle(page)
            page.get_by_test_id("stSidebarNav").get_by_text("Goodput", exact=True).click()
            expect(page).to_have_url(re.compile(rf"/goodput\?.*month={MONTH}"))
            metric = page.get_by_test_id("stMetric").filter(has_text="Idle cost (CNY)").get_by_test_id("stMetricValue")
            expect(metric).to_have_text(fmt_cell("idle_cost", idle["idle_cost"]))
            expect(page.get_by_text(f"Where idle sits, {MONTH}")).to_be_visible()
            expect(page.get_by_test_id("stVegaLiteChart").first).to_be_visible()
            settle(page)
            page.screenshot(path=str(ARTIFACTS / "goodput.png"), full_page=True)
        finally:
            browser.close()
