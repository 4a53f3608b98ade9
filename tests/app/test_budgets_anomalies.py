"""Overview's budget forms and spend anomalies, and the Runs page's ``?day=`` list, under AppTest.

The ledger: one elastic run a day from 2026-10-01 (2 nodes × 10 h on rtx4090-rent: 98.63 CNY a day, project
``llm``), and with ``spike`` 8 more nodes × 10 h on 2026-11-20 (493.15 CNY that day); the clock 2026-12-01 06:00
UTC, so November has ended (tests/test_anomalies.py derives the figures).

* a lead sets, changes and removes budgets; a bad amount or month is refused with the CLI's one line, naming the
  form's field, and nothing is written;
* a viewer sees the forms disabled; a lead demoted while the page is open saves nothing;
* the spike day is flagged with its figures and links to its runs; a flat history flags nothing.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from trainledger.app.serving.auth import make_entry

from tests.app.helpers import make_app, plain, run_page, set_role, sign_in, with_session

UTC = timezone.utc
MONTH = "2026-11"
NOW = "2026-12-01T06:00:00+00:00"


def build(url: str, spike: bool) -> str:
    from trainledger.store.db import make_engine, session_scope

    from tests.helpers import add_run

    engine = make_engine(url)
    with session_scope(engine) as s:
        day = date(2026, 10, 1)
        while day <= date(2026, 11, 30):
            add_run(s, f"r-{day}", datetime(day.year, day.month, day.day, 8, tzinfo=UTC), 10, nodes=2,
                    offer_name="rtx4090-rent", project="llm")
            day += timedelta(days=1)
        if spike:
            add_run(s, "spike", datetime(2026, 11, 20, 9, tzinfo=UTC), 10, nodes=8, offer_name="rtx4090-rent", project="llm")
    engine.dispose()
    return url


@pytest.fixture
def ledger(sqlite_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(build(sqlite_url, spike=True))
    return sqlite_url


def _budgets(url):
    from trainledger.money.outlook.budgets import list_budgets

    return with_session(url, lambda s: [(r["project"], r["period"], r["amount"], r["currency"]) for r in list_budgets(s)])


def _thresholds(url):
    from trainledger.money.outlook.budgets import list_budgets

    return with_session(url, lambda s: [(r["project"], r["threshold_pct"]) for r in list_budgets(s)])


def _table(at, column: str):
    """The one table with ``column``."""
    found = [df.value for df in at.dataframe if column in df.value.columns]
    assert len(found) == 1, [list(df.value.columns) for df in at.dataframe]
    return found[0]


def _save(at, *, scope="llm", period="Every month", month=MONTH, amount="3000", threshold="100"):
    at.selectbox(key="budget_scope").set_value(scope)
    at.text_input(key="budget_threshold").input(threshold)
    at.radio(key="budget_period").set_value(period)
    at.text_input(key="budget_month").input(month)
    at.text_input(key="budget_amount").input(amount)
    next(b for b in at.button if b.label == "Save budget").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_lead_sets_changes_and_removes_budgets_with_the_cli_validation(ledger):
    at = run_page(make_app(MONTH), "overview")
    assert any("No budget applies to 2026-11" in c.value for c in at.caption)
    _save(at, amount="12.345")
    assert [plain(e.value) for e in at.error] == [
        "Amount: a budget is in whole cents (at most 2 decimal places), got '12.345'"]
    _save(at, period="One month", month="2026-13", amount="100")
    assert [plain(e.value) for e in at.error] == ["Month: expected YYYY-MM such as 2026-11, got '2026-13'"]
    for bad in ("0", "101", "abc"):
        _save(at, amount="100", threshold=bad)
        assert [plain(e.value) for e in at.error] == [
            f"Threshold %: expected a percent of the budget from 1 to 100 (e.g. 80 to be warned at 80% spent; 100 for "
            f"none), got '{bad}'"]
    assert _budgets(ledger) == []  # nothing written
    _save(at, amount="3000")
    assert [plain(s.value) for s in at.success] == ["Saved the every-month budget of project llm: 3,000.00 CNY."]
    # the budget row drills into its runs: Runs filtered to llm in November
    from urllib.parse import parse_qs

    links = [e.proto for e in at.get("page_link") if "against the budget" in e.proto.label]
    assert [(x.label, x.page, parse_qs(x.query_string)) for x in links] == [
        ("Runs against the budget of llm", "runs", {"project": ["llm"], "month": [MONTH]})]
    _save(at, scope="The team (all projects)", period="One month", amount="5000")
    assert _budgets(ledger) == [("", MONTH, Decimal("5000"), "CNY"), ("llm", "monthly", Decimal("3000"), "CNY")]
    # the Overview shows them: November's llm cost 30 × 98.63 + 394.52 = 3,353.42 is over 3,000; the team's 5,000 holds
    table = _table(at, "state")
    llm = table[table["project"] == "llm"].iloc[0]
    assert (llm["spent to date (CNY)"], llm["budget (CNY)"], llm["state"]) == ("3,353.42", "3,000.00", "over")
    assert any(plain(s.value).startswith("**Team budget: ok** · spent 3,353.42 of 5,000.00 CNY") for s in at.success)
    # an alert threshold of 60%: 3,353.42 spent is 67.1% of 5,000 (≥ 3,000.00), so the team's budget is at risk
    spent = 30 * Decimal("98.63") + Decimal("394.52")
    assert spent >= Decimal("5000") * 60 / 100
    _save(at, scope="The team (all projects)", period="One month", amount="5000", threshold="60")
    assert [plain(s.value) for s in at.success][0] == "Saved the 2026-11 budget of the team: 5,000.00 CNY, alert at 60%."
    assert _thresholds(ledger) == [("", Decimal(60)), ("llm", Decimal(100))]
    assert _table(at, "period")[["project", "alert at"]].values.tolist() == [["(team)", "60%"], ["llm", "100%"]]
    assert [plain(w.value) for w in at.warning if "Team budget" in w.value] == [
        "**Team budget: at risk** · spent 3,353.42 of 5,000.00 CNY (67.1%); month end 3,353.42 expected; spent to date "
        "has reached its 60% alert threshold"]
    assert _table(at, "state").set_index("project").loc["llm", "alert at"] == "100%"
    # Remove: no budget picked by default, and a confirmation; without either nothing is removed
    remove = at.selectbox(key="budget_remove_pick")
    assert remove.value is None and remove.options == [
        "the team, 2026-11", "project llm, every-month"]  # plain text: a select option is not Markdown
    next(b for b in at.button if b.label == "Remove budget").click().run()
    assert [plain(e.value) for e in at.error] == ["Budget: pick the budget to remove; nothing was removed."]
    at.selectbox(key="budget_remove_pick").set_value(("llm", "monthly"))
    next(b for b in at.button if b.label == "Remove budget").click().run()
    assert [plain(e.value) for e in at.error] == ['Remove: tick "Yes, remove it" to confirm; nothing was removed.']
    assert len(_budgets(ledger)) == 2
    at.selectbox(key="budget_remove_pick").set_value(("llm", "monthly"))
    at.checkbox(key="budget_remove_sure").check()
    next(b for b in at.button if b.label == "Remove budget").click().run()
    assert [plain(s.value) for s in at.success][-1] == "Removed the every-month budget of project llm."
    assert _budgets(ledger) == [("", MONTH, Decimal("5000"), "CNY")]


@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(make_entry("alice", "lead", "alice-pw", iterations=1_000)
                    + make_entry("bob", "viewer", "bob-pw", iterations=1_000))
    return path


def test_a_viewer_sees_budgets_read_only_and_a_demoted_lead_saves_nothing(ledger, users_file, monkeypatch):
    from trainledger.money.outlook.budgets import set_budget

    with_session(ledger, lambda s: (set_budget(s, "4000"), s.commit()))
    monkeypatch.setenv("TRAINLEDGER_AUTH_FILE", str(users_file))
    bob = make_app(MONTH)
    sign_in(bob, "bob", "bob-pw")
    assert any("only leads can change them" in i.value for i in bob.info)
    assert _table(bob, "period")["budget"].tolist() == ["4,000.00"]
    fields = [bob.selectbox(key="budget_scope"), bob.radio(key="budget_period"),
              *(bob.text_input(key=k) for k in ("budget_month", "budget_amount", "budget_currency"))]
    assert all(f.disabled for f in fields)
    assert all(b.disabled for b in bob.button if b.label in ("Save budget", "Remove budget"))
    alice = make_app(MONTH)
    sign_in(alice, "alice", "alice-pw")
    alice.text_input(key="budget_amount").input("1")
    set_role(users_file, "alice", "viewer")
    next(b for b in alice.button if b.label == "Save budget").click().run()  # drawn disabled in this run: discarded
    assert not any("Saved" in x.value for x in alice.success) and _budgets(ledger) == [("", "monthly", Decimal("4000"), "CNY")]


def _links(at) -> list[dict]:
    """The "that day's runs" page links: their query parameters."""
    from urllib.parse import parse_qsl

    return [{"query": dict(parse_qsl(e.proto.query_string))} for e in at.get("page_link") if "that day" in e.proto.label]


def test_the_spike_day_is_flagged_on_overview_and_links_to_its_runs(ledger):
    at = run_page(make_app(MONTH), "overview")
    assert [plain(w.value) for w in at.warning if "above" in w.value] == [
        "**2026-11-20: spend 493.15 CNY**, above 147.95 (median 98.63, MAD 0.00 over the 28 days before)"]
    assert [x["query"] for x in _links(at)] == [{"month": MONTH, "day": "2026-11-20"}]
    runs = run_page(make_app(MONTH, day="2026-11-20"), "runs")
    day = _table(runs, "node-hours that day")
    assert day[["id", "node-hours that day"]].values.tolist() == [["spike", 80.0], ["r-2026-11-20", 20.0]]
    bad = run_page(make_app(MONTH, day="2026-11-31"), "runs")
    assert [plain(e.value) for e in bad.error] == ["day: expected a day as YYYY-MM-DD, got '2026-11-31'"]


def test_a_flat_history_flags_nothing_on_overview(sqlite_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(build(sqlite_url, spike=False))
    at = run_page(make_app(MONTH), "overview")
    assert not [w for w in at.warning if "above" in w.value] and not _links(at)
    assert any(c.value == "No day of 2026-11 stands out." for c in at.caption)
    assert any("30 of 30 whole days judged" in c.value for c in at.caption)
