"""Every dashboard page under AppTest, on the demo ledger: the figures shown are the ledger's."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlmodel import Session, select
from trainledger.app.views.plain_words import compact
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.export import presented_report
from trainledger.reports.present import fmt_cell
from trainledger.runs.registry import show_run
from trainledger.store.db import make_engine, session_scope
from trainledger.store.models import Run, RunNode

from tests.app.helpers import MONTH, SWEEP, build_ledger, make_app, metrics, plain, run_page, with_session
from tests.helpers import presented_month

PAGES = ["overview", "runs", "rent_vs_own", "roi", "strategies", "planner", "launch", "export", "settings"]


def _report(url: str, month: str = MONTH):
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            return monthly_report(s, month)
    finally:
        engine.dispose()


def test_overview_shows_the_monthly_report(ledger_url, app_env):
    """This month's spend and the other headline figures equal monthly_report's, with the CLI's rounding."""
    build_ledger(ledger_url)
    app_env(ledger_url)
    rep = _report(ledger_url)
    shown = metrics(run_page(make_app(), "overview"))
    s = rep.summary
    assert shown["Spend (CNY)"] == fmt_cell("actual_cost", s["actual_cost"])
    assert shown["GPU-hours"] == fmt_cell("gpu_hours", s["gpu_hours"])
    assert shown["Time utilization"] == f"{float(fmt_cell('time_utilization', s['time_utilization'])) * 100:.2f}%"
    assert shown["GPU-Util (NVML/DCGM busy share)"] == f"{float(fmt_cell('gpu_util_mean', s['gpu_util_mean'])) * 100:.2f}%"
    assert shown["MFU"] == f"{float(fmt_cell('mfu_mean', s['mfu_mean'])) * 100:.2f}%"
    assert shown["Idle cost (CNY)"] == fmt_cell("idle_cost", presented_report(rep)["summary"]["idle_cost"])
    waste = with_session(ledger_url, lambda x: presented_month(x, MONTH))["summary"]["waste_cost"]  # badput + idle
    assert shown["Waste (CNY)"] == fmt_cell("waste_cost", waste)
    assert shown["If owned (CNY)"] == fmt_cell("own_cost", s["own_cost"])
    assert shown["If rented elastic (CNY)"] == fmt_cell("elastic_cost", s["elastic_cost"])
    assert "," in shown["Spend (CNY)"] and shown["Spend (CNY)"].endswith(tuple("0123456789"))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_the_demo_ledger(page, demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), page)
    assert at.title, f"{page}: no title"
    assert not at.error, [e.value for e in at.error]


def test_month_comes_from_the_query_parameter(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app("2026-07"), "overview")
    assert metrics(at)["Spend (CNY)"] == fmt_cell("actual_cost", _report(demo_url, "2026-07").summary["actual_cost"])
    assert any("2026-07" in c.value for c in at.caption)


def test_rent_vs_own_seed_says_renting_saves_25_percent(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "rent_vs_own")
    at.slider(key="rvo_util").set_value(1.0).run()
    shown = metrics(at)
    assert shown["Own per node-month (CNY)"] == "4,800.00"
    assert shown["Rent per node-month (CNY)"] == "3,600.00"
    assert shown["Savings (rent cheaper)"] == "25.0%"
    # issue #28: an owned option that never wins says so; the exact figures are in the cards' help
    assert shown["Break-even utilization"] == "never breaks even"
    assert shown["Payback"] == "never breaks even"
    helps = {m.label: m.help for m in at.metric}
    assert "(here 133.33%)" in helps["Break-even utilization"]
    # 120,000 ÷ (3,600 − 1,460 power − 6.67 operations), beyond the 36-month depreciation
    assert "56.25 months, longer than the 36-month depreciation" in helps["Payback"]
    assert any("Renting (rtx4090-rent) is cheaper at every utilization" in plain(w.value) for w in at.warning)
    assert any("trainledger cost compare --node-type rtx4090-8x --utilization 1" in plain(c.value) for c in at.caption)


def test_rent_vs_own_edited_rent_price_is_costed_but_not_saved(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "rent_vs_own")
    at.slider(key="rvo_util").set_value(1.0).run()
    at.number_input(key="rvo_rtx4090-rent_price_per_node_month").set_value(5000.0).run()
    shown = metrics(at)
    # own 4,800 vs rent 5,000 at full use: owning is 200 ÷ 5,000 = 4.0% cheaper; u* = 4,800 ÷ 5,000
    assert shown["Rent per node-month (CNY)"] == "5,000.00"
    assert shown["Savings (own cheaper)"] == "4.0%"
    assert shown["Break-even utilization"] == "96.00%"
    assert any("Owning (rtx4090-own) wins above a time utilization of 96.00%" in plain(s.value) for s in at.success)
    assert any("Edited assumptions" in c.value for c in at.caption)
    engine = make_engine(demo_url)
    with Session(engine) as s:
        assert show_run(s, "hand-elastic-1")["cost_under_offers"][1]["cost"].quantize(Decimal("0.01")) == Decimal("98.63")
    engine.dispose()


