"""Billed cost in the reports: a month's invoices beside the ledger's estimate, and, where chosen, in its place.

``report monthly --cost-basis estimate|billed`` and ``cost compare --month M --cost-basis ...``
(:func:`with_cost_basis`). A month with current invoices shows, beside its figures, ``invoice_status`` (the
reconciliation's one line), ``expected_cost`` (the ledger's estimate of what the invoices bill) and, once the
month is reconciled, ``billed_cost`` and ``invoice_difference`` (billed − expected), labelled by the metrics
layer, and ``cost_basis`` says which the month's cost is:

* ``estimate`` (the default): the ledger's own figures, unchanged;
* ``billed``: only for a reconciled month: the rented lines at what was billed: ``actual_cost`` + the invoice
  difference; each node type's line (the report's ``node_types``) + the difference of its offers' invoice lines,
  and what no offer explains (lines matched to no offer: within the tolerance, or the month would not be
  reconciled) as ``invoice_unattributed``, so the node types' lines and it add up to the billed total; the savings
  against the alternative and the ROI are recomputed from it (rent vs own and ROI say so in ``cost_basis``). Runs,
  projects, idle and goodput stay at the ledger's estimate: a reconciled month differs from it by at most the
  tolerance per invoice line, and the goodput account splits each run's own cost.

A month without invoices is reported exactly as before (no key added).
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    #: node type → Σ (billed − expected) of its offers' cells; what no offer explains (unmatched lines)
    by_node_type: dict[str, Decimal] = field(default_factory=dict)
    unattributed: Decimal = Decimal(0)


def month_billed(session: Session, month: str, now: Optional[datetime] = None) -> Optional[MonthBilled]:
    """The month's reconciliation in brief; None when no invoice was imported for it."""
    found = session.exec(select(Invoice.id).where(Invoice.replaced_by.is_(None), Invoice.month == month).limit(1))
    if found.first() is None:
        return None
    from trainledger.money.invoice.reconcile import billed_cost, expected_cost
    from trainledger.store.models import NodeType, Offer

    rec = reconcile(session, month, now=now)
    expected, billed = rec.totals()
    node_type_of = dict(session.exec(select(Offer.name, NodeType.name)
                                     .join(NodeType, NodeType.id == Offer.node_type_id)).all())
    by_node_type: dict[str, Decimal] = {}
    for cell in rec.cells:
        nt = node_type_of.get(cell.offer)
        by_node_type[nt] = by_node_type.get(nt, Decimal(0)) + billed_cost(cell) - expected_cost(cell)
    unattributed = billed - expected - sum(by_node_type.values(), Decimal(0))
    if None in by_node_type:  # an offer without a node type (not in this ledger): nothing to add it to
        unattributed += by_node_type.pop(None)
    return MonthBilled(month, rec.currency, rec.reconciled, rec.status_text(), expected, billed, by_node_type,
                       unattributed)


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


def billed_node_types(rows: list[Any], b: Optional[MonthBilled], basis: str) -> dict[str, Decimal]:
    """Node type → its line's cost on ``basis`` (``rows``: the report's exact ``node_types``, with ``node_type`` and
    ``actual_cost``, objects or dicts): the estimate + its offers' invoice difference under ``billed``; only the lines
    that change."""
    if basis != "billed" or b is None:
        return {}
    out = {}
    for row in rows:
        get = row.get if isinstance(row, dict) else (lambda k, r=row: getattr(r, k, None))
        name, cost = get("node_type"), get("actual_cost")
        if cost is not None and b.by_node_type.get(name):
            out[name] = cost + b.by_node_type[name]
    return out


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
        if b.unattributed:
            out["invoice_unattributed"] = b.unattributed
        alt = figures.get("alternative_cost")
        if "savings_vs_alternative" in figures and alt is not None:
            out["savings_vs_alternative"], out["roi"] = alt - actual, costs.roi(actual, alt)
    return out
