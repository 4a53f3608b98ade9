"""The month-end forecast: to date + the rest of the month at the trailing window's run rate, its
range from the window's days, its identities, and the back-test on the demo history."""

from __future__ import annotations

import json
import statistics
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.outlook.forecast import Z_P90, forecast
from trainledger.money.rates.costs import cents
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_fleet, add_run
from tests.month_helpers import (
    FIXED_PER_NODE_MONTH,
    LLM_TO_DATE,
    MONTH,
    MONTH_H,
    NOW,
    RENT_PER_NODE_HOUR,
    SPEND_TO_DATE,
    VISION_TO_DATE,
    build_december,
    busy_rate,
)

UTC = timezone.utc
REST_H = Decimal(744 - 228)  # hours of December after NOW
WINDOW_H = Decimal(7 * 24)


def _close(a: Decimal, b: Decimal) -> bool:
    return abs(a - b) < Decimal("1e-15")


def test_expected_month_end_by_hand(session):
    build_december(session)
    f = forecast(session, MONTH, now=NOW)
    assert f["is_partial"] and f["period"] == "to date (10 of 31 days)" and f["remaining_hours"] == REST_H
    assert f["running_runs"] == 1 and f["method"]["window_days"] == 7.0
    assert f["method"]["window_start"] == NOW - timedelta(days=7) and "last 7 days" in f["method"]["text"]
    # the window (Dec 3 12:00 to Dec 10 12:00) saw 48 + 6 owned node-hours of llm and a 10-hour elastic run of vision
    llm_rest_nh = Decimal(54) * REST_H / WINDOW_H
    vision_rest = 10 * RENT_PER_NODE_HOUR * REST_H / WINDOW_H
    fleet_rest = (FIXED_PER_NODE_MONTH / MONTH_H) * 2 * REST_H + 2 * llm_rest_nh + Decimal("0.4") * (2 * REST_H - llm_rest_nh)
    assert cents(f["spend"]["to_date"]) == cents(SPEND_TO_DATE)
    assert _close(f["spend"]["expected"], f["spend"]["to_date"] + fleet_rest + vision_rest)
    llm = next(p["cost"] for p in f["projects"] if p["project"] == "llm")
    vision = next(p["cost"] for p in f["projects"] if p["project"] == "vision")
    assert cents(llm["to_date"]) == cents(LLM_TO_DATE) and cents(vision["to_date"]) == cents(VISION_TO_DATE)
    assert _close(llm["expected"], llm["to_date"] + llm_rest_nh * busy_rate())
    assert _close(vision["expected"], vision["to_date"] + vision_rest)
    assert _close(f["gpu_hours"]["expected"], 8 * (64 + Decimal(64) * REST_H / WINDOW_H))
    # identity: spend = Σ projects + idle, to date and at the month's end
    for k in ("to_date", "expected"):
        assert cents(f["spend"][k]) == cents(llm[k] + vision[k] + f["idle_cost"][k])


def test_range_from_the_window_days(session):
    """Each whole day of the window carried over the rest of the month is a scenario; p10/p90 = expected ∓
    1.2816 σ of the scenarios, never below what no usage at all would cost."""
    build_december(session)
    f = forecast(session, MONTH, now=NOW)
    # llm's owned node-hours in the 24-hour days back from NOW (Dec 9 12:00-Dec 10 12:00 first)
    day_nh = [Decimal(6), 0, 0, 0, Decimal(24), Decimal(24), 0]
    scenarios = [LLM_TO_DATE + nh * REST_H / 24 * busy_rate() for nh in day_nh]
    half = Z_P90 * Decimal(statistics.stdev(scenarios))
    llm = next(p["cost"] for p in f["projects"] if p["project"] == "llm")
    assert _close(llm["expected"], sum(scenarios, Decimal(0)) / 7)
    assert abs(llm["p90"] - (llm["expected"] + half)) < Decimal("1e-9")
    assert abs(llm["p10"] - max(llm["expected"] - half, llm["to_date"])) < Decimal("1e-9")
    assert llm["p10"] <= llm["expected"] <= llm["p90"]
    assert f["idle_cost"]["p10"] >= 0 and f["spend"]["p10"] >= f["spend"]["to_date"]
    assert f["method"]["window_whole_days"] == 7


def test_ended_and_unbegun_months(session):
    build_december(session)
    nov = forecast(session, "2026-11", now=NOW)
    actual = monthly_report(session, "2026-11", now=NOW).summary
    assert not nov["is_partial"] and nov["method"]["basis"] == "actual" and nov["period"] == "ended"
    assert nov["spend"]["expected"] == nov["spend"]["p10"] == nov["spend"]["p90"] == actual["actual_cost"]
    jan = forecast(session, "2027-01", now=NOW)
    assert jan["spend"]["to_date"] == 0 and jan["remaining_hours"] == 744
    # all of January at the window's rate: the fleet's month + the projected usage
    nh = Decimal(54) * 744 / WINDOW_H
    fleet = FIXED_PER_NODE_MONTH * 2 + 2 * nh + Decimal("0.4") * (2 * 744 - nh)
    assert _close(jan["spend"]["expected"], fleet + 10 * RENT_PER_NODE_HOUR * 744 / WINDOW_H)


