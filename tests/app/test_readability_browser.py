"""Issue #18's "done when": every page, opened by its deep link at 1280 and 1920 px, shows no value cut off.

`trainledger dashboard` serves the dashboard tests' demo ledger; headless Chromium opens each page's URL once and
reads it at each width in turn (the window resized), looking in the DOM for text wider than its box (scrollWidth >
clientWidth) among metric values and labels, table cells and Markdown text. Streamlit's dataframes are drawn on a
canvas: for those, the columns a page is about (Strategies' cost per 1M tokens, the Planner's offer, size, time and
cost) must be among the columns the grid shows without scrolling (its accessibility table lists only those). A
screenshot of every page at both widths goes to test-artifacts/screenshots/.
"""

from __future__ import annotations

import pytest
from trainledger.reports.weekly import strategy_comparison

from tests.app.helpers import MONTH, REPO, with_session
from tests.app.served import WAIT_MS, chromium, serve_demo, settle

pytestmark = pytest.mark.slow

SHOTS = REPO / "test-artifacts" / "screenshots"
WIDTHS = (1280, 1920)
HEIGHT = 1000  # px of the window while the checks run
#: (deep link, heading): every page, and a run's detail (the page with the most metric cards)
PAGES = [("overview", "Overview"), ("runs", "Runs"), ("runs?run=demo-0003", "Run detail"), ("rent-vs-own", "Rent vs own"),
         ("roi", "Monthly ROI"), ("strategies", "Strategies"), ("planner", "Planner"), ("launch", "Launch"),
         ("export", "Export"), ("settings", "Settings")]
#: the Planner ranking's columns that decide (app/pages/planner.py names them)
PLANNER_KEY_COLUMNS = ["offer", "nodes", "days", "cost (CNY)", "cost per 1M tokens (CNY)"]
#: text that must be read whole (code blocks scroll by design and are left out)
TEXT = ", ".join(f'[data-testid="{t}"]' for t in ("stMetricValue", "stMetricLabel")) + ", " + ", ".join(
    f'[data-testid="stTable"] {c}' for c in ("td", "th")) + ", " + ", ".join(
    f'[data-testid="stMarkdownContainer"] {c}' for c in ("p", "li", "td", "th", "h1", "h2", "h3"))
CUT_OFF_JS = """(selector) => {
  const out = [];
  for (const el of document.querySelectorAll(selector)) {
    for (const n of [el, ...el.querySelectorAll('*')]) {
      if (n.closest('pre, [data-testid="stCode"]') || n.clientWidth === 0) continue;
      if (n.scrollWidth > n.clientWidth + 1) {
        out.push({where: el.closest('[data-testid]')?.dataset.testid || el.tagName, text: n.textContent.slice(0, 80),
                  scrollWidth: n.scrollWidth, clientWidth: n.clientWidth});
      }
    }
  }
  return out;
}"""
GRID_COLUMNS_JS = """(i) => {
  const grid = document.querySelectorAll('[data-testid="stDataFrame"]')[i];
  const heads = [...grid.querySelectorAll('[role="columnheader"]')].map(h => h.textContent);
  const scroller = grid.querySelector('.dvn-scroller');
  return {heads, scrolls: scroller ? scroller.scrollWidth > scroller.clientWidth : false};
}"""

#: true once the first grid shows every key column without scrolling (the last may be cut by the edge when it scrolls)
KEY_COLUMNS_SHOWN_JS = """(keys) => {
  const grid = document.querySelectorAll('[data-testid="stDataFrame"]')[0];
  if (!grid) return false;
  let heads = [...grid.querySelectorAll('[role="columnheader"]')].map(h => h.textContent);
  const scroller = grid.querySelector('.dvn-scroller');
  if (scroller && scroller.scrollWidth > scroller.clientWidth) heads = heads.slice(0, -1);
  return keys.every(k => heads.includes(k));
}"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serve_demo(tmp_path_factory, "readability") as s:
        yield s


def _key_columns(url: str) -> list[str]:
    """Strategies' columns that must be seen first: the cost per 1M tokens under each offer (the page's own names)."""
    c = with_session(url, strategy_comparison)
    return ["strategy"] + [f"per 1M tokens, {o} ({c['currency']})"
                           for o in sorted({o for r in c["rows"] for o in r["cost_per_1m_tokens"]})]


@pytest.fixture(scope="module")
def walked(served) -> dict[int, dict]:
    """Every page opened once by its deep link and read at each width in turn (the window resized, the page
    redrawn: a page load costs ~2 CPU-s, the suite's budget): per width, the text found cut off per page and the
    key columns' grid per page; a screenshot of every page at each width."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect, sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    key_columns = {"strategies": _key_columns(served.url), "planner": PLANNER_KEY_COLUMNS}
    out: dict[int, dict] = {w: {"cut": {}, "grids": {}, "keys": key_columns} for w in WIDTHS}
    with sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(viewport={"width": WIDTHS[0], "height": HEIGHT})
            page.set_default_timeout(WAIT_MS)
            for link, heading in PAGES:
                sep = "&" if "?" in link else "?"
                page.goto(f"{served.base}/{link}{sep}month={MONTH}")
                for width in WIDTHS:
                    page.set_viewport_size({"width": width, "height": HEIGHT})
                    expect(page.get_by_role("heading", name=heading, exact=True).first).to_be_visible()
                    settle(page)
                    expect(page.get_by_test_id("stSpinner")).to_have_count(0)  # a cached read still computing (Planner)
                    settle(page)
                    if link == "planner":  # its last section is drawn when the script has run to the end
                        expect(page.get_by_role("heading", name="The seven strategies on one cluster (predicted)")).to_be_visible()
                    expect(page.get_by_test_id("stException")).to_have_count(0)
                    found = page.evaluate(CUT_OFF_JS, TEXT)
                    if found:
                        out[width]["cut"][link] = found
                    if link in key_columns:  # the page's first table: its key columns in view without scrolling
                        # the first grid drawn with its key columns; a page still rerunning (or redrawn at the new
                        # width) may swap the grid for a fresh one, whose headers come a frame later, so poll that
                        # grid (not any grid) for them
                        try:
                            page.wait_for_function(KEY_COLUMNS_SHOWN_JS, arg=key_columns[link])
                        except PlaywrightTimeout:
                            pass  # the test's assertion says which columns were shown
                        out[width]["grids"][link] = page.evaluate(GRID_COLUMNS_JS, 0)
                    _screenshot(page, SHOTS / f"{link.replace('?', '-').replace('=', '-')}-{width}.png", width)
        finally:
            browser.close()
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_no_value_is_cut_off(walked, width):
    seen = walked[width]
    for link, grid in seen["grids"].items():
        shown = grid["heads"][:-1] if grid["scrolls"] else grid["heads"]  # the last may be cut by the edge
        assert set(seen["keys"][link]) <= set(shown), (width, link, grid)
    assert set(seen["grids"]) == set(seen["keys"])  # every page with key columns was read
    assert not seen["cut"], seen["cut"]


def _screenshot(page, path, width: int) -> None:
    """The whole page: Streamlit scrolls inside its main block, so the window is made as tall as that block first."""
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": max(HEIGHT, height)})
    settle(page)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": width, "height": HEIGHT})
