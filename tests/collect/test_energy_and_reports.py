"""Measured energy in the monthly own cost, the daily report and the weekly table's measured columns (SQLite + PostgreSQL)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from trainledger.money.account.monthly import monthly_report
from trainledger.money.rates import costs
from trainledger.reports.daily import daily_report
from trainledger.reports.weekly import strategy_comparison
from trainledger.store.models import RunNode
from trainledger.store.settings import set_setting

from tests.helpers import add_fleet, add_run

D = Decimal
UTC = timezone.utc
NOV = datetime(2026, 11, 1, tzinfo=UTC)  # 30 days = 720 h
FIXED = D(120000) / 36 + D("6.67")  # own fixed cost per node-month (seed)
PRICE = D("0.5")  # CNY per kWh, PUE included
TINY = D("1e-18")


def _nodes(session, run_id, hosts, energy=None, util=None, source=None):
    for rank, h in enumerate(hosts):
        session.add(RunNode(run_id=run_id, hostname=h, node_rank=rank, energy_kwh=energy, gpu_util_mean=util, util_source=source))
    session.flush()


# --- monthly: measured energy replaces the nominal power term ------------------------

def test_measured_energy_feeds_the_own_cost_and_keeps_the_identity(session):
    add_fleet(session, 8)
    add_run(session, "r1", NOV + timedelta(days=2), 100, nodes=8)
    _nodes(session, "r1", [f"n{i}" for i in range(8)], energy=320.0)  # 3.2 kW per node measured, not 4.0
    rep = monthly_report(session, "2026-11")
    s = rep.summary
    # 2,560 kWh measured in runs + 4,960 idle node-hours × 0.8 kW nominal = 6,528 kWh × 0.5
    assert s["power_basis"] == "measured" and s["measured_energy_kwh"] == D(2560)
    assert (s["actual_cost"] - (FIXED * 8 + D(6528) * PRICE)).copy_abs() < TINY
    assert costs.cents(s["actual_cost"]) == D("29984.03")  # nominal: 30,304.03 (3,200 kWh in runs)
    (run,) = rep.runs
    assert costs.cents(run.cost + s["idle_cost"]) == costs.cents(s["actual_cost"])  # allocation identity
    assert (run.cost - D(800) * (FIXED / 720 + D(3264) / D(5760))).copy_abs() < TINY  # power shared by node-hours
    assert rep.node_types[0].power_basis == "measured"
    assert s["own_cost"] == s["actual_cost"]  # the own alternative is the same fleet, same energy


def test_partly_measured_month_is_mixed_and_unmeasured_is_nominal(session):
    add_fleet(session, 8)
    add_run(session, "r1", NOV + timedelta(days=2), 100, nodes=8)
    _nodes(session, "r1", [f"n{i}" for i in range(8)], energy=320.0)
    add_run(session, "r2", NOV + timedelta(days=9), 10, nodes=2)  # never collected: nominal 4.0 kW
    add_run(session, "r3", NOV + timedelta(days=12), 10, nodes=2)
    _nodes(session, "r3", ["n0", "n1"], energy=None)  # nodes known, energy missing: nominal too
    s = monthly_report(session, "2026-11").summary
    # 2,560 measured + (20 + 20) node-hours × 4.0 + (5,760 − 840) × 0.8 = 2,560 + 160 + 3,936
    assert s["power_basis"] == "mixed" and s["measured_energy_kwh"] == D(2560)
    assert (s["actual_cost"] - (FIXED * 8 + D(6656) * PRICE)).copy_abs() < TINY
    rep = monthly_report(session, "2026-11")
    assert costs.cents(sum((r.cost for r in rep.runs), D(0)) + rep.summary["idle_cost"]) == costs.cents(rep.summary["actual_cost"])


def test_nominal_month_is_unchanged_and_split_runs_prorate_energy(session):
    add_fleet(session, 8)
    add_run(session, "r1", NOV + timedelta(days=2), 100, nodes=8)
    s = monthly_report(session, "2026-11").summary
    assert s["power_basis"] == "nominal" and s["measured_energy_kwh"] is None
    assert s["actual_cost"] == FIXED * 8 + (D(800) * 4 + D(4960) * D("0.8")) * PRICE
    # a run across the month boundary: 4 of its 8 hours in November → half its 16 kWh
    add_run(session, "x", datetime(2026, 10, 31, 20, tzinfo=UTC), 8, nodes=1)
    _nodes(session, "x", ["n0"], energy=16.0)
    assert monthly_report(session, "2026-11").summary["measured_energy_kwh"] == D(8)
    assert monthly_report(session, "2026-10").summary["measured_energy_kwh"] == D(8)


# --- daily ------------------------------------------------------------------------------

def _day_ledger(session):
    """Asia/Shanghai (UTC+8): 2026-11-03 is 2026-11-02T16:00Z .. 2026-11-03T16:00Z."""
    set_setting(session, "timezone", "Asia/Shanghai")
    add_fleet(session, 8)
    # 6 nodes 02:00-08:00 local: 36 node-hours, hostnames n0-n5
    add_run(session, "r1", datetime(2026, 11, 2, 18, tzinfo=UTC), 6, nodes=6, gpu_util=0.9)
    _nodes(session, "r1", [f"n{i}" for i in range(6)])
    # 2 nodes from 22:00 local for 4 h: 2 h (4 node-hours) in the day, on n0-n1 again
    add_run(session, "r2", datetime(2026, 11, 3, 14, tzinfo=UTC), 4, nodes=2)
    _nodes(session, "r2", ["n0", "n1"])
    # elastic, 2 nodes from 20:00 local the day before for 10 h: 6 of its 10 h in the day
    add_run(session, "e1", datetime(2026, 11, 2, 12, tzinfo=UTC), 10, nodes=2, offer_name="rtx4090-rent", gpu_util=0.5)
    session.commit()


def test_daily_report_exact_figures(session, cli):
    _day_ledger(session)
    d = daily_report(session, "2026-11-03", now=datetime(2026, 11, 10, tzinfo=UTC))
    s = d["summary"]
    assert (d["date"], d["timezone"], d["day_hours"], d["partial"]) == ("2026-11-03", "Asia/Shanghai", D(24), False)
    assert s["available_node_hours"] == D(192)           # 8 nodes × 24 h
    assert s["fleet_used_node_hours"] == D(40)            # 36 + 4
    assert s["node_hours"] == D(52) and s["elastic_node_hours"] == D(12)  # + 12 elastic node-hours, apart
    assert s["idle_node_hours"] == D(152)
    assert s["time_utilization"] == D(40) / D(192)
    assert s["nodes_never_used"] == 2                     # n6, n7 (from the runs' hostnames)
    (fleet,) = d["fleets"]
    assert fleet["nodes_never_used_basis"] == "hostnames" and fleet["power_basis"] == "nominal"
    # GPU-Util weighted by GPU-hours: (0.9 × 288 + 0.5 × 96) ÷ 384; r2 unmeasured
    assert s["gpu_util_mean"] == pytest.approx(float((D("0.9") * 288 + D("0.5") * 96) / 384))
    assert s["gpu_util_sources"] == ["nvml"] and s["gpu_util_coverage"] == D(384) / D(416)
    # own fleet: 192 node-hours of the month's fixed cost + (40 × 4.0 + 152 × 0.8) kWh × 0.5
    fleet_day = FIXED / 720 * 192 + (D(40) * 4 + D(152) * D("0.8")) * PRICE
    elastic_day = D(2) * 10 * D(3600) / 730 * D("0.6")
    assert (s["fixed_cost"] - fleet_day).copy_abs() < TINY
    assert (s["elastic_rent_cost"] - elastic_day).copy_abs() < D("1e-11")  # on the 1e-12 slice grid
    assert costs.cents(s["fixed_cost"]) == D("1031.47") and costs.cents(s["elastic_rent_cost"]) == D("59.18")
    assert costs.cents(s["spend"]) == D("1090.65")
    assert costs.cents(s["idle_cost"]) == D("765.91")    # 152 × (3,340.0033/720 + 0.4)
    runs = {r["run_id"]: r for r in d["runs"]}
    assert costs.cents(runs["r1"]["cost"]) == D("239.00") and costs.cents(runs["r2"]["cost"]) == D("26.56")
    assert costs.cents(runs["r1"]["cost"] + runs["r2"]["cost"] + s["idle_cost"]) == costs.cents(s["fixed_cost"])

    session.commit()  # end the read transaction (SQLite: BEGIN IMMEDIATE holds the write lock)
    js = json.loads(cli("report", "daily", "--date", "2026-11-03", "--json").stdout)
    assert js["summary"]["spend"] == "1090.65" and js["summary"]["time_utilization"] == 0.2083
    text = cli("report", "daily", "--date", "2026-11-03")
    assert text.exit_code == 0 and "GPU-Util sources: nvml" in text.stdout
    bad = cli("report", "daily", "--date", "2026-13-01")
    assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0 and "--date" in bad.stderr


def test_days_of_a_month_add_up_to_the_month(session):
    _day_ledger(session)
    now = datetime(2026, 12, 5, tzinfo=UTC)
    days = [daily_report(session, date(2026, 11, k), now=now)["summary"]["spend"] for k in range(1, 31)]
    month = monthly_report(session, "2026-11", now=now).summary["actual_cost"]
    assert costs.cents(sum(days, D(0))) == costs.cents(month)
    assert (sum(days, D(0)) - month).copy_abs() < D("1e-9")


def test_daily_report_on_a_dst_day_has_25_hours(session):
    set_setting(session, "timezone", "Europe/Berlin")
    add_fleet(session, 8)
    d = daily_report(session, "2026-10-25", now=datetime(2026, 11, 1, tzinfo=UTC))
    assert d["day_hours"] == D(25) and d["summary"]["available_node_hours"] == D(200)
    assert d["summary"]["time_utilization"] == 0 and d["summary"]["nodes_never_used"] == 8
    hours_in_oct = D(31 * 24 + 1)
    assert (d["summary"]["spend"] - (FIXED / hours_in_oct * 200 + D(200) * D("0.8") * PRICE)).copy_abs() < TINY


# --- weekly strategy table: measured columns ---------------------------------------------

def test_weekly_table_has_measured_gpu_util_and_energy(session):
    for rid, strat, energy in (("s-dp", "dp", 1.5), ("s-z2", "zero2", None)):
        run = add_run(session, rid, NOV, 1, nodes=2, gpu_util=0.97)
        run.util_source, run.sweep_id, run.strategy, run.tokens_per_s = "cpu", "sw1", strat, 1000.0
        _nodes(session, rid, ["a", "b"], energy=energy, util=0.8 if energy else None, source="dcgm" if energy else None)
    session.commit()
    rows = {r["strategy"]: r for r in strategy_comparison(session, sweep_id="sw1")["rows"]}
    assert rows["dp"]["measured_gpu_util_mean"] == pytest.approx(0.8) and rows["dp"]["measured_util_source"] == "dcgm"
    assert rows["dp"]["measured_energy_kwh"] == pytest.approx(3.0)
    assert rows["dp"]["gpu_util_mean"] == 0.97 and rows["dp"]["util_source"] == "cpu"  # the trainer's own, kept apart
    assert rows["zero2"]["measured_gpu_util_mean"] is None and rows["zero2"]["measured_energy_kwh"] is None
