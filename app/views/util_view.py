"""Per-node utilization over time (issue 39 item 3): one run's nodes (Run detail) and a fleet's nodes in a month
(Goodput), hour by hour from the recorded samples (``trainledger.runs.utilization``; ``trainledger runs util``
prints the same). A zoomable line per node; an hour without samples is a gap, never 0."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui


def _chart(d: dict[str, Any], title: str) -> None:
    sources = set(d["metrics"])
    label = ui.CPU_UTIL if sources == {"cpu_util"} else ui.GPU_UTIL
    df = pd.DataFrame([{"hour": p["hour"], "node": p["node"] or "run", "util": p["util_mean"] * 100,
                        "samples": p["samples"]} for p in d["points"]])
    df["hour"] = pd.to_datetime(df["hour"], utc=True).dt.tz_convert(d["timezone"]).dt.tz_localize(None)
    zoom = alt.selection_interval(bind="scales", encodings=["x"])
    chart = (alt.Chart(df, title=title).mark_line(point=len(df) <= 200)
             .encode(x=alt.X("hour:T", title=f"hour ({d['timezone']})", axis=alt.Axis(format="%b %d %H:%M", labelAngle=0)),
                     y=alt.Y("util:Q", title=f"{label}, hourly mean (%)", scale=alt.Scale(domain=[0, 100])),
                     color=alt.Color("node:N", title="node"),
                     tooltip=["node", alt.Tooltip("hour:T", format="%Y-%m-%d %H:%M"),
                              alt.Tooltip("util:Q", title="%", format=".1f"), "samples"])
             .add_params(zoom))
    st.altair_chart(chart, use_container_width=True)


def run_section(url: str, run_id: str, scope: data.Scope = None) -> None:
    """Run detail: its nodes' utilization hour by hour."""
    d = data.run_utilization(url, run_id, scope)
    st.markdown("**Utilization per node over time**")
    if not d["points"]:
        st.caption("No utilization samples recorded for this run (the wrapper, the tracked trainer and the API record "
                   "them; an import does not).")
        return
    _chart(d, "")
    st.caption(f"Each node's mean over its GPUs and samples in each hour; drag to zoom. "
               f"`trainledger runs util {ui.code(run_id)}` prints the same.")


def fleet_section(url: str, month: str) -> None:
    """Goodput: a node type's (a fleet's) nodes in the month, hour by hour."""
    types = data.fleet_node_types(url, month)
    st.subheader(f"Utilization per node, {month}")
    if not types:
        st.caption(f"No owned or reserved fleet in {month}.")
        return
    node_type = st.selectbox("Node type (fleet)", types, key="fleet_util_node_type")
    d = data.fleet_utilization(url, node_type, month)
    if not d["points"]:
        st.caption(f"No utilization samples from {ui.md(node_type)} nodes in {month}.")
        return
    _chart(d, "")
    st.caption(f"Every {ui.md(node_type)} node with samples in {month}: its mean over its GPUs and samples in each "
               "hour (a gap: no run sampled it then; how much of the fleet sat idle is the heat map above). "
               f"`trainledger runs util --node-type {ui.code(node_type)} --month {month}` prints the same.")
