"""Every money figure is converted or not labelled with another currency (issue 26, item 1): the forecast,
its range and daily path, and the budgets, in a currency other than the offers'.

The ledger of tests/month_helpers (CNY offers, December 2026 to NOW) and one rate, CNY→USD 0.14 from
2026-11-01: every money figure in USD is the CNY figure × 0.14.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from trainledger.errors import LedgerInputError
from trainledger.money.outlook.budgets import budget_status, set_budget
from trainledger.money.outlook.forecast import forecast
from trainledger.money.rates.costs import cents
from trainledger.store.catalog.fx import set_rate

from tests.month_helpers import MONTH, NOW, build_december

RATE = Decimal("0.14")
MONEY = ("spend", "idle_cost")
RANGE = ("to_date", "expected", "p10", "p90")


def _rate(session) -> None:
    set_rate(session, "CNY", "USD", RATE, "2026-11-01")
    session.commit()


def test_the_forecast_in_usd_is_the_cny_forecast_at_the_rate(session):
    build_december(session)
    _rate(session)
    cny = forecast(session, MONTH, now=NOW)
    usd = forecast(session, MONTH, now=NOW, currency="USD")
    assert (cny["currency"], usd["currency"]) == ("CNY", "USD")
    for f in MONEY:
        for k in RANGE:
            assert cents(usd[f][k]) == cents(cny[f][k] * RATE), (f, k)
    assert cny["spend"]["expected"] > cny["spend"]["to_date"] > 0  # the projection is not empty
    for p_cny, p_usd in zip(cny["projects"], usd["projects"]):
        assert {k: cents(v) for k, v in p_usd["cost"].items()} == {k: cents(v * RATE) for k, v in p_cny["cost"].items()}
    assert [cents(d["spend"]) for d in usd["daily"]] == [cents(d["spend"] * RATE) for d in cny["daily"]]
    assert usd["gpu_hours"] == cny["gpu_hours"]  # not money: unchanged


def test_a_budget_in_usd_with_a_rate_and_its_status_in_either_currency(session):
    build_december(session)
    with pytest.raises(LedgerInputError, match="no exchange rate between CNY and USD; add one with `trainledger fx set"):
        set_budget(session, "100", project="llm", currency="USD")
    _rate(session)
    row = set_budget(session, "100", project="llm", currency="usd")
    session.commit()
    assert (row["amount"], row["currency"]) == (Decimal("100"), "USD")
    usd = budget_status(session, MONTH, now=NOW, currency="USD")
    b = usd["budgets"][0]
    assert (usd["currency"], b["currency"], b["amount"], b["fx_rate"]) == ("USD", "USD", Decimal("100"), None)
    cny = budget_status(session, MONTH, now=NOW)
    c = cny["budgets"][0]
    # in CNY: the budget converted at the rate in force (1 ÷ 0.14), beside the amount as set
    assert (cny["currency"], c["currency"], cents(c["amount"]), c["budget_amount"], c["budget_currency"]) == (
        "CNY", "CNY", Decimal("714.29"), Decimal("100"), "USD")
    assert cents(c["cost"]["to_date"] * RATE) == cents(b["cost"]["to_date"]) and c["state"] == b["state"]
    assert cents(c["used_pct"]) == cents(b["used_pct"])


def test_cli_forecast_and_budgets_take_currency(cli, ledger_url):
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        build_december(s)
        want = forecast(s, MONTH, now=NOW)
    engine.dispose()
    assert cli("fx", "set", "CNY", "USD", "0.14", "--from", "2026-11-01").exit_code == 0
    r = cli("forecast", "--now", NOW.isoformat(), "--currency", "USD", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["currency"] == "USD" and d["spend"]["expected"] == str(cents(want["spend"]["expected"] * RATE))
    r = cli("budget", "set", "500", "--currency", "USD", "--json")
    assert r.exit_code == 0, r.output
    r = cli("budget", "check", "--now", NOW.isoformat(), "--currency", "USD")
    assert f"spent {cents(want['spend']['to_date'] * RATE):,} of 500.00 USD" in r.output, r.output
    r = cli("forecast", "--now", NOW.isoformat(), "--currency", "EUR")
    assert r.exit_code == 2 and "no CNY→EUR exchange rate" in r.output and len(r.output.strip().splitlines()) == 1, r.output
