"""Cached reads for the Invoices page: the CLI's own functions (``invoice list``, ``invoice reconcile``).

:func:`reconciliation` is :func:`trainledger.reports.invoices.reconciliation_dict` of
:func:`trainledger.money.invoice.reconcile.reconcile`: what ``trainledger invoice reconcile --month M --json`` prints,
before rounding (the page presents it as the CLI does).
"""

from __future__ import annotations

from typing import Any, Optional

from trainledger.app.queries.data import cached, now, read_session
from trainledger.errors import LedgerInputError
from trainledger.money.invoice.reconcile import reconcile
from trainledger.reports.invoices import reconciliation_dict, to_csv, to_xlsx
from trainledger.sources.imports.invoice_import import list_invoices


@cached()
def imported(url: str) -> list[dict[str, Any]]:
    """Every imported invoice, newest first (``trainledger invoice list``)."""
    with read_session(url) as s:
        return list_invoices(s)


@cached()
def reconciliation(url: str, month: str, provider: Optional[str] = None) -> tuple[Optional[dict[str, Any]], str]:
    """(the month's reconciliation, "") or (None, the one-line reason there is none: no invoice for the month...)."""
    try:
        with read_session(url) as s:
            return reconciliation_dict(reconcile(s, month, provider=provider, now=now())), ""
    except LedgerInputError as exc:
        return None, str(exc).splitlines()[0]


@cached()
def download(url: str, month: str, fmt: str, provider: Optional[str] = None) -> bytes:
    """The bytes ``invoice reconcile --month M --format FMT -o FILE`` writes."""
    rec, _ = reconciliation(url, month, provider)
    return to_csv(rec) if fmt == "csv" else to_xlsx(rec)


@cached()
def cost_basis_note(url: str, month: str, currency: Optional[str]) -> Optional[str]:
    """One line for pages with the month's cost (ROI, Rent vs own): which cost they use, and the invoices' status
    and billed cost beside the ledger's estimate (``report monthly``'s ``invoice_status``, ``billed_cost``); None
    for a month without invoices."""
    from trainledger.money.invoice.billed import BASES, month_billed
    from trainledger.reports.present import fmt_cell
    from trainledger.store.settings import presentation_currency

    with read_session(url) as s:
        b = month_billed(s, month, now())
        shown = presentation_currency(s, currency)
    if b is None:
        return None
    text = f"Cost basis: {BASES['estimate']}. {month}'s invoices: {b.status_text}"
    if b.reconciled and (shown or b.currency) == b.currency:
        text += (f"; billed {fmt_cell('billed_cost', b.billed_cost)} {b.currency} against the ledger's "
                 f"{fmt_cell('expected_cost', b.expected_cost)}")
    return text + f" (`trainledger report monthly --month {month} --cost-basis billed`)."
