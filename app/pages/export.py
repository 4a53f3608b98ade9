"""Export: the monthly report as CSV, XLSX or JSON.

The bytes are ``trainledger.reports.export.render(presented_report(monthly_report(month)), fmt)``:
exactly what ``trainledger report monthly --month M --format FMT`` writes.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st
from trainledger.app.queries import data
from trainledger.app.views import access, period_view, ui
from trainledger.app.views.chargeback_view import chargeback_section
from trainledger.reports.present import label, labelled_rows

FORMATS = {"csv": ("CSV", "text/csv"),
           "xlsx": ("XLSX", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
           "json": ("JSON", "application/json")}

ident = access.page_gate()
scope = access.scope_of(ident)  # a project-scoped user: downloads of those projects' lines only (docs/SCOPES.md)
url = data.ledger_url()
period, month = ui.period_picker(url)
currency = ui.currency_picker(url)
st.title("Export")
if period.kind != "month":  # a quarter, a year to date or a date range: the period's totals, as the CLI writes them
    if scope is not None:  # a period's export is its team totals
        access.team_note(ident)
        st.caption("Pick a month for the export of your projects' lines.")
        st.stop()
    period_view.export_section(url, period, currency)
    st.stop()
p = data.presented(url, month, lines=True, currency=currency) if scope is None else \
    data.scoped_presented(url, month, scope, currency)
st.caption(f"The monthly report for {ui.period_text(month, p['summary'])}: a summary ("
           + ("own vs rent, savings, ROI, idle, waste" if scope is None else "which month, currency and projects")
           + "), one line per project and one per run. CSV has three blocks separated by a blank line; XLSX has "
           "three sheets. Cells a spreadsheet would run as a formula are escaped.")
ui.to_date_note(month, p["summary"])

c = st.columns(len(FORMATS))
for col, (fmt, (title, mime)) in zip(c, FORMATS.items()):
    name = f"trainledger-{month}{'-to-date' if p['summary'].get('is_partial') else ''}.{fmt}"
    # the bytes are made when the button is clicked (Streamlit's deferred download: the XLSX of a busy month takes
    # seconds), by the same cached function, for this session's scope; served, like every file, to a session only
    col.download_button(f"Download {title}", partial(data.export_bytes, url, month, fmt, currency, scope), file_name=name,
                        mime=mime, key=f"export_{fmt}", type="primary" if fmt == "csv" else "secondary",
                        icon=":material/download:", on_click="ignore")
if scope is None:
    st.caption(f"Same bytes as `trainledger report monthly --month {month} --currency {currency} --format csv` "
               "(or `--format xlsx -o FILE`)"
               + (f", run at the same time (`--now {p['summary']['period_end']}`)" if p["summary"].get("is_partial") else "")
               + f"; the FOCUS dataset of the month: `trainledger report focus --month {month} --currency {currency} -o {month}.csv`.")
    st.subheader("Summary", help=ui.RESERVED_RULE)
    st.caption("The summary block of the export, with the dashboard's labels (the file keeps its column keys). "
               + ui.md(ui.RESERVED_RULE))
    if p["summary"].get("fx_rates"):
        st.caption("Converted at: " + "; ".join(p["summary"]["fx_rates"]))
    st.caption("Carbon intensity: " + "; ".join(p["summary"]["carbon_intensities"]))
    summary = {k: v for k, v in p["summary"].items() if k not in ("fx_rates", "carbon_intensities")}  # the captions above
    st.table(pd.DataFrame(labelled_rows(summary, summary.get("currency"), ui.display_tz())).set_index("figure"))
else:  # the project and run lines of the user's projects, each as `report monthly` writes it; no team totals
    access.team_note(ident)
    st.caption("The files hold your projects' lines and their runs' lines, each exactly as `trainledger report "
               "monthly` writes it; their summary block names the month, the currency and your projects.")


def headers(keys: list[str]) -> dict[str, str]:
    """A figure's column: its metrics-layer label with the currency (ui.column); any other key: its words, money with
    the currency too (the generic ``cost`` of a line)."""
    from trainledger.reports.present import kind_of

    out = {}
    for k in keys:
        head = ui.column(k, currency)
        if head == k:  # sentence case like the figures' headers ("run cost (CNY)", "GPUs per node")
            words = label(k)
            head = (words if words[1:2].isupper() else words[:1].lower() + words[1:]) \
                + (f" ({currency})" if kind_of(k) == "money" else "")
        out[k] = head
    return out


st.subheader(f"Projects ({len(p['projects'])})")
if p["projects"]:
    st.dataframe(ui.frame(p["projects"], list(p["projects"][0]), headers(list(p["projects"][0]))), hide_index=True)
else:
    st.caption("No project used the cluster this month.")
st.subheader(f"Runs ({len(p['runs'])} lines)")
if p["runs"]:
    st.dataframe(ui.frame(p["runs"], list(p["runs"][0]), headers(list(p["runs"][0]))), hide_index=True)
else:
    st.caption("No run in this month.")

chargeback_section(url, month, currency, scope)
