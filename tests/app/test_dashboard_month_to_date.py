"""The dashboard on day 3 of a month (AppTest): every page says "to date (3 of 31 days)", prorates the
fleet, shows the forecast and the budgets, and seeds Rent vs own from the last full month.

The clock is ``$TRAINLEDGER_NOW`` (the reports' clock, as the CLI's ``--now``): the demo ledger is
written at that instant and the app reads it (app/queries/data.py ``now()``).
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import Session
from trainledger.money.account.monthly import monthly_report
from trainledger.money.outlook.budgets import budget_status, set_budget
from trainledger.money.outlook.forecast import forecast
from trainledger.money.rates import costs
from trainledger.reports.export import presented_report, render
from trainledger.reports.present import fmt_cell, present
from trainledger.store.db import make_engine, session_scope

from tests.app.helpers import make_app, metrics, plain, run_page

DAY3 = datetime(2026, 12, 3, 7, 7, 30, tzinfo=timezone.utc)
MONTH = "2026-12"
LABEL = "to date (3 of 31 days)"


def build_day3(url: str) -> str:
    """The demo written on 2026-12-03 07:07:30 UTC, with budgets: the team 30,000 a month (at risk),
    demo-pretrain 2,000 in December (over), demo-finetune 5,000 a month (ok)."""
    from trainledger.demo import generate_demo

    engine = make_engine(url)
    with session_scope(engine) as s:
        generate_demo(s, now=DAY3)
    with session_scope(engine) as s:
        set_budget(s, "30000")
        set_budget(s, "2000", project="demo-pretrain", month=MONTH)
        set_budget(s, "5000", project="demo-finetune")
    engine.dispose()
    return url


@pytest.fixture(scope="module")
def day3_url(tmp_path_factory) -> str:
    return build_day3(f"sqlite:///{tmp_path_factory.mktemp('day3') / 'ledger.db'}")


@pytest.fixture
def day3(day3_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", DAY3.isoformat())
    app_env(day3_url)
    return day3_url


def _figures(url: str, month: str = MONTH):
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            rep = monthly_report(s, month, now=DAY3)
            fc = forecast(s, month, now=DAY3)
            return rep, fc, budget_status(s, month, now=DAY3, fc=fc)
    finally:
        engine.dispose()


def test_overview_on_day_3(day3):
    rep, fc, st = _figures(day3)
    s = rep.summary
    at = run_page(make_app(MONTH), "overview")
    assert any(f"{MONTH} {LABEL}" in c.value for c in at.caption)
    assert any(LABEL in i.value and "has not ended" in i.value for i in at.info)
    shown = metrics(at)
    spent = fmt_cell("actual_cost", s["actual_cost"])
    assert shown["Spend, to date (CNY)"] == spent
    assert Decimal(2000) < s["actual_cost"] < Decimal(3000)  # 3 days of the fleet, not the month's ~30,000
    assert shown["Idle cost, to date (CNY)"] == fmt_cell("idle_cost", presented_report(rep)["summary"]["idle_cost"])
    # the elapsed node-hours used, not the whole month's capacity (which would read ~7%)
    assert s["capacity_node_hours"] == 8 * Decimal("55.125") and s["time_utilization"] > Decimal("0.5")
    assert shown["Time utilization, to date"] == f"{float(fmt_cell('time_utilization', s['time_utilization'])) * 100:.2f}%"
    assert shown["GPU-hours, to date"] == fmt_cell("gpu_hours", s["gpu_hours"])
    assert "Spend (CNY)" not in shown
    assert shown["Spend at month end (CNY)"] == fmt_cell("cost", fc["spend"]["expected"])
    assert shown["GPU-hours at month end"] == fmt_cell("gpu_hours", fc["gpu_hours"]["expected"])
    assert any(f"p10–p90 {fmt_cell('cost', fc['spend']['p10'])} to {fmt_cell('cost', fc['spend']['p90'])}" in c.value
               for c in at.caption)
    cheaper, _, pct = costs.savings(s["own_cost"], s["elastic_cost"])
    assert cheaper == "b"
    assert any(f"less** than owning to date (3 of 31 days) ({fmt_cell('savings_pct', pct)} cheaper)" in m.value
               for m in at.markdown)
    # the spend path chart: the days so far, then the forecast to the month's end, and the team budget
    specs = [c.proto.spec for c in at.get("vega_lite_chart") if "errorbar" in c.proto.spec]
    assert len(specs) == 1 and '"budget"' in specs[0] and '"spend"' in specs[0]
    # budgets: the team's at risk, and the per-project table
    team = next(b for b in st["budgets"] if b["project"] == "")
    assert any(w.value.startswith(f"**Team budget: at risk** · spent {spent} of 30,000.00 CNY "
                                  f"({fmt_cell('used_pct', team['used_pct'])})") for w in at.warning)
    table = next(d.value for d in at.dataframe if "state" in d.value.columns)
    rows = {r["project"]: r for r in table.to_dict("records")}
    want = {b["project"]: b for b in st["budgets"]}
    assert rows["demo-pretrain"]["state"] == "over" == want["demo-pretrain"]["state"]
    assert rows["demo-pretrain"]["over since / crosses on"] == str(want["demo-pretrain"]["crossed_on"])
    assert rows["demo-pretrain"]["spent to date (CNY)"] == fmt_cell("cost", want["demo-pretrain"]["cost"]["to_date"])
    assert rows["demo-pretrain"]["budget (CNY)"] == "2,000.00"
    assert rows["demo-pretrain"]["used"] == fmt_cell("used_pct", want["demo-pretrain"]["used_pct"])
    assert rows["demo-finetune"]["state"] == "ok" and rows["demo-finetune"]["month end, expected (CNY)"] == \
        fmt_cell("cost", want["demo-finetune"]["cost"]["expected"])


def test_a_page_run_reads_one_clock_while_time_passes(day3_url, app_env, monkeypatch):
    """Without ``$TRAINLEDGER_NOW`` the clock moves while a page runs (here 20 s at every reading of it): every figure
    of the run is at one instant, so the Spend card and the goodput line's spend (two cached reads: the month's
    report and its goodput account) show the same cents, as ``report monthly`` and ``goodput`` do at one ``--now``.
    The fleet's idle cost to date grows by the second, so reads at two instants differ."""
    import trainledger.store.types as types

    monkeypatch.delenv("TRAINLEDGER_NOW", raising=False)
    ticks = itertools.count()
    monkeypatch.setattr(types, "utcnow", lambda: DAY3 + timedelta(seconds=20 * next(ticks)))
    app_env(day3_url)
    at = run_page(make_app(MONTH), "overview")
    spend = metrics(at)["Spend, to date (CNY)"]
    line = plain(next(m.value for m in at.markdown if m.value.startswith("**Goodput")))
    assert line.startswith(f"**Goodput ({LABEL}):** of {spend} CNY, "), (spend, line)
    assert spend == fmt_cell("actual_cost", _figures(day3_url)[0].summary["actual_cost"])  # at DAY3, the run's clock


