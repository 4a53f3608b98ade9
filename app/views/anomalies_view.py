"""Spend anomalies on the dashboard: Overview's flagged days, and the Runs page's ``?day=YYYY-MM-DD`` list.

The days and the rule are :func:`trainledger.money.outlook.anomalies.anomalies` (what ``trainledger report anomalies
--month M`` prints); each flagged day links to the runs that ran on it
(:func:`trainledger.money.outlook.anomalies.runs_on_day`, ``trainledger report anomalies --day D``).
"""

from __future__ import annotations

from datetime import date
from typing import Any, Optional

import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui
from trainledger.errors import LedgerInputError
from trainledger.money.outlook.anomalies import MEASURES, RULE, anomalies, parse_day, runs_on_day

DAY_PARAM = "day"


@data.cached()
def month_anomalies(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``anomalies`` of the month; the fingerprints of the month and the one before (its baseline's) as the page's
    goodput totals read them (``data.known_fingerprints``)."""
    fps = data.known_fingerprints(url, (data.add_months(month, -1), month), currency)
    with data.read_session(url) as s:
        return anomalies(s, month, now=data.now(), currency=currency, fingerprints=fps)


@data.cached()
def day_runs(url: str, day: date, scope: data.Scope = None) -> list[dict[str, Any]]:
    """``runs_on_day``; ``scope``: only the runs of its projects."""
    with data.read_session(url) as s:
        return [r for r in runs_on_day(s, day, now=data.now()) if data.in_scope(r.get("project"), scope)]


def overview_section(url: str, month: str, currency: Optional[str]) -> None:
    """The month's flagged days, each with a link to its runs; the rule in the caption."""
    st.subheader(f"Spend anomalies, {month}")
    try:
        a = month_anomalies(url, month, currency)
    except LedgerInputError as exc:  # e.g. no exchange rate into the chosen currency
        st.caption(f"Not judged: {ui.error_line(exc)}")
        return
    cur = ui.md(a["currency"])
    judged = sum(d["judged"] for d in a["days"])
    st.caption(f"Rule: {ui.md(RULE)}. Days costed as the forecast costs them (owned fleets at nominal power). "
               f"{judged} of {len(a['days'])} whole days judged. The same as "
               f"`trainledger report anomalies --month {month} --currency {cur}`.")
    if not a["flagged"]:
        st.caption(f"No day of {month} stands out.")
        return
    for f in a["flagged"]:
        c = st.columns([5, 1], vertical_alignment="center")
        c[0].warning(f"**{f['date']}: {MEASURES[f['measure']]} {ui.money('cost', f['value'])} {cur}**, above "
                     f"{ui.money('cost', f['threshold'])} (median {ui.money('cost', f['median'])}, MAD "
                     f"{ui.money('cost', f['mad'])} over the {f['baseline_days']} days before)")
        c[1].page_link("pages/runs.py", label="that day's runs", icon=":material/list:",
                       query_params={"month": month, DAY_PARAM: f["date"].isoformat()})


def runs_section(url: str, scope: data.Scope = None) -> None:
    """With ``?day=YYYY-MM-DD`` (Overview's anomaly links): the runs that ran that day, node-hours within it."""
    raw = st.query_params.get(DAY_PARAM)
    if not raw:
        return
    try:
        day = parse_day(raw, "day")
    except LedgerInputError as exc:
        st.error(ui.error_line(exc))
        return
    rows = day_runs(url, day, scope)
    st.subheader(f"Runs on {day}")
    if not rows:
        ui.empty(f"No run ran on {day}: the day's spend was the fleets' fixed cost (idle)." if scope is None else
                 f"No run of your projects ran on {day}.")
        return
    st.dataframe(ui.frame(rows, ["id", "name", "project", "user", "status", "nodes", "started_at", "node_hours"],
                          {"started_at": "started", "node_hours": "node-hours that day"}),
                 hide_index=True, key="day_runs")
    st.caption(f"{len(rows)} runs ran during {day} (display time zone), the most node-hours first; "
               f"`trainledger report anomalies --day {day}`.")
