"""Overview: this month's spend, hours, the three utilizations, idle and waste, own vs rent, the month-end
forecast, budgets per project, 12-month trends.

Numbers: ``presented_report(monthly_report(month))`` (what ``trainledger report
monthly`` exports; a month that has not ended is to date); own vs rent through
``trainledger.money.rates.costs.savings`` on the same report; the forecast and budgets are
``trainledger forecast`` and ``trainledger budget check``.
"""

from __future__ import annotations

from decimal import Decimal

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, anomalies_view, budgets_view, figures, goodput_view, period_view, ui
from trainledger.app.views.scope_view import overview as scoped_overview
from trainledger.money.allocation.capacity import warning_text
from trainledger.money.goodput.waste import IDLE
from trainledger.money.rates import costs
from trainledger.reports.present import fmt_cell

ident = access.page_gate()
url = data.ledger_url()
period, month = ui.period_picker(url)
currency = ui.currency_picker(url)
if not ident.team_scope:  # a project-scoped user: their projects' lines, no team totals (docs/SCOPES.md)
    st.title("Overview")
    scoped_overview(url, month, currency, ident)
    st.stop()
rep = data.report(url, month, currency=currency)
p = data.presented(url, month, currency=currency)
s = p["summary"]
cur = ui.md(s["currency"])  # a currency code; escaped like every ledger value shown in Markdown
has_runs = s["runs"] > 0

st.title("Overview")
pr = period_view.report(url, period, currency)
if period.kind != "month":  # a quarter, a year to date or a date range: its totals, then its latest month below
    # (but "Spend by project" sums the period's whole months)
    period_view.caption(pr, cur)
    period_view.overview_headline(pr, cur)
    period_view.by_month(pr, cur)
    st.subheader(f"{month}, the period's latest month")
st.caption(f"{ui.period_text(month, s)} · calendar month in {ui.md(s['timezone'])} · money in {cur} · the same figures as "
           f"`trainledger report monthly --month {month} --currency {cur}`")
if s.get("fx_rates"):
    st.caption("Converted at: " + "; ".join(ui.md(r) for r in s["fx_rates"]))
ui.to_date_note(month, s)
if s.get("unpriced_runs"):  # never priced as something else, never 0.00: said, with the node-hours left out
    st.warning(f"{s['unpriced_runs']:,} runs are not costed ({ui.number('node_hours', s['not_costed_node_hours'])} "
               "node-hours, in no figure below): "
               + "; ".join(([f"{s['runs_without_node_type']:,} without a node type"] if s.get("runs_without_node_type") else [])
                           + [f"no offer for node type {ui.md(n)}" for n in s.get("unpriced_node_types", [])])
               + ". `trainledger report monthly` lists them.")

if not has_runs and not rep.node_types:
    ui.empty(f"No runs and no fleet in {month}. Import runs (`trainledger import runs.csv`), track one "
             "(`trainledger train`), or try the demo (`trainledger demo`, then `trainledger dashboard --demo`).")

OPTION = {"own": "owning", "rent_elastic": "renting elastic", "rent_reserved": "renting reserved"}
c = st.columns(5)
delta = period.kind == "month"  # a month's cards show its change against the month before (same days while it runs)


def change(key: str) -> dict:
    return {"delta": ui.change_text(pr, key), "delta_color": period_view.delta_color(key)} if delta else {}


c[0].metric(ui.card("spend", cur, s), ui.money("actual_cost", s["actual_cost"]), border=True, **change("actual_cost"),
            help=ui.help_of("spend") + " Owned or reserved fleets in full (to now while the month runs), elastic runs "
                 "as billed.")
c[1].metric(ui.card("idle_cost", cur, s), ui.money("idle_cost", s["idle_cost"]), border=True, **change("idle_cost"),
            help=ui.help_of("idle_cost"))
