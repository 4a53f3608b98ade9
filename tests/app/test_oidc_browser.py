"""OpenID Connect sign-in in real Chromium, through the real provider's login page (issue 40, "Done when").

`trainledger dashboard --oidc-config oidc.toml` against panva/oidc-provider (tests/app/oidc_fixtures.py): an admin,
a lead scoped to project ``hand`` and a viewer each start at a deep link, press "Sign in with Test SSO", type their
password on the provider's page and land back on that page signed in, with their mapped role in the sidebar; the
viewer's and the scoped lead's forms that write are disabled (what they write is the whole team's); the scoped lead's Runs page offers only its project; signing out goes
through the provider's sign-out and ends the session (its row is gone and the old cookie opens nothing).
"""

from __future__ import annotations

import pytest

from tests.app.helpers import MONTH, build_ledger
from tests.app.oidc_fixtures import PASSWORD, provider, session_exists, write_config
from tests.app.served import WAIT_MS, chromium, free_port, need_chromium, serve, settle

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("oidc-browser")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    port = free_port()
    with provider(tmp, port) as prov:
        with serve(tmp, url, "--oidc-config", str(write_config(tmp, prov.issuer)), port=port) as served:
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


def _page(browser):
    page = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def sign_in_sso(page, base: str, login: str, path: str = "/settings") -> None:
    page.goto(base + path)
    assert page.url.startswith(f"{base}/_trainledger/signin?next=")
    page.get_by_role("link", name="Sign in with Test SSO").click()
    page.wait_for_url("**/interaction/**")
    page.get_by_label("Username").fill(login)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base}{path.split('?')[0]}*")


@pytest.mark.parametrize("login, role, writes", [("ada", "admin", True), ("lena", "lead", False),
                                                 ("victor", "viewer", False)])
def test_each_role_signs_in_through_the_providers_page(site, browser, login, role, writes):
    from playwright.sync_api import expect

    page = _page(browser)
    sign_in_sso(page, site.base, login)
    expect(page.get_by_test_id("stSidebarUserContent").get_by_text(f"Signed in as {login} ({role})")).to_be_visible()
    settle(page)
    save = page.get_by_role("button", name="Save offer")
    if writes:
        expect(save).to_be_enabled()
    else:  # a viewer, or a lead scoped to projects (prices, fleets and settings are the whole team's)
        expect(page.get_by_text("only leads of the whole team can save changes" if role == "lead" else
                                "only leads can save changes")).to_be_visible()
        expect(save).to_be_disabled()
        page.goto(site.base + "/launch")
        if role == "viewer":
            expect(page.get_by_role("button", name="Launch", exact=True)).to_be_disabled()
        else:  # Launch is a team page: a scoped lead reads the note, no form
            expect(page.get_by_text("Team totals need team scope")).to_be_visible()
            expect(page.get_by_role("button", name="Launch", exact=True)).to_have_count(0)
    (cookie,) = [c for c in page.context.cookies() if c["name"] == f"trainledger_session_{site.port}"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["value"] not in page.url
    page.context.close()


def test_the_scoped_lead_sees_only_its_project_on_runs(site, browser):
    from playwright.sync_api import expect

    page = _page(browser)
    sign_in_sso(page, site.base, "lena", f"/runs?month={MONTH}")
    expect(page.get_by_role("heading", name="Runs", exact=True).first).to_be_visible()
    settle(page)
    page.get_by_test_id("stSelectbox").filter(has_text="Project").first.click()
    options = page.get_by_role("option")
    expect(options.first).to_be_visible()
    assert sorted(options.all_inner_texts()) == ["All", "hand"]
    page.context.close()


def test_sign_out_ends_the_session_at_the_dashboard_and_the_provider(site, browser):
    from playwright.sync_api import expect

    page = _page(browser)
    sign_in_sso(page, site.base, "victor", "/overview")
    expect(page.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as victor (viewer)")).to_be_visible()
    (cookie,) = [c for c in page.context.cookies() if c["name"] == f"trainledger_session_{site.port}"]
    assert session_exists(site.url, cookie["value"])
    page.get_by_test_id("stSidebarUserContent").get_by_role("link", name="Sign out").click()
    page.get_by_role("button", name="Yes, sign me out").click()  # the provider's own sign-out page
    page.wait_for_url(f"{site.base}/_trainledger/signedout")
    expect(page.get_by_text("You are signed out.")).to_be_visible()
    assert not session_exists(site.url, cookie["value"])
    page.goto(site.base + "/overview")
    assert page.url.startswith(f"{site.base}/_trainledger/signin?next=%2Foverview")
    page.context.close()
    old = browser.new_context()
    old.add_cookies([cookie])
    again = old.new_page()
    again.goto(site.base + "/overview")
    assert again.url.startswith(f"{site.base}/_trainledger/signin?next=%2Foverview")
    old.close()


def test_a_change_made_in_the_browser_is_in_the_audit_log_with_before_and_after(site, browser):
    """ada (admin, through the provider) sets and then changes project hand's every-month budget on the Overview:
    each save is one audit row, by ``oidc:ada`` from the dashboard at the browser's address, with its before and
    after; the Settings page's audit log shows both rows as the ledger holds them."""
    from playwright.sync_api import expect
    from sqlmodel import Session
    from trainledger.store import audit
    from trainledger.store.db import make_engine

    from tests.app.served import open_expander

    def rows() -> list[dict]:
        engine = make_engine(site.url)
        try:
            with Session(engine) as s:
                return [e for e in audit.entries(s) if e["action"].startswith("budget.")]
        finally:
            engine.dispose()

    seeded = len(rows())  # the demo's own budgets, recorded as the process's (origin python)
    page = _page(browser)
    sign_in_sso(page, site.base, "ada", f"/?month={MONTH}")
    settle(page)
    for amount, shown in (("150", "150.00"), ("175.5", "175.50")):
        open_expander(page, "Set, change or remove budgets")
        scope = page.get_by_role("combobox", name="Scope")
        if scope.input_value() != "hand":  # the form keeps the scope picked before the save
            scope.click()
            page.get_by_role("option", name="hand", exact=True).click()
        expect(scope).to_have_value("hand")
        box = page.get_by_role("textbox", name="Amount")
        box.fill(amount)
        expect(box).to_have_value(amount)
        page.get_by_role("button", name="Save budget").click()
        settle(page)
        expect(page.get_by_text(f"Saved the every-month budget of project hand: {shown} CNY.")).to_be_visible()
    found = rows()
    assert len(found) == seeded + 2
    newest, first = found[:2]
    after_first = {"amount": "150", "currency": "CNY", "threshold_pct": "100"}
    assert {k: first[k] for k in ("actor", "origin", "client", "action", "target", "before", "after")} == {
        "actor": "oidc:ada", "origin": "dashboard", "client": "loopback", "action": "budget.set",
        "target": "project hand monthly", "before": None, "after": after_first}
    assert {k: newest[k] for k in ("actor", "action", "target", "before", "after")} == {
        "actor": "oidc:ada", "action": "budget.set", "target": "project hand monthly", "before": after_first,
        "after": {**after_first, "amount": "175.5"}}

    page.goto(site.base + "/settings")
    settle(page)
    log = page.get_by_test_id("stDataFrame").filter(has_text="before → after")  # the grid's cells, as drawn
    expect(log.get_by_text("amount: 150 → 175.5", exact=True)).to_have_count(1)  # the grid's accessible cells
    expect(log.get_by_text("+ amount=150, currency=CNY, threshold_pct=100", exact=True)).to_have_count(1)
    expect(log.get_by_text("oidc:ada", exact=True)).to_have_count(2)
    page.context.close()
