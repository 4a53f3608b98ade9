"""Overview: this month's spend, hours, the three utilizations, idle and waste, own vs rent, 12-month trends.

Numbers: ``presented_report(monthly_report(month))`` (what ``trainledger report
monthly`` exports); own vs rent through ``ledger.money.costs.savings`` on the same report.
"""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st

from app import access, data, ui
from ledger.money import costs
from ledger.reports.present import fmt_cell

access.page_gate()
url = data.ledger_url()
month = ui.month_picker(url)
rep = data.report(url, month)
p = data.presented(url, month)
s = p["summary"]
cur = s["currency"]
has_runs = s["runs"] > 0

st.title("Overview")
st.caption(f"{month} · calendar month in {s['timezone']} · money in {cur} · the same figures as "
           f"`trainledger report monthly --month {month}`")

if not has_runs and not rep.node_types:
    ui.empty(f"No runs and no fleet in {month}. Import runs (`trainledger import runs.csv`), track one "
             "(`trainledger train`), or try the demo (`trainledger demo --db sqlite:///demo.db`).")

OPTION = {"own": "owning", "rent_elastic": "renting elastic", "rent_reserved": "renting reserved"}
c = st.columns(5)
c[0].metric(f"Spend ({cur})", ui.money("actual_cost", s["actual_cost"]), border=True,
            help="What the month cost under the offers actually used: owned or reserved fleets in full "
                 "(runs + idle), elastic runs as billed.")
c[1].metric(f"Idle cost ({cur})", ui.money("idle_cost", s["idle_cost"]), border=True,
            help="Fleet node-hours no run used, at the idle rate.")
c[2].metric(f"Waste ({cur})", ui.money("waste_cost", s["waste_cost"]), border=True,
            help="Lost work (failed, crashed and cancelled runs since their last checkpoint, or since their start "
                 "when they never checkpointed) + idle cost. By reason: "
                 + ", ".join(f"{k.replace('_', ' ')} {ui.money('waste_cost', v)}" for k, v in s["waste_by_reason"].items()))
c[3].metric(f"If owned ({cur})", ui.money("own_cost", s["own_cost"]), border=True,
            help="The same usage on an owned fleet (the configured fleet, else sized to the peak).")
c[4].metric(f"If rented elastic ({cur})", ui.money("elastic_cost", s["elastic_cost"]), border=True,
            help="The same runs rented elastic: only used node-hours, billed per run.")

c = st.columns([1, 1, 1.5, 1])
c[0].metric("GPU-hours", ui.number("gpu_hours", s["gpu_hours"]), border=True,
            help="Node-hours in runs × GPUs per node.")
c[1].metric(ui.TIME_UTIL, ui.pct(s["time_utilization"]), border=True, help=ui.TIME_UTIL_HELP)
c[2].metric(ui.GPU_UTIL, ui.pct(s["gpu_util_mean"]), border=True, help=ui.GPU_UTIL_HELP)
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
    if cheaper == "b":
        text = (f"renting elastic would have cost **{fmt_cell('savings', saving)} {cur} less** than owning "
                f"this month ({fmt_cell('savings_pct', pct_)} cheaper).")
    elif cheaper == "a":
        text = (f"owning costs **{fmt_cell('savings', saving)} {cur} less** than renting elastic this month "
                f"({fmt_cell('savings_pct', pct_)} cheaper).")
    else:
        text = "the same this month."
    cheapest = OPTION.get(s["cheapest_option"])
    st.markdown(f"**Own vs rent:** {text}" + (f" Cheapest of all options: **{cheapest}**." if cheapest else ""))

if p["node_types"]:
    st.dataframe(ui.frame(p["node_types"], ["node_type", "node_hours", "gpu_hours", "peak_nodes", "actual_cost",
                                            "idle_cost", "own_cost", "elastic_cost", "reserved_cost"],
                          {"node_type": "node type", "node_hours": "node-hours", "gpu_hours": "GPU-hours",
                           "peak_nodes": "peak nodes", "actual_cost": "spend", "idle_cost": "idle",
                           "own_cost": "if owned", "elastic_cost": "if rented elastic",
                           "reserved_cost": "if reserved"}), hide_index=True)


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
for t in data.trend(url, tuple(months)):
    m, sm = t["month"], t["summary"]
    for label, key in (("Spend", "actual_cost"), ("If owned", "own_cost"), ("If rented elastic", "elastic_cost"),
                       ("Idle", "idle_cost")):
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
st.bar_chart(pd.DataFrame(hour_rows), x="month", y="GPU-hours", height=220)
