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


def test_all_months_ranks_every_run_by_its_cost_and_waste_over_its_months(demo_url, app_env, monkeypatch):
    """Issue 39 item 4: "Most wasted" and "Most expensive" over all months: each run's cost and waste are its monthly
    lines' summed (the exact figures, half-up to the cent once), ranked most first; the badput drill-down over all
    months shows the category's amount. Computed here from the monthly reports and goodput accounts of every month."""
    from decimal import Decimal

    from trainledger.money.account.monthly import monthly_report
    from trainledger.money.goodput.account import Category, goodput_account
    from trainledger.money.goodput.waste import run_waste
    from trainledger.money.rates.costs import cents
    from trainledger.money.rates.months import months_between

    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    now = datetime.fromisoformat(NOW)

    def exact(s):
        cost: dict[str, Decimal] = {}
        months: dict[str, list[Decimal]] = {}  # each month's cost of a run
        waste: dict[str, Decimal] = {}
        straggler: dict[str, Decimal] = {}
        for m in months_between("2026-01", "2026-12"):
            for r in monthly_report(s, m, lines=True, now=now).runs:
                cost[r.run_id] = cost.get(r.run_id, Decimal(0)) + r.cost
                months.setdefault(r.run_id, []).append(r.cost)
            for a in goodput_account(s, month=m, now=now).runs:
                if a.run_cost or a.total_cost:
                    waste[a.run_id] = waste.get(a.run_id, Decimal(0)) + run_waste(a)
                    straggler[a.run_id] = straggler.get(a.run_id, Decimal(0)) + a.cost[Category.straggler_wait]
        return cost, months, waste, straggler

    cost, months, waste, straggler = with_session(demo_url, exact)
    at = run_page(make_app(scope="all", order="wasted"), "runs")
    df = _runs_table(at).value
    ids = list(df["id"])
    assert len(ids) == 50  # the top 50 of the demo's runs
    want = sorted(waste, key=lambda r: (-waste[r], r))[:50]
    assert ids == want
    assert [Decimal(str(v)).quantize(Decimal("0.01")) for v in df["waste (CNY)"]] == [cents(waste[r]) for r in ids]
    assert [Decimal(str(v)).quantize(Decimal("0.01")) for v in df["cost (CNY)"]] == [cents(cost[r]) for r in ids]
    assert not df["cost (CNY)"].isna().any() and not df["waste (CNY)"].isna().any()
    assert "over all months" in " ".join(c.value for c in at.caption)
    at.radio(key="runs_view").set_value("expensive").run()
    df = _runs_table(at).value
    assert list(df["id"]) == sorted(cost, key=lambda r: (-cost[r], r))[:50]
    assert [Decimal(str(v)).quantize(Decimal("0.01")) for v in df["cost (CNY)"]] == [cents(cost[r]) for r in df["id"]]
    # a run across a month edge is one row, with both months' cost
    across = [r for r in df["id"] if len(months[r]) > 1]
    assert across and all(cents(cost[r]) > cents(max(months[r])) for r in across), across
    # the badput drill-down over all months: the category's amount beside each run, most first
    at = run_page(make_app(scope="all", goodput="straggler_wait"), "runs")
    df = _runs_table(at).value
    col = "straggler wait (CNY)"
    assert list(df["id"]) == sorted((r for r in straggler if straggler[r] > 0), key=lambda r: (-straggler[r], r))[:50]
    assert [Decimal(str(v)).quantize(Decimal("0.01")) for v in df[col]] == [cents(straggler[r]) for r in df["id"]]


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


def test_a_year_to_date_lists_no_empty_months_and_says_why_it_has_no_change(demo_url, app_env, monkeypatch):
    """Issue 39 item 7 on screen: the demo's year to date starts its months at June (the first with anything
    recorded) and says that January to May are not listed; the year before has nothing: no change, and why."""
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    at = run_page(make_app(period="ytd", year="2026"), "overview")
    want = with_session(demo_url, lambda s: period_report(s, P.ytd_period(2026, datetime.fromisoformat(NOW).date()),
                                                          now=datetime.fromisoformat(NOW)))
    table = next(d.value for d in at.dataframe if list(d.value.columns)[0] == "month")
    assert list(table["month"]) == [r["month"] for r in want["by_month"]] and table["month"].iloc[0] == "2026-06"
    captions = [plain(c.value) for c in at.caption]
    assert "2026-01 to 2026-05: nothing recorded yet (no spend, no GPU-hours), so not listed." in captions
    assert f"No change shown: {want['previous_missing']}." in captions
    spend = next(m for m in at.metric if m.label == "Spend (CNY)")
    assert not spend.proto.delta  # nothing to compare with: no delta at all, not +0.0%


