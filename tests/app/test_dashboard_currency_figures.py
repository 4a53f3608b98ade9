"""Every money figure on the dashboard is in the currency its label names (issue 26, item 1).

The demo ledger of tests/app/helpers.py (CNY offers, CNY→USD 0.138 from June, 0.1401 from November)
with budgets set in CNY and in USD, seen on 2026-11-20 12:00 UTC (November to date, so the forecast
shows). With the sidebar's currency on USD, every money figure of Overview (spend, idle, waste, the
alternatives, the month-end forecast, its range, the team budget banner and the budget table), Runs,
Rent vs own (the fleet-sizing table), ROI, Planner and Export is checked against the ledger's own
figures converted to USD, as `--currency USD` prints them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from trainledger.money.account.monthly import monthly_report
from trainledger.money.outlook.budgets import budget_status, set_budget
from trainledger.money.outlook.forecast import forecast
from trainledger.money.rates.costs import cents
from trainledger.reports.present import fmt_cell

from tests.app.helpers import MONTH, build_ledger, make_app, metrics, plain, run_page, with_session
from tests.helpers import presented_month

NOW = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)
USD = "USD"


def _ledger(url: str) -> str:
    build_ledger(url)

    def budgets(s):
        set_budget(s, "35000")  # team, CNY
        set_budget(s, "20", project="hand", currency=USD)
        s.commit()
    with_session(url, budgets)
    return url


def _money(v) -> str:
    return fmt_cell("cost", v)


def test_overview_forecast_and_budgets_in_usd(sqlite_url, app_env, monkeypatch):
    url = _ledger(sqlite_url)
    app_env(url)
    monkeypatch.setenv("TRAINLEDGER_NOW", NOW.isoformat())
    fc = with_session(url, lambda s: forecast(s, MONTH, now=NOW, currency=USD))
    st_ = with_session(url, lambda s: budget_status(s, MONTH, now=NOW, currency=USD))
    p = with_session(url, lambda s: presented_month(s, MONTH, now=NOW, currency=USD))["summary"]
    at = run_page(make_app(currency=USD), "overview")
    m = metrics(at)
    for label, key in (("Spend", "actual_cost"), ("Idle cost", "idle_cost"), ("Waste", "waste_cost"),
                       ("If owned", "own_cost"), ("If rented elastic", "elastic_cost")):
        assert m[f"{label}, to date (USD)"] == fmt_cell(key, p[key]), label
    assert m["Spend at month end (USD)"] == _money(fc["spend"]["expected"])
    assert m["Idle cost at month end (USD)"] == _money(fc["idle_cost"]["expected"])
    assert any(f"p10–p90 {_money(fc['spend']['p10'])} to {_money(fc['spend']['p90'])} USD" in plain(c.value)
               for c in at.caption)
    team = next(b for b in st_["budgets"] if not b["project"])
    assert _money(team["amount"]) == "4,903.50"  # 35,000 CNY × 0.1401
    banner = [plain(x.value) for x in (*at.success, *at.warning, *at.error) if "Team budget" in x.value]
    assert len(banner) == 1 and f"spent {_money(fc['spend']['to_date'])} of 4,903.50 USD" in banner[0], banner
    table = next(df.value for df in at.dataframe if "budget (USD)" in df.value.columns)
    hand = table[table["project"] == "hand"].iloc[0]
    assert (hand["budget (USD)"], hand["spent to date (USD)"]) == ("20.00", _money(next(
        x["cost"]["to_date"] for x in fc["projects"] if x["project"] == "hand")))
    # in CNY the same page shows the USD budget converted back, never a dollar figure under CNY
    cny = run_page(make_app(currency="CNY"), "overview")
    table = next(df.value for df in cny.dataframe if "budget (CNY)" in df.value.columns)
    assert table[table["project"] == "hand"].iloc[0]["budget (CNY)"] == _money(Decimal(20) / Decimal("0.1401"))
    assert any("spent" in plain(x.value) and "of 35,000.00 CNY" in plain(x.value)
               for x in (*cny.success, *cny.warning, *cny.error))


def test_rent_vs_own_sizing_runs_roi_planner_export_in_usd(demo_url, app_env):
    app_env(demo_url)
    at = run_page(make_app(currency=USD), "rent_vs_own")
    sizing = next(df.value for df in at.dataframe if "nodes owned" in df.value.columns)
    own_col = next(c for c in sizing.columns if c.startswith("if owned"))
    rent_col = next(c for c in sizing.columns if c.startswith("rent elastic"))
    for _, row in sizing.iterrows():
        rep = with_session(demo_url, lambda s: monthly_report(s, row["month"][:7], own="rtx4090-own", currency=USD))
        nt = next(n for n in rep.node_types if n.node_type == "rtx4090-8x")
        # each month at its own rate, and the same "if owned" cost the monthly report shows
        assert (row[own_col], row[rent_col]) == (_money(nt.own_cost), _money(nt.elastic_cost)), row["month"]
    rep = with_session(demo_url, lambda s: monthly_report(s, MONTH, currency=USD))
    p = with_session(demo_url, lambda s: presented_month(s, MONTH, currency=USD))  # with its waste
    roi = metrics(run_page(make_app(currency=USD), "roi"))
    s = p["summary"]
    assert roi["Spend (USD)"] == fmt_cell("actual_cost", s["actual_cost"])
    alternative = next(k for k in roi if k.startswith("Alternative: "))
    assert alternative.endswith("(USD)") and roi[alternative] == fmt_cell("alternative_cost", s["alternative_cost"])
    assert roi["Savings vs the alternative (USD)"] == fmt_cell("savings_vs_alternative", s["savings_vs_alternative"])
    assert roi["Waste (USD)"] == fmt_cell("waste_cost", s["waste_cost"])
    # the account's idle (the fleets' idle less recovery, which waste counts as badput): waste's reason "idle"
    assert roi["of which idle less recovery (USD)"] == fmt_cell("waste_cost", s["waste_by_reason"]["idle"])
    assert not [k for k in roi if "CNY" in k]  # nothing labelled with the ledger's own currency
    runs = run_page(make_app(currency=USD), "runs")
    table = next(df.value for df in runs.dataframe if "cost (USD)" in df.value.columns)
    exact = {r.run_id: r.cost for r in with_session(demo_url, lambda s: monthly_report(s, MONTH, currency=USD, lines=True)).runs}
    shown = dict(zip(table["id"], table["cost (USD)"]))  # each half-up on its own (docs/MONEY.md, Rounding)
    assert len(shown) >= 5 and {rid: Decimal(str(v)) for rid, v in shown.items()} == {
        rid: cents(exact[rid]) for rid in shown}
    export = run_page(make_app(currency=USD), "export")
    summary = export.table[0].value
    assert summary.loc["Currency", "value"] == USD
    assert summary.loc[summary.index.str.startswith("Spend")]["value"].tolist() == [
        fmt_cell("actual_cost", s["actual_cost"])], summary.index.tolist()
    assert summary.loc[summary.index.str.startswith("Idle cost")]["value"].tolist() == [
        fmt_cell("idle_cost", s["idle_cost"])], summary.index.tolist()
    plan = metrics(run_page(make_app(currency=USD), "planner"))["Predicted cost"]
    cny_plan = metrics(run_page(make_app(currency="CNY"), "planner"))["Predicted cost"]
    as_number = lambda text: Decimal(text.split()[0].replace(",", ""))  # noqa: E731
    # the same plan at the list prices converted at today's rate (CNY→USD 0.1401 from November)
    assert plan.endswith(" USD") and abs(as_number(plan) - as_number(cny_plan) * Decimal("0.1401")) <= Decimal("0.01")
