"""Invoices: each imported invoice, the month's reconciliation and its differences, with the runs and hours behind one.

Numbers: ``trainledger invoice reconcile --month M --json`` (:func:`trainledger.money.invoice.reconcile.reconcile`,
presented by :mod:`trainledger.reports.invoices`); downloads: the bytes of ``invoice reconcile --format csv|xlsx -o``.
docs/INVOICES.md says how lines are matched and differences classified.
"""

from __future__ import annotations

import streamlit as st
from trainledger.app.queries import data, invoices
from trainledger.app.views import access, ui
from trainledger.money.metrics.registry import help_text

MIME = {"csv": "text/csv", "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"}
INVOICE_COLUMNS = ["invoice", "provider", "number", "month", "currency", "lines", "billed_cost", "imported_at",
                   "replaced_by"]
CHARGE_COLUMNS = ["offer", "charge_period_start", "charge_period_end", "runs", "billed_lines", "expected_cost",
                  "billed_cost", "difference"]
DIFF_COLUMNS = ["what", "offer", "resource", "charge_period_start", "difference"]
LABELS = {"what": "class", "charge_period_start": "from", "charge_period_end": "to", "billed_lines": "lines",
          "replaced_by": "replaced by"}

access.team_only(access.page_gate(), "Invoices")  # team totals: not for a project-scoped user (docs/SCOPES.md)
url = data.ledger_url()
month = ui.month_picker(url)
st.title("Invoices")
st.caption("What the providers billed against what the ledger expected, per offer and charge period; the same "
           f"figures as `trainledger invoice reconcile --month {month}` (docs/INVOICES.md).")

every = invoices.imported(url)
if not every:
    ui.empty("No invoice imported yet: `trainledger invoice import FILE` (FOCUS 1.0–1.3, or a provider CSV with "
             "`--mapping FILE.toml`).")
    st.stop()
st.subheader("Imported invoices")
st.dataframe(ui.frame(every, INVOICE_COLUMNS, LABELS), hide_index=True)

rec, reason = invoices.reconciliation(url, month)
if rec is None:
    ui.empty(reason)
    st.stop()
cur = rec["currency"]
st.subheader(f"{month}: {'reconciled' if rec['status'] == 'reconciled' else 'differences'}")
(st.success if rec["status"] == "reconciled" else st.error)(f"{month} ({cur}): {rec['status_text']}")
c = st.columns(3)
for col, key in zip(c, ("expected_cost", "billed_cost", "invoice_difference")):
    col.metric(ui.column(key, cur), ui.money(key, rec["difference" if key == "invoice_difference" else key]),
               help=help_text(key))

st.subheader("Per offer and charge period")
st.dataframe(ui.frame(rec["charges"], CHARGE_COLUMNS, LABELS, cur), hide_index=True)

st.subheader(f"Differences ({rec['differences_count']})")
diffs = rec["differences"]
if diffs:
    st.dataframe(ui.frame([{**d, "resource": d["resource"] or "(the offer)"} for d in diffs], DIFF_COLUMNS, LABELS, cur),
                 hide_index=True, key="invoice_differences")
    pick = st.selectbox("Show the runs and invoice lines behind", range(len(diffs)), key="invoice_drill",
                        format_func=lambda i: f"{diffs[i]['what']}: {diffs[i]['offer'] or '—'} "
                                              f"{diffs[i]['resource'] or '(the offer)'} {ui.money('difference', diffs[i]['difference'])}")
    d = diffs[pick]
    left, right = st.columns(2)
    left.markdown("**Runs (the ledger)**")
    if d["runs"]:
        left.dataframe(ui.frame(d["runs"], ["run_id", "used_node_hours", "billed_node_hours", "expected_cost"],
                                {"run_id": "run"}, cur), hide_index=True)
        for run in sorted({r["run_id"] for r in d["runs"] if r["run_id"]}):
            ui.runs_link(f"Run {run}", where=left, run=run, month=month)
    else:
        left.caption("No run of the ledger is behind this line.")
    right.markdown("**Invoice lines**")
    if d["lines"]:
        right.dataframe(ui.frame(d["lines"], ["invoice", "line", "resource", "quantity", "unit", "unit_price", "amount"],
                                 None, cur), hide_index=True)
    else:
        right.caption("No invoice line bills these runs.")
else:
    st.caption("No difference above the tolerance.")

cols = st.columns(2)
for col, fmt in zip(cols, ("csv", "xlsx")):
    col.download_button(f"Download {fmt.upper()}", invoices.download(url, month, fmt), file_name=f"invoices-{month}.{fmt}",
                        mime=MIME[fmt], key=f"invoice_{fmt}", icon=":material/download:", on_click="ignore")
st.caption(f"Same bytes as `trainledger invoice reconcile --month {month} --format csv -o FILE` (or `--format xlsx`).")
