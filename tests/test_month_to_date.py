"""A month that has not ended is reported to date: fleets, idle, capacity and time utilization
prorated to now (to the microsecond), labelled, identities to the cent; ended months unchanged."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates.costs import cents
from trainledger.money.rates.months import month_period
from trainledger.reports.daily import daily_report
from trainledger.reports.export import presented_report, render
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run, rounding
from tests.month_helpers import (
    ELAPSED_H,
    FIXED_PER_NODE_MONTH,
    IDLE_TO_DATE,
    LLM_TO_DATE,
    MONTH,
    MONTH_H,
    NOW,
    SPEND_TO_DATE,
    VISION_TO_DATE,
    build_december,
)

UTC = timezone.utc


def test_current_month_is_prorated_to_now(session):
    build_december(session)
    rep = monthly_report(session, MONTH, now=NOW)
    s = rep.summary
    assert rep.is_partial and s["is_partial"] is True
    assert s["period"] == "to date (10 of 31 days)"
    assert s["period_end"] == NOW and s["elapsed_hours"] == ELAPSED_H and s["month_hours"] == MONTH_H
    assert (s["days_elapsed"], s["days_in_month"]) == (10, 31)
    assert s["capacity_node_hours"] == 2 * ELAPSED_H  # 456 node-hours held so far, not 1,488
    assert s["node_hours"] == 48 + 6 + 10
    # time utilization: the 48 + 6 node-hours drawn from the fleet ÷ the 456 it held; vision-a's 10 elastic
    # node-hours are apart, in no utilization
    assert (s["fleet_used_node_hours"], s["elastic_node_hours"]) == (54, 10)
    assert s["time_utilization"] == Decimal(54) / 456
    assert cents(s["actual_cost"]) == cents(SPEND_TO_DATE)
    assert cents(s["idle_cost"]) == cents(IDLE_TO_DATE)
    by_project = {p["project"]: p["cost"] for p in rep.projects}
    assert cents(by_project["llm"]) == cents(LLM_TO_DATE) and cents(by_project["vision"]) == cents(VISION_TO_DATE)
    # runs + idle = fleet cost to date, and the export's lines add up to the summary, to the cent
    assert abs(sum(by_project.values()) + s["idle_cost"] - s["actual_cost"]) < Decimal("1e-18")
    p = presented_report(rep)
    assert sum(Decimal(r["cost"]) for r in p["runs"]) + Decimal(p["summary"]["idle_cost"]) + rounding(p, "runs") == Decimal(p["summary"]["actual_cost"])
    assert p["summary"]["period"] == "to date (10 of 31 days)" and p["summary"]["elapsed_hours"] == 228.0
    # the own alternative (the same fleet) and reserved rent (sized as owning) are prorated the same way
    own_alt = 64 * (FIXED_PER_NODE_MONTH / MONTH_H + 2) + (456 - 64) * (FIXED_PER_NODE_MONTH / MONTH_H + Decimal("0.4"))
    assert cents(s["own_cost"]) == cents(own_alt)  # all 64 node-hours on the owned fleet
    assert cents(s["reserved_cost"]) == cents(Decimal(3240) * 2 * ELAPSED_H / MONTH_H)


def test_fixed_costs_run_to_the_microsecond(session):
    add_fleet(session, nodes=3)
    session.commit()
    for now, hours in ((datetime(2026, 12, 1, tzinfo=UTC), Decimal(0)),
                       (datetime(2026, 12, 1, 0, 0, 0, 1, tzinfo=UTC), Decimal(1) / 3_600_000_000),
                       (datetime(2026, 12, 17, 13, 30, tzinfo=UTC), Decimal("397.5"))):
        s = monthly_report(session, MONTH, now=now).summary
        assert s["elapsed_hours"] == hours and s["capacity_node_hours"] == 3 * hours
        # a fleet with no runs: nodes × hours × (fixed ÷ hours in the month + idle power)
        want = 3 * hours * (FIXED_PER_NODE_MONTH / MONTH_H + Decimal("0.4"))
        assert abs(s["actual_cost"] - want) < Decimal("1e-20") and abs(s["idle_cost"] - want) < Decimal("1e-20")
    assert monthly_report(session, MONTH, now=datetime(2026, 12, 1, tzinfo=UTC)).summary["period"] == "to date (0 of 31 days)"
    assert monthly_report(session, MONTH, now=datetime(2026, 12, 1, 0, 0, 1, tzinfo=UTC)).summary["period"] == "to date (1 of 31 days)"
    assert monthly_report(session, MONTH, now=datetime(2026, 12, 2, tzinfo=UTC)).summary["period"] == "to date (1 of 31 days)"


def test_ended_month_is_unchanged(session):
    """An ended month's report and export do not depend on when they are made, and carry no to-date keys."""
    build_december(session)
    nov_end = datetime(2026, 12, 1, tzinfo=UTC)
    a = monthly_report(session, "2026-11", now=nov_end)
    b = monthly_report(session, "2026-11", now=NOW)
    c = monthly_report(session, "2026-11", now=nov_end + timedelta(days=400))
    assert not a.is_partial and a.summary == b.summary == c.summary
    assert not {"period", "is_partial", "period_end", "elapsed_hours"} & set(a.summary)
    assert a.summary["capacity_node_hours"] == 2 * 720  # the whole of November
    for fmt in ("csv", "json", "xlsx"):
        assert render(presented_report(a), fmt) == render(presented_report(c), fmt)
    # a month that ends at now exactly has ended
    assert not monthly_report(session, "2026-11", now=nov_end).is_partial