def test_compare_shows_three_runs_from_the_ledger(demo_url, app_env, monkeypatch):
    """Issue 39 item 2 under AppTest: ``/runs?compare=A,B,C`` draws their loss and cumulative cost and shows each
    run's figures as ``trainledger runs compare`` gives them (cost to the cent, from ``runs show``)."""
    from trainledger.reports.present import fmt_cell, jsonable
    from trainledger.runs.compare import compare_runs

    monkeypatch.setenv("TRAINLEDGER_NOW", NOW)
    app_env(demo_url)
    ids = ["demo-0094", "demo-0056", "demo-0119"]
    at = run_page(make_app(compare=",".join(ids)), "runs")
    assert at.multiselect(key="runs_compare").value == ids and at.query_params["compare"] == ",".join(ids)
    want = with_session(demo_url, lambda s: jsonable(compare_runs(s, ids, now=datetime.fromisoformat(NOW))))
    figures = next(d.value for d in at.dataframe if list(d.value.columns) == ["figure", *ids])
    row = dict(zip(figures["figure"], figures.index))
    cost = figures.loc[row["cost (CNY)"]]
    assert [cost[i] for i in ids] == [fmt_cell("cost", r["figures"]["cost_actual"]) for r in want["runs"]]
    assert all(c.replace(",", "").replace(".", "").isdigit() for c in (cost[i] for i in ids))
    loss = figures.loc[row["final loss"]]
    assert [loss[i] for i in ids] == [ui.grouped("final_loss", r["figures"]["final_loss"]) for r in want["runs"]]
    config = next(d.value for d in at.dataframe if list(d.value.columns) == ["config", *ids])
    assert list(config["config"])[:3] == ["strategy", "DP", "TP"] and not any(c.startswith("≠") for c in config["config"])
    # two of the five charts have samples in the demo (loss, cumulative cost); the others say there are none
    plain_page = run_page(make_app(), "runs")
    assert len(at.get("vega_lite_chart")) == len(plain_page.get("vega_lite_chart")) + 2
    captions = [plain(c.value) for c in at.caption]
    assert "Throughput: no samples recorded for these runs." in captions


def test_utilization_per_node_hour_by_hour_on_run_detail_and_goodput(app_env, tmp_path, monkeypatch):
    """Issue 39 item 3 under AppTest: Run detail draws each node's hourly mean and Goodput a fleet's nodes in the
    month, the points of ``trainledger.runs.utilization`` (the chart's data), with the CLI command that prints them."""
    import json as json_

    from sqlmodel import Session
    from trainledger.runs.utilization import fleet_utilization, run_utilization
    from trainledger.store.db import make_engine

    from tests.test_runs_utilization import _samples

    url = f"sqlite:///{tmp_path / 'util.db'}"
    engine = make_engine(url)
    with Session(engine) as s:
        _samples(s)
        want_run = run_utilization(s, "u-a")
        want_fleet = fleet_utilization(s, "rtx4090-8x", "2026-11")
    engine.dispose()
    monkeypatch.setenv("TRAINLEDGER_NOW", "2026-11-30T12:00:00+00:00")
    app_env(url)

    def chart_points(at) -> list[tuple[str, float]]:
        for c in at.get("vega_lite_chart"):
            spec = json_.loads(c.proto.spec)
            if "hourly mean" in json_.dumps(spec.get("encoding", {}).get("y", {})):
                import pyarrow as pa

                table = pa.ipc.open_stream(c.proto.datasets[0].data.data).read_all()
                rows = table.to_pylist()
                return sorted((r["node"], round(r["util"], 9)) for r in rows)
        return []

    at = run_page(make_app(run="u-a", month="2026-11"), "runs")
    assert chart_points(at) == sorted((p["node"], round(p["util_mean"] * 100, 9)) for p in want_run["points"])
    assert any("`trainledger runs util u-a` prints the same" in c.value for c in at.caption)
    at = run_page(make_app(month="2026-11"), "goodput")
    assert at.selectbox(key="fleet_util_node_type").value == "rtx4090-8x"
    assert chart_points(at) == sorted((p["node"], round(p["util_mean"] * 100, 9)) for p in want_fleet["points"])
    assert len(want_fleet["points"]) == 4


def test_runs_link_builds_the_runs_query():
    assert ui.runs_link("", project="p", month="2026-11", waste=None) == {"project": "p", "month": "2026-11"}
    with pytest.raises(TypeError, match="unknown filter"):
        ui.runs_link("", colour="red")
    assert ui.when("2026-11-20T08:05:59.123456+00:00", ZoneInfo("Asia/Shanghai")) == "2026-11-20 16:05"
    assert ui.when(None) == "" and ui.grouped("tokens", 1591158542649) == "1,591,158,542,649"
