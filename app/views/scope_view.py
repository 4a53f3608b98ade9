"""What a project-scoped user sees on the Overview and Goodput pages (docs/SCOPES.md): their projects' lines.

A user of the auth file with ``projects = ["A", "B"]`` sees the lines of A and B, each exactly the line
``trainledger report monthly --json`` (``projects``), ``trainledger budget check`` and ``trainledger goodput``
give for it, and a note that the team's totals (the month's spend, idle, own vs rent, the fleet, the forecast,
anomalies) need team scope. Every read takes the scope (``trainledger.app.queries.data``), so nothing of
another project is read into the page.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import streamlit as st
from trainledger.app.queries import data, goodput_data
from trainledger.app.views import access, goodput_view, ui
from trainledger.reports.export import PROJECT_COLUMNS
from trainledger.reports.present import fmt_cell

STATE = {"ok": "ok", "at_risk": "at risk", "over": "over"}


def project_cards(p: dict[str, Any], cur: str) -> None:
    """Per project of the scope: its spend, GPU-hours, runs and waste in the month (the report's project line)."""
    for line in p["projects"]:
        name = ui.md(line["project"])
        c = st.columns(4)
        c[0].metric(f"{name}: spend ({cur})", ui.money("cost", line["cost"]), border=True,
                    help="The project's runs' cost in the month: its line of `trainledger report monthly`.")
        c[1].metric(f"{name}: GPU-hours", ui.number("gpu_hours", line["gpu_hours"]), border=True)
        c[2].metric(f"{name}: runs", f"{line['runs']:,}", border=True)
        c[3].metric(f"{name}: waste ({cur})", ui.money("waste_cost", line["waste_cost"]), border=True,
                    help="The project's runs' badput in the month's goodput account.")


def overview(url: str, month: str, currency: Optional[str], ident: access.Identity) -> None:
    """The Overview of a project-scoped user: their projects' figures, budgets and running runs; no team totals."""
    scope = access.scope_of(ident)
    p = data.scoped_presented(url, month, scope, currency)
    s = p["summary"]
    cur = ui.md(s["currency"])
    st.caption(f"{ui.period_text(month, s)} · calendar month in {ui.md(s['timezone'])} · money in {cur} · your "
               f"projects' lines of `trainledger report monthly --month {month} --currency {cur}`")
    access.team_note(ident)
    ui.to_date_note(month, s)
    st.subheader(f"Your projects, {month}")
    if not p["projects"]:
        ui.empty(f"None of your projects ran in {month}.")
    else:
        project_cards(p, cur)
        st.dataframe(ui.frame(p["projects"], PROJECT_COLUMNS, currency=cur), hide_index=True, key="scoped_projects")
        ui.runs_link("Their runs", month=month)
    budgets(url, month, currency, scope, cur)
    running = data.runs(url, month=None, project=None, user=None, status="running", strategy=None, limit=20, offset=0,
                        scope=scope)
    if running and month == data.current_month(url):
        st.subheader("Running now")
        st.dataframe(ui.frame(running, ["id", "name", "project", "strategy", "nodes", "started_at", "node_hours",
                                        "gpu_util_mean", "mfu"]), hide_index=True)


def budgets(url: str, month: str, currency: Optional[str], scope: tuple[str, ...], cur: str) -> None:
    """The budgets of the scope's projects (``trainledger budget check``'s lines for them); the team's budget is
    a team total."""
    b = data.budget_status(url, month, currency)
    mine = [x for x in b["budgets"] if x["project"] and x["project"] in scope]
    if not mine:
        return
    st.subheader(f"Budgets of your projects, {month}")
    rows = [{"project": x["project"], "to_date_cost": x["cost"]["to_date"],
             "forecast_cost": x["cost"]["expected"],
             "budget_cost": x["amount"], "used": fmt_cell("used_pct", x["used_pct"]), "state": STATE[x["state"]]}
            for x in mine]
    st.dataframe(ui.frame(rows, ["project", "to_date_cost", "forecast_cost", "budget_cost", "used", "state"],
                          {"to_date_cost": f"spent to date ({cur})", "forecast_cost": f"month end, expected ({cur})",
                           "budget_cost": f"budget ({cur})"}, currency=cur), hide_index=True, key="scoped_budgets")
    st.caption(f"The same as `trainledger budget check --month {month} --currency {cur}` for these projects.")


def scoped_account(acct: Any, scope: tuple[str, ...]) -> Any:
    """The month's goodput account with the runs of ``scope`` only, and so their project lines (no month totals)."""
    runs = [r for r in acct.runs if data.in_scope(r.project, scope)]
    return dataclasses.replace(acct, months=[], totals={}, runs=runs)  # its project lines: the kept runs grouped


def goodput(url: str, month: str, currency: Optional[str], ident: access.Identity, cur: str) -> None:
    """The Goodput page of a project-scoped user: badput per project and the runs ranked, of their projects."""
    access.team_note(ident)
    acct = scoped_account(goodput_data.account(url, month, currency), access.scope_of(ident))
    goodput_view.badput_by_project(acct.projects, cur)
    goodput_view.ranked_runs(acct.runs, cur)
