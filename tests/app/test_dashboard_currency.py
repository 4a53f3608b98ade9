"""The sidebar's currency selector changes what every page shows; Settings shows price history, rates and carbon.

AppTest on the demo ledger (tests/app/helpers.py: CNY offers, CNY→USD rates from June and November).
Each figure is checked against the ledger function the CLI prints with ``--currency USD``.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

D = Decimal

from trainledger.money.account.compare import compare_node_type
from trainledger.money.account.monthly import monthly_report
from trainledger.reports.present import fmt_cell
from trainledger.runs.registry import show_run

from tests.app.helpers import MONTH, build_ledger, make_app, metrics, plain, run_page, with_session

_with = with_session


def test_the_currency_selector_changes_every_page(demo_url, app_env):
    app_env(demo_url)
    usd = _with(demo_url, lambda s: monthly_report(s, MONTH, currency="USD"))
    spend = fmt_cell("actual_cost", usd.summary["actual_cost"])
    # the selector on Overview, kept when moving to another page
    at = run_page(make_app(), "overview")
    assert at.selectbox(key="currency_picker").value == "CNY" and "Spend (CNY)" in metrics(at)
    at.selectbox(key="currency_picker").select("USD").run()
    assert metrics(at)["Spend (USD)"] == spend
    assert any("Converted at: CNY→USD 0.1401, rate from 2026-11-01" in plain(c.value) for c in at.caption)
    at.switch_page("pages/roi.py").run()
    assert at.selectbox(key="currency_picker").value == "USD" and metrics(at)["Spend (USD)"] == spend
    # every page that shows money, opened with ?currency=USD
    detail = _with(demo_url, lambda s: show_run(s, "hand-elastic-1", "USD"))
    at = run_page(make_app(currency="USD", run="hand-elastic-1"), "runs")
    assert metrics(at)["Run cost (USD)"] == fmt_cell("cost_actual", detail["cost_actual"]) == "13.82"  # 98.63 CNY × 0.1401
    rvo = run_page(make_app(currency="USD"), "rent_vs_own")
    u = Decimal(str(rvo.slider(key="rvo_util").value))
    compare = _with(demo_url, lambda s: compare_node_type(s, "rtx4090-8x", u, currency="USD"))
    assert metrics(rvo)["Rent per node-month (USD)"] == fmt_cell("rent_per_node_month", compare["rent_per_node_month"])
    assert compare["rent_per_node_month"] == 3600 * D("0.1401") * u  # the list price at today's rate
    export = run_page(make_app(currency="USD"), "export")
    assert export.table[0].value.loc["Currency", "value"] == "USD"  # the summary, with the dashboard's labels
    assert any(plain(c.value) == "Converted at: " + "; ".join(usd.summary["fx_rates"]) for c in export.caption)
    strategies = run_page(make_app(currency="USD"), "strategies")
    assert any("per 1M tokens, rtx4090-rent (USD)" in str(df.value.columns.tolist()) for df in strategies.dataframe)
    cny_plan = metrics(run_page(make_app(), "planner"))["Predicted cost"]
    usd_plan = metrics(run_page(make_app(currency="USD"), "planner"))["Predicted cost"]
    assert cny_plan.endswith(" CNY") and usd_plan.endswith(" USD")
    as_number = lambda text: D(text.split()[0].replace(",", ""))  # noqa: E731
    assert abs(as_number(usd_plan) - as_number(cny_plan) * D("0.1401")) <= D("0.01")  # the same plan, at today's rate


def test_a_month_without_a_rate_is_refused_in_one_line(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app("2026-05", currency="USD"), "overview")
    assert [plain(e.value) for e in at.error] == [
        "--currency: no CNY→USD exchange rate in force on 2026-05-01 (UTC); add one with "
        "`trainledger fx set CNY USD RATE --from 2026-05-01` (or `fx import rates.csv`)"]
    assert not at.metric  # no unconverted figure under the dollar sign


def test_settings_show_price_history_rates_and_carbon_and_add_a_version(sqlite_url, app_env):
    build_ledger(sqlite_url)
    app_env(sqlite_url)
    at = run_page(make_app(), "settings")
    at.selectbox(key="set_history_offer").select("rtx4090-rent").run()
    history = next(df.value for df in at.dataframe if "valid from" in df.value.columns)
    assert history[["version", "Price per node-month"]].values.tolist() == [[1, "3,600.00"]]
    rates = next(df.value for df in at.dataframe if "1 base in quote" in df.value.columns)
    assert rates[["base", "quote", "1 base in quote"]].values.tolist() == [["CNY", "USD", "0.138"], ["CNY", "USD", "0.1401"]]
    carbon = next(df.value for df in at.dataframe if "gCO2e/kWh" in df.value.columns)
    assert carbon[["scope", "gCO2e/kWh", "assumed"]].values.tolist() == [["default", "475", True]]
    # a new price from November 15 (in the past): refused without the box, naming the months; saved with it
    at.selectbox(key="set_offer_pick").select("rtx4090-rent").run()
    prefix = "offer_rtx4090-rent_rent_elastic"
    at.text_input(key=f"{prefix}_price_per_node_month").input("4380")
    at.date_input(key=f"{prefix}_valid_from").set_value(date(2026, 11, 15))
    next(b for b in at.button if b.label == "Save offer").click().run()
    assert len(at.error) == 1 and plain(at.error[0].value).startswith("valid from: 2026-11-15 00:00 (UTC) is in the past: "
                                                               "the new price would rewrite 2026-11, 2026-12")
    at.checkbox(key=f"{prefix}_retro").check()
    next(b for b in at.button if b.label == "Save offer").click().run()
    assert [plain(s.value) for s in at.success][0].startswith("Saved offer rtx4090-rent. Re-costed 2026-11, 2026-12")
    at.selectbox(key="set_history_offer").select("rtx4090-rent").run()
    history = next(df.value for df in at.dataframe if "valid from" in df.value.columns)
    assert history[["version", "Price per node-month"]].values.tolist() == [[1, "3,600.00"], [2, "4,380.00"]]
    nov = _with(sqlite_url, lambda s: {r.run_id: r.cost for r in monthly_report(s, MONTH).runs})
    assert fmt_cell("cost", nov["hand-elastic-1"]) == "120.00"  # Nov 20: 2 × 10 h × 4,380/730
