"""Issue #28 in a real browser: Runs money first, views you can share and drill into, periods equal to the CLI's.

One `trainledger dashboard` (the dashboard tests' demo ledger, its clock at :data:`NOW` as the CLI's ``--now``)
and one headless Chromium, which opens each page once and reads it at 1280 and 1920 px in turn (the window
resized); each width's test checks on each page:

* Runs, "Most expensive": the cost column is among the columns the grid draws without scrolling, not cut by its
  edge, and the grid lies inside the window (so does the column's box); the rows are the monthly report's run
  lines by cost; a URL with every filter (project, user, status, strategy, order, month) reopens the same rows
  in a fresh browser, and they are the ledger's;
* Overview: clicking "Runs of demo-pretrain" opens Runs filtered to that project;
* Overview for 2026-Q4 and for 2026-10-15 to 2026-11-20: the headline figures and their changes are
  `trainledger report period --json`'s (run here);
* no table cell reads "None", no time shows seconds or microseconds; Run detail's metric values are never
  broken across lines (each number on one line);
* Compare (1280 px): three runs from ``?compare=``, their figures grid's cost row equal to
  `trainledger runs compare --json`'s;
* a screenshot of every page visited at both widths goes to test-artifacts/screenshots/periods/.
"""

from __future__ import annotations

import json
import re
import subprocess
from decimal import Decimal as D

import pytest
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates.costs import cents
from trainledger.reports.present import fmt_cell

from tests.app.helpers import MONTH, REPO, build_ledger, with_session
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle, trainledger

pytestmark = pytest.mark.slow

NOW = "2026-12-01T12:00:00+00:00"  # the demo's clock: 2026-Q4 is to date
SHOTS = REPO / "test-artifacts" / "screenshots" / "periods"
HEIGHT = 1000
CELLS_JS = """() => [...document.querySelectorAll('[data-testid="stDataFrame"] [role="gridcell"], [data-testid="stTable"] td')]
  .map(c => c.textContent)"""
