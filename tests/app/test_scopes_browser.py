"""Project scopes in real Chromium (docs/SCOPES.md): a users-file user scoped to ``demo-finetune`` signs in on a
served dashboard; the Runs page lists only that project's runs, another project's run id in the URL reads as no
run, and the CSV the Export page downloads holds only that project's lines. One server start."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.app.helpers import MONTH, build_ledger
from tests.app.scopes import A, B, C, cli_report, leaks, names_of, users_file
from tests.app.served import WAIT_MS, chromium, need_chromium, serve, settle

pytestmark = pytest.mark.slow


def test_a_scoped_user_sees_and_downloads_only_their_project(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    need_chromium()
    url = build_ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    others = names_of(url, B) | names_of(url, C)
    guess = min(n for n in names_of(url, B) if n.startswith("demo-0"))
    users = users_file(tmp_path / "users.toml")
    with serve(tmp_path, url, "--auth-file", str(users)) as served, sync_playwright() as p:
        browser = chromium(p)
        try:
            page = browser.new_page(accept_downloads=True, viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            page.add_init_script("delete window.showSaveFilePicker")  # the table's CSV: a plain download, no dialog
            page.goto(f"{served.base}/runs?month={MONTH}")
            page.get_by_label("User").fill("fin")
            page.get_by_label("Password").fill("fin-pw")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_load_state()
            expect(page.get_by_role("heading", name="Runs", exact=True).first).to_be_visible()
            expect(page.get_by_test_id("stSidebarUserContent").get_by_text("Signed in as fin (viewer)")).to_be_visible()
            settle(page)
            assert leaks(page.locator("body").inner_text(), others) == []
            table = page.get_by_test_id("stDataFrame").first  # drawn on a canvas: read through its own CSV download
            table.hover()
            with page.expect_download(timeout=WAIT_MS) as info:
                table.get_by_role("button", name="Download as CSV").click()
            listed = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text(encoding="utf-8-sig"))))

            page.goto(f"{served.base}/runs?month={MONTH}&run={guess}")  # another project's run: no such run
            expect(page.get_by_text(f"no run '{guess}' in this ledger")).to_be_visible()
            settle(page)
            assert leaks(page.locator("body").inner_text().replace(guess, ""), others) == []

            page.goto(f"{served.base}/export?month={MONTH}")
            button = page.get_by_role("button", name="Download CSV")
            expect(button).to_be_visible()
            settle(page)
            with page.expect_download(timeout=WAIT_MS) as info:
                button.click()
            got = Path(info.value.path()).read_bytes().decode()
            media = info.value.url  # the file the app serves: only to a signed-in browser
            assert media.startswith(f"{served.base}/media/"), media
            assert page.request.get(media).body().decode() == got  # this browser's session
            stranger = browser.new_context()
            try:
                refused = stranger.request.get(media)  # the same URL, no session: refused, nothing of the file
                assert (refused.status, refused.text()) == (403, "Sign in to download this file.")
            finally:
                stranger.close()
        finally:
            browser.close()
    mine = {r["run_id"] for r in cli_report(url)["runs"] if r["project"] == A}
    assert {r["id"] for r in listed} == mine and {r["project"] for r in listed} == {A}
    assert leaks(got, others) == []
    blocks = got.split("\n\n")
    projects = list(csv.DictReader(io.StringIO(blocks[1])))
    runs = list(csv.DictReader(io.StringIO(blocks[2])))
    assert [r["project"] for r in projects] == [A]
    assert runs and {r["project"] for r in runs} == {A}
