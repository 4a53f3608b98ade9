"""Bad query parameters on every page: one line on the page, never a traceback (real Chromium), and nothing else leaks.

The finding: ``?month=9999-12`` crashed Overview and Export with a full traceback (server paths and
source) shown to whoever opened the link. Now every page reads ``?month=`` and ``?run=`` (and the
Strategies page ``?sweep=``) through app/views/ui.py, which turns a bad value into a one-line warning
and falls back (this month; no run); an error no page handles is one line too ("This page
failed (TypeName)"), its traceback only in the dashboard's log; and the served dashboard runs with
``client.showErrorDetails = none``, so even an uncaught exception would show no message or trace.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.app.helpers import MONTH, build_ledger, make_app, plain
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle

HOSTILE_RUN = quote("../../../../etc/passwd", safe="")
CASES = [  # path, page heading, what the one line says
    ("/overview?month=9999-12", "Overview", "?month=: the year must be 1970 to 9998, got '9999-12'"),
    ("/export?month=9999-12", "Export", "?month=: the year must be 1970 to 9998, got '9999-12'"),
    ("/roi?month=0000-01", "Monthly ROI", "?month=: the year must be 1970 to 9998, got '0000-01'"),
    ("/rent-vs-own?month=2026-13", "Rent vs own", "?month=: expected YYYY-MM such as 2026-11, got '2026-13'"),
    ("/runs?month=%27%3B%20DROP%20TABLE%20run", "Runs", "?month=: expected YYYY-MM such as 2026-11"),
    (f"/runs?run={HOSTILE_RUN}", "Runs", "?run=: '../../../../etc/passwd' is not a run id"),
    ("/runs?run=" + "x" * 500, "Runs", "?run=: 500 characters; at most 64"),
    (f"/runs?month={MONTH}&run=no-such-run", "Runs", "RUN_ID: no run 'no-such-run' in this ledger"),
    (f"/launch?run={HOSTILE_RUN}", "Launch", "?run=: '../../../../etc/passwd' is not a run id"),
    ("/strategies?sweep=%3Cscript%3E", "Strategies", "?sweep=<script>: no such sweep in this ledger"),
    # periods (issue #28): the same one line, then the month instead
    ("/overview?period=weekly", "Overview", "?period=: expected month, quarter, ytd or range, got 'weekly'"),
    ("/overview?period=quarter&quarter=2026-Q5", "Overview", "?quarter=: expected YYYY-Qn such as 2026-Q4, got '2026-Q5'"),
    ("/roi?period=range&from=2026-02-30&to=2026-03-01", "Monthly ROI",
     "?from=: expected a day YYYY-MM-DD such as 2026-11-05, got '2026-02-30'"),
    ("/overview?period=range&from=2026-11-20&to=2026-11-01", "Overview", "To: 2026-11-01 is before From 2026-11-20"),
    # Runs' filters and order in the URL
    ("/runs?project=%3Cscript%3E", "Runs", "?project=<script>: not one of the choices; showing All instead."),
    (f"/runs?month={MONTH}&goodput=nope", "Runs", "?goodput=: expected one of startup, data_wait"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("params")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    with serve(tmp, url) as s:
        yield s


@pytest.mark.slow
def test_bad_query_parameters_are_one_line_in_the_browser(served):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            for path, heading, line in CASES:
                page.goto(served.base + path)
                expect(page.get_by_role("heading", name=heading, exact=True).first).to_be_visible()
                settle(page)
                expect(page.get_by_test_id("stException")).to_have_count(0)
                body = page.inner_text("body").replace("\u2060", "")
                assert "Traceback" not in body and 'File "' not in body and "/site-packages/" not in body, path
                expect(page.get_by_test_id("stAlert").filter(has_text=line).first).to_be_visible()  # waits for the line
                alerts = [a.replace("\u2060", "") for a in page.get_by_test_id("stAlert").all_inner_texts()]
                said = [a for a in alerts if line in a]
                assert said and all(len(a.strip().splitlines()) == 1 for a in said), (path, alerts)
        finally:
            browser.close()
    assert "Traceback" not in served.log_text()  # handled: nothing even reached the log as an error


def test_an_error_no_page_handles_is_one_line_and_goes_to_the_log(app_env, tmp_path, monkeypatch, caplog):
    from trainledger.app.queries import data

    app_env(build_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"))

    def broken(*args, **kwargs):
        raise RuntimeError("internal detail /srv/secret/path.py")

    monkeypatch.setattr(data, "presented", broken)
    at = make_app()
    at.run()
    assert not at.exception
    assert [plain(e.value) for e in at.error] == ["This page failed (RuntimeError); the details are in the dashboard's log."]
    assert "internal detail" not in " ".join(e.value for e in at.error)
    assert "internal detail /srv/secret/path.py" in caplog.text and "Traceback" in caplog.text