def test_to_date_follows_the_display_time_zone(session):
    """In Asia/Shanghai, December starts at 2026-11-30 16:00 UTC: at NOW 236 hours have elapsed."""
    add_fleet(session, nodes=1)
    set_setting(session, "timezone", "Asia/Shanghai")
    session.commit()
    s = monthly_report(session, MONTH, now=NOW).summary
    assert s["elapsed_hours"] == 236 and s["period"] == "to date (10 of 31 days)"
    assert s["period_start"] == datetime(2026, 11, 30, 16, tzinfo=UTC)
    p = month_period(MONTH, ZoneInfo("Asia/Shanghai"), datetime(2026, 12, 10, 16, 0, 1, tzinfo=UTC))
    assert p.label == "to date (11 of 31 days)"


def test_fleet_sized_by_peak_is_prorated_too(session):
    """Runs on an own offer with no fleet configured: capacity = peak nodes × hours elapsed."""
    add_run(session, "p1", datetime(2026, 12, 2, tzinfo=UTC), 5, nodes=4)
    session.commit()
    s = monthly_report(session, MONTH, now=NOW).summary
    assert s["capacity_node_hours"] == 4 * ELAPSED_H
    assert s["time_utilization"] == Decimal(20) / (4 * ELAPSED_H)


def test_days_of_the_month_add_up_to_the_month_to_date(session):
    """The daily report (a partial day too) and the monthly report agree to the cent."""
    build_december(session)
    days = [daily_report(session, date(2026, 12, d), now=NOW) for d in range(1, 11)]
    assert days[-1]["partial"] and not days[0]["partial"]
    s = monthly_report(session, MONTH, now=NOW).summary
    assert cents(sum(d["summary"]["spend"] for d in days)) == cents(s["actual_cost"])
    assert cents(sum(d["summary"]["idle_cost"] for d in days)) == cents(s["idle_cost"])
    assert sum(d["summary"]["available_node_hours"] for d in days) == s["capacity_node_hours"]


def test_cli_says_to_date(cli, ledger_url):
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        build_december(s)
    engine.dispose()
    r = cli("report", "monthly", "--month", MONTH, "--format", "json", "--now", NOW.isoformat())
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)["summary"]
    assert summary["is_partial"] is True and summary["period_end"] == "2026-12-10T12:00:00+00:00"
    assert summary["elapsed_hours"] == 228.0 and summary["period"] == "to date (10 of 31 days)"
    assert summary["actual_cost"] == str(cents(SPEND_TO_DATE))
    r = cli("report", "monthly", "--month", MONTH, "--now", NOW.isoformat())
    assert "period,to date (10 of 31 days)\nis_partial,true\n" in r.output
    r = cli("cost", "compare", "--month", MONTH, "--now", NOW.isoformat())
    assert r.exit_code == 0 and r.output.startswith("2026-12 to date (10 of 31 days) (UTC, CNY)")
    r = cli("cost", "compare", "--month", MONTH, "--now", NOW.isoformat(), "--json")
    assert json.loads(r.output)["elapsed_hours"] == 228.0
    r = cli("report", "monthly", "--month", MONTH, "--now", "yesterday-ish")
    assert r.exit_code == 2 and "--now: expected an ISO 8601 time" in r.output and "Traceback" not in r.output


