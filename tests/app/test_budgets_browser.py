"""Budgets and spend anomalies in real Chromium, on the demo ledger served with sign-in (lead alice, viewer bob).

* the demo's budgets (the team's and both projects') show on Overview with their states, as ``budget check``;
* a lead sets a budget for project ``hand`` in the form; the Overview's budget table and
  ``trainledger budget check`` both show it;
* a viewer sees the budgets but the form disabled;
* on the same Overview, a flagged anomaly day links to the Runs page, which lists that day's runs.
"""

from __future__ import annotations

import subprocess
from decimal import Decimal

import pytest
from trainledger.app.serving.auth import make_entry
from trainledger.money.outlook.anomalies import anomalies, runs_on_day
from trainledger.money.outlook.budgets import budget_status
from trainledger.reports.present import fmt_cell

from tests.app.helpers import MONTH, REPO, build_ledger, with_session
from tests.app.served import WAIT_MS, chromium, evidence, need_chromium, open_expander, serve, settle, trainledger

pytestmark = pytest.mark.slow
ARTIFACTS = REPO / "test-artifacts"
STATE = {"ok": "ok", "at_risk": "at risk", "over": "over"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("budgets")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    users = tmp / "users.toml"
    users.write_text(make_entry("alice", "lead", "alice-pw", iterations=1_000)
                     + make_entry("bob", "viewer", "bob-pw", iterations=1_000))
    with serve(tmp, url, "--auth-file", str(users)) as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = chromium(p)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def overview_as(site, browser):
    """``overview_as(user, password, name)``: a new browser context signed in as ``user`` on the Overview, drawn; a
    failure on the way keeps its evidence as ``name``-signin (the sign-in's Overview failed in CI twice, in two
    ways, issue 38). The contexts are closed after the test: a page left open keeps its renderer and its session."""
    contexts = []

    def open_as(user: str, password: str, name: str):
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        with evidence(page, site, f"{name}-signin"):
            page.goto(f"{site.base}/overview?month={MONTH}")
            page.get_by_label("User").fill(user)
            page.get_by_label("Password").fill(password)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_load_state()
            settle(page)
        return page

    yield open_as
    for context in contexts:
        context.close()


def _open_form(page):
    open_expander(page, "Set, change or remove budgets")


def test_a_lead_sets_a_budget_sees_it_on_overview_and_in_budget_check_and_opens_an_anomaly_days_runs(site, overview_as):
    from playwright.sync_api import expect

    st = with_session(site.url, lambda s: budget_status(s, MONTH))
    by = {b["project"]: b for b in st["budgets"]}
    assert sorted(by) == ["", "demo-finetune", "demo-pretrain"]  # the demo's own budgets
    page = overview_as("alice", "alice-pw", "budgets-lead")
    with evidence(page, site, "budgets-lead"):  # failed twice in full runs on a slow machine, never alone (issue 38)
        expect(page.get_by_text(f"Team budget: {STATE[by['']['state']]}")).to_be_visible()
        table = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("over since / crosses on"))
        expect(table.get_by_text("25,000.00")).to_have_count(1)  # demo-pretrain's budget
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "budgets-demo-overview-1280.png"), full_page=True)

        _open_form(page)
        scope = page.get_by_role("combobox", name="Scope")
        scope.click()
        page.get_by_role("option", name="hand", exact=True).click()
        expect(scope).to_have_value("hand")  # the form's state, not only the click, before it is saved
        amount = page.get_by_role("textbox", name="Amount")
        amount.fill("150")
        expect(amount).to_have_value("150")
        page.get_by_role("button", name="Save budget").click()
        settle(page)
        expect(page.get_by_text("Saved the every-month budget of project hand: 150.00 CNY.")).to_be_visible()
        hand = with_session(site.url, lambda s: next(b for b in budget_status(s, MONTH)["budgets"] if b["project"] == "hand"))
        assert hand["amount"] == Decimal("150")
        expect(table.get_by_text("150.00", exact=True)).to_have_count(1)
        page.screenshot(path=str(ARTIFACTS / "budgets-lead-saved-1280.png"), full_page=True)
        out = subprocess.run([*trainledger(), "budget", "check", "--month", MONTH, "--db", site.url],
                             capture_output=True, text=True, timeout=120)
        line = next(x for x in out.stdout.splitlines() if " hand " in x)
        assert "of 150.00 CNY" in line and line.startswith("OVER" if hand["state"] == "over" else
                                                           "AT RISK" if hand["state"] == "at_risk" else "ok"), out.stdout

        # the same Overview flags the demo November's anomaly days; the first one's link opens its runs
        flagged = with_session(site.url, lambda s: anomalies(s, MONTH)["flagged"])
        assert flagged, "the demo's November has idle days far above their baseline"
        first = flagged[0]
        runs = with_session(site.url, lambda s: runs_on_day(s, first["date"]))
        label = "idle cost" if first["measure"] == "idle_cost" else "spend"
        expect(page.get_by_text(f"{first['date']}: {label} {fmt_cell('cost', first['value'])} CNY")).to_be_visible()
        page.get_by_role("link", name="that day's runs").first.click()
        page.wait_for_url(f"**/runs?*day={first['date']}*")
        settle(page)
        expect(page.get_by_role("heading", name=f"Runs on {first['date']}")).to_be_visible()
        day = page.get_by_test_id("stDataFrame").filter(has=page.get_by_text("node-hours that day"))
        expect(day.get_by_text(runs[0]["id"], exact=True)).to_have_count(1)
        page.screenshot(path=str(ARTIFACTS / "anomaly-day-runs-1280.png"), full_page=True)


