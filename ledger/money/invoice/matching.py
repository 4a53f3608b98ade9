"""Matching invoice lines to the ledger's expected charges: the cells a month is reconciled in.

**Expected charges** are what the ledger believes a provider bills (:func:`expected_charges`, from
:func:`trainledger.money.account.monthly.month_charges`, the FOCUS export's own source): each elastic run's part of
each charge period (its billed node-hours × the hourly rate in force, after the offer's granularity and minimum),
and each fixed-cost fleet's cost of each charge period (a reserved term's commitment: nodes × monthly price).

**Billed lines** are the lines of the month's current invoices (a replaced invoice no longer counts) whose period
starts in the month; a line's offer and node come from the invoice mapping (``trainledger invoice map``), else its
SKU when that names an offer (FOCUS ``SkuId``), else its resource when that names a ledger run or commitment
(``trainledger/runs/ID``, ``trainledger/commitments/OFFER``: the ledger's own FOCUS export). A line the ledger
cannot place is *unmatched*.

**Cells**: lines and charges meet in cells keyed by offer, charge period and resource (:class:`Cell`):

* the charge period is the ledger's (the month cut where a price or rate changes); a line whose period spans
  several of an offer's charge periods joins them into one cell;
* the resource is the run when a line names a ledger run; else the node when the mapping gives the line a node
  (a run's charge goes to each of its nodes, ``run_node``, in equal parts: billed node-hours ÷ nodes each);
  else the offer as a whole (what no line names). So Σ cells = the month's expected charges, exactly.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.money.account.monthly import month_charges
from trainledger.money.rates.costs import ONE, ZERO
from trainledger.store.mappings.invoice_map import load_rules, resolve
from trainledger.store.models import Invoice, InvoiceLine, Offer, OfferKind, RunNode

RUN_PREFIX, COMMITMENT_PREFIX = "trainledger/runs/", "trainledger/commitments/"
#: the coarsest billing step assumed of a provider when the offer states a finer one (docs/INVOICES.md)
HOUR = ONE


@dataclass
class Charge:
    """One expected charge: a run's part of a charge period (``run_id``) or a fleet's cost of it (None)."""

    offer: str
    kind: str
    start: datetime
    end: datetime
    run_id: Optional[str]
    nodes: int
    node_hours: Decimal  # used (fleets: their capacity)
    billed_hours: Decimal  # the pricing quantity: billed node-hours (fleets: capacity node-hours)
    cost: Decimal
    step_hours: Decimal  # one billing step per node: max(granularity, minimum, 1 h); 0 for a fleet
    fx_rate: Optional[Decimal]  # the ledger's rate from the offer's currency to the invoice's (None: same)
    offer_currency: str
    share: Decimal = ONE  # the part of the charge in its cell (a node's: 1/nodes)

    def part(self, share: Decimal) -> "Charge":
        return Charge(**{**self.__dict__, "share": share})


@dataclass
class Billed:
    """One invoice line with where it was placed."""

    line: InvoiceLine
    invoice: int
    provider: str
    offer: Optional[str]
    node: str = ""
    run_id: Optional[str] = None


@dataclass
class Cell:
    """Lines and charges of one offer, charge period (or periods a line spans) and resource."""

    offer: str
    kind: str
    start: datetime
    end: datetime
    resource: str  # "run:ID", "node:HOST" or "" (the offer as a whole)
    charges: list[Charge] = field(default_factory=list)
    lines: list[Billed] = field(default_factory=list)


def expected_charges(session: Session, month: str, currency: Optional[str], now: datetime) -> list[Charge]:
    """The month's expected charges in ``currency`` (the invoices'), each charge period at its prices and rate."""
    mc = month_charges(session, month, currency=currency, now=now)
    out = []
    for line in mc.lines:
        ch = line.charge
        if ch is None or ch.offer.kind != OfferKind.rent_elastic:
            continue  # drawn from a fleet: the fleet's charge is what is billed
        o = ch.offer
        step = max(o.billing_granularity_hours or ZERO, o.minimum_hours or ZERO, HOUR)
        out.append(Charge(o.name, o.kind.value, ch.start, ch.end, line.run_id, line.nodes, line.node_hours,
                          ch.pricing_quantity, line.cost, step, _rate(o), _source(o)))
    for fc in mc.fleets:
        o, fm = fc.offer, fc.fleet
        out.append(Charge(o.name, o.kind.value, fc.start, fc.end, None, 0, fm.capacity_node_hours,
                          fm.capacity_node_hours, fm.total, ZERO, _rate(o), _source(o)))
    return out


def _rate(offer: Any) -> Optional[Decimal]:
    fx = getattr(offer, "fx", None)
    return fx.rate if fx is not None else None


def _source(offer: Any) -> str:
    return getattr(offer, "source_currency", None) or offer.currency


def billed_lines(session: Session, start: datetime, end: datetime, provider: Optional[str]) -> list[Billed]:
    """The month's lines of current invoices, each placed on an offer (and node or run) where the ledger can."""
    q = (select(InvoiceLine, Invoice.id, Invoice.provider).join(Invoice, Invoice.id == InvoiceLine.invoice_id)
         .where(Invoice.replaced_by.is_(None), InvoiceLine.period_start >= start, InvoiceLine.period_start < end,
                InvoiceLine.kind != "info"))
    if provider:
        q = q.where(Invoice.provider == provider)
    rules = load_rules(session)
    offers = set(session.exec(select(Offer.name)))
    out = []
    for line, inv_id, prov in session.exec(q.order_by(Invoice.id, InvoiceLine.line_no)):
        out.append(_place(Billed(line, inv_id, prov, None), rules, offers))
    return out