def test_daily_path_ends_on_the_to_date_figures(session):
    build_december(session)
    f = forecast(session, MONTH, now=NOW)
    days = f["daily"]
    assert [str(d["date"]) for d in days] == [f"2026-12-{i:02d}" for i in range(1, 11)]
    assert days[-1]["end"] == NOW and days[-1]["spend"] == f["spend"]["to_date"]
    assert all(a["spend"] <= b["spend"] for a, b in zip(days, days[1:]))
    assert days[3]["cost_by_project"]["llm"] == 0 and days[4]["cost_by_project"]["llm"] > 0  # llm-a ran on Dec 5


def test_window_and_project_are_checked(session):
    build_december(session)
    with pytest.raises(LedgerInputError, match="--window"):
        forecast(session, MONTH, now=NOW, window_days=0)
    with pytest.raises(LedgerInputError, match="--project: no project named 'nope'"):
        forecast(session, MONTH, now=NOW, project="nope")
    only = forecast(session, MONTH, now=NOW, project="vision")
    assert [p["project"] for p in only["projects"]] == ["vision"]
    shorter = forecast(session, MONTH, now=NOW, window_days=1)  # Dec 9 12:00-Dec 10 12:00: llm-live's 6 hours only
    vision = next(p["cost"] for p in shorter["projects"] if p["project"] == "vision")
    assert vision["expected"] == vision["to_date"]


def test_cli_forecast(cli, ledger_url):
    from trainledger.store.db import make_engine, session_scope

    engine = make_engine(ledger_url)
    with session_scope(engine) as s:
        build_december(s)
        want = forecast(s, MONTH, now=NOW)
    engine.dispose()
    r = cli("forecast", "--now", NOW.isoformat(), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["month"] == MONTH and d["spend"]["expected"] == str(cents(want["spend"]["expected"]))
    assert d["is_partial"] is True and d["period_end"] == NOW.isoformat()
    r = cli("forecast", "--now", NOW.isoformat(), "--project", "llm")
    assert r.exit_code == 0 and "2026-12 to date (10 of 31 days)" in r.output and "method: To date" in r.output
    assert f"{cents(want['spend']['expected']):,}" in r.output
    for args, message in ((("--window", "0"), "--window"), (("--month", "2026-13"), "--month"),
                          (("--project", "nope"), "--project"), (("--now", "soon"), "--now")):
        r = cli("forecast", *args)
        assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_backtest_cuts_the_ledger_as_it_stood(session):
    """At an instant of the past: runs not yet started are gone, runs going on are running there."""
    from trainledger.reports.backtest import _cut

    add_fleet(session, nodes=2)
    add_run(session, "a", datetime(2026, 10, 1, tzinfo=UTC), 20, nodes=2, tokens=1000)
    add_run(session, "b", datetime(2026, 10, 5, tzinfo=UTC), 96, nodes=1, tokens=9600)
    add_run(session, "c", datetime(2026, 10, 12, tzinfo=UTC), 5, nodes=2)
    session.commit()
    t = datetime(2026, 10, 7, tzinfo=UTC)
    _cut(session, t, NOW)
    runs = {r.id: r for r in session.exec(select(Run)).all()}
    assert set(runs) == {"a", "b"}
    assert runs["a"].status == RunStatus.succeeded and runs["a"].tokens == 1000
    assert runs["b"].status == RunStatus.running and runs["b"].ended_at is None and runs["b"].heartbeat_at == t
    assert runs["b"].tokens == 4800  # half of its 96 hours
    s = monthly_report(session, "2026-10", now=t).summary
    assert s["node_hours"] == 40 + 48 and s["capacity_node_hours"] == 2 * 6 * 24


def test_backtest_on_the_demo_history(tmp_path):
    """The issue's target: median absolute error of the month's spend ≤ 10% at day 14."""
    from trainledger.demo import generate_demo
    from trainledger.reports.backtest import backtest
    from trainledger.store.db import make_engine, session_scope

    now = datetime(2026, 12, 3, 7, 7, 30, tzinfo=UTC)
    engine = make_engine(f"sqlite:///{tmp_path / 'demo.db'}")
    with session_scope(engine) as s:
        generate_demo(s, now=now)
    with session_scope(engine) as s:
        b = backtest(s, now=now)
        actual = {m: monthly_report(s, m, now=now).summary["actual_cost"] for m in b["months"]}
    engine.dispose()
    assert b["months"] == ["2026-07", "2026-08", "2026-09", "2026-10", "2026-11"] and b["days"] == [7, 14, 21]
    spend = [r for r in b["rows"] if r["figure"] == "spend"]
    assert len(spend) == 15 and all(r["actual"] == cents(actual[r["month"]]) for r in spend)
    errors14 = [abs(r["error_pct"]) for r in spend if r["day"] == 14]
    summary = {(x["day"], x["figure"]): x for x in b["summary"]}
    assert summary[(14, "spend")]["median_abs_error_pct"] == statistics.median(errors14) <= 10
    assert summary[(14, "spend")]["in_range"] == sum(r["in_range"] for r in spend if r["day"] == 14)
    assert {r["as_of"] for r in spend if r["month"] == "2026-10"} == {datetime(2026, 10, d, tzinfo=UTC) for d in (8, 15, 22)}