def test_run_detail_shows_the_runs_cost(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(run="hand-elastic-1"), "runs")
    engine = make_engine(demo_url)
    with session_scope(engine) as s:
        d = show_run(s, "hand-elastic-1")
    engine.dispose()
    shown = metrics(at)
    assert shown["Run cost (CNY)"] == fmt_cell("cost_actual", d["cost_actual"]) == "98.63"  # 2 × 10 h × 3,600 ÷ 730
    under = at.dataframe[1].value  # cost under every offer
    assert dict(zip(under["offer"], under["run cost (CNY)"])) == {u["offer"]: fmt_cell("cost", u["cost"])
                                                               for u in d["cost_under_offers"]}
    assert dict(zip(under["offer"], under["run cost (CNY)"]))["rtx4090-rent"] == "98.63"


def test_the_run_picked_for_detail_is_kept_in_the_url(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    assert "run" not in at.query_params  # the first run is shown by default: the URL stays as it was
    ids = at.selectbox(key="runs_detail").options
    second = ids[1].split(" — ")[0]
    at.selectbox(key="runs_detail").set_value(second).run()
    assert at.query_params["run"] == second and plain(at.subheader[0].value).startswith(second)
    again = make_app(run=second)  # the copied link opens the same run
    again.run()
    again.switch_page("pages/runs.py").run()
    assert again.selectbox(key="runs_detail").value == second


def test_run_detail_flags_stragglers_and_draws_the_loss(demo_url, app_env):
    engine = make_engine(demo_url)
    with Session(engine) as s:
        run_id = s.exec(select(RunNode.run_id).join(Run, Run.id == RunNode.run_id)
                        .where(RunNode.straggler, Run.status == "succeeded").order_by(RunNode.run_id)).first()
    engine.dispose()
    app_env(demo_url)
    at = run_page(make_app(run=run_id), "runs")
    assert any("Straggler: demo-node05" in plain(w.value) for w in at.warning)
    loss_chart = at.get("vega_lite_chart")[-1].proto  # the last chart on the page: the loss curve
    assert '"loss"' in loss_chart.spec and len(loss_chart.datasets[0].data.data) > 0
    assert not any("No loss samples" in c.value for c in at.caption)


def test_cpu_run_mfu_is_na_cpu(demo_url, app_env):
    app_env(demo_url)
    shown = metrics(run_page(make_app(run="hand-cpu-1"), "runs"))
    assert shown["MFU"] == "n/a (CPU)"
    assert shown["CPU utilization (process, CPU-only run)"] == "97.00%"


def test_runs_filters_by_status(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "runs")
    at.selectbox(key="runs_status").set_value("failed").run()
    table = at.dataframe[0].value
    assert len(table) > 0 and set(table["status"]) == {"failed"}


def test_roi_shows_the_summary_and_projects(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "roi")
    p = with_session(demo_url, lambda x: presented_month(x, MONTH))  # with its goodput account: the waste
    s = p["summary"]
    shown = metrics(at)
    assert shown["Spend (CNY)"] == fmt_cell("actual_cost", s["actual_cost"])
    assert shown["Savings vs the alternative (CNY)"] == fmt_cell("savings_vs_alternative", s["savings_vs_alternative"])
    assert shown["ROI"] == f"{s['roi'] * 100:.2f}%"
    # issue #28: compact on the card (e.g. "23.1 B"), the exact figure on hover
    assert shown["Tokens per 1,000 CNY"] == compact(s["tokens_per_1000"], "tokens_per_1000")
    tokens = next(m for m in at.metric if m.label == "Tokens per 1,000 CNY")
    assert tokens.help == f"Exact: {fmt_cell('tokens_per_1000', Decimal(str(s['tokens_per_1000'])))}."
    assert shown["Waste (CNY)"] == fmt_cell("waste_cost", s["waste_cost"])
    projects = at.dataframe[0].value
    assert list(projects["project"]) == [r["project"] for r in p["projects"]]
    assert list(projects["spend (CNY)"]) == [fmt_cell("cost", r["cost"]) for r in p["projects"]]


def test_strategies_shows_the_ledgers_comparison(demo_url, app_env):
    from trainledger.reports.weekly import strategy_comparison

    app_env(demo_url)
    at = run_page(make_app(), "strategies")
    engine = make_engine(demo_url)
    with session_scope(engine) as s:
        expected = strategy_comparison(s, sweep_id=SWEEP)
    engine.dispose()
    table = at.dataframe[0].value
    assert list(table["run"]) == [r["run_id"] for r in expected["rows"]] == ["sweep-a-3d", "sweep-a-zero1", "sweep-a-zero2"]
    col = "per 1M tokens, rtx4090-rent (CNY)"
    # 2 nodes × 3,600 ÷ 730 per node-hour ÷ (tokens/s × 3,600) × 10⁶; 3d made the most tokens per hour
    assert list(table[col]) == [fmt_cell("cost_per_1m_tokens", r["cost_per_1m_tokens"]["rtx4090-rent"])
                                for r in expected["rows"]] == ["0.0986", "0.1096", "0.1233"]  # 4 decimals: often under a cent
    assert list(table[""]) == ["★ cheapest", "", ""]
    assert list(table["memory per GPU"]) == ["14.0 GiB (CUDA peak allocated)", "21.5 GiB (CUDA peak allocated)",
                                             "17.0 GiB (CUDA peak allocated)"]
    assert list(table["MFU"]) == ["34.00%", "31.00%", "28.00%"]
    assert table["time per epoch"][1] == "2 h"  # 180M tokens per epoch ÷ 25,000 tokens/s
    assert at.selectbox(key="strategies_sweep").value == SWEEP
    assert any(f"trainledger report weekly --sweep {SWEEP}" in plain(c.value) for c in at.caption)


def test_strategies_empty_state(sqlite_url, app_env):
    make_engine(sqlite_url).dispose()
    app_env(sqlite_url)
    at = run_page(make_app(), "strategies")
    assert any("No sweep yet: run `trainledger sweep ...`" in i.value for i in at.info)


def test_planner_marks_what_fits(demo_url, app_env):
    """The seven strategies on the seed cluster: memory per GPU as the planning model predicts it."""
    from trainledger.runs.plan import strategy_table
    from trainledger.store.db import get_engine, session_scope

    app_env(demo_url)
    at = run_page(make_app(), "planner")
    table = next(df.value for df in at.dataframe if list(df.value.columns)[0] == "strategy").set_index("strategy")
    with session_scope(get_engine(demo_url)) as s:
        expected = {r["strategy"]: r for r in strategy_table(s, "llama2-70b", 2e12, "rtx4090-8x", 8)["strategies"]}
    for strategy, r in expected.items():
        assert table.loc[strategy, "memory per GPU (GiB)"] == pytest.approx(r["total_gib"], abs=1e-3)
        assert table.loc[strategy, "fits"] == ("✓ fits" if r["fits"] else "✗ out of memory")


def test_export_page_offers_the_three_formats(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(), "export")
    labels = [b.label for b in at.get("download_button")]
    assert labels[:3] == ["Download CSV", "Download XLSX", "Download JSON"]  # then the chargeback statements
    assert any(f"trainledger report monthly --month {MONTH} --currency CNY --format csv" in c.value for c in at.caption)


@pytest.mark.parametrize("fmt", ["csv", "xlsx", "json"])
def test_export_bytes_are_the_clis(fmt, demo_url, tmp_path, app_env):
    """What the Export page offers for download is what `trainledger report monthly` writes."""
    from trainledger.app.queries import data
    from trainledger.cli.commands import app
    from typer.testing import CliRunner

    out = tmp_path / f"report.{fmt}"
    r = CliRunner().invoke(app, ["report", "monthly", "--month", MONTH, "--format", fmt, "-o", str(out), "--db", demo_url])
    assert r.exit_code == 0, r.output
    assert data.export_bytes(demo_url, MONTH, fmt) == out.read_bytes()


def test_unknown_run_in_the_link_is_one_line(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(run="no-such-run"), "runs")
    assert [plain(e.value) for e in at.error] == ["RUN_ID: no run 'no-such-run' in this ledger; see `trainledger runs list`"]


def test_public_address_without_auth_serves_nothing(demo_url, app_env):
    from streamlit import config

    app_env(demo_url)
    config.set_option("server.address", "0.0.0.0")
    at = make_app()
    at.run()
    assert any("serves nothing" in e.value for e in at.error)
    assert not at.metric


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_an_empty_state(page, sqlite_url, app_env):
    """A new ledger (presets only): every page renders, says what to do, and raises nothing."""
    make_engine(sqlite_url).dispose()
    app_env(sqlite_url)
    at = run_page(make_app(), page)
    assert at.title and not at.error, [e.value for e in at.error]


def test_overview_shows_running_runs_in_the_current_month(sqlite_url, app_env):
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    from trainledger.money.rates.months import month_of
    from trainledger.store.models import RunStatus
    from trainledger.store.types import utcnow

    from tests.helpers import add_run

    engine = make_engine(sqlite_url)
    now = utcnow()
    with session_scope(engine) as s:
        run = add_run(s, "live-1", now - timedelta(hours=2), 2, nodes=2, offer_name="rtx4090-rent")
        run.status, run.ended_at, run.heartbeat_at = RunStatus.running, None, now
    engine.dispose()
    app_env(sqlite_url)
    at = run_page(make_app(month_of(now, ZoneInfo("UTC"))), "overview")
    assert any(h.value == "Running now" for h in at.subheader)
    assert "live-1" in list(at.dataframe[-1].value["id"])