GRID_JS = """(i) => {
  const grid = document.querySelectorAll('[data-testid="stDataFrame"]')[i];
  const box = grid.getBoundingClientRect();
  const scroller = grid.querySelector('.dvn-scroller');
  return {heads: [...grid.querySelectorAll('[role="columnheader"]')].map(h => h.textContent),
          rows: [...grid.querySelectorAll('tbody [role="row"]')].map(r => [...r.querySelectorAll('[role="gridcell"]')].map(c => c.textContent)),
          left: box.left, right: box.right, scrollLeft: scroller ? scroller.scrollLeft : 0,
          scrolls: scroller ? scroller.scrollWidth > scroller.clientWidth : false,
          pageScrolls: document.documentElement.scrollWidth > window.innerWidth};
}"""
#: for each metric value: does any number in it ("4,101.99") start on one line and end on another?
BROKEN_JS = """() => {
  const out = [];
  for (const el of document.querySelectorAll('[data-testid="stMetricValue"]')) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const m of n.textContent.matchAll(/[0-9][0-9,.]*/g)) {
        const r = document.createRange();
        r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
        if (tops.size > 1) out.push(m[0]);
      }
    }
  }
  return out;
}"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("periods-browser")
    with serve(tmp, build_ledger(f"sqlite:///{tmp / 'ledger.db'}"), env={"TRAINLEDGER_NOW": NOW}) as s:
        yield s


def cli_period(served, first: str, last: str) -> dict:
    out = subprocess.run([*trainledger(), "report", "period", "--from", first, "--to", last, "--db", served.url,
                          "--now", NOW, "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def month_lines(url: str) -> list[dict]:
    """The month's run lines with each run's cost half-up to the cent (as Runs shows it)."""
    from datetime import datetime

    rep = with_session(url, lambda s: monthly_report(s, MONTH, now=datetime.fromisoformat(NOW)))
    return [{"id": r.run_id, "cost": cents(r.cost), "project": r.project, "user": r.user, "status": r.status,
             "strategy": r.strategy} for r in rep.runs]


def by_cost(lines: list[dict]) -> list[str]:
    return [x["id"] for x in sorted(lines, key=lambda x: (-x["cost"], x["id"]))]


def open_page(page, served, path: str, heading: str) -> None:
    from playwright.sync_api import expect

    page.goto(served.base + path)
    expect(page.get_by_role("heading", name=heading, exact=True).first).to_be_visible()
    settle(page)
    expect(page.get_by_test_id("stException")).to_have_count(0)


def grid(page, i: int = 0) -> dict:
    page.wait_for_function("(i) => document.querySelectorAll('[data-testid=\"stDataFrame\"]')[i]"
                           "?.querySelector('[role=\"columnheader\"]')", arg=i)
    return page.evaluate(GRID_JS, i)


def unclean(page) -> list[str]:
    """What a page shows that it must not: a table cell reading "None"; a time with seconds, microseconds or an ISO
    "T" anywhere."""
    cells = page.evaluate(CELLS_JS)
    text = page.inner_text('[data-testid="stMain"]') + "\n" + "\n".join(cells)
    return (["a cell reads None"] if "None" in cells else []) + re.findall(
        r"\d{2}:\d{2}:\d{2}\.\d|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text)


def shot(page, name: str, width: int) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": max(HEIGHT, height)})
    settle(page)
    page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": width, "height": HEIGHT})


def metric_values(page) -> dict[str, tuple[str, str]]:
    """Metric label → (value, delta) as shown."""
    out = {}
    for m in page.get_by_test_id("stMetric").all():
        label = m.get_by_test_id("stMetricLabel").inner_text().strip()
        delta = m.get_by_test_id("stMetricDelta")
        out.setdefault(label, (m.get_by_test_id("stMetricValue").inner_text().strip(),
                               delta.inner_text().strip() if delta.count() else ""))  # the period's cards come first
    return out


def shared_url_rows(browser, page, served, filters: dict) -> dict:
    """Runs with every filter, the order and the month in the URL; that URL in a fresh context: the rows of both."""
    from playwright.sync_api import expect

    query = "&".join(f"{k}={v}" for k, v in filters.items())
    open_page(page, served, f"/runs?month={MONTH}&{query}&order=expensive", "Runs")
    first = [r[0] for r in grid(page)["rows"]]
    shared = page.url
    other = browser.new_context(viewport={"width": 1280, "height": HEIGHT}).new_page()
    other.set_default_timeout(WAIT_MS)
    other.goto(shared)
    expect(other.get_by_role("heading", name="Runs", exact=True).first).to_be_visible()
    settle(other)
    again = [r[0] for r in grid(other)["rows"]]
    other.context.close()
    return {"first": first, "url": shared, "again": again}


@pytest.fixture(scope="module")
def expected(served) -> dict:
    """The ledger's run lines of the month and the CLI's quarter and range, once for both widths."""
    return {"lines": month_lines(served.url), "quarter": cli_period(served, "2026-10", "2026-12"),
            "span": cli_period(served, "2026-10-15", "2026-11-20")}


WIDTHS = (1280, 1920)
PERIODS = (("/overview?period=quarter&quarter=2026-Q4", "quarter", "overview-quarter"),
           ("/overview?period=range&from=2026-10-15&to=2026-11-20", "span", "overview-range"))
OTHER_PAGES = (("/roi?period=quarter&quarter=2026-Q4", "Monthly ROI", "roi-quarter"),
               ("/export?period=quarter&quarter=2026-Q4", "Export", "export-quarter"),
               (f"/goodput?month={MONTH}", "Goodput", "goodput"))


def at_each_width(page, read) -> dict:
    """``read(page, width)`` at each width in turn on the page as loaded (the window resized, the page redrawn: a
    page load costs ~2 CPU-s of the suite's budget); the window is left at the first width."""
    out = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": HEIGHT})
        settle(page)
        out[width] = read(page, width)
    page.set_viewport_size({"width": WIDTHS[0], "height": HEIGHT})
    return out


@pytest.fixture(scope="module")
def walked(served, expected) -> dict:
    """Every page once, read at 1280 and 1920 px (what each width's test checks), and the checks that do not depend
    on the width at 1280 px: a shared URL, a project's link, Compare."""
    from playwright.sync_api import expect, sync_playwright

    lines = expected["lines"]
    seen: dict = {w: {} for w in WIDTHS}

    def keep(name: str, values: dict) -> None:
        for w, v in values.items():
            seen[w][name] = v

    def read_shot(name: str, more=None):
        def read(page, width):
            got = {"unclean": unclean(page), **(more(page) if more else {})}
            shot(page, name, width)
            return got
        return read

    top = max((x for x in lines if x["project"] == "demo-pretrain"), key=lambda x: x["cost"])
    filters = {k: top[k] for k in ("project", "user", "status", "strategy")}
    once: dict = {"filters": filters}
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(viewport={"width": WIDTHS[0], "height": HEIGHT})
            page.set_default_timeout(WAIT_MS)

            open_page(page, served, f"/runs?month={MONTH}&order=expensive", "Runs")
            keep("runs", at_each_width(page, read_shot("runs-most-expensive", lambda pg: {"grid": grid(pg)})))
            once["shared"] = shared_url_rows(browser, page, served, filters)

            open_page(page, served, f"/runs?month={MONTH}&run={by_cost(lines)[0]}", "Run detail")
            expect(page.get_by_test_id("stMetricValue").first).to_be_visible()
            keep("run detail", at_each_width(page, read_shot("run-detail", lambda pg: {"broken": pg.evaluate(BROKEN_JS)})))

            open_page(page, served, f"/overview?month={MONTH}", "Overview")
            keep("overview", at_each_width(page, read_shot("overview-month")))
            page.get_by_role("link", name="Runs of demo-pretrain").click()
            page.wait_for_url(re.compile(r"/runs\?.*project=demo-pretrain"))
            expect(page.get_by_role("heading", name="Runs", exact=True).first).to_be_visible()
            settle(page)
            expect(page.get_by_role("combobox", name="Project")).to_have_value("demo-pretrain")
            once["project_rows"] = grid(page)["rows"]

            for path, key, name in PERIODS:
                open_page(page, served, path, "Overview")
                keep(name, at_each_width(page, read_shot(name, lambda pg: {"metrics": metric_values(pg)})))

            for path, heading, name in OTHER_PAGES:
                open_page(page, served, path, heading)
                keep(name, at_each_width(page, read_shot(name, lambda pg: {
                    "lost_work_href": pg.get_by_role("link", name=re.compile(r"^lost work: ")).get_attribute("href")
                    if name == "goodput" else None})))

            # Compare (issue 39 item 2): three runs from the URL, their figures as `trainledger runs compare`
            ids = by_cost(lines)[:3]
            open_page(page, served, f"/runs?month={MONTH}&compare={','.join(ids)}", "Compare runs")
            page.get_by_role("heading", name="Figures", exact=True).scroll_into_view_if_needed()
            page.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')].some("
                                   "g => g.querySelector('[role=\"columnheader\"]')?.textContent === 'figure')")
            index = page.evaluate("() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')].findIndex("
                                  "g => g.querySelector('[role=\"columnheader\"]')?.textContent === 'figure')")
            once["compare"] = {"ids": ids, "grid": grid(page, index), "unclean": unclean(page)}
            shot(page, "runs-compare", WIDTHS[0])
        finally:
            browser.close()
    return {"seen": seen, "once": once}


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_money_first_shared_links_and_periods(served, expected, walked, width):
    lines, seen = expected["lines"], walked["seen"][width]

    # Runs, most expensive: money first, in view, ranked by the visible cost column
    g = seen["runs"]["grid"]
    assert g["heads"][:7] == ["id", "name", "cost (CNY)", "waste (CNY)", "waste reason", "GPU-hours",
                              "cost per 1M tokens (CNY)"], g["heads"]
    shown = g["heads"][:-1] if g["scrolls"] else g["heads"]  # the last drawn may be cut by the grid's edge
    assert "cost (CNY)" in shown and g["scrollLeft"] == 0 and not g["pageScrolls"], g
    assert 0 <= g["left"] and g["right"] <= width, g  # the column's box lies within the grid's, in the window
    ids = [r[0] for r in g["rows"]]
    assert ids and ids == by_cost(lines)[:len(ids)]
    assert [D(r[2]) for r in g["rows"]] == [next(x["cost"] for x in lines if x["id"] == i) for i in ids]

    # every page: no "None" cell, no time with seconds; Run detail: no number broken across lines
    assert {name: v["unclean"] for name, v in seen.items() if v["unclean"]} == {}
    assert seen["run detail"]["broken"] == []

    # periods: the quarter and a custom range, figures and changes as `trainledger report period`
    for _, key, name in PERIODS:
        shown_, cli = seen[name]["metrics"], expected[key]
        s, ch = cli["summary"], cli["change"]
        before = cli["previous"]["period"]
        assert shown_["Spend (CNY)"] == (fmt_cell("actual_cost", s["actual_cost"]),
                                         f"{ch['actual_cost_pct']:+.1f}% vs {before}"), shown_
        assert shown_["GPU-hours"][0] == fmt_cell("gpu_hours", s["gpu_hours"])
        assert shown_["Time utilization"][0] == f"{s['time_utilization'] * 100:.2f}%"
        assert shown_["Idle cost (CNY)"][0] == (fmt_cell("idle_cost", s["idle_cost"]) if s["idle_cost"] else "—")
    quarter, span = expected["quarter"], expected["span"]
    assert quarter["summary"]["actual_cost"] == "71598.87" and quarter["change"]["actual_cost_pct"] == 5.5
    assert span["summary"]["idle_cost"] is None and span["days"] and not span["whole_months"]
    assert re.search(r"goodput=lost_work", seen["goodput"]["lost_work_href"] or "")

    if width != WIDTHS[0]:  # what follows does not depend on the width: checked at 1280 px
        return
    once = walked["once"]
    # a URL with every filter, the order and the month reopens the same rows (a fresh browser context)
    same = by_cost([x for x in lines if all(x[k] == v for k, v in once["filters"].items())])
    sh = once["shared"]
    assert sh["first"] == same[:len(sh["first"])] and sh["first"], (sh, same)
    assert all(f"{k}={v}" in sh["url"] for k, v in {**once["filters"], "order": "expensive", "month": MONTH}.items())
    assert sh["again"] == sh["first"]
    # Overview: a project's link opens Runs filtered to it
    rows = once["project_rows"]
    assert rows and {r[0] for r in rows} <= {x["id"] for x in lines if x["project"] == "demo-pretrain"}
    # Compare: the figures grid's cost row is `trainledger runs compare --json`'s
    cmp_ = once["compare"]
    out = subprocess.run([*trainledger(), "runs", "compare", *cmp_["ids"], "--db", served.url, "--now", NOW, "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    want = json.loads(out.stdout)
    assert cmp_["grid"]["heads"] == ["figure", *cmp_["ids"]], cmp_["grid"]["heads"]
    cost = next(r for r in cmp_["grid"]["rows"] if r[0] == "cost (CNY)")
    assert cost[1:] == [fmt_cell("cost", r["figures"]["cost_actual"]) for r in want["runs"]], cost
    assert all(D(c.replace(",", "")) > 0 for c in cost[1:])
    assert cmp_["unclean"] == []
