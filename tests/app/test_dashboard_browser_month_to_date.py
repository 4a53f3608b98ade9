"""End to end on day 3 of a month: `trainledger dashboard` (clock: $TRAINLEDGER_NOW) in headless Chromium.

The Overview opens on the current month by itself and says "to date (3 of 31 days)", with the fleet
prorated, the month-end forecast and the budgets; Monthly ROI, Rent vs own and Export say it too; the
downloaded CSV is `trainledger report monthly --month 2026-12 --now ...` byte for byte.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from trainledger.app.views import ui
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.export import presented_report
from trainledger.reports.present import fmt_cell

from tests.app.conftest import RUN_ENV
from tests.app.helpers import with_session
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle, trainledger
from tests.app.test_dashboard_browser import ARTIFACTS
from tests.app.test_dashboard_month_to_date import DAY3, LABEL, MONTH, build_day3

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def day3_dashboard(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("e2e-day3")
    url = build_day3(f"sqlite:///{tmp / 'ledger.db'}")
    env = {**RUN_ENV, "TRAINLEDGER_JOURNAL_DIR": str(tmp / "journal"), "XDG_DATA_HOME": str(tmp / "xdg"),
           "TRAINLEDGER_NOW": DAY3.isoformat()}
    with serve(tmp, url, env=env) as served:
        yield served.base, url


def _metric(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def test_day_3_in_the_browser(day3_dashboard):
    from playwright.sync_api import expect, sync_playwright

    base, url = day3_dashboard
    s = presented_report(with_session(url, lambda x: monthly_report(x, MONTH, now=DAY3)))["summary"]
    ARTIFACTS.mkdir(exist_ok=True)
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(accept_downloads=True, viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            page.goto(base)  # no ?month=: the current month by the dashboard's clock
            expect(_metric(page, "Spend, to date (CNY)")).to_have_text(fmt_cell("actual_cost", s["actual_cost"]))
            expect(page.get_by_text(f"{MONTH} {LABEL}").first).to_be_visible()
            expect(_metric(page, "Time utilization, to date")).to_have_text(ui.pct(s["time_utilization"]))
            expect(page.get_by_text("Month-end forecast, 2026-12")).to_be_visible()
            expect(page.get_by_text("Team budget: at risk")).to_be_visible()
            budgets = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("demo-pretrain"))
            expect(budgets.first).to_be_visible()
            settle(page)
            page.screenshot(path=str(ARTIFACTS / "dashboard-day3-overview.png"), full_page=True)
            page.get_by_text("Budgets, 2026-12").scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "dashboard-day3-budgets.png"))

            nav = page.get_by_test_id("stSidebarNav")
            nav.get_by_role("link", name="Monthly ROI", exact=True).click()
            expect(_metric(page, "ROI, to date")).to_have_text(ui.pct(s["roi"]))
            expect(page.get_by_text(f"{MONTH} {LABEL}").first).to_be_visible()
            nav.get_by_role("link", name="Rent vs own", exact=True).click()
            expect(page.get_by_text("Starts at 2026-11's time utilization").first).to_be_visible()
            settle(page)
            page.screenshot(path=str(ARTIFACTS / "dashboard-day3-rent-vs-own.png"), full_page=True)
            nav.get_by_role("link", name="Export", exact=True).click()
            expect(page.get_by_text(f"{MONTH} {LABEL}").first).to_be_visible()
            button = page.get_by_role("button", name="Download CSV")
            expect(button).to_be_visible()
            settle(page)
            with page.expect_download(timeout=WAIT_MS) as info:
                button.click()
            download = info.value
            assert download.suggested_filename == f"trainledger-{MONTH}-to-date.csv"
            got = Path(download.path()).read_bytes()
        finally:
            browser.close()
    cli = subprocess.run([*trainledger(), "report", "monthly", "--month", MONTH, "--format", "csv", "--db", url,
                          "--now", DAY3.isoformat()], capture_output=True, check=True, timeout=120)
    assert got == cli.stdout
    assert f"period,{LABEL}\nis_partial,true\n".encode() in got
