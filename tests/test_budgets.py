"""Budgets: set, list, remove; states ok / at risk / over with the crossing day; `budget check` for cron."""

from __future__ import annotations

import json
from datetime import date, timedelta
from decimal import Decimal

import pytest
from sqlmodel import func, select
from trainledger.errors import LedgerInputError
from trainledger.money.outlook.budgets import budget_status, list_budgets, remove_budget, set_budget
from trainledger.money.outlook.forecast import forecast
from trainledger.money.rates.costs import cents
from trainledger.store.models import Budget

from tests.month_helpers import (
    FIXED_PER_NODE_MONTH,
    LLM_TO_DATE,
    LOAD_KWH_PRICE,
    MONTH,
    NOW,
    RENT_PER_NODE_HOUR,
    VISION_TO_DATE,
    build_december,
)

REST_H = Decimal(516)


def _count(session) -> int:
    return session.exec(select(func.count()).select_from(Budget)).one()


def test_set_list_remove(session):
    build_december(session)
    set_budget(session, "60000")  # team, every month
    set_budget(session, "500", project="llm")
    set_budget(session, "300", project="llm", month=MONTH)
    set_budget(session, "350", project="llm", month=MONTH)  # replaces, does not add
    session.commit()
    rows = list_budgets(session)
    assert [(r["project"], r["period"], r["amount"], r["currency"]) for r in rows] == [
        ("", "monthly", Decimal("60000"), "CNY"), ("llm", "monthly", Decimal("500"), "CNY"), ("llm", MONTH, Decimal("350"), "CNY")]
    remove_budget(session, project="llm", month=MONTH)
    session.commit()
    assert _count(session) == 2
    with pytest.raises(LedgerInputError, match="has no 2026-11 budget"):
        remove_budget(session, project="llm", month="2026-11")


@pytest.mark.parametrize("amount, kwargs, message", [
    ("-5", {}, "more than 0"), ("0", {}, "more than 0"), ("abc", {}, "expected an amount"), ("NaN", {}, "finite"),
    ("Infinity", {}, "finite"), ("1e20", {}, "at most"), ("1e-7", {}, "whole cents"), ("10.005", {}, "whole cents"), ("10", {"project": "nope"}, "--project: no project named 'nope'"),
    ("10", {"month": "2026-13"}, "--month"), ("10", {"month": "26-12"}, "--month"),
    ("10", {"currency": "USD"}, "--currency: this ledger's costs are in CNY"),
    ("10", {"threshold": "0"}, "--threshold: expected a percent of the budget from 1 to 100"),
    ("10", {"threshold": "101"}, "--threshold: expected a percent"), ("10", {"threshold": "abc"}, "--threshold"),
])
def test_bad_input_writes_nothing(session, amount, kwargs, message):
    build_december(session)
    with pytest.raises(LedgerInputError, match=message.replace("(", r"\(")):
        set_budget(session, amount, **kwargs)
    session.rollback()
    assert _count(session) == 0


def test_states_and_crossing_days(session):
    """llm spent 54 owned node-hours by NOW (350.42): over a 300 budget since Dec 5 (llm-a's 48 node-hours that day).
    vision's elastic run (49.32) projects to 200.78 at the month's end: at risk under 150."""
    build_december(session)
    set_budget(session, "300", project="llm")
    set_budget(session, "150", project="vision", month=MONTH)
    set_budget(session, "100000")
    set_budget(session, "1", project="vision", month="2026-11")  # another month: not this one's
    session.commit()
    st = budget_status(session, MONTH, now=NOW)
    rows = {r["project"]: r for r in st["budgets"]}
    assert st["worst"] == "over" and set(rows) == {"", "llm", "vision"}
    llm, vision, team = rows["llm"], rows["vision"], rows[""]
    assert llm["state"] == "over" and cents(llm["cost"]["to_date"]) == cents(LLM_TO_DATE) == Decimal("350.42")
    assert llm["crossed_on"] == date(2026, 12, 5)
    assert vision["state"] == "at_risk" and vision["period"] == MONTH and vision["amount"] == 150
    expected = VISION_TO_DATE + 10 * RENT_PER_NODE_HOUR * REST_H / 168
    assert cents(vision["cost"]["expected"]) == cents(expected) == Decimal("200.78")
    crosses = NOW + timedelta(hours=float((150 - VISION_TO_DATE) / (expected - VISION_TO_DATE) * REST_H))
    assert vision["crossed_on"] == crosses.date() == date(2026, 12, 24)
    assert team["state"] == "ok" and team["crossed_on"] is None and team["scope"] == "team"
    assert team["cost"] == forecast(session, MONTH, now=NOW)["spend"]


