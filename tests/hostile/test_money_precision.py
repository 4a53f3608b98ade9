"""Money at extreme totals never passes through a float, and SQLite and PostgreSQL agree to the last digit.

The float that leaked: the measured energy of a run, summed in SQL (``SUM(run_node.energy_kwh)``
over a float column), fed an owned fleet's power cost. Such a sum is rounded to a double (and
in the order each backend happens to add), so at totals near 1e21 the monthly cost differed
between the backends and from the exact figure. Now each node's stored figure is taken at its
shortest exact decimal and summed as a Decimal (``trainledger.money.facts.rollup.exact_kwh``).

Data: an owned fleet of 4 nodes held all of November 2026 (2,880 node-hours), one run of
4 nodes × 10 h whose nodes measured 7,654,321,098,765.4 + 3 × 0.15 kWh (a float sum gives
…765.852 or …765.851, the exact sum is …765.85) and an electricity price of
98,765,432.123456 per kWh, so the month costs about 7.6e20.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal

from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.reports.daily import daily_report
from trainledger.store.catalog.prices import versions
from trainledger.store.db import make_engine
from trainledger.store.models import RunNode

from tests.helpers import add_fleet, add_run, offer

ENERGY_KWH = [7654321098765.4, 0.15, 0.15, 0.15]
PRICE = Decimal("98765432.123456")
EXACT_KWH = sum((Decimal(repr(x)) for x in ENERGY_KWH), Decimal(0))


def build(url: str) -> None:
    engine = make_engine(url)
    with Session(engine) as s:
        own = offer(s, "rtx4090-own")
        own.electricity_price_per_kwh = PRICE  # the list price, and the only price version (the price always was)
        for version in versions(s, own.id):
            version.electricity_price_per_kwh = PRICE
        s.add(own)
        add_fleet(s, nodes=4, valid_from=date(2026, 1, 1))
        add_run(s, "big-energy", datetime(2026, 11, 3, tzinfo=timezone.utc), 10, nodes=4, offer_name="rtx4090-own")
        for i, kwh in enumerate(ENERGY_KWH):
            s.add(RunNode(run_id="big-energy", hostname=f"node{i}", node_rank=i, energy_kwh=kwh))
        s.commit()
    engine.dispose()


def figures(url: str) -> dict:
    engine = make_engine(url)
    with Session(engine) as s:
        rep = monthly_report(s, "2026-11", lines=True)
        day = daily_report(s, "2026-11-03")
        own = offer(s, "rtx4090-own")
    engine.dispose()
    return {"summary": rep.summary, "runs": [(r.run_id, r.cost) for r in rep.runs],
            "day": day["summary"], "offer": own}


def test_the_float_sum_was_not_exact():
    """The premise: adding these figures as doubles does not give the exact decimal sum."""
    forward = 0.0
    for x in ENERGY_KWH:
        forward += x
    assert Decimal(repr(forward)) != EXACT_KWH == Decimal("7654321098765.85")


def test_measured_energy_and_the_fleet_cost_are_exact(ledger_url):
    build(ledger_url)
    f = figures(ledger_url)
    s = f["summary"]
    assert s["measured_energy_kwh"] == EXACT_KWH
    own = f["offer"]
    capacity, busy, hours = Decimal(4 * 720), Decimal(40), Decimal(720)
    kwh = costs.fleet_energy_kwh(EXACT_KWH, Decimal(0), capacity - busy, own.power_kw_load, own.power_kw_idle)
    expected = costs.fleet_month(own, capacity, [busy], hours, energy_kwh=kwh)
    assert s["actual_cost"] == expected.total
    assert Decimal("1e20") < s["actual_cost"] < Decimal("1e21")
    assert dict(f["runs"])["big-energy"] == expected.allocated[0]
    assert s["idle_cost"] == expected.idle
    assert expected.allocated[0] + expected.idle == expected.total


def test_sqlite_and_postgresql_agree_to_the_last_digit(sqlite_url, new_pg_url):
    build(sqlite_url)
    build(new_pg_url)
    a, b = figures(sqlite_url), figures(new_pg_url)
    for key in ("actual_cost", "idle_cost", "own_cost", "elastic_cost", "measured_energy_kwh", "lost_work_cost"):
        assert a["summary"][key] == b["summary"][key], key
    assert a["runs"] == b["runs"]
    assert a["day"] == b["day"]
