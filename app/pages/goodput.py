"""Goodput: what the month's spend bought (issue #25): where idle sits, hour by hour.

Numbers: ``trainledger goodput idle --month M --json`` (``ledger.money.occupancy``) through
:mod:`app.goodput_view`; the month's period and currency as on every page (``monthly_report``).
"""

from __future__ import annotations

import streamlit as st

from app import access, data, goodput_view, ui

access.page_gate()
url = data.ledger_url()
month = ui.month_picker(url)
currency = ui.currency_picker(url)
s = data.presented(url, month, currency=currency)["summary"]
st.title("Goodput")
st.caption(f"{ui.period_text(month, s)} · calendar month in {ui.md(s['timezone'])} · money in {ui.md(s['currency'])}")
ui.to_date_note(month, s)
goodput_view.idle_heat_map(url, month, currency, s)
