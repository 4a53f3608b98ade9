"""Monthly ROI: spend, savings vs the alternative, output per spend and waste, per month and per project.

Numbers: ``presented_report(monthly_report(month), its goodput account)`` — the summary and the
project lines of the monthly export (waste = badput + idle; a project's waste: its runs' badput).
"""

from __future__ import annotations

from decimal import Decimal

import pandas as pd
import streamlit as st
from trainledger.app.queries import data, invoices
from trainledger.app.views import access, figures, period_view, plain_words, ui

OPTION = {"own": "own fleet", "rent_elastic": "rent elastic", "rent_reserved": "rent reserved", None: ui.DASH}

access.team_only(access.page_gate(), "Monthly ROI")  # team totals: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
period, month = ui.period_picker(url)
currency = ui.currency_picker(url)
p = data.presented(url, month, currency=currency)
s = p["summary"]
cur = ui.md(s["currency"])  # a currency code; escaped like every ledger value shown in Markdown
st.title("Monthly ROI")
pr = period_view.report(url, period, currency)
if period.kind != "month":  # a quarter, a year to date or a date range: its totals, then its latest month below
    period_view.caption(pr, cur)
    period_view.roi_headline(pr, cur)
    period_view.by_month(pr, cur)
    st.subheader(f"{month}, the period's latest month")
st.caption(f"{ui.period_text(month, s)} · ROI = (cost of the alternative − cost of the chosen option) ÷ cost of the "
           "chosen option")
ui.to_date_note(month, s)
basis = invoices.cost_basis_note(url, month, currency)
if basis:
    st.caption(basis)

if not s["runs"] and s["actual_cost"] == "0.00":
    ui.empty(f"Nothing was spent in {month}: no runs and no fleet.")
else:
    c = st.columns(4)
    monthly = period.kind == "month"  # a month's cards: the change against the month before (same days while it runs)
    c[0].metric(ui.card("spend", cur, s), ui.money("actual_cost", s["actual_cost"]), border=True,
                help=f"Chosen option: {OPTION[s['chosen_option']]}.",
                delta=ui.change_text(pr, "actual_cost") if monthly else None, delta_color="inverse")
    c[1].metric(ui.to_date(f"Alternative: {OPTION[s['alternative_option']]} ({cur})", s),
                ui.money("alternative_cost", s["alternative_cost"]), border=True)
    c[2].metric(ui.card("savings_vs_alternative", cur, s), ui.money("savings_vs_alternative", s["savings_vs_alternative"]),
                border=True, help=ui.help_of("savings_vs_alternative") + " Negative: the alternative would have been cheaper.")
    c[3].metric(ui.card("roi", summary=s), ui.pct(s["roi"]), border=True,
                help=ui.help_of("roi") + " Both options over the same hours: the part of the month elapsed while it runs.")
    c = st.columns([1.6, 1.3, 1, 1])
    plain_words.compact_metric(c[0], f"Tokens per 1,000 {cur}", "tokens_per_1000", s["tokens_per_1000"], border=True)
    plain_words.compact_metric(c[1], f"Useful GPU-hours per 1,000 {cur}", "useful_gpu_hours_per_1000",
                               s["useful_gpu_hours_per_1000"], border=True,
                               help="GPU-hours × GPU-Util (NVML/DCGM busy share), per 1,000 of spend.")
    c[2].metric(ui.card("waste_cost", cur), ui.money("waste_cost", s["waste_cost"]), border=True,
                delta=ui.change_text(pr, "waste_cost") if monthly else None, delta_color="inverse",
                help=ui.help_of("waste_cost"))
    c[3].metric("of which " + ui.column("account_idle_cost", cur), ui.money("waste_cost", (s.get("waste_by_reason") or {}).get("idle")),
                border=True, help=ui.help_of("account_idle_cost"))
    if s["savings_vs_alternative"] is not None and Decimal(s["savings_vs_alternative"]) < 0:
        st.warning(f"The alternative ({OPTION[s['alternative_option']]}) would have cost "
                   f"{ui.money('savings', -Decimal(s['savings_vs_alternative']))} {cur} less "
                   + (f"so far this month, {s['period']}." if s.get("is_partial") else "this month."))

st.subheader("Per project")
alt_key = "cost_if_elastic" if s["alternative_option"] == "rent_elastic" else "cost_if_own"
projects = []
for row in p["projects"]:
    savings = None
    if row[alt_key] is not None:
        savings = Decimal(row[alt_key]) - Decimal(row["cost"])
    projects.append({**row, "savings_vs_alternative": savings})
if projects:
    st.dataframe(ui.frame(projects, ["project", "runs", "gpu_hours", "tokens", "cost", alt_key, "savings_vs_alternative",
                                     "waste_cost", "tokens_per_1000", "useful_gpu_hours_per_1000"],
                          {"gpu_hours": "GPU-hours", "cost": f"spend ({cur})",
                           alt_key: f"if {OPTION[s['alternative_option']]} ({cur})",
                           "savings_vs_alternative": f"savings ({cur})", "waste_cost": f"waste ({cur})",
                           "tokens_per_1000": f"tokens per 1,000 {cur}",
                           "useful_gpu_hours_per_1000": f"useful GPU-h per 1,000 {cur}"}), hide_index=True)
    bars = [{"project": r["project"] or "(none)", "series": label, "cost": float(Decimal(r[key]))}
            for r in projects for label, key in (("spend", "cost"), ("waste", "waste_cost"))]
    ui.show_chart(ui.grouped_bars(pd.DataFrame(bars), "project", "cost", "series", y_title=cur, height=280))
else:
    st.caption("No project used the cluster this month.")

st.subheader("Spend by project, with idle")
figures.spend_by_project(url, month, currency, cur, s["actual_cost"], "roi_spend_by_project")

months = data.trend_months(url, month)
st.subheader(f"Trend, {months[0]} to {months[-1]}")
money_rows, roi_rows = [], []
for t in data.trend(url, tuple(months), currency):
    sm = t["summary"]
    if sm is None:  # no exchange rate for that month
        continue
    m = t["month"] + (" (to date)" if sm.get("is_partial") else "")
    money_rows.append({"month": m, "series": "Spend", "cost": float(Decimal(sm["actual_cost"]))})
    if sm["alternative_cost"] is not None:
        money_rows.append({"month": m, "series": f"Alternative ({OPTION[sm['alternative_option']]})",
                           "cost": float(Decimal(sm["alternative_cost"]))})
    if sm["roi"] is not None:
        roi_rows.append({"month": m, "measure": "ROI", "percent": sm["roi"] * 100})
left, right = st.columns(2)
with left:
    st.markdown(f"**Spend vs the alternative ({cur})**")
    ui.show_chart(ui.grouped_bars(pd.DataFrame(money_rows), "month", "cost", "series", y_title=cur))
with right:
    st.markdown("**ROI (%)**")
    if roi_rows:
        ui.show_chart(ui.lines(pd.DataFrame(roi_rows), "month", "percent", "measure", x_title=None, y_title="%",
                               x_type="N", y_format=".2f"))
