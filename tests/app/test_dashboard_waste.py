"""Issue #18 items 1-3 on the dashboard: waste (issue 36: badput + idle, the goodput account's) ranked and by reason, spend by project with idle, capacity
over-use and how a run was costed; every figure checked against the ledger function that computes it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

import pytest
from trainledger.money.account.monthly import monthly_report
from trainledger.money.account.spend import spend_by_project
from trainledger.money.allocation.capacity import capacity_warnings, warning_text
from trainledger.money.goodput.account import BADPUT, Category
from trainledger.money.goodput.goodput_ledger import report_account
from trainledger.money.rates import costs
from trainledger.store.db import make_engine, session_scope

from tests.app.helpers import MONTH, make_app, metrics, plain, run_page, with_session
from tests.helpers import presented_month

D = Decimal


def _presented(url: str) -> dict:
    """``report monthly``'s presented export (with the month's goodput account: waste = badput + idle)."""
    return with_session(url, lambda s: presented_month(s, MONTH))


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
        # from the run's exact cost, to 4 decimals (a cost per 1M tokens is often under a cent)
        per_1m = costs.cost_per_million_tokens(exact[row["id"]], line["tokens"]) if line["tokens"] else None
        shown = row["cost per 1M tokens (CNY)"]  # a number column, shown with 4 decimals
        assert (None if pd_na(shown) else D(f"{shown:.4f}")) == (
            None if per_1m is None else per_1m.quantize(D("0.0001"), ROUND_HALF_UP))
    assert "None" not in set(table["user"]) and "None" not in set(table["project"])
    # the hand-built elastic run: 2 nodes × 10 h × 3,600 ÷ 730
    assert _cents(table.set_index("id").loc["hand-elastic-1", "cost (CNY)"]) == costs.cents(D(2 * 10 * 3600) / 730)


def pd_na(v) -> bool:
    return v is None or v != v


def _accounts(url: str) -> dict:
    """Run id → its goodput account in the month (what the Runs page's waste column and reason come from)."""
    def read(s):
        rep = monthly_report(s, MONTH)
        return {a.run_id: a for a in report_account(s, rep).runs}
    return with_session(url, read)


def test_most_wasted_runs_rank_by_their_badput(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    at.radio(key="runs_view").set_value("wasted").run()
    table = _table(at)
    lines = {r["run_id"]: r for r in _presented(demo_url)["runs"]}
    accounts = _accounts(demo_url)
    # the run's waste: the badput of its line (the export's badput_cost), its reason its largest badput category
    ranked = sorted(lines.values(), key=lambda r: (-D(r["badput_cost"]), r["run_id"]))[:50]
    assert list(table["id"]) == [r["run_id"] for r in ranked]
    for _, row in table.iterrows():
        assert _cents(row["waste (CNY)"]) == D(lines[row["id"]]["badput_cost"])
        a = accounts[row["id"]]
        best = max((c for c in BADPUT if c is not Category.recovery), key=lambda c: (a.cost[c], -BADPUT.index(c)))
        assert row["waste reason"] == best.value.replace("_", " ")
    # not the lost work: the most wasted run is not the one that lost the most
    assert table.iloc[0]["id"] != max(lines.values(), key=lambda r: (D(r["lost_work_cost"]), r["run_id"]))["run_id"]


@pytest.mark.parametrize("reason", ["failed", "cancelled", "crashed", "lost_since_checkpoint"])
def test_an_old_waste_link_filters_the_runs_with_lost_work(demo_url, app_env, reason):
    app_env(demo_url)
    at = run_page(make_app(waste=reason), "runs")
    accounts = _accounts(demo_url)
    lost = {k: a.cost[Category.lost_work] for k, a in accounts.items() if a.cost[Category.lost_work] > 0}
    table = _table(at)
    # every run with lost work (the reasons of before issue 36 are all the category lost_work), the most first
    assert list(table["id"]) == sorted(lost, key=lambda k: (-lost[k], k))[:50]
    assert any("badput: lost work (the most of it first)" in plain(c.value) for c in at.caption)


def test_a_bad_waste_reason_is_one_line(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(waste="idle"), "runs")
    assert [plain(e.value) for e in at.error] == [
        "?waste=: expected a badput category (startup, data_wait, checkpoint_save, checkpoint_restore, eval, "
        "lost_work, recovery, straggler_wait, unattributed) or failed, crashed, cancelled, lost_since_checkpoint "
        "(= lost_work), got 'idle'; idle is the fleet's, no run's"]


def test_overview_waste_reasons_add_up_to_the_waste_and_link_to_their_runs(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "overview")
    s = _presented(demo_url)["summary"]
    shown = metrics(at)
    labels = {"lost work (failed, crashed, cancelled runs)": "lost_work", "data wait": "data_wait",
              "straggler wait": "straggler_wait", "checkpoint saves": "checkpoint_save",
              "checkpoint restores": "checkpoint_restore", "idle fleet": "idle", "startup": "startup", "eval": "eval",
              "recovery": "recovery", "unattributed": "unattributed", "rounding": "rounding"}
    reasons = {labels[k]: D(v.replace(",", "")) for k, v in shown.items() if k in labels}
    assert reasons == {k: D(v) for k, v in s["waste_by_reason"].items() if D(v)}
    assert sum(reasons.values(), D(0)) == D(shown["Waste (CNY)"].replace(",", "")) == D(s["waste_cost"])
    links = [str(p.proto) for p in at.get("page_link")]
    targets = {re.search(r"goodput=(\w+)", lk).group(1) for lk in links if "goodput=" in lk and "order=wasted" in lk}
    assert targets == {k for k in reasons if k not in ("idle", "rounding")}, links  # idle has no runs
    assert not [lk for lk in links if "waste=" in lk]
    assert not [c for c in at.caption if "not priced" in c.value]  # straggler wait is priced, like every category


def test_overview_and_runs_of_a_month_with_straggler_and_data_waits(sqlite_url, app_env, monkeypatch):
    """Issue 36's month (tests/test_waste_reasons.py): waste = badput + idle on the Overview to the cent, the same
    as the monthly JSON; the Runs page's most wasted run is the one with most badput, not the failed one."""
    from tests.helpers import WASTE_NOW, waste_month

    engine = make_engine(sqlite_url)
    with session_scope(engine) as s:
        waste_month(s)
    engine.dispose()
    app_env(sqlite_url)
    monkeypatch.setenv("TRAINLEDGER_NOW", WASTE_NOW.isoformat())
    shown = metrics(run_page(make_app(), "overview"))
    assert shown["Waste, to date (CNY)"] == "7,037.18"  # 27 busy node-hours + 1,361 idle ones (the test's header)
    assert (shown["lost work (failed, crashed, cancelled runs)"], shown["straggler wait"], shown["data wait"],
            shown["unattributed"], shown["idle fleet"], shown["rounding"]) == (
        "66.39", "26.56", "13.28", "73.03", "6,857.93", "-0.01")
    at = run_page(make_app(), "runs")
    at.radio(key="runs_view").set_value("wasted").run()
    table = _table(at)
    assert list(zip(table["id"], table["waste (CNY)"], table["waste reason"])) == [
        ("slow", 79.67, "unattributed"), ("fail", 66.39, "lost work"), ("imp", 33.19, "unattributed")]
    # a badput category's drill-down (?goodput=, Overview's reason links): each run with the category's amount
    acct = with_session(sqlite_url, lambda s: report_account(s, monthly_report(s, MONTH, lines=True, now=WASTE_NOW),
                                                              WASTE_NOW))
    for category in (Category.straggler_wait, Category.data_wait):
        want = sorted(((a.run_id, costs.cents(a.cost[category])) for a in acct.runs if a.cost[category] > 0),
                      key=lambda x: (-x[1], x[0]))
        assert want, category
        table = _table(run_page(make_app(goodput=category.value), "runs"))
        label = f"{category.value.replace('_', ' ')} (CNY)"
        assert list(zip(table["id"], (D(str(v)).quantize(D("0.01")) for v in table[label]))) == want, category


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