def _place(b: Billed, rules: list, offers: set[str]) -> Billed:
    res = b.line.resource
    rule = resolve(rules, b.provider, res)
    if res.startswith(RUN_PREFIX):
        b.run_id = res[len(RUN_PREFIX):]
    if rule is not None:
        b.offer, b.node = rule.offer, res if rule.node == "*" else rule.node
    elif b.line.sku in offers:
        b.offer = b.line.sku
    elif res.startswith(COMMITMENT_PREFIX) and res[len(COMMITMENT_PREFIX):] in offers:
        b.offer = res[len(COMMITMENT_PREFIX):]
    return b


def provider_offers(session: Session, provider: str, lines: list[Billed]) -> set[str]:
    """The offers a provider bills: those its lines were placed on and those its mapping rules name."""
    named = {r.offer for r in load_rules(session) if r.provider == provider}
    return named | {b.offer for b in lines if b.offer}


# --- cells -----------------------------------------------------------------------------------------------------

def _period_groups(charges: list[Charge], lines: list[Billed]) -> dict[tuple[str, datetime], tuple[datetime, datetime]]:
    """(offer, charge period start) → the cell period it belongs to: periods one line spans are joined."""
    periods: dict[str, set[tuple[datetime, datetime]]] = defaultdict(set)
    for c in charges:
        periods[c.offer].add((c.start, c.end))
    groups: dict[tuple[str, datetime], tuple[datetime, datetime]] = {}
    for offer, found in periods.items():
        spans = sorted(found)
        root = list(range(len(spans)))

        def top(i: int) -> int:
            while root[i] != i:
                i = root[i]
            return i

        for b in lines:
            if b.offer == offer:
                hit = [i for i, (s, e) in enumerate(spans) if s < b.line.period_end and b.line.period_start < e]
                for i in hit[1:]:
                    root[top(i)] = top(hit[0])
        for i, (s, _) in enumerate(spans):
            members = [sp for j, sp in enumerate(spans) if top(j) == top(i)]
            groups[(offer, s)] = (members[0][0], members[-1][1])
    return groups


def _line_period(b: Billed, groups: dict, month_start: datetime, month_end: datetime) -> tuple[datetime, datetime]:
    spans = sorted(v for (o, _), v in groups.items() if o == b.offer)
    for s, e in spans:
        if s <= b.line.period_start < e:
            return s, e
    return month_start, month_end


def build_cells(charges: list[Charge], lines: list[Billed], kinds: dict[str, str], hosts: dict[str, list[str]],
                month_start: datetime, month_end: datetime) -> tuple[list[Cell], list[Billed]]:
    """The cells of the month, and the lines placed on no offer (unmatched)."""
    groups = _period_groups(charges, lines)
    cells: dict[tuple, Cell] = {}

    def cell(offer: str, period: tuple[datetime, datetime], resource: str) -> Cell:
        key = (offer, period[0], resource)
        if key not in cells:
            cells[key] = Cell(offer, kinds.get(offer, ""), period[0], period[1], resource)
        return cells[key]

    named: dict[tuple[str, datetime], set[str]] = defaultdict(set)
    unmatched = []
    for b in lines:
        if b.offer is None:
            unmatched.append(b)
            continue
        period = _line_period(b, groups, month_start, month_end)
        resource = f"run:{b.run_id}" if b.run_id else (f"node:{b.node}" if b.node else "")
        named[(b.offer, period[0])].add(resource)
        cell(b.offer, period, resource).lines.append(b)
    for c in charges:
        period = groups[(c.offer, c.start)]
        for resource, part in _charge_parts(c, named[(c.offer, period[0])], hosts):
            cell(c.offer, period, resource).charges.append(part)
    return sorted(cells.values(), key=lambda c: (c.offer, c.start, c.resource)), unmatched


def _charge_parts(c: Charge, named: set[str], hosts: dict[str, list[str]]) -> list[tuple[str, Charge]]:
    """Where a charge goes: its run's cell when a line names the run; else a part per named node it ran on
    (1/nodes each) and the rest to the offer as a whole."""
    if c.run_id and f"run:{c.run_id}" in named:
        return [(f"run:{c.run_id}", c)]
    on_nodes = [h for h in hosts.get(c.run_id or "", []) if f"node:{h}" in named][:c.nodes] if c.run_id else []
    if not on_nodes:
        return [("", c)]
    shares = [ONE / c.nodes] * len(on_nodes)
    if len(on_nodes) == c.nodes:  # every node named: the last takes what is left, so the parts add up to 1 exactly
        shares[-1] = ONE - sum(shares[:-1], ZERO)
    parts = [(f"node:{h}", c.part(share)) for h, share in zip(on_nodes, shares)]
    rest = ONE - sum(shares, ZERO)
    return parts + ([("", c.part(rest))] if rest else [])


def run_hosts(session: Session, run_ids: set[str]) -> dict[str, list[str]]:
    """Run id → the host names of its nodes (``run_node``), sorted."""
    out: dict[str, list[str]] = defaultdict(list)
    ids = sorted(run_ids)
    for i in range(0, len(ids), 500):
        for rid, host in session.exec(select(RunNode.run_id, RunNode.hostname).where(RunNode.run_id.in_(ids[i:i + 500]))):
            out[rid].append(host)
    return {k: sorted(v) for k, v in out.items()}
