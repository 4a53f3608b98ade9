"""Issue #18 items 1-3 on the dashboard: waste ranked and by reason, spend by project with idle, capacity
over-use and how a run was costed; every figure checked against the ledger function that computes it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from sqlmodel import col, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.account.spend import spend_by_project
from trainledger.money.account.waste import RUN_REASONS
from trainledger.money.allocation.capacity import capacity_warnings, warning_text
from trainledger.money.rates import costs
from trainledger.reports.export import presented_report
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import Run

from tests.app.helpers import MONTH, make_app, metrics, plain, run_page, with_session

D = Decimal
REASONS = {"failed runs": "failed", "crashed runs": "crashed", "cancelled runs": "cancelled",
           "lost work since the last checkpoint": "lost_since_checkpoint", "idle fleet": "idle"}


def _presented(url: str) -> dict:
    return presented_report(with_session(url, lambda s: monthly_report(s, MONTH)))


def _table(at, first_column: str = "id"):
    return next(d.value for d in at.dataframe if list(d.value.columns)[0] == first_column)


def _cents(x) -> D:
    return D(f"{x:.2f}")


def test_most_expensive_runs_show_the_monthly_reports_figures(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    at.radio(key="runs_view").set_value("expensive").run()
    table = _table(at)
    # outside an export each run's cost is half-up to the cent on its own (docs/MONEY.md, "Rounding")
    exact = {r.run_id: r.cost for r in with_session(demo_url, lambda s: monthly_report(s, MONTH)).runs}
    lines = {r["run_id"]: {**r, "cost": str(costs.cents(exact[r["run_id"]]))} for r in _presented(demo_url)["runs"]}
    ranked = sorted(lines.values(), key=lambda r: (-D(r["cost"]), r["run_id"]))[:50]
    assert list(table["id"]) == [r["run_id"] for r in ranked]
    for _, row in table.iterrows():
        line = lines[row["id"]]
        assert _cents(row["cost (CNY)"]) == D(line["cost"])
        per_1m = costs.cost_per_million_tokens(D(line["cost"]), line["tokens"]) if line["tokens"] else None
        assert (None if pd_na(row["cost per 1M tokens (CNY)"]) else _cents(row["cost per 1M tokens (CNY)"])) == (
            None if per_1m is None else costs.cents(per_1m))
    assert "None" not in set(table["user"]) and "None" not in set(table["project"])
    # the hand-built elastic run: 2 nodes × 10 h × 3,600 ÷ 730
    assert _cents(table.set_index("id").loc["hand-elastic-1", "cost (CNY)"]) == costs.cents(D(2 * 10 * 3600) / 730)


def pd_na(v) -> bool:
    return v is None or v != v


def test_most_wasted_runs_rank_by_lost_work(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    at.radio(key="runs_view").set_value("wasted").run()
    table = _table(at)
    lines = _presented(demo_url)["runs"]
    worst = max(lines, key=lambda r: (D(r["lost_work_cost"]), r["run_id"]))
    assert table.iloc[0]["id"] == worst["run_id"] and D(worst["lost_work_cost"]) > 0
    assert _cents(table.iloc[0]["waste (CNY)"]) == D(worst["lost_work_cost"])
    wasted = [r for r in lines if r["status"] in ("failed", "crashed", "cancelled")]
    shown = table[table["waste (CNY)"].notna()]
    assert {r: _cents(v) for r, v in zip(shown["id"], shown["waste (CNY)"])} == {
        r["run_id"]: D(r["lost_work_cost"]) for r in wasted}


@pytest.mark.parametrize("reason", ["failed", "cancelled", "crashed", "lost_since_checkpoint"])
def test_waste_link_filters_the_runs_of_that_reason(demo_url, app_env, reason):
    app_env(demo_url)
    at = run_page(make_app(waste=reason), "runs")
    lines = _presented(demo_url)["runs"]
    checkpointed = set(with_session(demo_url, lambda s: s.exec(select(Run.id).where(col(Run.last_checkpoint_at).is_not(None))).all()))
    expected = {r["run_id"] for r in lines if r["status"] in ("failed", "crashed", "cancelled")
                and (r["run_id"] in checkpointed) == (reason == "lost_since_checkpoint")
                and (reason == "lost_since_checkpoint" or r["status"] == reason)}
    if not expected:
        assert not [d for d in at.dataframe if list(d.value.columns)[0] == "id"]
        assert any("No runs match" in i.value for i in at.info)
        return
    table = _table(at)
    assert set(table["id"]) == expected
    # the reason's runs add up to what the monthly report counts under it (to the cent, up to the per-line rounding)
    total = sum((_cents(v) for v in table["waste (CNY)"]), D(0))
    by_reason = D(_presented(demo_url)["summary"]["waste_by_reason"][reason])
    assert abs(total - by_reason) <= D("0.01") * len(expected)


def test_a_bad_waste_reason_is_one_line(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(waste="nope"), "runs")
    assert [plain(e.value) for e in at.error] == [
        "?waste=: expected one of failed, crashed, cancelled, lost_since_checkpoint, got 'nope'"]


def test_overview_waste_reasons_add_up_to_the_waste_and_link_to_their_runs(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "overview")
    s = _presented(demo_url)["summary"]
    shown = metrics(at)
    reasons = {REASONS[k]: D(v.replace(",", "")) for k, v in shown.items() if k in REASONS}
    assert reasons == {k: D(v) for k, v in s["waste_by_reason"].items()}
    assert sum(reasons.values(), D(0)) == D(shown["Waste (CNY)"].replace(",", "")) == D(s["waste_cost"])
    links = [p.proto for p in at.get("page_link")]
    targets = {re.search(r"waste=(\w+)", str(lk)).group(1) for lk in links if "waste=" in str(lk)}
    assert targets == set(RUN_REASONS), links  # failed, crashed, cancelled, lost since checkpoint: idle has no runs
    for lk in links:
        if "waste=" in str(lk):
            assert f"month={MONTH}" in str(lk)


@pytest.mark.parametrize("page", ["overview", "roi"])
def test_spend_by_project_and_idle_add_up_to_the_spend(demo_url, app_env, page):
    app_env(demo_url)
    at = run_page(make_app(), page)
    table = next(d.value for d in at.dataframe if list(d.value.columns) == ["project", "spend (CNY)"])
    rep = with_session(demo_url, lambda s: monthly_report(s, MONTH))
    lines = spend_by_project(rep)
    shown = {p: D(c.replace(",", "")) for p, c in zip(table["project"], table["spend (CNY)"])}
    assert shown == {x["line"]: x["cost"] for x in lines}
    assert "idle" in shown and shown["idle"] == costs.cents(rep.summary["idle_cost"])
    assert sum(shown.values(), D(0)) == costs.cents(rep.summary["actual_cost"]) == D(metrics(at)["Spend (CNY)"].replace(",", ""))


def _overview_of_fleet_and(url: str, app_env, second: str, after_h: float, nodes: int):
    """The Overview of a ledger with an 8-node fleet, an 8-node run of 10 h from t0, and ``second`` starting
    ``after_h`` hours after t0 on ``nodes`` nodes."""
    from tests.helpers import add_fleet, add_run

    t0 = datetime(2026, 11, 10, tzinfo=timezone.utc)
    engine = make_engine(url)
    with session_scope(engine) as s:
        add_fleet(s, 8)
        add_run(s, "full", t0, 10, nodes=8)
        add_run(s, second, t0 + timedelta(hours=after_h), 5, nodes=nodes)
    engine.dispose()
    app_env(url)
    return run_page(make_app(), "overview")


def test_overview_flags_capacity_over_use_with_its_runs(sqlite_url, app_env):
    at = _overview_of_fleet_and(sqlite_url, app_env, "early", 9, 2)  # an hour before "full" ends: 10 of 8 nodes
    found = with_session(sqlite_url, lambda s: capacity_warnings(s, MONTH))
    assert [(w["peak_nodes"], w["fleet_nodes"], sorted(w["runs"])) for w in found] == [(10, 8, ["early", "full"])]
    shown = [plain(w.value) for w in at.warning if "Data quality" in w.value]
    assert shown == [f"Data quality: {warning_text(w)}." for w in found]
    assert all(r in shown[0] for r in found[0]["runs"])


def test_no_capacity_warning_within_capacity(sqlite_url, app_env):
    at = _overview_of_fleet_and(sqlite_url, app_env, "next", 10, 8)  # starts the instant "full" ends
    assert with_session(sqlite_url, lambda s: capacity_warnings(s, MONTH)) == []
    assert not [w for w in at.warning if "Data quality" in w.value]


def test_run_detail_says_which_offer_and_why_the_what_ifs_differ(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(run="hand-elastic-1"), "runs")
    captions = [plain(c.value) for c in at.caption]
    assert any(c.startswith("Costed under rtx4090-rent: the offer recorded on the run. Rented elastic: price per "
                            "node-hour × billed node-hours") for c in captions), captions
    under = next(d.value for d in at.dataframe if "why it differs from the actual cost" in d.value.columns)
    why = dict(zip(under["offer"], under["why it differs from the actual cost"]))
    assert why["rtx4090-own"].startswith("owned: the run's node-hours × the full-use rate")
    assert why["rtx4090-rent"] == "rented: price per node-hour × billed node-hours; actual: billed node-hours × hourly rate"


def test_cpu_run_detail_labels_and_readable_charts(sqlite_url, app_env):
    """A CPU run's per-node column says CPU utilization, not GPU-Util; the per-node chart is >= 250 px high and
    the loss chart's time axis is formatted as dates; a run without a user shows blank in the table."""
    import json

    from trainledger.store.models import MetricSample, RunNode

    from tests.helpers import add_run

    t0 = datetime(2026, 11, 10, tzinfo=timezone.utc)
    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        run = add_run(s, "cpu-1", t0, 2, nodes=2, offer_name="rtx4090-rent")
        run.util_source, run.gpu_util_mean, run.user_id = "cpu", 0.9, None
        for rank in range(2):
            s.add(RunNode(run_id="cpu-1", hostname=f"host{rank}", node_rank=rank, gpu_util_mean=0.9 - rank / 10,
                          util_source="cpu"))
        for i in range(5):
            s.add(MetricSample(run_id="cpu-1", metric="loss", ts=t0 + timedelta(minutes=10 * i), value=3.0 - i / 10))
    engine.dispose()
    app_env(sqlite_url)
    at = run_page(make_app(run="cpu-1"), "runs")
    assert list(_table(at)["user"]) == [""]
    nodes = next(d.value for d in at.dataframe if "hostname" in d.value.columns)
    assert "CPU utilization (process, CPU-only run)" in nodes.columns and "GPU-Util (NVML/DCGM busy share)" not in nodes.columns
    assert "CPU util p95" in nodes.columns
    charts = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    util = next(c for c in charts if "CPU util %" in json.dumps(c))
    assert util.get("height", 0) >= 250
    loss = charts[-1]
    assert loss["encoding"]["x"]["type"] == "temporal" and loss["encoding"]["x"]["axis"]["format"] == "%b %d %H:%M"