c[2].metric(ui.card("waste_cost", cur, s), ui.money("waste_cost", s["waste_cost"]), border=True, **change("waste_cost"),
            help="Everything the month paid for that bought no kept training progress: " + ui.help_of("waste_cost")
                 + " This month by reason: "
                 + ", ".join(f"{k.replace('_', ' ')} {ui.money('waste_cost', v)}" for k, v in s["waste_by_reason"].items()
                             if Decimal(v)))
c[3].metric(ui.card("own_cost", cur, s), ui.money("own_cost", s["own_cost"]), border=True, help=ui.help_of("own_cost"))
c[4].metric(ui.card("elastic_cost", cur, s), ui.money("elastic_cost", s["elastic_cost"]), border=True,
            help=ui.help_of("elastic_cost"))

c = st.columns([1.3, 1, 1.6, 0.9, 1.3])
c[0].metric(ui.card("gpu_hours", summary=s), ui.number("gpu_hours", s["gpu_hours"]), border=True, **change("gpu_hours"),
            help=ui.help_of("gpu_hours"))
c[4].metric(ui.card("co2e_kg", summary=s), ui.number("co2e_kg", s["co2e_kg"]), border=True,
            help=f"Energy ({s['co2e_basis']}: measured where collected, else nominal power × node-hours) × grid "
                 "intensity" + (" — the default intensity is an assumption, set yours under Settings." if
                                s["carbon_intensity_assumed"] else "."))
c[1].metric(ui.card("time_utilization", summary=s), ui.pct(s["time_utilization"]), border=True, help=ui.TIME_UTIL_HELP,
            **change("time_utilization"))
c[2].metric(ui.GPU_UTIL, ui.pct(s["gpu_util_mean"]), border=True, help=ui.GPU_UTIL_HELP, **change("gpu_util_mean"))
c[3].metric(ui.MFU, ui.mfu_text(s["mfu_mean"], s["gpu_util_sources"], has_runs), border=True, help=ui.MFU_HELP)
notes = []
if s["gpu_util_coverage"] is not None and s["gpu_util_coverage"] < 1:
    notes.append(f"GPU-Util measured on {ui.pct(s['gpu_util_coverage'])} of GPU-hours.")
if "cpu" in s["gpu_util_sources"]:
    notes.append("Some runs were CPU-only: their busy share is process CPU utilization, and their MFU is null.")
if notes:
    st.caption(" ".join(notes))

own, elastic = rep.summary["own_cost"], rep.summary["elastic_cost"]
if own is not None and elastic is not None and (own or elastic):
    cheaper, saving, pct_ = costs.savings(own, elastic)
    span = s['period'] if s.get("is_partial") else "this month"
    if cheaper == "b":
        text = (f"renting elastic would have cost **{fmt_cell('savings', saving)} {cur} less** than owning "
                f"{span} ({fmt_cell('savings_pct', pct_)} cheaper).")
    elif cheaper == "a":
        text = (f"owning costs **{fmt_cell('savings', saving)} {cur} less** than renting elastic {span} "
                f"({fmt_cell('savings_pct', pct_)} cheaper).")
    else:
        text = f"the same {span}."
    cheapest = OPTION.get(s["cheapest_option"])
    st.markdown(f"**Own vs rent:** {text}" + (f" Cheapest of all options: **{cheapest}**." if cheapest else ""))

goodput_view.overview_figure(url, month, currency, s)  # issue #25: what the spend bought

if p["node_types"]:
    st.dataframe(ui.frame(p["node_types"], ["node_type", "node_hours", "gpu_hours", "peak_nodes", "actual_cost",
                                            "idle_cost", "own_cost", "elastic_cost", "reserved_cost"],
                          {"node_type": "node type"}, currency=cur), hide_index=True)

REASON_LABELS = {"lost_work": "lost work (failed, crashed, cancelled runs)", "data_wait": "data wait",
                 "straggler_wait": "straggler wait", "checkpoint_save": "checkpoint saves",
                 "checkpoint_restore": "checkpoint restores", IDLE: "idle fleet"}