def test_an_ended_month_is_not_to_date(day3):
    at = run_page(make_app("2026-11"), "overview")
    shown = metrics(at)
    rep, _, st = _figures(day3, "2026-11")
    assert shown["Spend (CNY)"] == fmt_cell("actual_cost", rep.summary["actual_cost"])
    assert not any(LABEL in c.value for c in at.caption) and not at.info
    assert "Spend at month end (CNY)" not in shown
    assert any(e.value.startswith("**Team budget: over**") for e in at.error)  # November's whole month: over 30,000.00
    assert st["budgets"][0]["state"] == "over"


def test_roi_on_day_3(day3):
    rep, _, _ = _figures(day3)
    s = presented_report(rep)["summary"]
    at = run_page(make_app(MONTH), "roi")
    assert any(LABEL in c.value for c in at.caption) and any(LABEL in i.value for i in at.info)
    shown = metrics(at)
    assert shown["ROI, to date"] == f"{s['roi'] * 100:.2f}%"
    assert -0.3 < s["roi"] < -0.15  # owning 3 days vs renting them, not -92%: the whole month's fleet vs 3 days' rent
    assert shown["Spend, to date (CNY)"] == fmt_cell("actual_cost", s["actual_cost"])


def test_rent_vs_own_starts_from_the_last_full_month(day3):
    nov, _, _ = _figures(day3, "2026-11")
    at = run_page(make_app(MONTH), "rent_vs_own")
    u = nov.summary["time_utilization"]
    dec, _, _ = _figures(day3)
    assert at.slider(key="rvo_util").value == float(round(u, 2)) != float(round(dec.summary["time_utilization"], 2))
    assert any(c.value.startswith(f"Starts at 2026-11's time utilization ({float(fmt_cell('time_utilization', u)) * 100:.2f}%)")
               and f"{MONTH} {LABEL} has not ended, so the last full month is used" in c.value for c in at.caption)
    sizing = next(d.value for d in at.dataframe if "month" in d.value.columns)
    row = sizing[sizing["month"] == f"{MONTH} {LABEL}"].iloc[0]
    # the peak over the window (the fleet's 8 nodes at most: the demo never over-uses it) owned for the 55.125
    # hours elapsed, not for all of December: fixed cost per node-hour + 4.0 kW busy + 0.8 kW idle, at 0.5 per kWh
    peak = max(n.peak_nodes for r in (nov, dec) for n in r.node_types if n.node_type == "rtx4090-8x")
    used = next(n.node_hours for n in dec.node_types if n.node_type == "rtx4090-8x")
    fixed = (Decimal(120_000) / 36 + Decimal("6.67")) / 744
    own = fixed * peak * Decimal("55.125") + 2 * used + Decimal("0.4") * (peak * Decimal("55.125") - used)
    assert peak == 8 and row["node-hours"] == present("node_hours", used)
    own_nt = next(n for n in dec.node_types if n.node_type == "rtx4090-8x")
    # the monthly report's "if owned" cost of December to date (the fleet held, 8 nodes), which uses the energy
    # measured on the demo's runs: not the nominal-power figure by hand (that was the table's figure before)
    assert own_nt.own_nodes == peak and own_nt.power_basis != "nominal"
    assert row["if owned (rtx4090-own)"] == fmt_cell("cost", own_nt.own_cost) != fmt_cell("cost", own)


def test_export_on_day_3_is_the_clis(day3):
    rep, _, _ = _figures(day3)
    at = run_page(make_app(MONTH), "export")
    assert any(f"{MONTH} {LABEL}" in c.value for c in at.caption)
    assert any(LABEL in i.value for i in at.info)
    assert any("--now 2026-12-03T07:07:30+00:00" in c.value for c in at.caption)
    assert at.table[0].value.loc["Period", "value"] == LABEL  # the summary, with the dashboard's labels
    engine = make_engine(day3)
    with Session(engine) as s:
        from trainledger.money.goodput.goodput_ledger import report_account

        rep = monthly_report(s, MONTH, now=DAY3)
        want = render(presented_report(rep, report_account(s, rep, DAY3)), "csv")  # as `report monthly` writes it
    engine.dispose()
    from trainledger.app.queries import data

    assert data.export_bytes(day3, MONTH, "csv") == want
    assert want.startswith(f"metric,value\nmonth,{MONTH}\ntimezone,UTC\ncurrency,CNY\nperiod,{LABEL}\nis_partial,true\n".encode())
    assert Decimal(presented_report(rep)["summary"]["elapsed_hours"]) == Decimal("55.125")
