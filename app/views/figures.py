"""Page sections shared by the Overview and Monthly ROI pages (issue #18)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Optional

import altair as alt
import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import ui
from trainledger.money.account.spend import IDLE, NO_PROJECT


def project_names(lines: list[dict]) -> list[str]:
    """The projects among the spend lines (``spend_by_project``: projects, then idle and rounding)."""
    end = next((i for i, x in enumerate(lines) if x["line"] == IDLE), len(lines))
    return [x["line"] for x in lines[:end] if x["line"] != NO_PROJECT]


def open_runs(project: Optional[str], month: str) -> None:
    """Runs of ``project`` in ``month`` (a clicked bar or a selected row), through the shared link builder."""
    if project:
        st.switch_page("pages/runs.py", query_params=ui.runs_link("", project=project, month=month))


def project_links(names: list[str], month: str, label: str = "Runs of {name}") -> None:
    """One link per project to its runs in the month: "Runs of demo-pretrain" (``label`` with ``{name}`` and
    ``{month}``)."""
    if not names:
        return
    cols = st.columns(min(len(names), 4))
    for i, name in enumerate(names):
        ui.runs_link(label.format(name=ui.md(name), month=month), where=cols[i % len(cols)], project=name, month=month,
                     help=f"Runs, filtered to project {ui.md(name)} in {month}")


def spend_by_project(url: str, month: str, currency: Optional[str], cur: str, spend: Any, key: str,
                     months: Optional[tuple[str, ...]] = None) -> None:
    """Spend by project with idle as its own line (``trainledger.money.account.spend.spend_by_project``): table and bars.
    The lines add up to the month's spend (``spend``, as presented) to the cent. A project's row, bar or link
    opens Runs filtered to it (``ui.runs_link``) in ``month``. ``months``: the lines summed over those months
    (a period's whole months; ``spend_by_project_months``), their spend the lines' sum."""
    lines = data.spend_by_project(url, month, currency) if months is None else \
        data.spend_by_project_months(url, months, currency)
    if months is not None:
        spend = sum((x["cost"] for x in lines), Decimal(0))
    names = project_names(lines)
    span = "" if months is None else f" of {months[0]} to {months[-1]}" if len(months) > 1 else f" of {months[0]}"
    st.caption(f"Projects + idle = spend{span} {ui.money('actual_cost', spend)} {cur} "
               "(fleet node-hours no run used are idle, no project's; each line half-up to the cent, the cents "
               "they leave as a rounding line). Click a project's row or bar for its runs"
               + (f" in {month}." if months is not None else "."))
    left, right = st.columns([1, 2])
    picked = left.dataframe(ui.frame(lines, ["line", "cost"], {"line": "project", "cost": f"spend ({cur})"}),
                            hide_index=True, key=key, on_select="rerun", selection_mode="single-row")
    rows = picked.selection.rows if picked is not None else []
    if rows and lines[rows[0]]["line"] in names:
        open_runs(lines[rows[0]]["line"], month)
    df = pd.DataFrame([{"project": x["line"], "spend": float(x["cost"])} for x in lines])
    pick = alt.selection_point(name="pick", fields=["project"])
    chart = (alt.Chart(df).mark_bar().encode(
        y=alt.Y("project:N", title=None, sort=None), x=alt.X("spend:Q", title=cur, axis=alt.Axis(format=ui.AXIS_FORMAT)),
        tooltip=["project", alt.Tooltip("spend:Q", format=",.2f")]).add_params(pick)
        .properties(height=max(ui.MIN_CHART_HEIGHT, 30 * len(df))))
    event = right.altair_chart(chart, width="stretch", on_select="rerun", key=f"{key}_bars")
    chosen = (event.selection.get("pick") or [{}]) if event is not None else [{}]
    name = chosen[0].get("project") if chosen else None
    if name in names:
        open_runs(name, month)
    project_links(names, month)
