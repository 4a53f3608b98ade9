"""Signing in, in real Chromium: deep links, reloads, sign-out, changed passwords, removed users, read-only viewers.

`trainledger dashboard --auth-file users.toml` serves the sign-in form over plain HTTP
(app/serving/signin.py); it sets an HttpOnly, SameSite=Lax session cookie and never puts a secret in a
URL. Checked here:

* a deep link opened signed out (``/runs?month=…&run=…``) goes to the form and, after signing
  in, to that very page (the run detail figure is there);
* a reload keeps the browser signed in; every page answers at its own URL (``/overview`` is
  the Overview, not "Page not found"), and ``/`` opens ``/overview``;
* signing out ends the session: a reload asks to sign in again;
* a changed password or a user removed from the auth file ends that user's sessions;
* a viewer sees the forms that write disabled (Settings, Launch).
"""

from __future__ import annotations

import re

import pytest
from trainledger.app.serving.auth import make_entry

from tests.app.helpers import MONTH, build_ledger
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle

pytestmark = pytest.mark.slow

FAST = 1_000  # PBKDF2 iterations
PAGE_URLS = [("overview", "Overview"), ("runs", "Runs"), ("rent-vs-own", "Rent vs own"), ("roi", "Monthly ROI"),
             ("strategies", "Strategies"), ("planner", "Planner"), ("launch", "Launch"), ("export", "Export"),
             ("settings", "Settings")]  # app/main.py's SECTIONS: url path and heading
USERS = {"alice": ("lead", "alice-pw"), "bob": ("viewer", "bob-pw"), "carol": ("lead", "carol-pw"),
         "dave": ("viewer", "dave-pw")}


def write_users(path, users: dict) -> None:
    path.write_text("".join(make_entry(n, role, pw, iterations=FAST) for n, (role, pw) in users.items()))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    need_chromium()
    tmp = tmp_path_factory.mktemp("signin")
    url = build_ledger(f"sqlite:///{tmp / 'ledger.db'}")
    users = tmp / "users.toml"
    write_users(users, USERS)
    with serve(tmp, url, "--auth-file", str(users)) as served:
        yield served, users


def sign_in(page, base: str, user: str, password: str) -> None:
    page.get_by_label("User").fill(user)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


@pytest.fixture
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


def test_a_deep_link_signed_out_comes_back_to_its_page_and_survives_a_reload(site, browser):
    from playwright.sync_api import expect

    served, _ = site
    deep = f"/runs?month={MONTH}&run=hand-elastic-1"
    page = _page(browser)
    page.goto(served.base + deep)
    assert page.url.startswith(f"{served.base}/_trainledger/signin?next=")
    sign_in(page, served.base, "alice", "alice-pw")
    assert page.url == served.base + deep
    cost = page.get_by_test_id("stMetric").filter(has_text="Run cost (CNY)").get_by_test_id("stMetricValue")
    expect(cost).to_have_text("98.63")
    (cookie,) = [c for c in page.context.cookies() if c["name"] == f"trainledger_session_{served.port}"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    assert cookie["value"] not in page.url and "password" not in page.url
    page.reload()
    expect(cost).to_have_text("98.63")
    expect(page.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as alice (lead)")).to_be_visible()
    assert cookie["value"] not in served.log_text()


def test_every_page_has_a_stable_url(site, browser):
    from playwright.sync_api import expect

    served, _ = site
    page = _page(browser)
    page.goto(served.base + "/overview")
    sign_in(page, served.base, "alice", "alice-pw")
    for url_path, title in PAGE_URLS:
        page.goto(f"{served.base}/{url_path}?month={MONTH}")
        expect(page.get_by_role("heading", name=title, exact=True).first).to_be_visible()
        settle(page)
        assert page.url.split("?")[0] == f"{served.base}/{url_path}", (url_path, page.url)
        assert page.get_by_text("Page not found").count() == 0, url_path
    page.goto(served.base + "/")
    expect(page.get_by_role("heading", name="Overview", exact=True).first).to_be_visible()
    page.wait_for_url(f"{served.base}/overview*")


def test_sign_out_ends_the_session(site, browser):
    from playwright.sync_api import expect

    served, _ = site
    page = _page(browser)
    page.goto(served.base + "/settings")
    sign_in(page, served.base, "carol", "carol-pw")
    expect(page.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as carol (lead)")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_text("You are signed out.")).to_be_visible()
    page.reload()
    assert page.url.startswith(f"{served.base}/_trainledger/signin?next=%2Fsettings")
    expect(page.get_by_role("heading", name="Sign in to trainledger")).to_be_visible()


def test_a_changed_password_or_a_removed_user_ends_old_sessions(site, browser):
    from playwright.sync_api import expect

    served, users = site
    dave, carol = _page(browser), _page(browser)
    for page, (name, pw) in ((dave, ("dave", "dave-pw")), (carol, ("carol", "carol-pw"))):
        page.goto(served.base + "/overview")
        sign_in(page, served.base, name, pw)
        expect(page.get_by_test_id("stSidebarUserContent").get_by_text(f"Signed in as {name}")).to_be_visible()
    write_users(users, {**{k: v for k, v in USERS.items() if k != "carol"}, "dave": ("viewer", "dave-new-pw")})
    for page in (dave, carol):
        page.reload()
        assert page.url.startswith(f"{served.base}/_trainledger/signin?next=%2Foverview"), page.url
    sign_in(dave, served.base, "dave", "dave-pw")
    expect(dave.get_by_text("Wrong user or password.")).to_be_visible()
    sign_in(dave, served.base, "dave", "dave-new-pw")
    expect(dave.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as dave (viewer)")).to_be_visible()
    write_users(users, USERS)


def test_a_viewer_sees_read_only_forms(site, browser):
    from playwright.sync_api import expect

    served, _ = site
    page = _page(browser)
    page.goto(served.base + "/settings")
    sign_in(page, served.base, "bob", "bob-pw")
    expect(page.get_by_text("only leads can save changes")).to_be_visible()
    expect(page.get_by_role("button", name="Save offer")).to_be_disabled()
    page.get_by_role("tab", name="Fleet").click()
    expect(page.get_by_role("button", name="Save fleet")).to_be_disabled()
    page.get_by_role("tab", name="Currency and time zone").click()
    expect(page.get_by_role("button", name="Save settings")).to_be_disabled()
    expect(page.get_by_role("textbox", name=re.compile(r"^Currency \(ISO 4217\)"))).to_be_disabled()
    page.get_by_role("tab", name="Exchange rates").click()
    expect(page.get_by_role("button", name="Save rate")).to_be_disabled()
    page.get_by_role("tab", name="Carbon intensity").click()
    expect(page.get_by_role("button", name="Save intensity")).to_be_disabled()
    page.goto(served.base + "/launch")
    expect(page.get_by_role("button", name="Launch", exact=True)).to_be_disabled()
    expect(page.get_by_role("spinbutton", name="Steps")).to_be_disabled()
