"""Reports in another currency: each charge period converted at its own rate, a missing rate refused.

SQLite and PostgreSQL; months in 2025. The CNY→USD rate changes on 2025-11-16, inside November,
so November has two charge periods and a run across that instant is converted at both rates.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from decimal import Decimal

from sqlmodel import Session, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts import rollup
from trainledger.money.rates import costs
from trainledger.store.models import FxRate, Offer

from tests.helpers import add_fleet, add_run, rounding

D = Decimal
UTC = timezone.utc
OFFERS = """
[[offer]]
name = "cny-rent"
node_type = "rtx4090-8x"
kind = "rent_elastic"
currency = "CNY"
price_per_node_hour = "10"
valid_from = 2025-01-01

[[offer]]
name = "cny-own"
node_type = "rtx4090-8x"
kind = "own"
currency = "CNY"
capex_per_node = "73000"
depreciation_months = 36
power_kw_load = "4"
power_kw_idle = "1"
electricity_price_per_kwh = "0.5"
operations_per_node_month = "100"
valid_from = 2025-01-01
"""
NOV = (datetime(2025, 11, 1, tzinfo=UTC), datetime(2025, 11, 16, tzinfo=UTC), datetime(2025, 12, 1, tzinfo=UTC))


def _ledger(cli, engine, tmp_path) -> None:
    f = tmp_path / "offers.toml"
    f.write_text(OFFERS, encoding="utf-8")
    assert cli("pricing", "import", f).exit_code == 0
    for rate, day in (("0.14", "2025-11-01"), ("0.15", "2025-11-16")):
        assert cli("fx", "set", "CNY", "USD", rate, "--from", day, "--source", "test").exit_code == 0
    with Session(engine) as s:
        add_fleet(s, 2, offer_name="cny-own", valid_from=date(2025, 1, 1))
        add_run(s, "a", datetime(2025, 11, 5, tzinfo=UTC), 10, nodes=2, offer_name="cny-rent", project="p1")
        add_run(s, "b", datetime(2025, 11, 20, tzinfo=UTC), 5, nodes=1, offer_name="cny-rent", project="p2")
        add_run(s, "c", datetime(2025, 11, 15, 12, tzinfo=UTC), 36, nodes=1, offer_name="cny-rent", project="p2")
        add_run(s, "d", datetime(2025, 11, 10, tzinfo=UTC), 48, nodes=1, offer_name="cny-own", project="p1")
        add_run(s, "e", datetime(2025, 11, 15, 12, tzinfo=UTC), 24, nodes=1, offer_name="cny-own", project="p2")
        s.commit()


def test_a_usd_report_equals_the_cny_figures_at_each_periods_rate_to_the_cent(cli, engine, tmp_path):
    _ledger(cli, engine, tmp_path)
    usd = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json", "--currency", "USD").output)
    cny = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json").output)
    assert (usd["summary"]["currency"], cny["summary"]["currency"]) == ("USD", "CNY")
    runs = {r["run_id"]: r for r in usd["runs"]}
    # elastic, by hand: a 2 × 10 h × 10 × 0.14; b 5 h × 10 × 0.15; c 12 h at 0.14 then 24 h at 0.15
    assert (runs["a"]["cost"], runs["b"]["cost"], runs["c"]["cost"]) == ("28.00", "7.50", "52.80")
    assert {r["run_id"]: r["cost"] for r in cny["runs"]}["c"] == "360.00"
    # the owned fleet: its CNY cost in each charge period (2 nodes × the period's hours), × that period's rate
    with Session(engine) as s:
        own = s.exec(select(Offer).where(Offer.name == "cny-own")).one()
        month_h = costs.hours_between(NOV[0], NOV[2])
        busy = ([D(48), D("12")], [D("12")])  # d: Nov 10-12; e: 12 h before Nov 16 00:00, 12 h after
        fleet_usd = sum((costs.fleet_month(own, 2 * costs.hours_between(a, b), nh, month_h).total * rate
                         for (a, b), nh, rate in zip([(NOV[0], NOV[1]), (NOV[1], NOV[2])], busy, (D("0.14"), D("0.15")))), D(0))
    assert usd["summary"]["actual_cost"] == str(costs.cents(D("88.30") + fleet_usd))
    # the identities hold in dollars to the cent: run lines + idle = actual; projects = actual - idle
    s = usd["summary"]
    assert sum(D(r["cost"]) for r in usd["runs"]) + D(s["idle_cost"]) + rounding(usd, "runs") == D(s["actual_cost"])
    assert sum(D(p["cost"]) for p in usd["projects"]) + rounding(usd, "projects") == D(s["actual_cost"]) - D(
        s["idle_cost"])
    # and the report says which rates it used, for which charge periods
    assert s["fx_rates"] == ["CNY→USD 0.14, rate from 2025-11-01, for 2025-11-01 00:00 to 2025-11-16 00:00",
                             "CNY→USD 0.15, rate from 2025-11-16, for 2025-11-16 00:00 to 2025-12-01 00:00"]
    assert "fx_rates" not in cny["summary"]
    with Session(engine) as s:
        assert rollup.check(s) == []


def test_a_missing_rate_or_a_bad_code_is_refused_in_one_line(cli, engine, tmp_path):
    _ledger(cli, engine, tmp_path)
    out = tmp_path / "oct.csv"
    for args, needle in (
        (("report", "monthly", "--month", "2025-10", "--currency", "USD"),
         "--currency: no CNY→USD exchange rate in force on 2025-10-01 (UTC); add one with `trainledger fx set CNY USD RATE --from 2025-10-01`"),
        (("report", "monthly", "--month", "2025-10", "--currency", "USD", "--format", "csv", "-o", out), "no CNY→USD exchange rate"),
        (("report", "monthly", "--month", "2025-11", "--currency", "XYZ"), "--currency: 'XYZ' is not an ISO 4217 currency code"),
        (("report", "monthly", "--month", "2025-11", "--currency", "usd"), "--currency: expected a 3-letter ISO 4217 code"),
        (("cost", "compare", "--month", "2025-10", "--currency", "EUR"), "no CNY→EUR exchange rate"),
        (("runs", "show", "c", "--currency", "EUR"), "no CNY→EUR exchange rate"),
    ):
        res = cli(*args)
        assert res.exit_code == 2 and needle in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)
        assert res.stdout == ""
    assert not out.exists()
    # the Settings currency is the default presentation currency: USD by default now, refused where no rate
    assert cli("settings", "currency", "USD").exit_code == 0
    nov = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json").output)
    assert nov["summary"]["currency"] == "USD" and {r["run_id"]: r["cost"] for r in nov["runs"]}["a"] == "28.00"
    res = cli("report", "monthly", "--month", "2025-10")
    assert res.exit_code == 2 and "no CNY→USD exchange rate in force on 2025-10-01" in res.stderr
    assert json.loads(cli("report", "monthly", "--month", "2025-10", "--format", "json", "--currency", "CNY").output
                      )["summary"]["currency"] == "CNY"


def test_the_reverse_pair_serves_and_two_currencies_need_a_presentation_currency(cli, engine, tmp_path):
    _ledger(cli, engine, tmp_path)
    with Session(engine) as s:
        for r in s.exec(select(FxRate)).all():
            s.delete(r)
        s.commit()
    assert cli("fx", "set", "USD", "CNY", "8", "--from", "2025-11-01").exit_code == 0
    usd = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json", "--currency", "USD").output)
    assert {r["run_id"]: r["cost"] for r in usd["runs"]}["a"] == "25.00"  # 200 CNY ÷ 8
    assert usd["summary"]["fx_rates"][0].startswith("CNY→USD 0.125 (1 / the USD→CNY rate), rate from 2025-11-01")
    usd_offer = tmp_path / "usd.toml"
    usd_offer.write_text(OFFERS.split("[[offer]]")[1].replace("cny-rent", "usd-rent").replace('"CNY"', '"USD"')
                         .replace('"10"', '"2"').join(["[[offer]]", ""]), encoding="utf-8")
    assert cli("pricing", "import", usd_offer).exit_code == 0
    with Session(engine) as s:
        add_run(s, "f", datetime(2025, 11, 21, tzinfo=UTC), 10, nodes=1, offer_name="usd-rent")
        s.commit()
    res = cli("report", "monthly", "--month", "2025-11")
    assert res.exit_code == 2 and "offers in use are priced in CNY, USD" in res.stderr and "--currency" in res.stderr
    cny = json.loads(cli("report", "monthly", "--month", "2025-11", "--format", "json", "--currency", "CNY").output)
    assert {r["run_id"]: r["cost"] for r in cny["runs"]}["f"] == "160.00"  # 10 h × 2 USD × 8
    with Session(engine) as s:
        assert monthly_report(s, "2025-11", currency="CNY").currency == "CNY"


def test_fx_commands_refuse_bad_rates_and_codes_and_write_nothing(cli, ledger_url, tmp_path):
    res = cli("fx", "set", "--from", "2025-11-01", "--db", ledger_url, "CNY", "USD", "--", "-0.1", db=False)
    assert res.exit_code == 2 and res.stderr == "error: RATE: a rate must be a number > 0, got '-0.1'\n"
    for args, needle in (
        (("fx", "set", "CNY", "USD", "0", "--from", "2025-11-01"), "RATE: a rate must be a number > 0, got '0'"),
        (("fx", "set", "CNY", "USD", "abc", "--from", "2025-11-01"), "RATE: expected a number"),
        (("fx", "set", "CNY", "ABC", "1", "--from", "2025-11-01"), "QUOTE: 'ABC' is not an ISO 4217 currency code"),
        (("fx", "set", "cny", "USD", "1", "--from", "2025-11-01"), "BASE: expected a 3-letter ISO 4217 code"),
        (("fx", "set", "USD", "USD", "1", "--from", "2025-11-01"), "QUOTE: a rate converts between two currencies"),
        (("fx", "set", "CNY", "USD", "1", "--from", "2025-13-01"), "--from: expected a date YYYY-MM-DD"),
    ):
        res = cli(*args)
        assert res.exit_code == 2 and needle in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)
    bad = tmp_path / "rates.csv"
    bad.write_text("base,quote,rate,valid_from\nCNY,USD,0.14,2025-11-01\nCNY,USD,-1,2025-12-01\n", encoding="utf-8")
    res = cli("fx", "import", bad)
    assert res.exit_code == 2 and "rates.csv: row 3: rate: a rate must be a number > 0" in res.stderr
    twice = tmp_path / "twice.csv"
    twice.write_text("base,quote,rate,valid_from\nCNY,USD,0.14,2025-11-01\nCNY,USD,0.15,2025-11-01\n", encoding="utf-8")
    res = cli("fx", "import", twice)
    assert res.exit_code == 2 and "CNY→USD from 2025-11-01 is given twice (rows 2 and 3)" in res.stderr
    assert json.loads(cli("fx", "list", "--json").output) == []
    good = tmp_path / "good.csv"
    good.write_text("base,quote,rate,valid_from,source\nCNY,USD,0.1387,2025-11-01,PBOC\nCNY,USD,0.1401,2025-12-01,PBOC\n"
                    "EUR,USD,1.08,2025-11-01,ECB\n", encoding="utf-8")
    res = cli("fx", "import", good, "--json")
    assert res.exit_code == 0 and json.loads(res.output) == {"rates": 3, "added": 3, "replaced": 0}
    rows = json.loads(cli("fx", "list", "--base", "CNY", "--json").output)
    assert [(r["rate"], r["valid_from"], r["valid_to"], r["source"]) for r in rows] == [
        ("0.1387", "2025-11-01", "2025-12-01", "PBOC"), ("0.1401", "2025-12-01", None, "PBOC")]
