"""Billed cost in the reports: a month's invoices beside the ledger's estimate, and, where chosen, in its place.

``report monthly --cost-basis estimate|billed`` and ``cost compare --month M --cost-basis ...``
(:func:`with_cost_basis`). A month with current invoices shows, beside its figures, ``invoice_status`` (the
reconciliation's one line), ``expected_cost`` (the ledger's estimate of what the invoices bill) and, once the
month is reconciled, ``billed_cost`` and ``invoice_difference`` (billed − expected), labelled by the metrics
layer, and ``cost_basis`` says which the month's cost is:

* ``estimate`` (the default): the ledger's own figures, unchanged;
* ``billed``: only for a reconciled month: the rented lines at what was billed: ``actual_cost`` + the invoice
  difference; the savings against the alternative and the ROI are recomputed from it (rent vs own and ROI say so
  in ``cost_basis``). Runs, projects, idle and goodput stay at the ledger's estimate (the difference is within
  the reconciliation's tolerance per line).

A month without invoices is reported exactly as before (no key added).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.invoice.reconcile import reconcile
from trainledger.money.rates import costs
from trainledger.store.models import Invoice

BASES = {"estimate": "the ledger's estimate", "billed": "billed: the reconciled invoices for the rented lines"}


@dataclass(frozen=True)
class MonthBilled:
    """A month's current invoices against the ledger: reconciled or not, and the two totals."""

    month: str
    currency: str
    reconciled: bool
    status_text: str
    expected_cost: Decimal
    billed_cost: Decimal


def month_billed(session: Session, month: str, now: Optional[datetime] = None) -> Optional[MonthBilled]:
    """The month's reconciliation in brief; None when no invoice was imported for it."""
    found = session.exec(select(Invoice.id).where(Invoice.replaced_by.is_(None), Invoice.month == month).limit(1))
    if found.first() is None:
        return None
    rec = reconcile(session, month, now=now)
    expected, billed = rec.totals()
    return MonthBilled(month, rec.currency, rec.reconciled, rec.status_text(), expected, billed)


def _check_basis(basis: str, b: Optional[MonthBilled], month: str, currency: Optional[str]) -> None:
    if basis not in BASES:
        raise LedgerInputError(f"--cost-basis: expected estimate or billed, got {basis!r}")
    if basis != "billed":
        return
    if b is None:
        raise LedgerInputError(f"--cost-basis billed: no invoice imported for {month}; import it with `trainledger "
                               "invoice import FILE`")
    if not b.reconciled:
        raise LedgerInputError(f"--cost-basis billed: {month} is not reconciled ({b.status_text}); see `trainledger "
                               f"invoice reconcile --month {month}`")
    if currency != b.currency:
        raise LedgerInputError(f"--cost-basis billed: the invoices of {month} are in {b.currency}; present the "
                               f"report in it (--currency {b.currency})")


def with_cost_basis(figures: dict[str, Any], b: Optional[MonthBilled], basis: str, month: str,
                    currency: Optional[str]) -> dict[str, Any]:
    """``figures`` (a monthly summary or a comparison's total, in ``currency``) with the invoices' figures and the
    cost basis (module docstring); unchanged for a month without invoices under the estimate."""
    _check_basis(basis, b, month, currency)
    if b is None:
        return figures
    out = dict(figures)
    same = currency == b.currency
    out["invoice_status"] = b.status_text if same else (
        f"{b.status_text}; the invoices are in {b.currency}: present the report in {b.currency} to compare")
    if same:
        out["expected_cost"] = b.expected_cost
        if b.reconciled:
            out["billed_cost"], out["invoice_difference"] = b.billed_cost, b.billed_cost - b.expected_cost
    out["cost_basis"] = BASES[basis]
    if basis == "billed":
        actual = figures["actual_cost"] + b.billed_cost - b.expected_cost
        out["actual_cost"] = actual
        alt = figures.get("alternative_cost")
        if "savings_vs_alternative" in figures and alt is not None:
            out["savings_vs_alternative"], out["roi"] = alt - actual, costs.roi(actual, alt)
    return out