def capacity_section() -> None:
    """A data-quality warning per node type whose runs used more nodes at once than its fleet holds."""
    for w in data.capacity_warnings(url, month):
        st.warning(f"Data quality: {ui.md(warning_text(w))}.")


def waste_section() -> None:
    """Waste by reason: the goodput account's badput categories and idle (in cents: with ``rounding`` when needed
    they add up to the waste), each category linked to its runs, the most of it first."""
    reasons = {k: v for k, v in s["waste_by_reason"].items() if Decimal(v)}
    st.subheader(f"Waste by reason, {month}")
    st.caption(f"Waste {ui.money('waste_cost', s['waste_cost'])} {cur} = badput + idle = the reasons below (reasons "
               "at 0.00 left out), the goodput account's categories: failed, crashed and cancelled runs are lost "
               "work (counted from their last checkpoint, from their start when they never checkpointed); straggler "
               "and data waits are priced at the run's cost. Click a reason for its runs.")
    items = list(reasons.items())
    for start in range(0, len(items), 5):
        cols = st.columns(5)
        for col, (key, value) in zip(cols, items[start:start + 5]):
            col.metric(REASON_LABELS.get(key, key.replace("_", " ")), ui.money("waste_cost", value), border=True)
            if key not in (IDLE, "rounding"):
                ui.runs_link("its runs", where=col, goodput=key, month=month, order="wasted")  # fits a narrow card


def spend_section() -> None:
    """Spend by project with idle as its own line: the lines add up to the month's spend. For a quarter, a year to
    date or a range: summed over the period's whole months (the period report's ``months``)."""
    months = tuple(pr.get("months") or ()) if period.kind != "month" else ()
    if months:
        st.subheader(f"Spend by project, {ui.md(pr['period'])} (whole months {months[0]} to {months[-1]})")
        figures.spend_by_project(url, month, currency, cur, None, "spend_by_project", months=months)
        return
    st.subheader(f"Spend by project, {month}")
    figures.spend_by_project(url, month, currency, cur, s["actual_cost"], "spend_by_project")


capacity_section()
if has_runs or rep.node_types:
    spend_section()
    waste_section()


STATE = {"ok": "ok", "at_risk": "at risk", "over": "over"}


def forecast_section() -> None:
    """The month-end forecast of a month that has not ended: expected figures, p10-p90, the method."""
    f = data.forecast(url, month, currency)
    st.subheader(f"Month-end forecast, {month}")
    c = st.columns(3)
    for col, key in ((c[0], "spend"), (c[1], "idle_cost"), (c[2], "gpu_hours")):
        kind = "cost" if key != "gpu_hours" else "gpu_hours"
        col.metric(ui.card(key, cur if kind == "cost" else None, qualifier=" at month end"),
                   fmt_cell(kind, f[key]["expected"]), border=True,
                   help=f"p10 {fmt_cell(kind, f[key]['p10'])}, p90 {fmt_cell(kind, f[key]['p90'])}; "
                        f"to date {fmt_cell(kind, f[key]['to_date'])}. `trainledger forecast --month {month} --currency {cur}`.")
    st.caption(f"Expected, with p10–p90 {fmt_cell('cost', f['spend']['p10'])} to {fmt_cell('cost', f['spend']['p90'])} {cur} "
               f"for the spend. {f['method']['text']}")
    team = next((b for b in data.budget_status(url, month, currency)["budgets"] if not b["project"]), None)
    ui.show_chart(spend_path_chart(f, team["amount"] if team else None))


