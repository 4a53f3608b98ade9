"""Overview's "Set, change or remove budgets": ``trainledger budget set|list|remove`` in the browser.

Every write goes through :mod:`trainledger.money.outlook.budgets` (``set_budget`` / ``remove_budget``: the CLI's
own validation: amount in whole cents above 0 and below 10^13, a month YYYY-MM, a known project, a
currency the ledger can convert, an alert threshold from 1 to 100 percent), so a form accepts exactly
what ``budget set`` accepts and says why in the same one line, naming the form's field. Leads save; viewers see the budgets and the forms
disabled, and every save checks the role on the server right before it writes
(:func:`trainledger.app.views.access.require_lead`).
"""

from __future__ import annotations

from typing import Any, Optional

import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, ui
from trainledger.errors import LedgerInputError
from trainledger.money.outlook.budgets import MONTHLY, TEAM, ledger_currency, list_budgets, remove_budget, set_budget
from trainledger.store.models import Project

TEAM_LABEL = "The team (all projects)"
EVERY_MONTH = "Every month"
ONE_MONTH = "One month"
FLASH = "_budgets_flash"
# the CLI's flags in its one-line errors, as the form's fields
FIELDS = (("AMOUNT:", "Amount:"), ("--month:", "Month:"), ("--currency:", "Currency:"), ("--project:", "Scope:"),
          ("--threshold:", "Threshold %:"),
          ("(leave --project out for a team-wide budget)", "(or choose the team)"),
          ("see `trainledger budget list`", "see the budgets above"))


@data.cached()
def budgets(url: str) -> dict[str, Any]:
    """Every budget (``budget list``), the projects a budget can be for, and the ledger's currency."""
    from sqlmodel import select

    with data.read_session(url) as s:
        return {"rows": list_budgets(s), "projects": list(s.exec(select(Project.name).order_by(Project.name)).all()),
                "currency": ledger_currency(s)}


def form_error(exc: LedgerInputError) -> str:
    """The CLI's one-line error with the form's field names in place of its flags."""
    text = str(exc).splitlines()[0]
    for flag, field in FIELDS:
        text = text.replace(flag, field)
    return ui.md(text)


def manage(url: str, month: str) -> None:
    """The budgets table and the set / remove forms (disabled for viewers), in an expander under the budgets."""
    ident = access.current_identity()
    read_only = ident is None or access.read_only(ident)
    b = budgets(url)
    with st.expander("Set, change or remove budgets", expanded=not b["rows"] or FLASH in st.session_state):
        if FLASH in st.session_state:
            st.success(st.session_state.pop(FLASH))  # composed from escaped values
        if read_only and ident is not None:
            st.info(f"Signed in as {ui.md(ident.user)} ({ident.role}): you can see the budgets, but only leads can "
                    "change them.")
        if b["rows"]:
            st.dataframe(ui.frame([{**r, "project": r["project"] or "(team)",
                                    "period": "every month" if r["period"] == MONTHLY else r["period"],
                                    "threshold": f"{r['threshold_pct']}%"} for r in b["rows"]],
                                  ["project", "period", "amount", "currency", "threshold"],
                                  {"amount": "budget", "threshold": "alert at"}),
                         hide_index=True, key="budget_list")
        _set_form(url, month, b, read_only)
        if b["rows"]:
            _remove_form(url, b["rows"], read_only)
        st.caption("The same as `trainledger budget set AMOUNT [--project P] [--month YYYY-MM] [--currency C] "
                   "[--threshold PCT]` and "
                   "`trainledger budget remove`; a one-month budget replaces the every-month one in its month.")


def _set_form(url: str, month: str, b: dict[str, Any], read_only: bool) -> None:
    with st.form("budget_set"):
        c = st.columns([2, 1.2, 1, 1.2, 1, 1])
        scope = c[0].selectbox("Scope", [TEAM_LABEL] + b["projects"], key="budget_scope", disabled=read_only)
        period = c[1].radio("Period", [EVERY_MONTH, ONE_MONTH], key="budget_period", disabled=read_only)
        which = c[2].text_input("Month (YYYY-MM)", value=month, key="budget_month", disabled=read_only,
                                help="Used with “One month”: that month's budget replaces the every-month one there.")
        amount = c[3].text_input("Amount", key="budget_amount", disabled=read_only, placeholder="e.g. 20000",
                                 help="Whole cents, above 0.")
        currency = c[4].text_input("Currency", value=b["currency"], key="budget_currency", disabled=read_only,
                                   help="Another than the ledger's needs an exchange rate (Settings → Exchange rates).")
        threshold = c[5].text_input("Threshold %", value="100", key="budget_threshold", disabled=read_only,
                                    help="1 to 100: the budget is at risk once spent to date reaches this share of it "
                                         "(100: only when the month-end forecast is above it).")
        saved = st.form_submit_button("Save budget", type="primary", disabled=read_only)
    if saved and (actor := access.lead_writer("change budgets")):
        project = None if scope == TEAM_LABEL else scope
        one: Optional[str] = which if period == ONE_MONTH else None
        try:
            with data.write_session(url, actor) as s:
                row = set_budget(s, amount, project=project, month=one, currency=currency or None,
                                 threshold=threshold)
        except LedgerInputError as exc:
            st.error(form_error(exc))
        else:
            _saved(f"Saved the {_period(row['period'])} budget of {_scope(row['project'])}: "
                   f"{ui.money('amount', row['amount'])} {ui.md(row['currency'])}"
                   + (f", alert at {row['threshold_pct']}%." if row["threshold_pct"] < 100 else "."))


def _remove_form(url: str, rows: list[dict[str, Any]], read_only: bool) -> None:
    keys = [(r["project"], r["period"]) for r in rows]
    with st.form("budget_remove"):
        pick = st.selectbox("Budget", keys, key="budget_remove_pick", disabled=read_only, index=None,
                            placeholder="Pick the budget to remove",  # no default: nothing removed by accident
                            format_func=lambda k: f"{_scope(k[0], markdown=False)}, {_period(k[1], markdown=False)}")
        sure = st.checkbox("Yes, remove it (its alerts stop)", key="budget_remove_sure", disabled=read_only)
        removed = st.form_submit_button("Remove budget", disabled=read_only)
    if removed and pick is None:
        st.error("Budget: pick the budget to remove; nothing was removed.")
    elif removed and not sure:
        st.error("Remove: tick \"Yes, remove it\" to confirm; nothing was removed.")
    elif removed and (actor := access.lead_writer("change budgets", "Nothing was removed.")):
        project, period = pick
        try:
            with data.write_session(url, actor) as s:
                remove_budget(s, project=project or None, month=None if period == MONTHLY else period)
        except LedgerInputError as exc:
            st.error(form_error(exc))
        else:
            _saved(f"Removed the {_period(period)} budget of {_scope(project)}.")


def _scope(project: str, markdown: bool = True) -> str:
    """Whose budget: Markdown-escaped for a message, plain for a select option (options are not Markdown: an
    escape would be seen)."""
    if project == TEAM:
        return "the team"
    return f"project {ui.md(project) if markdown else project}"


def _period(period: str, markdown: bool = True) -> str:
    return "every-month" if period == MONTHLY else (ui.md(period) if markdown else period)


def _saved(message: str) -> None:
    st.session_state[FLASH] = message
    st.rerun()