def test_demo_on_day_3(tmp_path):
    """The issue's case: the demo ledger on 2026-12-03 charges the owned fleet for 3 days' worth, not 31."""
    from sqlmodel import select
    from trainledger.demo import generate_demo
    from trainledger.money.rates import costs
    from trainledger.store.db import make_engine, session_scope
    from trainledger.store.models import Run

    now = datetime(2026, 12, 3, 7, 7, 30, tzinfo=UTC)
    engine = make_engine(f"sqlite:///{tmp_path / 'demo.db'}")
    with session_scope(engine) as s:
        generate_demo(s, now=now)
    with session_scope(engine) as s:
        rep = monthly_report(s, MONTH, now=now)
        s_ = rep.summary
        assert s_["period"] == "to date (3 of 31 days)"
        assert s_["capacity_node_hours"] == 8 * Decimal("55.125")  # not 8 × 744 = 5,952
        # the runs' node-hours within the 55.125 elapsed hours, over the fleet's capacity for those hours only
        start = datetime(2026, 12, 1, tzinfo=UTC)
        used = sum((r.nodes * costs.hours_between(max(r.started_at, start), min(r.ended_at, now))
                    for r in s.exec(select(Run)).all() if r.ended_at > start), Decimal(0))
        assert abs(s_["node_hours"] - used) < Decimal("1e-9")  # Decimal sums in another order
        assert abs(s_["time_utilization"] - used / s_["capacity_node_hours"]) < Decimal("1e-9")
        assert s_["time_utilization"] > Decimal("0.5")  # not 441 ÷ 5,952 node-hours of the whole month
        assert (s_["idle_cost"] > 0) == (used < s_["capacity_node_hours"])
        # the own fleet's 3 days cost about 8 × 55.125 h × (4,800 ÷ 730) (full load); renting them ~25% less
        assert Decimal("2700") < s_["actual_cost"] < Decimal("2900")
        assert Decimal("-0.26") < s_["roi"] < Decimal("-0.20")
        p = presented_report(rep)
        assert sum(Decimal(r["cost"]) for r in p["runs"]) + Decimal(p["summary"]["idle_cost"]) + rounding(p, "runs") == Decimal(p["summary"]["actual_cost"])
    engine.dispose()


@pytest.mark.parametrize("month", ["2027-01"])
def test_month_not_begun_is_empty_to_date(session, month):
    add_fleet(session, nodes=2)
    session.commit()
    s = monthly_report(session, month, now=NOW).summary
    assert s["is_partial"] and s["elapsed_hours"] == 0 and s["actual_cost"] == 0 and s["period"] == "to date (0 of 31 days)"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(st.tuples(st.integers(-3 * 24 * 60, 31 * 24 * 60), st.integers(1, 6 * 24 * 60), st.integers(1, 8),
                               st.sampled_from(["rtx4090-own", "rtx4090-rent", "rtx4090-reserved"])), min_size=1, max_size=8),
       now_minutes=st.integers(1, 31 * 24 * 60 - 1), fleet_nodes=st.integers(1, 8))
def test_identities_hold_to_date(session, runs, now_minutes, fleet_nodes):
    """Whatever the runs and the instant: runs + idle = spend to date (exact), the export adds up to the cent,
    and the fleet's capacity is its nodes × the hours elapsed. Runs end by now, as on a real ledger."""
    import uuid

    from sqlmodel import delete
    from trainledger.store.models import Budget, Fleet, Run

    start = datetime(2026, 12, 1, tzinfo=UTC)
    now = start + timedelta(minutes=now_minutes)
    try:
        add_fleet(session, fleet_nodes, name=f"f-{uuid.uuid4().hex[:6]}")
        for k, (offset, minutes, nodes, offer_name) in enumerate(runs):
            t0 = start + timedelta(minutes=offset)
            if t0 >= now:
                continue
            hours = min(minutes / 60, (now - t0).total_seconds() / 3600)
            add_run(session, f"r{k}-{uuid.uuid4().hex[:6]}", t0, hours, nodes=nodes, offer_name=offer_name)
        session.commit()
        rep = monthly_report(session, MONTH, now=now)
        s = rep.summary
        assert s["is_partial"] and s["period_end"] == now
        assert s["elapsed_hours"] == Decimal(now_minutes) / 60
        if not any(r.offer_kind == "rent_reserved" for r in rep.runs):  # reserved runs imply a reserved fleet (peak)
            assert sum(n.capacity_node_hours for n in rep.node_types) == fleet_nodes * s["elapsed_hours"]
        assert abs(sum((r.cost for r in rep.runs), Decimal(0)) + s["idle_cost"] - s["actual_cost"]) < Decimal("1e-18")
        p = presented_report(rep)
        assert sum(Decimal(r["cost"]) for r in p["runs"]) + Decimal(p["summary"]["idle_cost"]) + rounding(p, "runs") == Decimal(p["summary"]["actual_cost"])
        assert sum((Decimal(x["cost"]) for x in p["projects"]), Decimal(0)) + Decimal(p["summary"]["idle_cost"]) + rounding(p, "projects") == \
            Decimal(p["summary"]["actual_cost"])
    finally:
        session.rollback()
        for model in (Run, Fleet, Budget):
            session.exec(delete(model))
        session.commit()