def spend_path_chart(f: dict, budget) -> alt.Chart:
    """Spend so far day by day, the straight line to the expected month end with its p10-p90, the team's budget."""
    end = pd.Timestamp(f["period_end"]) + pd.Timedelta(hours=float(f["remaining_hours"]))
    start = pd.Timestamp(f["period_end"]) - pd.Timedelta(hours=float(f["elapsed_hours"]))
    path = [{"time": start, "spend": 0.0, "series": "spent"}]
    path += [{"time": pd.Timestamp(d["end"]), "spend": float(d["spend"]), "series": "spent"} for d in f["daily"]]
    path += [{"time": pd.Timestamp(f["period_end"]), "spend": float(f["spend"]["to_date"]), "series": "forecast"},
             {"time": end, "spend": float(f["spend"]["expected"]), "series": "forecast"}]
    x = alt.X("time:T", title=None)
    y = alt.Y("spend:Q", title=f"spend ({cur})")
    chart = alt.Chart(pd.DataFrame(path)).mark_line(point=True).encode(
        x=x, y=y, strokeDash=alt.StrokeDash("series:N", title=None, legend=alt.Legend(orient="bottom"),
                                            scale=alt.Scale(domain=["spent", "forecast"], range=[[1, 0], [5, 4]])),
        tooltip=[alt.Tooltip("time:T"), "series", alt.Tooltip("spend:Q", format=",.2f")])
    band = alt.Chart(pd.DataFrame([{"time": end, "p10": float(f["spend"]["p10"]), "p90": float(f["spend"]["p90"])}])
                     ).mark_errorbar(ticks=True).encode(x=x, y=alt.Y("p10:Q", title=f"spend ({cur})"), y2="p90:Q")
    layers = [chart, band]
    if budget is not None:
        layers.append(alt.Chart(pd.DataFrame([{"budget": float(budget)}])).mark_rule(color="red", strokeDash=[4, 4])
                      .encode(y="budget:Q", tooltip=[alt.Tooltip("budget:Q", format=",.2f")]))
    return alt.layer(*layers).properties(height=260)


def budget_section() -> None:
    """Each budget of the month (team and projects) and the per-project table: to date, forecast, budget, state;
    a project's row (selected, or its link under the table) opens Runs filtered to it in the month."""
    b = data.budget_status(url, month, currency)
    st.subheader(f"Budgets, {month}")
    if not b["budgets"]:
        st.caption(f"No budget applies to {month}. Set one below (leads) or with `trainledger budget set AMOUNT [--project P] "
                   "[--month YYYY-MM]`; `trainledger budget check` exits 1 when one is at risk or over (for cron).")
        return
    f = data.forecast(url, month, currency)
    by_project = {x["project"]: x for x in b["budgets"]}
    team = by_project.get("")
    if team is not None:
        line = (f"**Team budget: {STATE[team['state']]}** · spent {fmt_cell('cost', team['cost']['to_date'])} of "
                f"{fmt_cell('cost', team['amount'])} {cur} ({fmt_cell('used_pct', team['used_pct'])}); month end "
                f"{fmt_cell('cost', team['cost']['expected'])} expected")
        if team["crossed_on"]:
            line += f"; {'over since' if team['state'] == 'over' else 'crosses it on'} {team['crossed_on']}"
        if team["state"] == "at_risk" and team["threshold_reached"]:
            line += f"; spent to date has reached its {team['threshold_pct']}% alert threshold"
        (st.error if team["state"] == "over" else st.warning if team["state"] == "at_risk" else st.success)(line)
    rows, names = [], []  # names: each row's project (None for runs without one)
    for p in f["projects"]:
        names.append(p["project"] or None)
        bud = by_project.get(p["project"])
        rows.append({"project": p["project"] or "(none)", "to_date_cost": p["cost"]["to_date"],
                     "forecast_cost": p["cost"]["expected"], "p90_cost": p["cost"]["p90"],
                     "budget_cost": bud["amount"] if bud else None, "used": fmt_cell("used_pct", bud["used_pct"]) if bud else "",
                     "alert": f"{bud['threshold_pct']}%" if bud else "",
                     "state": STATE[bud["state"]] if bud else "no budget",
                     "crossed_on": str(bud["crossed_on"]) if bud and bud["crossed_on"] else ""})
    for name, bud in by_project.items():  # budgets of projects with no cost this month
        if name and name not in {p["project"] for p in f["projects"]}:
            names.append(name)
            rows.append({"project": name, "to_date_cost": 0, "forecast_cost": 0, "p90_cost": 0, "budget_cost": bud["amount"],
                         "used": fmt_cell("used_pct", bud["used_pct"]), "alert": f"{bud['threshold_pct']}%",
                         "state": STATE[bud["state"]], "crossed_on": ""})
    table = ui.frame(rows, ["project", "to_date_cost", "forecast_cost", "p90_cost", "budget_cost", "used", "alert", "state",
                            "crossed_on"],
                     {"to_date_cost": f"spent to date ({s['currency']})",
                      "forecast_cost": f"month end, expected ({s['currency']})", "p90_cost": f"p90 ({s['currency']})",
                      "budget_cost": f"budget ({s['currency']})", "alert": "alert at",
                      "crossed_on": "over since / crosses on"})
    picked = st.dataframe(table, hide_index=True, key="budget_table", on_select="rerun", selection_mode="single-row")
    if picked is not None and picked.selection.rows:
        figures.open_runs(names[picked.selection.rows[0]], month)
    figures.project_links([n for n in names if n and n in by_project], month, "Runs against the budget of {name}")
    st.caption("at risk: the month-end forecast is above the budget, or spent to date has reached its alert threshold "
               "(alert at, when below 100%); over: spent to date above it. Click a project's row or link for its runs "
               f"in {month}. The same as `trainledger budget check --month {month} --currency {cur}`.")


