"""Monthly accounting on a real ledger (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainledger.money.account.compare import compare_month
from trainledger.money.account.monthly import monthly_report
from trainledger.money.facts.rollup import sweep_peak as peak_concurrent_nodes
from trainledger.money.rates import costs
from trainledger.money.rates.months import month_bounds
from trainledger.reports.export import presented_report
from trainledger.reports.present import jsonable
from trainledger.store.models import RunStatus
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run, rounding

D = Decimal
UTC = timezone.utc
NOV = datetime(2026, 11, 1, tzinfo=UTC)  # 30 days = 720 h
FIXED = D(120000) / 36 + D("6.67")        # own fixed cost per node-month


def test_owned_fleet_month_allocates_runs_and_idle(session):
    add_fleet(session, 8)
    add_run(session, "r1", NOV + timedelta(days=2), 100, nodes=8, tokens=10**9, gpu_util=0.9)
    add_run(session, "r2", NOV + timedelta(days=9), 10, nodes=2, status=RunStatus.failed, project="p2")
    rep = monthly_report(session, "2026-11")
    s = rep.summary
    # fleet: 8 × 3,340.00333 + (820 busy × 4.0 kW + 4,940 idle × 0.8 kW) × 0.5
    assert s["actual_cost"] == FIXED * 8 + (D(820) * 4 + D(4940) * D("0.8")) * D("0.5")
    assert costs.cents(s["actual_cost"]) == D("30336.03")
    runs = {r.run_id: r for r in rep.runs}
    assert costs.cents(runs["r1"].cost) == D("5311.11")    # 800 node-h × (3,340.0033/720 + 2.0)
    assert costs.cents(runs["r2"].cost) == D("132.78")     # 20 node-h at the same rate
    assert costs.cents(s["idle_cost"]) == D("24892.13")    # 4,940 idle node-h × (3,340.0033/720 + 0.4)
    assert costs.cents(runs["r1"].cost + runs["r2"].cost + s["idle_cost"]) == costs.cents(s["actual_cost"])
    assert costs.cents(s["failed_run_cost"]) == D("132.78")
    assert costs.cents(s["lost_work_cost"]) == D("132.78")  # r2 never checkpointed: all of it lost
    # waste = badput + idle: no run recorded phases (no goodput), so all 30,336.03 of the spend is waste
    from trainledger.money.goodput.goodput_ledger import report_account
    from trainledger.money.goodput.waste import waste_cost

    assert costs.cents(waste_cost(report_account(session, rep).months[0])) == D("30336.03")
    assert s["time_utilization"] == D(820) / D(5760)
    # if rented elastic: 800 and 20 node-hours at 3600/730
    assert costs.cents(s["elastic_cost"]) == D("4043.84")  # 820 × 3600/730
    assert s["chosen_option"] == "own" and s["alternative_option"] == "rent_elastic"
    assert s["roi"] == (s["elastic_cost"] - s["actual_cost"]) / s["actual_cost"]
    assert s["tokens"] == 10**9
    assert s["tokens_per_1000"] == D(10**9) / s["actual_cost"] * 1000
    # GPU-Util is weighted by GPU-hours over runs that measured it; coverage says how many did
    assert s["gpu_util_mean"] == pytest.approx(0.9)
    assert s["gpu_util_coverage"] == D(6400) / D(6560)
    assert s["mfu_mean"] is None


def test_elastic_runs_are_billed_per_run_and_reserved_is_paid_whole(session):
    add_run(session, "e1", NOV + timedelta(hours=5), 2.5, nodes=2, offer_name="rtx4090-rent")
    rep = monthly_report(session, "2026-11")
    assert rep.summary["actual_cost"] == D(3600) / 730 * (2 * 3)  # hourly rate × 2 nodes × 3 started hours billed
    assert costs.cents(rep.summary["actual_cost"]) == D("29.59")
    assert rep.summary["idle_cost"] == 0
    cmp = compare_month(session, "2026-11")
    row = cmp["node_types"][0]
    assert row["own_nodes"] == 2 and row["own_nodes_from"] == "peak"
    assert row["reserved_cost"] == D(2) * D(3240)           # 2 nodes reserved for the month
    assert row["cheapest"] == "rent_elastic"
    assert costs.cents(row["own_cost"]) == D("7264.01")     # 2 × 3,340.0033 + (5 × 4.0 + 1,435 × 0.8) × 0.5 = 6,680.01 + 584


def test_run_crossing_a_month_boundary_is_split_and_keeps_its_total(session):
    start = datetime(2026, 10, 31, 20, 0, tzinfo=UTC)
    add_run(session, "x", start, 7.5, nodes=1, offer_name="rtx4090-rent", tokens=7_500_001)
    oct_, nov = monthly_report(session, "2026-10"), monthly_report(session, "2026-11")
    a, b = oct_.runs[0], nov.runs[0]
    assert (a.node_hours, b.node_hours) == (D(4), D("3.5"))
    assert a.split and b.split
    total = D(3600) / 730 * 8  # 7.5 h billed as 8 started hours
    assert abs(a.cost + b.cost - total) < D("1e-18")  # billed node-hours split on a 1e-12 grid, then priced
    assert costs.cents(a.cost) == D("21.04")  # 4/7.5 of the run's bill
    assert a.tokens + b.tokens == 7_500_001


def test_months_follow_the_display_time_zone(session):
    add_run(session, "tz", datetime(2026, 10, 31, 17, 0, tzinfo=UTC), 2, nodes=1)  # 01:00-03:00 on Nov 1 in Shanghai
    assert len(monthly_report(session, "2026-10").runs) == 1
    set_setting(session, "timezone", "Asia/Shanghai")
    assert len(monthly_report(session, "2026-10").runs) == 0
    rep = monthly_report(session, "2026-11")
    assert rep.runs[0].node_hours == D(2) and rep.timezone == "Asia/Shanghai"
    assert month_bounds("2026-11", rep and __import__("zoneinfo").ZoneInfo("Asia/Shanghai"))[0] == datetime(2026, 10, 31, 16, tzinfo=UTC)


def test_fleet_valid_for_part_of_the_month_costs_its_share(session):
    add_fleet(session, 4, valid_from=date(2026, 11, 16))  # 15 of 30 days
    rep = monthly_report(session, "2026-11")
    assert rep.node_types[0].capacity_node_hours == D(4 * 360)
    assert rep.summary["actual_cost"] == FIXED * 2 + D(4 * 360) * D("0.8") * D("0.5")
    assert rep.summary["idle_cost"] == rep.summary["actual_cost"]


def test_peak_concurrent_nodes_sweep():
    t = NOV
    h = timedelta(hours=1)
    assert peak_concurrent_nodes([(t, t + 2 * h, 2), (t + h, t + 3 * h, 3), (t + 3 * h, t + 4 * h, 4)]) == 5
    assert peak_concurrent_nodes([(t, t + h, 2), (t + h, t + 2 * h, 2)]) == 2  # back to back, not overlapping


run_strategy = st.tuples(
    st.integers(0, 90 * 24 * 60),  # start, minutes after 2026-10-01
    st.integers(0, 40 * 24 * 60),  # duration in minutes
    st.integers(1, 8),
    st.sampled_from(["rtx4090-own", "rtx4090-rent", "rtx4090-reserved"]),
    st.sampled_from(list(RunStatus)[2:]),
)


ALL_ENDED = datetime(2027, 3, 1, tzinfo=UTC)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=st.lists(run_strategy, min_size=1, max_size=12), fleet_nodes=st.integers(1, 16),
       tz=st.sampled_from(["UTC", "Asia/Shanghai", "America/Los_Angeles"]))
def test_identities_hold_every_month(session, runs, fleet_nodes, tz):
    """Every month: Σ allocated + idle = fleet cost; every run's slices add up to its total."""
    try:
        set_setting(session, "timezone", tz)
        add_fleet(session, fleet_nodes, name=f"f-{uuid.uuid4().hex[:6]}")
        base = datetime(2026, 10, 1, tzinfo=UTC)
        ids = []
        for k, (start, minutes, nodes, offer_name, status) in enumerate(runs):
            rid = f"h{k}-{uuid.uuid4().hex[:8]}"
            ids.append(rid)
            add_run(session, rid, base + timedelta(minutes=start), minutes / 60, nodes=nodes,
                    offer_name=offer_name, status=status, tokens=nodes * minutes * 1000)
        per_run: dict[str, list] = {rid: [] for rid in ids}
        for month in ["2026-09", "2026-10", "2026-11", "2026-12", "2027-01", "2027-02"]:
            rep = monthly_report(session, month, now=ALL_ENDED)  # whole months (tests/test_month_to_date.py: to date)
            s = rep.summary
            fixed_runs = sum((r.cost for r in rep.runs if r.offer_kind != "rent_elastic"), D(0))
            elastic_runs = sum((r.cost for r in rep.runs if r.offer_kind == "rent_elastic"), D(0))
            assert abs(fixed_runs + s["idle_cost"] + elastic_runs - s["actual_cost"]) < D("1e-18")
            # the export: each line its exact cost half-up on its own, and a rounding line where the cents need one,
            # so its lines add up to its totals, which are the CLI's (cost compare --month)
            p = presented_report(rep)
            assert [D(r["cost"]) for r in p["runs"]] == [costs.cents(r.cost) for r in rep.runs]
            assert sum(D(r["cost"]) for r in p["runs"]) + D(p["summary"]["idle_cost"]) + rounding(p, "runs") == D(p["summary"]["actual_cost"])
            assert sum((D(x["cost"]) for x in p["projects"]), D(0)) + D(p["summary"]["idle_cost"]) + rounding(p, "projects") == D(p["summary"]["actual_cost"])
            cmp = jsonable(compare_month(session, month, now=ALL_ENDED))
            assert cmp["total"]["actual_cost"] == p["summary"]["actual_cost"]
            assert cmp["total"]["elastic_cost"] == p["summary"]["elastic_cost"]
            if s["own_cost"] is not None:
                own_idle = sum((n.own_idle_cost for n in rep.node_types), D(0))
                assert abs(sum((r.cost_own for r in rep.runs), D(0)) + own_idle - s["own_cost"]) < D("1e-18")
            for r in rep.runs:
                per_run[r.run_id].append(r)
        for k, (start, minutes, nodes, offer_name, status) in enumerate(runs):
            slices = per_run[ids[k]]
            hours = D(minutes) / 60
            assert abs(sum((x.node_hours for x in slices), D(0)) - nodes * hours) < D("1e-20")
            assert sum(x.tokens for x in slices) == nodes * minutes * 1000
            elastic_total = costs.elastic_run_cost(_rent(session), nodes, hours)
            assert abs(sum((x.cost_elastic for x in slices), D(0)) - elastic_total) < D("1e-18")
    finally:
        session.rollback()


def _rent(session):
    from tests.helpers import offer

    return offer(session, "rtx4090-rent")
