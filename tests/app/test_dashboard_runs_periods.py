"""Issue #28 items 2-4 under Streamlit's AppTest: Runs money first and in the URL, period headline figures.

The browser checks (column in view, shared URL in a fresh browser, clicks, screenshots) are in
test_runs_periods_browser.py; here the table and the figures themselves, against the ledger functions.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from trainledger.app.views import ui
from trainledger.money.rates import periods as P
from trainledger.reports.periods import period_report, presented_period
from trainledger.reports.present import fmt_cell

from tests.app.helpers import make_app, metrics, plain, run_page, with_session

NOW = "2026-12-01T12:00:00+00:00"
FIRST = ["id", "name", "cost (CNY)", "waste (CNY)", "waste reason", "GPU-hours", "cost per 1M tokens (CNY)"]


def _runs_table(at):
    return next(d for d in at.dataframe if list(d.value.columns)[0] == "id")


def test_runs_are_money_first_blank_never_none_and_times_to_the_minute(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    grid = _runs_table(at)
    df = grid.value
    assert list(df.columns)[:7] == FIRST
    assert grid.proto.placeholder == ""  # a missing number is drawn as an empty cell, not "None"
    text = df.select_dtypes(include=["object", "string"])
    assert not text.isin(["None", "nan", "NaT"]).any().any()
    started = [v for v in df["started"] if v]
    assert started and all(re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}", v) for v in started), started[:3]
    # the filters, the order and the page go into the URL (a copied link reopens the view)
    at.selectbox(key="runs_project").set_value("demo-pretrain").run()
    at.radio(key="runs_view").set_value("expensive").run()
    assert at.query_params["project"] == "demo-pretrain" and at.query_params["order"] == "expensive"
    df = _runs_table(at).value
    costs = list(df["cost (CNY)"])
    assert costs == sorted(costs, reverse=True) and set(df["project"]) == {"demo-pretrain"}


def test_a_shared_url_sets_every_filter(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    at = run_page(make_app(project="demo-finetune", user="bob", status="succeeded", strategy="zero2",
                           order="expensive", scope="month"), "runs")
    assert [at.selectbox(key=f"runs_{k}").value for k in ("project", "user", "status", "strategy")] == [
        "demo-finetune", "bob", "succeeded", "zero2"]
    assert at.radio(key="runs_view").value == "expensive"
    df = _runs_table(at).value
    assert len(df) and set(df["project"]) == {"demo-finetune"} and set(df["user"]) == {"bob"}
    assert set(df["status"]) == {"succeeded"} and set(df["strategy"]) == {"zero2"}


def test_a_quarter_on_the_overview_is_the_period_report(demo_url, app_env, monkeypatch):
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    at = run_page(make_app(period="quarter", quarter="2026-Q4"), "overview")
    want = with_session(demo_url, lambda s: presented_period(
        period_report(s, P.quarter_period("2026-Q4"), now=datetime.fromisoformat(NOW))))
    assert at.query_params["period"] == "quarter" and at.query_params["quarter"] == "2026-Q4"
    spend = next(m for m in at.metric if m.label == "Spend (CNY)")  # the period's card comes first
    assert spend.value == fmt_cell("actual_cost", want["summary"]["actual_cost"]) == "71,598.87"
    assert plain(spend.proto.delta) == f"{want['change']['actual_cost_pct']:+.1f}% vs {want['previous']['period']}"
    assert metrics(at)["GPU-hours"] == fmt_cell("gpu_hours", want["summary"]["gpu_hours"])
    # "Spend by project" sums the quarter's whole months (October to December to date), not only December
    from decimal import Decimal

    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.account.spend import spend_by_project
    from trainledger.money.rates.costs import cents

    assert want["months"] == ["2026-10", "2026-11", "2026-12"]
    reps = with_session(demo_url, lambda s: [monthly_report(s, m, now=datetime.fromisoformat(NOW)) for m in want["months"]])
    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["project", "spend (CNY)"])
    shown = {p: Decimal(c.replace(",", "")) for p, c in zip(table["project"], table["spend (CNY)"])}
    for name in ("demo-pretrain", "demo-finetune"):
        monthly = [next((x["cost"] for x in spend_by_project(r) if x["line"] == name), Decimal(0)) for r in reps]
        assert monthly[0] > 0 and shown[name] == sum(monthly), (name, monthly)  # each month's line, added up
    assert shown["idle"] == sum(cents(r.summary["idle_cost"]) for r in reps)
    assert sum(shown.values(), Decimal(0)) == Decimal(want["summary"]["actual_cost"]) == Decimal("71598.87")


def test_runs_link_builds_the_runs_query():
    assert ui.runs_link("", project="p", month="2026-11", waste=None) == {"project": "p", "month": "2026-11"}
    with pytest.raises(TypeError, match="unknown filter"):
        ui.runs_link("", colour="red")
    assert ui.when("2026-11-20T08:05:59.123456+00:00", ZoneInfo("Asia/Shanghai")) == "2026-11-20 16:05"
    assert ui.when(None) == "" and ui.grouped("tokens", 1591158542649) == "1,591,158,542,649"