if s.get("is_partial"):
    forecast_section()
budget_section()
budgets_view.manage(url, month)  # issue #28: leads set budgets here
anomalies_view.overview_section(url, month, currency)  # issue #28: days far above their trailing baseline


@st.fragment(run_every="30s")
def running_now() -> None:
    rows = data.runs(url, month=None, project=None, user=None, status="running", strategy=None, limit=20, offset=0)
    st.subheader("Running now")
    if not rows:
        st.caption("No run is running (refreshes every 30 s).")
        return
    st.dataframe(ui.frame(rows, ["id", "name", "project", "strategy", "nodes", "started_at", "node_hours",
                                 "gpu_util_mean", "mfu"]), hide_index=True)


if month == data.current_month(url):
    running_now()

# --- 12-month trend -------------------------------------------------------------------
months = data.trend_months(url, month)
st.subheader(f"Trend, {months[0]} to {months[-1]}")
money_rows, util_rows, hour_rows = [], [], []
trends = data.trend(url, tuple(months), currency)
missing = [t["month"] for t in trends if t["summary"] is None]
if missing:
    st.caption(f"Not shown in {cur} (no exchange rate): {', '.join(missing)}.")
for t in trends:
    sm = t["summary"]
    if sm is None:
        continue
    m = t["month"] + (" (to date)" if sm.get("is_partial") else "")
    for key in ("actual_cost", "own_cost", "elastic_cost", "idle_cost"):
        label = ui.label_of(key)
        if sm[key] is not None:
            money_rows.append({"month": m, "series": label, "cost": float(Decimal(sm[key]))})
    for label, key in ((ui.TIME_UTIL, "time_utilization"), (ui.GPU_UTIL, "gpu_util_mean"), (ui.MFU, "mfu_mean")):
        if sm[key] is not None:
            util_rows.append({"month": m, "measure": label, "percent": sm[key] * 100})
    hour_rows.append({"month": m, "GPU-hours": sm["gpu_hours"]})

left, right = st.columns(2)
with left:
    st.markdown(f"**Spend vs the alternatives ({cur})**")
    if money_rows:
        ui.show_chart(ui.grouped_bars(pd.DataFrame(money_rows), "month", "cost", "series", y_title=cur))
with right:
    st.markdown("**The three utilizations (%)**")
    if util_rows:
        ui.show_chart(ui.lines(pd.DataFrame(util_rows), "month", "percent", "measure", x_title=None,
                               y_title="%", x_type="N", y_format=".2f"))
    else:
        st.caption("No utilization recorded in these months.")
st.markdown("**GPU-hours per month**")
st.bar_chart(pd.DataFrame(hour_rows), x="month", y="GPU-hours", y_label="GPU-hours", height=280)
