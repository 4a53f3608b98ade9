"""End to end: `trainledger dashboard` in a subprocess, driven by headless Chromium (Playwright).

Visits every page through the sidebar, checks a figure on Overview, and
downloads the CSV export, which must equal `trainledger report monthly
--format csv` byte for byte. Launches a tiny run from the Launch page and
watches it (live refresh) reach `succeeded`. Screenshots go to
test-artifacts/ (gitignored). The server runs in its own process group,
killed in teardown; then no process of a launched run may be left.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from sqlmodel import Session

from ledger.money.monthly import monthly_report
from ledger.store.db import make_engine
from ledger.reports.present import fmt_cell
from ledger.store.models import Run, RunStatus
from tests.app.conftest import RUN_ENV
from tests.app.helpers import MONTH, REPO, build_ledger
from tests.tracking.conftest import kill_leftover_runs, processes_of_run, wait_for

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"
PAGES = ["Runs", "Rent vs own", "Monthly ROI", "Strategies", "Planner", "Launch", "Settings", "Export"]  # Export last
WAIT_MS = 60_000
RUN_WAIT_MS = 180_000  # a tiny 2-rank run on a small CPU, start to end
LAUNCHED: list[str] = []  # run ids started through the dashboard, checked in teardown


def _trainledger() -> list[str]:
    script = Path(sys.executable).with_name("trainledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ledger.cli"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(base: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dashboard exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    pytest.fail(f"dashboard not healthy within {timeout_s} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: tests/run.sh installs the Debian chromium package")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    tmp = tmp_path_factory.mktemp("e2e")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    port = _free_port()
    log = tmp / "dashboard.log"
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINLEDGER_AUTH_FILE", "TRAINLEDGER_DB_URL")}
    env.update(RUN_ENV, TRAINLEDGER_JOURNAL_DIR=str(tmp / "journal"), XDG_DATA_HOME=str(tmp / "xdg"),
               TRAINLEDGER_CACHE_DIR=str(tmp_path_factory.mktemp("shards")))  # for the runs it launches
    with open(log, "wb") as out:
        proc = subprocess.Popen([*_trainledger(), "dashboard", "--port", str(port), "--db", url],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp, env=env, start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(base, proc, log)
        yield base, url, proc
    finally:
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        kill_leftover_runs(url, LAUNCHED)  # launched runs live in their own sessions


def test_the_ledger_url_is_not_on_the_command_line(dashboard):
    _, url, proc = dashboard
    cmdlines = []
    for pid in [proc.pid, *_children(proc.pid)]:
        try:
            cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    streamlit = [c for c in cmdlines if "app.serve run" in c]
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
    from playwright.sync_api import expect, sync_playwright

    base, url, _ = dashboard
    engine = make_engine(url)
    with Session(engine) as s:
        spend = fmt_cell("actual_cost", monthly_report(s, MONTH).summary["actual_cost"])
    engine.dispose()
    ARTIFACTS.mkdir(exist_ok=True)
    expect.set_options(timeout=WAIT_MS)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(accept_downloads=True, viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            # a deep link first, on a server nobody has visited: full navigation, titles from app/main.py
            page.goto(f"{base}/runs?month={MONTH}&run=hand-elastic-1")
            expect(page.get_by_test_id("stMetric").filter(has_text="Cost (CNY)").get_by_test_id("stMetricValue")
                   ).to_have_text("98.63")
            expect(page.get_by_test_id("stSidebarNav").get_by_role("link", name="Rent vs own", exact=True)).to_be_visible()
            page.goto(f"{base}/?month={MONTH}")
            metric = page.get_by_test_id("stMetric").filter(has_text="Spend (CNY)")
            expect(metric.get_by_test_id("stMetricValue")).to_have_text(spend, timeout=WAIT_MS)
            _settle(page)
            page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

            for title in PAGES:
                page.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
                expect(page.get_by_role("heading", name=title, exact=True).first).to_be_visible(timeout=WAIT_MS)
                _settle(page)
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
        finally:
            browser.close()

    cli = subprocess.run([*_trainledger(), "report", "monthly", "--month", MONTH, "--format", "csv", "--db", url],
                         capture_output=True, check=True, timeout=120)
    assert got == cli.stdout
    assert got.startswith(b"metric,value\nmonth,2026-11\n")


def test_the_currency_selector_changes_every_page_in_a_browser(dashboard):
    """Choosing USD in the sidebar turns Overview's spend into the CLI's `--currency USD` figure, and the choice
    follows the user to the other pages."""
    from playwright.sync_api import expect, sync_playwright

    base, url, _ = dashboard
    engine = make_engine(url)
    with Session(engine) as s:
        usd = fmt_cell("actual_cost", monthly_report(s, MONTH, currency="USD").summary["actual_cost"])
        cny = fmt_cell("actual_cost", monthly_report(s, MONTH).summary["actual_cost"])
    engine.dispose()
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{base}/?month={MONTH}")
            spend = page.get_by_test_id("stMetric").filter(has_text="Spend (")
            expect(spend.get_by_test_id("stMetricLabel")).to_have_text("Spend (CNY)")
            expect(spend.get_by_test_id("stMetricValue")).to_have_text(cny)
            _settle(page)
            page.get_by_test_id("stSidebar").get_by_role("combobox", name="Currency").click()
            page.get_by_role("option", name="USD", exact=True).click()
            expect(spend.get_by_test_id("stMetricLabel")).to_have_text("Spend (USD)")
            expect(spend.get_by_test_id("stMetricValue")).to_have_text(usd)
            _settle(page)
            page.screenshot(path=str(ARTIFACTS / "dashboard-overview-usd.png"), full_page=True)
            page.get_by_test_id("stSidebarNav").get_by_role("link", name="Monthly ROI", exact=True).click()
            expect(page.get_by_test_id("stMetric").filter(has_text="Spend (USD)").get_by_test_id("stMetricValue")
                   ).to_have_text(usd)
            page.get_by_test_id("stSidebarNav").get_by_role("link", name="Runs", exact=True).click()
            expect(page.get_by_test_id("stMetric").filter(has_text="Cost (USD)")).to_be_visible()
            expect(page.get_by_test_id("stSidebar").get_by_role("combobox", name="Currency")).to_have_value("USD")
            _settle(page)
            expect(page.get_by_test_id("stException")).to_have_count(0)
        finally:
            browser.close()


def test_launch_a_tiny_run_and_watch_it_succeed(dashboard):
    from playwright.sync_api import expect, sync_playwright

    base, url, _ = dashboard
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1200})
            page.set_default_timeout(WAIT_MS)
            page.goto(f"{base}/launch")
            expect(page.get_by_role("heading", name="Launch", exact=True).first).to_be_visible(timeout=WAIT_MS)
            _settle(page)
            expect(page.get_by_role("combobox", name="Config")).to_have_value("shipped: dp.yaml")
            steps = page.get_by_role("spinbutton", name="Steps")
            steps.fill("4")
            steps.press("Enter")
            _settle(page)
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
            _settle(page)
            expect(page.get_by_test_id("stMetric").filter(has_text="Step").get_by_test_id("stMetricValue")
                   ).to_have_text("4 of 4")
            expect(page.get_by_test_id("stAlert").filter(has_text=f"Run {rid} succeeded: 4 steps")).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "dashboard-launch-succeeded.png"), full_page=True)
        finally:
            browser.close()
    engine = make_engine(url)
    with Session(engine) as s:
        run = s.get(Run, rid)
        assert (run.status, run.steps, run.world_size, run.strategy) == (RunStatus.succeeded, 4, 2, "dp")
    engine.dispose()
    wait_for(lambda: not processes_of_run(rid), 30, "no processes of the finished run")


def _settle(page) -> None:
    """Wait until Streamlit has finished the script run and drawn its widgets (no status widget, no skeletons)."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
                           " && !document.querySelector('[data-testid=\"stSkeleton\"]')", timeout=WAIT_MS)
