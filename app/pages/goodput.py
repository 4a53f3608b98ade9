"""Goodput: what the month's spend bought (issue #25).

Numbers: the goodput account (``trainledger goodput --month M``, ``trainledger.money.goodput.account``): spend = goodput +
badput + idle, badput by category per project and per month, runs ranked by badput; where idle sits hour by
hour (``trainledger goodput idle --month M``, ``trainledger.money.goodput.occupancy``). Sections in :mod:`trainledger.app.views.goodput_view`.
"""

from __future__ import annotations

import streamlit as st
from trainledger.app.queries import data, goodput_data
from trainledger.app.views import access, goodput_view, scope_view, ui, util_view

ident = access.page_gate()
url = data.ledger_url()
month = ui.month_picker(url)
currency = ui.currency_picker(url)
s = data.presented(url, month, currency=currency)["summary"]
cur = ui.md(s["currency"])
st.title("Goodput")
st.caption(f"{ui.period_text(month, s)} · calendar month in {ui.md(s['timezone'])} · money in {cur} · the same figures "
           f"as `trainledger goodput --month {month} --currency {cur}`")
ui.to_date_note(month, s)
if not ident.team_scope:  # a project-scoped user: their projects' badput and runs; no month totals, idle or fleet
    scope_view.goodput(url, month, currency, ident, cur)
    st.stop()

m = goodput_view.month_account(url, month, currency)
if m is None:
    ui.empty(f"Nothing was spent in {month}: no runs and no fleet.")
else:
    goodput_view.month_metrics(m, s)
    goodput_view.category_links(m, month)
    projects, ranked = goodput_data.sections(url, month, currency)  # stored with the month's totals once it is over
    goodput_view.badput_by_project(projects, cur)
    goodput_view.ranked_runs(ranked, cur)
goodput_view.idle_heat_map(url, month, currency, s)
util_view.fleet_section(url, month)  # issue 39 item 3: the fleet's nodes hour by hour
goodput_view.badput_trend(url, data.trend_months(url, month, n=6), currency, cur)
