"""The reconciliation of a month: what the providers billed against what the ledger expected, every difference
classified with its amount (``trainledger invoice reconcile --month M``; docs/INVOICES.md).

Per cell (:mod:`trainledger.money.invoice.matching`: offer, charge period, resource), with money in the invoices'
currency, Ae the ledger's expected cost, Qe its billed node-hours, Pe = Ae ÷ Qe the price in force (per node-hour),
Qr the node-hours the runs used and S one billing step per node of each run (the larger of the offer's
granularity, its minimum and one hour), and for each invoice line its amount a, unit price p and quantity q
(months of a reserved term × the month's hours):

* **fx** = a − a·k, where k = the ledger's rate ÷ the line's own (only when the line states its rate);
* **rounding** = (a − p·q)·k when |a − p·q| is within what rounding the three figures as written explains;
* **rate** = a·k − rounding − Pe·q: billed at another price than the one in force;
* the quantity's part, Pe·(Qb − Qe), Qb = Σ q: up to the band [Qr, Qr + S] it is **minimum billing or granularity**;
  beyond it, **billed hours without runs** (above) or **runs without billed hours** (below);
* a cell with lines and no charge: its lines' whole amount is **billed hours without runs**; a cell with charges
  and no line: −Ae is **runs without billed hours**; a line placed on no offer is **unmatched** (its amount).

So in every cell Σ classes = billed − expected, exactly, and over the month Σ differences = Σ billed − Σ expected.
A difference counts when |amount| > tolerance × its invoice lines (at least one): the month is *reconciled* when
none counts, else "N differences totalling X".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.invoice.matching import (
    Billed,
    Cell,
    Charge,
    billed_lines,
    build_cells,
    expected_charges,
    provider_offers,
    run_hosts,
)
from trainledger.money.rates.costs import ZERO, cents, hours_between
from trainledger.money.rates.months import month_bounds
from trainledger.store.models import Invoice, Offer, OfferKind
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

TOLERANCE = Decimal("0.01")
#: the classes of difference, in the order they are listed (their keys are part of the JSON)
CLASSES = {
    "rate": "rate differs from the price in force",
    "billed_without_runs": "billed hours without runs in the ledger",
    "runs_without_billing": "runs without billed hours",
    "minimum_or_granularity": "minimum billing or granularity",
    "fx": "exchange rate",
    "rounding": "rounding",
    "unmatched": "unmatched line",
}
RENTED = (OfferKind.rent_elastic.value, OfferKind.rent_reserved.value)


@dataclass
class Difference:
    """One class of difference in one cell (or one unmatched line), with what is behind it."""

    cls: str
    offer: Optional[str]
    start: Optional[datetime]
    end: Optional[datetime]
    resource: str
    amount: Decimal
    lines: list[Billed] = field(default_factory=list)
    charges: list[Charge] = field(default_factory=list)

    def counts(self, tolerance: Decimal) -> bool:
        return abs(self.amount) > tolerance * max(1, len(self.lines))


@dataclass
class Reconciliation:
    month: str
    currency: str
    provider: Optional[str]
    tolerance: Decimal
    cells: list[Cell]
    differences: list[Difference]  # those that count
    small: list[Difference]  # within tolerance
    invoices: list[dict[str, Any]]

    @property
    def reconciled(self) -> bool:
        return not self.differences

    def status_text(self) -> str:
        """``reconciled (every line within 0.01 USD)`` or ``N differences totalling X USD``."""
        if self.reconciled:
            return f"reconciled (every line within {format(self.tolerance.normalize(), 'f')} {self.currency})"
        n, total = len(self.differences), sum((d.amount for d in self.differences), ZERO)
        return f"{n} difference{'s' * (n != 1)} totalling {cents(total):,.2f} {self.currency}"

    def totals(self) -> tuple[Decimal, Decimal]:
        """(expected, billed) of the month: Σ cells, and the unmatched lines billed too."""
        expected = _sum(expected_cost(c) for c in self.cells)
        unmatched = _sum(d.amount for d in self.differences + self.small if d.cls == "unmatched")
        return expected, _sum(billed_cost(c) for c in self.cells) + unmatched


# --- one cell ---------------------------------------------------------------------------------------------------

def _sum(values) -> Decimal:
    return sum(values, ZERO)


def expected_cost(cell: Cell) -> Decimal:
    return _sum(c.cost * c.share for c in cell.charges)


def billed_cost(cell: Cell) -> Decimal:
    return _sum(b.line.amount for b in cell.lines)


def _ledger_factor(b: Billed, charge: Charge) -> Decimal:
    """k: the ledger's rate ÷ the line's, when the line states its rate from the offer's currency (else 1)."""
    line = b.line
    if line.fx_rate is None or line.pricing_currency != charge.offer_currency:
        return Decimal(1)
    return (charge.fx_rate or Decimal(1)) / line.fx_rate


def _line_parts(b: Billed, charge: Charge, price: Decimal, month_hours: Decimal) -> tuple[Decimal, ...]:
    """(fx, rounding, rate, billed node-hours) of one line against the price in force ``price`` per node-hour."""
    line = b.line
    k = _ledger_factor(b, charge)
    a, p, q = line.amount, line.unit_price, line.quantity
    fx = a - a * k
    rounding = ZERO
    if p is not None and q is not None and abs(a - p * q) <= line.rounding_bound:
        rounding = (a - p * q) * k
    if q is None:
        hours = a * k / price if price else ZERO
    else:
        hours = q * month_hours if line.unit == "months" else q
    return fx, rounding, a * k - rounding - price * hours, hours


