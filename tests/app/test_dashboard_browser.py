"""End to end: `trainledger dashboard` in a subprocess, driven by headless Chromium (Playwright).

Visits every page through the sidebar, checks a figure on Overview, and
downloads the CSV export, which must equal `trainledger report monthly
--format csv` byte for byte. Launches a tiny run from the Launch page and
watches it (live refresh) reach `succeeded`. Screenshots go to
test-artifacts/ (gitignored). The server runs in its own process group,
killed in teardown; then no process of a launched run may be left.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

import pytest
from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.present import fmt_cell
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.app.conftest import RUN_ENV
from tests.app.helpers import MONTH, REPO, build_ledger
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle, trainledger
from tests.tracking.conftest import kill_leftover_runs, processes_of_run, wait_for

pytestmark = pytest.mark.slow

ARTIFACTS = REPO / "test-artifacts"
PAGES = ["Runs", "Rent vs own", "Monthly ROI", "Strategies", "Planner", "Launch", "Settings", "Export"]  # Export last
RUN_WAIT_MS = 180_000  # a tiny 2-rank run on a small CPU, start to end
LAUNCHED: list[str] = []  # run ids started through the dashboard, checked in teardown


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("e2e")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    env = {**RUN_ENV, "TRAINLEDGER_JOURNAL_DIR": str(tmp / "journal"), "XDG_DATA_HOME": str(tmp / "xdg"),
           "TRAINLEDGER_CACHE_DIR": str(tmp_path_factory.mktemp("shards"))}  # for the runs it launches
    try:
        with serve(tmp, url, env=env) as served:
            yield served.base, url, served.proc
    finally:
        kill_leftover_runs(url, LAUNCHED)  # launched runs live in their own sessions


@contextlib.contextmanager
def _page(**options):
    """A page (``options``: Playwright's ``new_page``) of a headless Chromium of its own, closed after; its waits, and
    ``expect``'s (tests/app/served.py ``chromium``), allow WAIT_MS."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(**options)
            page.set_default_timeout(WAIT_MS)
            yield page
        finally:
            browser.close()


def test_the_ledger_url_is_not_on_the_command_line(dashboard):
    _, url, proc = dashboard
    cmdlines = []
    for pid in [proc.pid, *_children(proc.pid)]:
        try:
            cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    streamlit = [c for c in cmdlines if "trainledger.app.serving.serve run" in c]
    assert streamlit, cmdlines
    assert all(url not in c for c in streamlit) and all("--server.address 127.0.0.1" in c for c in streamlit)


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def test_every_page_and_the_csv_export(dashboard):
    from playwright.sync_api import expect

    base, url, _ = dashboard
    engine = make_engine(url)
    with Session(engine) as s:
        spend = fmt_cell("actual_cost", monthly_report(s, MONTH).summary["actual_cost"])
    engine.dispose()
    ARTIFACTS.mkdir(exist_ok=True)

    with _page(accept_downloads=True, viewport={"width": 1440, "height": 1000}) as page:
        # a deep link first, on a server nobody has visited: full navigation, titles from app/main.py
        page.goto(f"{base}/runs?month={MONTH}&run=hand-elastic-1")
        expect(page.get_by_test_id("stMetric").filter(has_text="Run cost (CNY)").get_by_test_id("stMetricValue")
               ).to_have_text("98.63")
        expect(page.get_by_test_id("stSidebarNav").get_by_role("link", name="Rent vs own", exact=True)).to_be_visible()
        page.goto(f"{base}/?month={MONTH}")
        metric = page.get_by_test_id("stMetric").filter(has_text="Spend (CNY)")
        expect(metric.get_by_test_id("stMetricValue")).to_have_text(spend, timeout=WAIT_MS)
        settle(page)
        page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

        for title in PAGES:
            page.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
            expect(page.get_by_role("heading", name=title, exact=True).first).to_be_visible(timeout=WAIT_MS)
            settle(page)
            expect(page.get_by_test_id("stException")).to_have_count(0)
            page.screenshot(path=str(ARTIFACTS / f"dashboard-{title.lower().replace(' ', '-')}.png"), full_page=True)

        # still on Export, with the month carried over from ?month=
        button = page.get_by_role("button", name="Download CSV")
        expect(button).to_be_visible()
        with page.expect_download(timeout=WAIT_MS) as info:
            button.click()
        download = info.value
        assert download.suggested_filename == f"trainledger-{MONTH}.csv"
        got = Path(download.path()).read_bytes()

    cli = subprocess.run([*trainledger(), "report", "monthly", "--month", MONTH, "--format", "csv", "--db", url],
                         capture_output=True, check=True, timeout=120)
    assert got == cli.stdout
    assert got.startswith(b"metric,value\nmonth,2026-11\n")


def test_the_currency_selector_changes_every_page_in_a_browser(dashboard):
    """Choosing USD in the sidebar turns Overview's spend into the CLI's `--currency USD` figure, and the choice
    follows the user to the other pages."""
    from playwright.sync_api import expect

    base, url, _ = dashboard
    engine = make_engine(url)
    with Session(engine) as s:
        usd = fmt_cell("actual_cost", monthly_report(s, MONTH, currency="USD").summary["actual_cost"])
        cny = fmt_cell("actual_cost", monthly_report(s, MONTH).summary["actual_cost"])
    engine.dispose()
    with _page(viewport={"width": 1440, "height": 1000}) as page:
        page.goto(f"{base}/?month={MONTH}")
        spend = page.get_by_test_id("stMetric").filter(has_text="Spend (")
        expect(spend.get_by_test_id("stMetricLabel")).to_have_text("Spend (CNY)")
        expect(spend.get_by_test_id("stMetricValue")).to_have_text(cny)
        settle(page)
        page.get_by_test_id("stSidebar").get_by_role("combobox", name="Currency").click()
        page.get_by_role("option", name="USD", exact=True).click()
        expect(spend.get_by_test_id("stMetricLabel")).to_have_text("Spend (USD)")
        expect(spend.get_by_test_id("stMetricValue")).to_have_text(usd)
        settle(page)
        page.screenshot(path=str(ARTIFACTS / "dashboard-overview-usd.png"), full_page=True)
        page.get_by_test_id("stSidebarNav").get_by_role("link", name="Monthly ROI", exact=True).click()
        expect(page.get_by_test_id("stMetric").filter(has_text="Spend (USD)").get_by_test_id("stMetricValue")
               ).to_have_text(usd)
        page.get_by_test_id("stSidebarNav").get_by_role("link", name="Runs", exact=True).click()
        expect(page.get_by_test_id("stMetric").filter(has_text="Run cost (USD)")).to_be_visible()
        expect(page.get_by_test_id("stSidebar").get_by_role("combobox", name="Currency")).to_have_value("USD")
        settle(page)
        expect(page.get_by_test_id("stException")).to_have_count(0)


def test_a_frontend_file_the_browser_could_not_fetch_is_loaded_again_once(dashboard):
    """tests/app/served.py ``settle``: when the browser cannot fetch one of the frontend's lazily loaded files (here
    every fetch of the chart's file during the first load of the page is reset by the browser's network layer),
    each chart shows the TypeError; settle warns, naming the file, loads the page again, and the page then draws
    every chart. A file that fails on every load fails the test."""
    from playwright.sync_api import expect

    from tests.app.served import CHUNK_FAILED

    base, _, _ = dashboard
    chart = re.compile(r"/static/js/ArrowVegaLiteChart\.[^/]+\.js$")
    with _page(viewport={"width": 1440, "height": 1000}) as page:
        loads: list[str] = []  # the page's loads, so far
        reset: list[int] = []  # the load each reset fetch belonged to
        page.on("domcontentloaded", lambda _: loads.append(page.url))

        def reset_during_the_first_load(route):
            if len(loads) <= 1:  # the preload hint's fetch and the import's own: both, or the import may not fail
                reset.append(len(loads))
                route.abort("connectionreset")
            else:
                route.continue_()

        page.route(chart, reset_during_the_first_load)
        page.goto(f"{base}/overview?month={MONTH}")  # not /: its switch to /overview is a second script run
        with pytest.warns(UserWarning, match=r"could not load .*ArrowVegaLiteChart") as seen:
            settle(page)
        assert len(seen) == 1 and len(loads) == 2 and set(reset) == {1}
        expect(page.get_by_text(CHUNK_FAILED)).to_have_count(0)
        expect(page.get_by_test_id("stVegaLiteChart").first).to_be_visible()

        page.unroute(chart)
        page.route(chart, lambda route: route.abort("connectionreset"))
        page.reload()
        with pytest.warns(UserWarning), pytest.raises(AssertionError, match=r"failed to load twice: .*could not load .*ArrowVegaLiteChart"):
            settle(page)


def test_a_page_that_never_connected_is_loaded_again_once_and_a_stuck_one_says_where_it_stood(dashboard, monkeypatch):
    """tests/app/served.py ``settle``: a page whose frontend never connected (here the browser closes the app's
    WebSocket on the first load) is not drawn in the wait; settle warns with the page's state (its script never
    ran), loads it again, and it draws. A page that never connects fails, saying where it stood."""
    from playwright.sync_api import expect

    from tests.app import served

    monkeypatch.setattr(served, "WAIT_MS", 6_000)  # the wait given up on twice below: not the suite's minute
    base, _, _ = dashboard
    with _page(viewport={"width": 1440, "height": 1000}) as page:
        loads: list[str] = []
        page.on("domcontentloaded", lambda _: loads.append(page.url))

        def refuse_on_the_first_load(ws):
            if len(loads) <= 1:
                ws.close()
            else:
                ws.connect_to_server()

        page.route_web_socket(re.compile(r"/_stcore/stream$"), refuse_on_the_first_load)
        page.goto(f"{base}/overview?month={MONTH}")
        with pytest.warns(UserWarning, match=r"/overview\?month=.*: not drawn after 6 s: .*script initial") as seen:
            settle(page)
        assert len(seen) == 1 and len(loads) == 2
        expect(page.get_by_test_id("stMetric").first).to_be_visible()

        page.route_web_socket(re.compile(r"/_stcore/stream$"), lambda ws: ws.close())
        page.reload()
        monkeypatch.setattr(served, "WAIT_MS", 2_000)  # both waits fail: no draw to leave time for
        with pytest.warns(UserWarning), pytest.raises(AssertionError, match=r"failed to load twice: .*not drawn after 2 s: .*script initial"):
            settle(page)


def test_launch_a_tiny_run_and_watch_it_succeed(dashboard):
    from playwright.sync_api import expect

    base, url, _ = dashboard
    ARTIFACTS.mkdir(exist_ok=True)
    with _page(viewport={"width": 1440, "height": 1200}) as page:
        page.goto(f"{base}/launch")
        expect(page.get_by_role("heading", name="Launch", exact=True).first).to_be_visible(timeout=WAIT_MS)
        settle(page)
        expect(page.get_by_role("combobox", name="Config")).to_have_value("shipped: dp.yaml")
        steps = page.get_by_role("spinbutton", name="Steps")
        steps.fill("4")
        steps.press("Enter")
        settle(page)
        page.get_by_role("button", name="Launch", exact=True).click()
        launched = page.get_by_test_id("stAlert").filter(has_text="Launched run ")
        expect(launched).to_be_visible(timeout=WAIT_MS)
        rid = re.search(r"Launched run ([0-9a-f]{16}) ", launched.inner_text()).group(1)
        LAUNCHED.append(rid)
        page.screenshot(path=str(ARTIFACTS / "dashboard-launch-started.png"), full_page=True)
        # no reload: the progress fragment refreshes itself until the run has ended, then the page redraws
        # once (for a moment the fragment's old elements are still there: hence .first, then settle)
        status = page.get_by_test_id("stMetric").filter(has_text="Status").get_by_test_id("stMetricValue")
        expect(status.first).to_have_text("succeeded", timeout=RUN_WAIT_MS)
        expect(status).to_have_count(1)  # the redraw has finished: the old elements are gone
        expect(status).to_have_text("succeeded")
        settle(page)
        expect(page.get_by_test_id("stMetric").filter(has_text="Step").get_by_test_id("stMetricValue")
               ).to_have_text("4 of 4")
        expect(page.get_by_test_id("stAlert").filter(has_text=f"Run {rid} succeeded: 4 steps")).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "dashboard-launch-succeeded.png"), full_page=True)
    engine = make_engine(url)
    with Session(engine) as s:
        run = s.get(Run, rid)
        assert (run.status, run.steps, run.world_size, run.strategy) == (RunStatus.succeeded, 4, 2, "dp")
    engine.dispose()
    wait_for(lambda: not processes_of_run(rid), 30, "no processes of the finished run")