def test_budget_check_for_cron(cli, ledger_url):
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        build_december(s)
    engine.dispose()
    now = NOW.isoformat()
    assert cli("budget", "set", "100000").exit_code == 0
    r = cli("budget", "check", "--now", now)
    assert r.exit_code == 0 and r.output.startswith("ok      (team)  2026-12 to date (10 of 31 days): spent"), r.output
    r = cli("budget", "set", "300", "--project", "llm", "--month", MONTH, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["amount"] == "300.00"
    assert cli("budget", "set", "--monthly", "150", "--project", "vision").exit_code == 0
    r = cli("budget", "check", "--now", now)
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("OVER    llm  2026-12 to date (10 of 31 days): spent 350.42 of 300.00 CNY (116.8%)")
    assert lines[1].endswith("over since 2026-12-05")
    assert lines[2].startswith("AT RISK vision") and "month end 200.78 expected" in lines[2] and lines[2].endswith("2026-12-24")
    d = json.loads(cli("budget", "check", "--now", now, "--json").output)
    assert [b["state"] for b in d["budgets"]] == ["ok", "over", "at_risk"] and d["worst"] == "over"
    r = cli("budget", "list")
    assert r.exit_code == 0 and "(team)" in r.output and "300.00" in r.output
    # an ended month with no overspend passes
    assert cli("budget", "check", "--month", "2026-11", "--now", now).exit_code == 0
    assert cli("budget", "remove", "--project", "llm", "--month", MONTH).exit_code == 0


@pytest.mark.parametrize("args, message", [
    (("set", "abc"), "AMOUNT: expected an amount"),
    (("set", "--monthly=-5"), "AMOUNT: a budget must be more than 0"),
    (("set", "10", "--project", "nope"), "--project: no project named 'nope'"),
    (("set", "10", "--month", "2026/12"), "--month: expected YYYY-MM"),
    (("set", "10", "--currency", "EUR"), "--currency"),
    (("set", "10", "--monthly", "20"), "AMOUNT: give the amount once"),
    (("set", "--monthly", "20", "--month", MONTH), "--monthly"),
    (("remove", "--project", "llm"), "budget: project llm has no every-month budget"),
    (("check", "--month", "2026-1"), "--month"),
    (("set", "10", "--threshold", "101"), "--threshold: expected a percent of the budget from 1 to 100"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(cli, ledger_url, args, message):
    from sqlmodel import Session
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        build_december(s)
    r = cli("budget", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output
    with Session(engine) as s:
        assert _count(s) == 0
    engine.dispose()


def test_a_threshold_puts_a_budget_at_risk_once_spent_to_date_reaches_it(session, cli, ledger_url):
    """November has ended at NOW: llm's only run there, llm-nov (2 owned nodes × 48 h), cost 96 busy node-hours at
    November's rate (30 days: 720 h), 637.33, and its forecast is that figure. A budget that figure is 90 % of
    (708.15) is ok at the default 100, at risk at 80 (spent ≥ 566.52), ok again at 95 (672.74)."""
    from trainledger.money.account.monthly import monthly_report

    build_december(session)
    spent = 96 * (FIXED_PER_NODE_MONTH / 720 + LOAD_KWH_PRICE)  # by hand from the seed prices
    llm = next(p for p in monthly_report(session, "2026-11", now=NOW).projects if p["project"] == "llm")
    assert cents(spent) == cents(llm["cost"]) == Decimal("637.33")
    amount = cents(spent / Decimal("0.9"))
    assert amount == Decimal("708.15")

    def status(threshold):
        row = set_budget(session, amount, project="llm", month="2026-11", threshold=threshold)
        session.commit()
        b = budget_status(session, "2026-11", now=NOW)["budgets"][0]
        return row["threshold_pct"], b["threshold_pct"], b["state"], b["threshold_reached"], b["crossed_on"], b

    assert status(None)[:5] == (100, 100, "ok", False, None)
    assert session.exec(select(Budget.threshold_pct)).one() is None  # 100 is stored as NULL: no state changed
    assert status("100")[:4] == (100, 100, "ok", False)
    pct, _, state, reached, crossed, b = status("80")
    assert (pct, state, reached, crossed) == (Decimal(80), "at_risk", True, None)
    assert cents(b["cost"]["to_date"]) == cents(spent) and cents(b["cost"]["expected"]) == cents(spent)
    assert cents(b["cost"]["to_date"]) >= cents(amount * Decimal("0.8")) == Decimal("566.52")
    assert status("95")[2:4] == ("ok", False)  # 95 % of 708.15 is 672.74, above the 637.33 spent
    assert [(r["project"], r["threshold_pct"]) for r in list_budgets(session)] == [("llm", Decimal(95))]
    # the CLI: set with --threshold, list and check show it; check exits 1 (at risk) at 80
    now = NOW.isoformat()
    session.close()
    r = cli("budget", "set", str(amount), "--project", "llm", "--month", "2026-11", "--threshold", "80")
    assert r.exit_code == 0, r.output
    r = cli("budget", "list")
    assert r.exit_code == 0 and "threshold_pct" in r.output and "80.0%" in r.output, r.output
    r = cli("budget", "check", "--month", "2026-11", "--now", now)
    assert r.exit_code == 1, r.output
    assert r.output.strip() == ("AT RISK llm  2026-11 ended: spent 637.33 of 708.15 CNY (90.0%, threshold 80%); month end "
                                "637.33 expected (p10 637.33, p90 637.33); spent to date has reached its 80% threshold")
    assert json.loads(cli("budget", "check", "--month", "2026-11", "--now", now, "--json").output)["budgets"][0][
        "threshold_pct"] == 80.0