def test_a_viewer_sees_budgets_but_cannot_change_them(site, overview_as):
    from playwright.sync_api import expect

    page = overview_as("bob", "bob-pw", "budgets-viewer")
    with evidence(page, site, "budgets-viewer"):
        _open_form(page)
        expect(page.get_by_text("you can see the budgets, but only leads can change them")).to_be_visible()
        expect(page.get_by_role("button", name="Save budget")).to_be_disabled()
        expect(page.get_by_role("button", name="Remove budget")).to_be_disabled()
        expect(page.get_by_role("textbox", name="Amount")).to_be_disabled()
        page.screenshot(path=str(ARTIFACTS / "budgets-viewer-1280.png"), full_page=True)


#: each idle policy a lead sets for the demo's fleet, ending where the demo began (none)
POLICIES = ("proportional", "even", "weights:demo-finetune=1,demo-pretrain=3,hand=1", "none")  # as stored


def _demo_policy(session) -> str | None:
    from sqlmodel import select
    from trainledger.store.models import Fleet

    return session.exec(select(Fleet.idle_share).where(Fleet.name == "demo-cluster")).one()


def _chargeback_cli(served, tmp_path) -> dict[str, str]:
    """`trainledger report chargeback --month MONTH`'s summary CSV: statement → total."""
    import csv

    out = tmp_path / f"cb-{len(list(tmp_path.iterdir()))}"
    done = subprocess.run([*trainledger(), "report", "chargeback", "--month", MONTH, "-o", str(out), "--db", served.url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with open(out / f"{MONTH}-chargeback-summary.csv", newline="") as fh:
        return {r["statement"]: r["total"] for r in csv.DictReader(fh)}


#: the first grid whose first column is "statement": its headers and rows (each cell's text)
GRID_JS = """() => {
  const grid = [...document.querySelectorAll('[data-testid="stDataFrame"]')]
    .find(g => g.querySelector('[role="columnheader"]')?.textContent === 'statement');
  if (!grid) return null;
  return {heads: [...grid.querySelectorAll('[role="columnheader"]')].map(h => h.textContent),
          rows: [...grid.querySelectorAll('tbody [role="row"]')].map(r => [...r.querySelectorAll('[role="gridcell"]')].map(c => c.textContent))};
}"""


def _chargeback_grid(page) -> dict[str, str]:
    """The Export page's chargeback table as shown: statement → total (its cells' text)."""
    page.get_by_role("heading", name="Chargeback statements").scroll_into_view_if_needed()
    page.wait_for_function(f"() => ({GRID_JS})()?.rows.length > 0")
    g = page.evaluate(GRID_JS)
    total = g["heads"].index("total (CNY)")
    return {r[0]: r[total] for r in g["rows"] if r}


def test_a_lead_sets_each_idle_policy_in_settings_and_the_chargeback_table_is_the_clis(site, overview_as, tmp_path):
    """Issue 39 item 1 in Chromium: a lead changes the demo fleet's idle policy in Settings (each policy in turn)
    and the Export page's chargeback table shows, for every statement, the total `trainledger report chargeback`
    writes, to the cent; the share of idle moves with the policy."""
    from playwright.sync_api import expect

    page = overview_as("alice", "alice-pw", "chargeback")
    with evidence(page, site, "chargeback"):
        seen = {}
        before = with_session(site.url, _demo_policy)
        for policy in POLICIES:
            page.goto(f"{site.base}/settings")
            settle(page)
            page.get_by_role("tab", name="Fleet").click()
            fleet = page.get_by_role("combobox", name="Fleet")
            fleet.click()
            page.get_by_role("option", name="demo-cluster", exact=True).click()
            expect(fleet).to_have_value("demo-cluster")
            settle(page)  # the form redrawn for the fleet picked (with its policy) before it is filled
            # the fleet's own form, not the new-fleet form still shown until the rerun for the pick has drawn: both
            # show the policy "none", but only the fleet's has its name (a fill into the new-fleet form is lost)
            expect(page.get_by_role("textbox", name="Name")).to_have_value("demo-cluster")
            share = page.get_by_role("textbox", name="Idle charged back")
            expect(share).to_have_value(before or "none")
            share.fill(policy)
            expect(share).to_have_value(policy)
            page.get_by_role("button", name="Save fleet").click()
            settle(page)
            expect(page.get_by_text("Fleet demo-cluster updated.")).to_be_visible()
            assert with_session(site.url, _demo_policy) == (None if policy == "none" else policy)  # what was saved
            before = policy
            page.goto(f"{site.base}/export?month={MONTH}")
            settle(page)
            expect(page.get_by_role("heading", name="Chargeback statements")).to_be_visible()
            shown = _chargeback_grid(page)
            cli = _chargeback_cli(site, tmp_path)
            assert {k: v.replace(",", "") for k, v in shown.items()} == cli, (policy, shown, cli)
            seen[policy] = cli
            page.screenshot(path=str(ARTIFACTS / f"chargeback-{policy.split(':')[0]}-1280.png"), full_page=True)
        # the policy moved idle between the statements: none charges none back, proportional and even differ
        assert Decimal(seen["none"]["idle (not charged back)"]) > 0 == Decimal(seen["even"]["idle (not charged back)"])
        assert seen["proportional"]["demo-pretrain"] != seen["even"]["demo-pretrain"] != seen["none"]["demo-pretrain"]
        assert Decimal(seen["proportional"]["spend"]) == Decimal(seen["none"]["spend"])
