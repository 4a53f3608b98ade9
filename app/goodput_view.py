"""Goodput sections of the dashboard (issue #25): the idle heat map, ...

Every figure is the presented JSON of the ledger function ``trainledger goodput`` prints
(:mod:`app.goodput_data`), so a page shows the CLI's numbers to the cent.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from app import goodput_data, ui


def idle_heat_map(url: str, month: str, currency: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Where the month's idle sits: metrics, a day × hour heat map of idle cost and the per-day table."""
    occ = goodput_data.idle_occupancy(url, month, currency)
    cur = ui.md(occ["currency"])
    st.subheader(f"Where idle sits, {month}")
    st.caption(f"Owned and reserved fleets' node-hours held vs used, hour by hour in {ui.md(occ['timezone'])}; the hours' "
               f"idle cost adds up to the month's idle cost. The same figures as `trainledger goodput idle --month {month}`.")
    c = st.columns(4)
    c[0].metric(ui.to_date(f"Idle cost ({cur})", summary), ui.money("idle_cost", occ["idle_cost"]), border=True,
                help="Fleet node-hours no run used, at the idle rate: the monthly report's idle cost.")
    c[1].metric(ui.to_date(f"of which recovery ({cur})", summary), ui.money("recovery_cost", occ["recovery_cost"]),
                border=True, help="Idle between an interruption and the resumed attempt of the same chain: "
                                  "idle that has an owner.")
    c[2].metric(ui.to_date("Idle node-hours", summary), ui.number("idle_node_hours", occ["idle_node_hours"]), border=True)
    c[3].metric(ui.to_date("Held node-hours", summary), ui.number("held_node_hours", occ["held_node_hours"]), border=True,
                help=f"Used: {ui.number('used_node_hours', occ['used_node_hours'])} node-hours.")
    if not occ["fleets"]:
        st.caption(f"No owned or reserved fleet in {month}: nothing was held idle.")
        return occ
    ui.show_chart(heat_chart(occ["hours"], cur))
    st.dataframe(ui.frame(occ["days"], ["day", "held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost",
                                        "recovery_cost", "costliest_hour"],
                          {"held_node_hours": "held node-hours", "used_node_hours": "used node-hours",
                           "idle_node_hours": "idle node-hours", "idle_cost": f"idle ({occ['currency']})",
                           "recovery_cost": f"recovery ({occ['currency']})", "costliest_hour": "costliest hour"}),
                 hide_index=True, key="idle_days")
    return occ


def heat_chart(hours: list[dict[str, Any]], cur: str) -> alt.Chart:
    """Day (rows) × hour of the day (columns), coloured by idle cost; a DST-repeated hour added into one cell."""
    df = pd.DataFrame([{"day": h["day"], "hour": h["hour"], "idle": float(Decimal(h["idle_cost"])),
                        "held": h["held_node_hours"], "used": h["used_node_hours"]} for h in hours])
    df = df.groupby(["day", "hour"], as_index=False).sum()
    return (alt.Chart(df).mark_rect()
            .encode(x=alt.X("hour:O", title="hour of the day"), y=alt.Y("day:O", title=None),
                    color=alt.Color("idle:Q", title=f"idle ({cur})", scale=alt.Scale(scheme="orangered")),
                    tooltip=["day", "hour", alt.Tooltip("idle:Q", title=f"idle ({cur})", format=",.2f"),
                             alt.Tooltip("held:Q", title="held node-hours", format=",.3f"),
                             alt.Tooltip("used:Q", title="used node-hours", format=",.3f")])
            .properties(height=max(ui.MIN_CHART_HEIGHT, 14 * df["day"].nunique())))


def phase_timeline(url: str, run_id: str) -> list[dict[str, Any]]:
    """A run's phases per node (``trainledger goodput --run ID``'s timeline): when each phase ran, from its
    first start to its last end, and how long it took in all; the table lists the figures."""
    rows = goodput_data.timeline(url, run_id)
    st.markdown("**Phases per node**")
    if not rows:
        st.caption("No phases recorded for this run (a run seen only by the wrapper or a Slurm import): its time is "
                   "unattributed in the goodput account.")
        return rows
    spans = pd.DataFrame([{"node": r["node"] or "(node)", "phase": r["phase"], "from": pd.Timestamp(r["first_at"]),
                           "to": pd.Timestamp(r["last_at"]), "seconds": float(r["seconds"]), "count": r["count"]}
                          for r in rows if r.get("first_at") is not None and r.get("last_at") is not None])
    if not spans.empty:
        ui.show_chart(alt.Chart(spans).mark_bar(opacity=0.7).encode(
            x=alt.X("from:T", title="time (UTC)"), x2="to:T", y=alt.Y("node:N", title=None),
            color=alt.Color("phase:N", legend=alt.Legend(orient="bottom", labelLimit=ui.LEGEND_LABEL_LIMIT)),
            yOffset="phase:N",
            tooltip=["node", "phase", alt.Tooltip("from:T", format="%Y-%m-%d %H:%M:%S"),
                     alt.Tooltip("to:T", format="%Y-%m-%d %H:%M:%S"), alt.Tooltip("seconds:Q", format=",.3f"), "count"])
            .properties(height=max(ui.MIN_CHART_HEIGHT, 40 * spans["node"].nunique())))
    st.dataframe(pd.DataFrame([{"node": r["node"], "phase": r["phase"], "seconds": r["seconds"], "count": r["count"],
                                "first": r.get("first_at"), "last": r.get("last_at")} for r in rows]),
                 hide_index=True)
    return rows
