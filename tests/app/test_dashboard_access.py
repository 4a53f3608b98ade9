"""Sign-in and roles: viewers read, only leads write (checked on the server, in the page code)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import tomllib
from datetime import date
from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.app.serving.auth import (
    AuthFileError,
    authenticate,
    hash_password,
    load_auth_file,
    make_entry,
    verify_password,
)
from trainledger.store.db import make_engine
from trainledger.store.models import Fleet, Setting

from tests.app.helpers import REPO, make_app, metrics, plain, set_role, sign_in
from tests.helpers import offer_price

FAST = 1_000  # PBKDF2 iterations in tests (the default is 600,000)


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST)
                    + make_entry("bob", "viewer", "bob-pw", iterations=FAST))
    return path


@pytest.fixture
def ledger(sqlite_url, app_env):
    make_engine(sqlite_url).dispose()  # an empty ledger with the presets
    app_env(sqlite_url)
    return sqlite_url


def _sign_in(at, user: str, password: str):
    sign_in(at, user, password)
    return at


def _settings_as(monkeypatch, users_file, user, password):
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file))
    at = _sign_in(make_app(), user, password)
    at.switch_page("pages/settings.py").run()
    assert not at.exception, at.exception
    return at




def _change_offer_price(at, price: str):
    at.selectbox(key="set_offer_pick").set_value("rtx4090-rent").run()
    at.text_input(key="offer_rtx4090-rent_rent_elastic_price_per_node_month").input(price)
    next(b for b in at.button if b.label == "Save offer").click().run()
    assert not at.exception, at.exception
    return at


# --- hashing and the auth file ---------------------------------------------------------

def test_hash_round_trip_and_salt():
    h1, h2 = hash_password("s3cret", iterations=FAST), hash_password("s3cret", iterations=FAST)
    assert h1 != h2 and h1.startswith("pbkdf2_sha256$1000$")
    assert verify_password("s3cret", h1) and not verify_password("s3cret!", h1)
    assert not verify_password("s3cret", "pbkdf2_sha256$1000$not-base64$x")
    digest = base64.b64encode(hashlib.pbkdf2_hmac("sha256", b"pw", b"\x01" * 16, 1)).decode()
    assert hash_password("pw", salt=b"\x01" * 16, iterations=1) == f"pbkdf2_sha256$1$AQEBAQEBAQEBAQEBAQEBAQ==${digest}"


def test_auth_file_loads_and_authenticates(users_file):
    users = load_auth_file(users_file)
    assert {u.name: u.role for u in users.values()} == {"alice": "lead", "bob": "viewer"}
    assert authenticate(users, "alice", "alice-pw").role == "lead"
    assert authenticate(users, "alice", "bob-pw") is None
    assert authenticate(users, "mallory", "alice-pw") is None


@pytest.mark.parametrize("body,needle", [
    ("", "no users"),
    ('[users.x]\nrole = "owner"\npassword_hash = "pbkdf2_sha256$1$AA==$AA=="\n', "role must be viewer, lead or admin, got 'owner'"),
    ('[users.x]\nrole = "lead"\nprojects = []\n', "projects must be a non-empty list of project names"),
    ('[users.x]\nrole = "lead"\nprojects = "llama"\n', "projects must be a non-empty list of project names"),
    ('[users.x]\nrole = "lead"\n', "password_hash is missing"),
    ('[users.x]\nrole = "lead"\npassword_hash = "md5$abc"\n', "password_hash: expected pbkdf2_sha256$"),
    ('[users.x]\nrole = "lead"\npassword_hash = "x"\ncolour = "red"\n', "unknown key 'colour'"),
    ("[users\n", "not valid TOML"),
])
def test_bad_auth_file_is_one_line(tmp_path, body, needle):
    f = tmp_path / "users.toml"
    f.write_text(body)
    with pytest.raises(AuthFileError) as exc:
        load_auth_file(f)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_python_m_app_auth_hash_prints_a_usable_entry(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trainledger.app.serving.auth", "hash", "carol", "--role", "lead", "--password-stdin"],
                       input="carol-pw\n", capture_output=True, text=True, cwd=REPO, timeout=60, check=True)
    entry = tomllib.loads(r.stdout)["users"]["carol"]
    assert entry["role"] == "lead" and entry["password_hash"].startswith("pbkdf2_sha256$600000$")
    f = tmp_path / "users.toml"
    f.write_text(r.stdout)
    assert authenticate(load_auth_file(f), "carol", "carol-pw") is not None
    assert "carol-pw" not in r.stdout


# --- the app -------------------------------------------------------------------------------

def test_sign_in_is_required_and_a_wrong_password_is_refused(ledger, users_file, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file))
    at = make_app()
    refused = sign_in(at, "alice", "wrong")
    assert (refused.entry, refused.status, refused.message) == (None, 401, "Wrong user or password.")
    assert not at.metric and at.title[0].value == "Sign in to trainledger"
    assert any('href="/_trainledger/signin?next=' in m.value for m in at.markdown)
    assert sign_in(at, "alice", "alice-pw").entry.name == "alice"
    assert "Spend (CNY)" in metrics(at)


def test_viewer_sees_read_only_forms(ledger, users_file, monkeypatch):
    at = _settings_as(monkeypatch, users_file, "bob", "bob-pw")
    assert any("only leads can save changes" in i.value for i in at.info)
    at.selectbox(key="set_offer_pick").set_value("rtx4090-rent").run()  # pickers stay open: a viewer can look
    writes = [w for w in (*at.text_input, *at.text_area, *at.number_input, *at.date_input, *at.checkbox)]
    assert writes and all(w.disabled for w in writes), [(w.key, w.disabled) for w in writes if not w.disabled]
    saves = [b for b in at.button if b.label in ("Save offer", "Import", "Save fleet", "Save settings")]
    assert len(saves) == 4 and all(b.disabled for b in saves)
    assert not at.selectbox(key="set_offer_pick").disabled and at.selectbox(key="set_offer_kind_rtx4090-rent").disabled


def test_a_lead_demoted_while_the_page_is_open_cannot_change_prices(ledger, users_file, monkeypatch):
    """The form was drawn for a lead; the click arrives after the demotion: the server draws the form disabled for
    the viewer and discards the disabled button's click (Streamlit enforces ``disabled`` on the server), so
    nothing is saved; ``access.require_lead`` right before the write is the second check."""
    at = _settings_as(monkeypatch, users_file, "alice", "alice-pw")
    at.selectbox(key="set_offer_pick").set_value("rtx4090-rent").run()
    at.text_input(key="offer_rtx4090-rent_rent_elastic_price_per_node_month").input("1")
    set_role(users_file, "alice", "viewer")
    next(b for b in at.button if b.label == "Save offer").click().run()
    assert not at.success and any("Signed in as alice (viewer)" in plain(i.value) for i in at.info)
    assert next(b for b in at.button if b.label == "Save offer").disabled
    assert offer_price(ledger) == Decimal("3600")


def test_a_lead_demoted_while_the_page_is_open_cannot_edit_fleet_or_settings(ledger, users_file, monkeypatch):
    at = _settings_as(monkeypatch, users_file, "alice", "alice-pw")
    at.text_input(key="fleet__name").input("sneaky")
    at.text_input(key="set_currency").input("USD")
    set_role(users_file, "alice", "viewer")
    next(b for b in at.button if b.label == "Save fleet").click().run()  # drawn disabled in this run: discarded
    assert not at.success and all(b.disabled for b in at.button if b.label in ("Save fleet", "Save settings"))
    engine = make_engine(ledger)
    with Session(engine) as s:
        assert s.exec(select(Fleet)).all() == [] and s.get(Setting, "currency") is None
    engine.dispose()


def _require_lead_script():
    import streamlit as st
    from trainledger.app.views.access import require_lead

    st.write(f"allowed: {require_lead('change prices')}")


@pytest.mark.parametrize("user,allowed", [("bob", False), ("alice", True), (None, False)])
def test_require_lead_is_checked_on_the_server(ledger, users_file, monkeypatch, user, allowed):
    """The check every write makes right before it writes, whatever the page drew."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file))
    at = AppTest.from_function(_require_lead_script, default_timeout=60)
    if user is not None:
        sign_in(at, user, f"{user}-pw")
    else:
        at.run()
    assert [m.value for m in at.markdown] == [f"allowed: {allowed}"]
    errors = [plain(e.value) for e in at.error]
    if user == "bob":
        assert errors == ["Only leads can change prices: bob is a viewer. Nothing was saved."]
    elif user is None:
        assert errors == ["Only leads can change prices: you are not signed in. Nothing was saved."]
    else:
        assert errors == []


