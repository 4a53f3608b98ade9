"""Issue 40 item 4 on the dashboard: every save records the signed-in user (origin "dashboard") in the audit log,
in the same transaction as the write; Settings → Audit log shows it to admins and team-scope leads only."""

from __future__ import annotations

import getpass
from datetime import date, datetime, timezone

import pytest
from sqlmodel import Session
from trainledger.app.serving.auth import make_entry
from trainledger.store import audit
from trainledger.store.db import make_engine

from tests.app.helpers import make_app, plain, sign_in

FAST = 1_000


@pytest.fixture
def ledger(sqlite_url, app_env):
    make_engine(sqlite_url).dispose()
    app_env(sqlite_url)
    return sqlite_url


@pytest.fixture
def users_file(tmp_path, monkeypatch):
    path = tmp_path / "users.toml"
    path.write_text(make_entry("alice", "lead", "alice-pw", iterations=FAST)
                    + make_entry("bob", "viewer", "bob-pw", iterations=FAST)
                    + make_entry("root", "admin", "root-pw", iterations=FAST)
                    + make_entry("lena", "lead", "lena-pw", iterations=FAST).replace(
                        'role = "lead"\n', 'role = "lead"\nprojects = ["llm"]\n'))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(path))
    return path


def _rows(url: str) -> list[dict]:
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return [{k: v for k, v in r.items() if k not in ("id", "at")} for r in audit.entries(s)]
    finally:
        engine.dispose()


def _settings(user: str | None = None):
    at = make_app()
    if user is None:
        at.run()
    else:
        sign_in(at, user, f"{user}-pw")
    at.switch_page("pages/settings.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _click(at, label: str):
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_settings_saves_record_the_signed_in_user(ledger, users_file):
    at = _settings("alice")
    at.text_input(key="fleet__name").input("rack-a")
    at.number_input(key="fleet__nodes").set_value(4)
    at.date_input(key="fleet__from").set_value(date(2026, 1, 1))
    _click(at, "Save fleet")
    assert [plain(s.value) for s in at.success] == ["Fleet rack-a added."]
    at.text_input(key="set_currency").input("USD")
    _click(at, "Save settings")
    at.text_input(key="fx_rate").input("0.1387")
    at.date_input(key="fx_from").set_value(date(2026, 11, 1))
    _click(at, "Save rate")
    who = {"actor": "alice", "origin": "dashboard", "client": ""}  # AppTest has no browser address
    assert _rows(ledger) == [
        {**who, "action": "fx.set", "target": "CNY/USD from 2026-11-01", "before": None,
         "after": {"rate": "0.1387", "source": ""}},
        {**who, "action": "setting.set", "target": "currency", "before": None, "after": {"value": "USD"}},
        {**who, "action": "fleet.add", "target": "rack-a", "before": None,
         "after": {"name": "rack-a", "offer": "rtx4090-own", "node_count": 4, "valid_from": "2026-01-01",
                   "valid_to": None, "idle_share": "none"}},
    ]


def test_a_price_edit_and_a_budget_record_the_user_and_a_bad_one_nothing(ledger, users_file):
    at = _settings("alice")
    at.selectbox(key="set_offer_pick").set_value("rtx4090-rent").run()
    at.text_input(key="offer_rtx4090-rent_rent_elastic_price_per_node_month").input("-5")
    _click(at, "Save offer")
    assert at.error and _rows(ledger) == []  # refused: nothing written, nothing recorded
    at.text_input(key="offer_rtx4090-rent_rent_elastic_price_per_node_month").input("3000.50")
    saved_from = datetime.now(timezone.utc).replace(microsecond=0)
    _click(at, "Save offer")
    assert [plain(s.value) for s in at.success] == ["Saved offer rtx4090-rent."]
    (row,) = _rows(ledger)
    assert (row["actor"], row["origin"], row["client"], row["action"], row["target"]) == (
        "alice", "dashboard", "", "offer.price", "rtx4090-rent")
    start = datetime.fromisoformat(row["after"]["valid_from"])  # now, in whole seconds
    assert saved_from <= start <= datetime.now(timezone.utc) and start.microsecond == 0
    assert (row["before"]["price_per_node_month"], row["after"]) == ("3600", {
        "version": 2, "valid_from": row["after"]["valid_from"], "price_per_node_month": "3000.5",
        "billing_granularity_hours": row["before"]["billing_granularity_hours"],
        "minimum_hours": row["before"]["minimum_hours"], "note": ""})

    at.switch_page("pages/overview.py").run()
    at.text_input(key="budget_amount").input("20000")
    _click(at, "Save budget")
    assert _rows(ledger)[0] == {"actor": "alice", "origin": "dashboard", "client": "", "action": "budget.set",
                                "target": "team monthly", "before": None,
                                "after": {"amount": "20000", "currency": "CNY", "threshold_pct": "100"}}


def test_local_use_records_the_os_user_of_the_dashboard(ledger):
    at = _settings()
    at.text_input(key="set_currency").input("EUR")
    _click(at, "Save settings")
    assert _rows(ledger) == [{"actor": f"local:{getpass.getuser()}", "origin": "dashboard", "client": "",
                              "action": "setting.set", "target": "currency", "before": None, "after": {"value": "EUR"}}]


@pytest.mark.parametrize("user, shown", [("root", True), ("alice", True), ("bob", False), ("lena", False)])
def test_the_audit_log_section_is_for_admins_and_team_leads(ledger, users_file, user, shown):
    engine = make_engine(ledger)
    with Session(engine) as s:
        audit.record(s, audit.Actor("ops-anna", "cli", "ops-host"), "budget.set", "team monthly",
                     {"amount": "1000"}, {"amount": "1200"})
        s.commit()
    engine.dispose()
    at = _settings(user)
    assert "Audit log" in [h.value for h in at.subheader]
    tables = [d.value for d in at.dataframe if "before → after" in d.value.columns]
    notes = [c.value for c in at.caption if "audit log" in c.value.lower() and "shown to admins" in c.value]
    if shown:
        (df,) = tables
        assert list(df.columns) == ["when", "who", "from", "where", "what", "changed", "before → after"]
        assert df.iloc[0].tolist()[1:] == ["ops-anna", "cli", "ops-host", "budget.set", "team monthly", "amount: 1000 → 1200"]
        assert notes == []
    else:
        assert tables == [] and len(notes) == 1
