"""The dashboard's shared caches (trainledger.app.queries.data.report, charges, month_goodput and month_lines,
st.cache_resource): every session reads the same objects, so no page may change them, and a write forgets them."""

from __future__ import annotations

import pickle

from trainledger.app.queries import data

from tests.app.helpers import MONTH, make_app, run_page

PAGES = ["overview", "runs", "goodput", "rent_vs_own", "roi", "strategies", "planner", "export", "settings",
         "invoices"]
PREVIOUS = data.add_months(MONTH, -1)


def _shared(url: str) -> dict[str, bytes]:
    """The shared objects of the month and the one before, as bytes (pickle: every field, every run line)."""
    out = {}
    for month in (MONTH, PREVIOUS):
        out[f"report {month}"] = pickle.dumps(data.report(url, month, True))
        out[f"report {month} totals"] = pickle.dumps(data.report(url, month))
        out[f"charges {month}"] = pickle.dumps(data.charges(url, month, None))  # lines per charge period: the chargeback's
        out[f"goodput {month}"] = pickle.dumps(data.month_goodput(url, month))
        out[f"lines {month}"] = pickle.dumps(data.month_lines(url, month))  # the presented lines and statements
    return out


def _hold_clock(monkeypatch) -> None:
    """The caches are keyed by the dashboard's clock too (data.clock, which ticks every 30 s): held at one instant,
    two reads a tick apart are still one entry."""
    held = data.clock()
    monkeypatch.setattr(data, "clock", lambda: held)


def _no_expiry(monkeypatch) -> None:
    """The shared caches keep their objects for the whole test: their 30 s expiry (data.TTL), and the clock's tick,
    would otherwise race the test's eleven page renders on a loaded machine (seen: a fresh account after the
    Settings page at load 14). Streamlit makes a new cache for a function whose ttl changed, so this test's objects
    live in one without an expiry, and the next test's in a 30 s one again."""
    _hold_clock(monkeypatch)
    for cached in (data.report, data.charges, data.month_goodput, data.month_lines):
        monkeypatch.setattr(cached.cache._info, "ttl", None)


def test_no_page_changes_the_shared_reports_and_accounts(demo_url, app_env, monkeypatch):
    app_env(demo_url)
    _no_expiry(monkeypatch)
    before = _shared(demo_url)
    first = data.month_goodput(demo_url, MONTH)
    assert data.month_goodput(demo_url, MONTH) is first  # shared, not copied
    assert first.runs and data.report(demo_url, MONTH, True).runs  # the demo month has run lines to change
    for page, query in [(p, {}) for p in PAGES] + [("runs", {"scope": "all"})]:  # all months: every month's
        at = run_page(make_app(**query), page)
        assert not at.error, (page, [e.value for e in at.error])
        assert data.month_goodput(demo_url, MONTH) is first, page  # the page read the shared object ...
        after = _shared(demo_url)
        assert {k for k in before if after[k] != before[k]} == set(), page  # ... and left it as it was


def test_clear_caches_forgets_the_shared_objects(demo_url, app_env, monkeypatch):
    app_env(demo_url)
    _hold_clock(monkeypatch)
    first = data.month_goodput(demo_url, MONTH)
    rep = data.report(demo_url, MONTH, True)
    mc = data.charges(demo_url, MONTH, None)  # as data.report calls it (an argument left out is another key)
    assert mc.report is rep  # the report with lines is the chargeback's costing, computed once
    assert data.charges(demo_url, MONTH, currency=None) is mc  # an argument by name or by place: one entry
    lines = data.month_lines(demo_url, MONTH)
    assert data.month_lines(demo_url, MONTH) is lines
    data.clear_caches()
    assert data.month_lines(demo_url, MONTH) is not lines
    again = data.month_goodput(demo_url, MONTH)
    assert again is not first and data.report(demo_url, MONTH, True) is not rep and data.charges(demo_url, MONTH, None) is not mc
    assert pickle.dumps(again) == pickle.dumps(first)  # the same figures, computed again
    assert again.projects == first.projects and again.chains == first.chains  # groups: computed where read