def test_lead_can_change_prices(ledger, users_file, monkeypatch):
    at = _settings_as(monkeypatch, users_file, "alice", "alice-pw")
    _change_offer_price(at, "3000.50")
    assert [plain(s.value) for s in at.success] == ["Saved offer rtx4090-rent."]
    assert offer_price(ledger) == Decimal("3000.50")


def test_bad_price_is_one_line_and_writes_nothing(ledger, users_file, monkeypatch):
    at = _settings_as(monkeypatch, users_file, "alice", "alice-pw")
    _change_offer_price(at, "-5")
    assert [plain(e.value) for e in at.error] == [
        "offer form: offer 'rtx4090-rent': price_per_node_month: Input should be greater than or equal to 0 (got '-5')"]
    assert offer_price(ledger) == Decimal("3600")


def test_local_use_is_a_lead_and_can_add_a_fleet(ledger):
    at = make_app()
    at.run()
    at.switch_page("pages/settings.py").run()
    assert not any("Signed in" in i.value for i in at.info)
    at.text_input(key="fleet__name").input("rack-a")
    at.number_input(key="fleet__nodes").set_value(4)
    at.date_input(key="fleet__from").set_value(date(2026, 1, 1))
    next(b for b in at.button if b.label == "Save fleet").click().run()
    assert [plain(s.value) for s in at.success] == ["Fleet rack-a added."]
    engine = make_engine(ledger)
    with Session(engine) as s:
        f = s.exec(select(Fleet)).one()
        assert (f.name, f.node_count, f.valid_from, f.valid_to) == ("rack-a", 4, date(2026, 1, 1), None)
    engine.dispose()


def test_role_removed_from_the_file_signs_out(ledger, users_file, monkeypatch):
    at = _settings_as(monkeypatch, users_file, "alice", "alice-pw")
    users_file.write_text(make_entry("bob", "viewer", "bob-pw", iterations=FAST))
    st_ = users_file.stat()
    os.utime(users_file, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))  # a new mtime: re-read
    at.run()
    assert at.title[0].value == "Sign in to trainledger"