def classify(cell: Cell, month_hours: Decimal) -> dict[str, Decimal]:
    """The cell's difference (billed − expected) by class; the amounts add up to it exactly."""
    ae, billed = expected_cost(cell), billed_cost(cell)
    qe = _sum(c.billed_hours * c.share for c in cell.charges)
    if not cell.lines:
        return {"runs_without_billing": -ae}
    if not cell.charges or not qe:
        return {"billed_without_runs": billed - ae}
    price = ae / qe
    out: dict[str, Decimal] = defaultdict(Decimal)
    qb = ZERO
    for b in cell.lines:
        fx, rounding, rate, hours = _line_parts(b, cell.charges[0], price, month_hours)
        out["fx"] += fx
        out["rounding"] += rounding
        out["rate"] += rate
        qb += hours
    used = _sum(c.node_hours * c.share for c in cell.charges)
    low = min(used, qe)
    high = max(used + _sum(c.step_hours * c.nodes * c.share for c in cell.charges), qe)
    within = min(max(qb, low), high)
    out["minimum_or_granularity"] += price * (within - qe)
    out["billed_without_runs" if qb > within else "runs_without_billing"] += price * (qb - within)
    return {k: v for k, v in out.items() if v}


def cell_differences(cell: Cell, month_hours: Decimal) -> list[Difference]:
    return [Difference(cls, cell.offer, cell.start, cell.end, cell.resource, amount, cell.lines, cell.charges)
            for cls, amount in sorted(classify(cell, month_hours).items(), key=lambda kv: list(CLASSES).index(kv[0]))]


# --- the month --------------------------------------------------------------------------------------------------

def _invoices(session: Session, month: str, lines: list[Billed], provider: Optional[str]) -> list[dict[str, Any]]:
    ids = {b.invoice for b in lines}
    q = select(Invoice).where(Invoice.replaced_by.is_(None))
    if provider:
        q = q.where(Invoice.provider == provider)
    rows = [r for r in session.exec(q.order_by(Invoice.id)) if r.id in ids or r.month == month]
    return [{"invoice": r.id, "provider": r.provider, "number": r.number, "month": r.month, "currency": r.currency,
             "lines": r.lines, "billed_cost": r.billed_cost, "source": r.source} for r in rows]


def _currency(invoices: list[dict[str, Any]], month: str, provider: Optional[str]) -> str:
    if not invoices:
        of = f" of {provider}" if provider else ""
        raise LedgerInputError(f"--month: no invoice{of} imported for {month}; import one with "
                               "`trainledger invoice import FILE`")
    found = sorted({i["currency"] for i in invoices})
    if len(found) > 1:
        raise LedgerInputError(f"--month: the invoices of {month} are in {' and '.join(found)}; reconcile one "
                               "provider at a time (--provider NAME)")
    return found[0]


def _scope(session: Session, charges: list[Charge], lines: list[Billed], provider: Optional[str]) -> list[Charge]:
    """The charges reconciled: rented offers' (reserved and elastic), and any offer a line was placed on; with a
    provider, only the offers it bills."""
    offers = provider_offers(session, provider, lines) if provider else (
        {c.offer for c in charges if c.kind in RENTED} | {b.offer for b in lines if b.offer})
    return [c for c in charges if c.offer in offers]


def reconcile(session: Session, month: str, *, provider: Optional[str] = None, tolerance: Decimal = TOLERANCE,
              now: Optional[datetime] = None) -> Reconciliation:
    """Reconcile ``month``'s current invoices (of ``provider``, else all) with the ledger's expected charges."""
    if tolerance < 0:
        raise LedgerInputError(f"--tolerance: must be 0 or more, got {tolerance}")
    tz = display_timezone(session)
    start, end = month_bounds(month, tz)
    lines = billed_lines(session, start, end, provider)
    invoices = _invoices(session, month, lines, provider)
    currency = _currency(invoices, month, provider)
    try:
        expected = expected_charges(session, month, currency, now or utcnow())
    except LedgerInputError as exc:  # no exchange rate to the invoices' currency: say so in the invoices' terms
        reason = str(exc).removeprefix("--currency: ")
        raise LedgerInputError(f"--month: the invoices of {month} are in {currency}: {reason}") from None
    charges = _scope(session, expected, lines, provider)
    kinds = {name: kind.value for name, kind in session.exec(select(Offer.name, Offer.kind))}
    hosts = run_hosts(session, {c.run_id for c in charges if c.run_id}) if any(b.node for b in lines) else {}
    cells, unmatched = build_cells(charges, lines, kinds, hosts, start, end)
    diffs = [d for c in cells for d in cell_differences(c, hours_between(start, end))]
    diffs += [Difference("unmatched", None, b.line.period_start, b.line.period_end, b.line.resource, b.line.amount,
                         [b]) for b in unmatched]
    return Reconciliation(month, currency, provider, tolerance, cells, [d for d in diffs if d.counts(tolerance)],
                          [d for d in diffs if not d.counts(tolerance)], invoices)
