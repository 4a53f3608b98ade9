"""The monthly report: the ledger's real usage of a month costed under every option.

This is where ledger rows meet the cost engine (:mod:`trainledger.money.rates.costs`). The CLI
(``cost compare --month``, ``report monthly``), the export and the dashboard
all read their figures from :func:`monthly_report`, so a number is computed in
exactly one place.

A month is a calendar month in the display time zone (:mod:`trainledger.money.rates.months`).
A run that crosses a month boundary is split at the boundary: its node-hours are
split exactly, and its elastic cost and tokens are split by the share of its
duration, so that the slices of a run always add up to the run's total
(telescoping shares). The facts come from the pre-aggregated rollup
(:mod:`trainledger.money.facts.rollup`); the report takes them in five steps:

1. :func:`~trainledger.money.account.month_load.load_month`: the month's bounds, the part elapsed, catalog,
   fleets and rollup facts (:class:`~trainledger.money.account.month_load.Months`: several months' at once);
2. :func:`_resolve_offers`: the offer each group of runs is costed under;
3. :func:`_node_type_month`: per node type, the actual cost (fleets allocated,
   elastic runs billed) and the alternatives (own, elastic, reserved);
4. :func:`_summary`: the month's totals, ROI, lost work and idle, output per spend and time
   utilization (node-hours drawn from fixed-cost fleets ÷ their capacity; elastic node-hours apart);
5. :func:`_projects` and :func:`_lines`: projects and per-run lines, costed at the
   same rates as the totals so that they add up to them.

A month that has not ended (``now`` before its end) is reported **to date**:
capacity, fixed costs of owned and reserved fleets, idle and time utilization
are counted to ``now`` (to the microsecond) at the month's rates per node-hour,
live runs are added up to ``now`` by the rollup, and the summary carries
``period`` ("to date (3 of 31 days)"), ``is_partial``, ``period_end`` and
``elapsed_hours``. An ended month's report is what it always was.
**Charge periods.** Prices, exchange rates and carbon intensities are effective-dated;
where one takes effect inside a month, the rollup cuts the node type's month there
(:mod:`trainledger.money.facts.rollup`). Step 3 then runs once per charge period
(:func:`_cost_node_types`) on the catalog priced at that period's start
(:func:`trainledger.money.rates.catalog.priced_catalog`), with each fleet's fixed cost prorated
by the period's hours, and the periods are added up: Σ periods = the month, and the
allocation identity holds in each. A month with no change is one period and is
costed exactly as before. Money is presented in the offers' currency, or converted
to ``currency`` (``--currency``, else the Settings currency once set) at each
period's rate (:mod:`trainledger.money.rates.fx`); the rates used are listed in the report.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, Iterable, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account import not_costed
from trainledger.money.account.month_lines import (  # noqa: F401  (RunSlice, ChargeInfo, SLICE_QUANTUM: imported from here)
    SLICE_QUANTUM,
    ChargeInfo,
    GroupKey,
    RunSlice,
    _add,
    _combine_co2e,
    _Costing,
    _elastic,
    _fleet_energy_kwh,
    _lines,
    _total,
    merged_lines,
)
from trainledger.money.account.month_load import Months, _Month, load_month  # noqa: F401  (_Month: imported from here)
from trainledger.money.facts import counts, rollup
from trainledger.money.facts.rollup_facts import NO_NODE_TYPE_ID
from trainledger.money.rates import carbon, costs
from trainledger.money.rates.catalog import (
    Catalog,
    combine_bases,
    default_offer,
    fleet_capacity,
    pick_offer,
    priced_catalog,
)
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.months import Period
from trainledger.store.models import (
    WASTE_STATUSES,
    Offer,
    OfferKind,
    Project,
)
from trainledger.store.types import utcnow


@dataclass
class FleetCharge:
    """A fixed-cost offer's fleet over one charge period: its cost, what runs used, and idle."""

    offer: Any
    start: datetime
    end: datetime
    fleet: costs.FleetMonth
    fleets: list[str]  # the names of the fleets held (empty: capacity implied by peak use)


@dataclass
class MonthCharges:
    """The month's report and its charges per charge period (``trainledger.reports.focus``)."""

    report: "MonthlyReport"
    lines: list[RunSlice]  # one per run and charge period, with ``charge`` set
    fleets: list[FleetCharge]
    start: datetime
    end: datetime


@dataclass
class FleetUse:
    """One fixed-cost offer's fleets over the month (its charge periods added): held, drawn by runs (at most what
    was held: time utilization's numerator), idle and its cost; ``idle_rate`` is idle cost ÷ idle node-hours."""

    offer: str
    kind: str
    capacity_node_hours: Decimal
    used_node_hours: Decimal
    idle_node_hours: Decimal
    idle_cost: Decimal

    @property
    def idle_rate(self) -> Optional[Decimal]:
        return self.idle_cost / self.idle_node_hours if self.idle_cost > 0 and self.idle_node_hours > 0 else None


@dataclass
class NodeTypeMonth:
    """Comparison of options for one node type in one month."""

    node_type: str
    currency: str
    node_hours: Decimal  # of all its runs: fleet_used_node_hours (≤ capacity) + elastic_node_hours (+ over-use)
    gpu_hours: Decimal
    peak_nodes: int
    capacity_node_hours: Decimal  # of the fleets actually held
    actual_cost: Decimal
    idle_cost: Decimal
    own_offer: Optional[str]
    own_nodes: Optional[int]
    own_nodes_from: Optional[str]  # "fleet" | "peak"
    own_cost: Optional[Decimal]
    own_idle_cost: Optional[Decimal]
    elastic_offer: Optional[str]
    elastic_cost: Optional[Decimal]
    reserved_offer: Optional[str]
    reserved_cost: Optional[Decimal]
    over_capacity: bool = False
    power_basis: str = "nominal"  # own power term: "measured" | "mixed" | "nominal" (_fleet_energy_kwh)
    energy_kwh: Optional[Decimal] = None  # of its runs: measured, else nominal power × node-hours
    co2e_kg: Optional[Decimal] = None
    co2e_basis: Optional[str] = None
    fleet_used_node_hours: Decimal = ZERO  # drawn from its fixed-cost fleets, each at most its capacity
    elastic_node_hours: Decimal = ZERO  # on elastic rent: reported apart, in no utilization
    time_utilization: Optional[Decimal] = None  # fleet_used_node_hours ÷ capacity_node_hours
    fleets: list[FleetUse] = field(default_factory=list)  # per fixed-cost offer


@dataclass
class MonthlyReport:
    month: str
    timezone: str
    currency: str
    summary: dict[str, Any]
    node_types: list[NodeTypeMonth]
    projects: list[dict[str, Any]]
    runs: list[RunSlice] = field(repr=False)
    fx_rates: list[dict[str, Any]] = field(default_factory=list)  # the rates each charge period was converted at
    carbon: dict[str, Any] = field(default_factory=dict)
    period: Optional[Period] = None  # the elapsed part of the month (all of it once it has ended)
    #: runs no offer can cost (no node type, or a node type without an offer): in no money figure
    not_costed: list[not_costed.NotCostedRun] = field(default_factory=list)

    @property
    def is_partial(self) -> bool:
        return self.period is not None and self.period.is_partial


# --- the report, in steps ----------------------------------------------------------

def monthly_report(session: Session, month: str, *, own: Optional[str] = None, rent: Optional[str] = None,
                   reserved: Optional[str] = None, now: Optional[datetime] = None,
                   lines: bool | Iterable[str] = True, projects: bool = True,
                   currency: Optional[str] = None, months: Optional[Months] = None) -> MonthlyReport:
    """Cost the ledger's usage of ``month`` under its actual offers and every alternative.

    Per node type: actual cost (fleets allocated, elastic runs billed), cost if
    owned (fleet sized to the configured own fleet, else to the peak of
    concurrent nodes), cost if rented elastic (only used node-hours, billed per
    run) and cost if rented reserved (same sizing as owning).

    The totals are computed per node type, recorded offer and status, so their
    cost does not grow with the number of runs; projects and per-run lines are
    then costed at the same rates, so they add up to the totals. ``lines``: the
    per-run lines (``runs``) for every run (True), none (False) or only the given
    run ids; ``projects=False`` leaves out the per-project table (trend charts).
    ``currency``: present money in it (each charge period at its exchange rate);
    default: the Settings currency once set, else the offers' own. ``months``: what several months' reports read,
    read once for all of them (:class:`~trainledger.money.account.month_load.Months`, ``now`` and ``currency`` the
    same): the same report.
    """
    m, offers, costings, nt_months, currencies = _cost_month(session, month, (own, rent, reserved), now, currency, months)
    return _assemble(session, m, offers, costings, nt_months, currencies, lines, projects)


def _cost_month(session: Session, month: str, flags: tuple[Optional[str], Optional[str], Optional[str]],
                now: Optional[datetime], currency: Optional[str], months: Optional[Months] = None) -> tuple:
    """Steps 1-3: the month loaded (:mod:`~trainledger.money.account.month_load`), its offers resolved, each node
    type costed per charge period."""
    now = now or utcnow()
    m = months.load(month, now, currency) if months is not None else load_month(session, month, now, currency)
    offers = _resolve_offers(m)
    costings, nt_months, currencies = _cost_node_types(m, offers, flags)
    return m, offers, costings, nt_months, currencies


def _assemble(session: Session, m: "_Month", offers: "_Offers", costings: dict, nt_months: list[NodeTypeMonth],
              currencies: set[str], lines: bool | Iterable[str], projects: bool,
              run_lines: Optional[list[RunSlice]] = None) -> MonthlyReport:
    """Steps 4-5: summary (with the part elapsed, carbon and the rates used), projects and lines (``run_lines``:
    every run's, already made)."""
    month = m.name
    currency = m.fx.target or _one_currency(month, currencies) or m.currency_setting
    runs = counts.runs_per_group(session, m.facts)
    summary = _summary(month, offers, nt_months, _group_costs(costings), _lost_work(offers, costings, m.facts.periods))
    summary["runs"] = counts.count(runs, offers.groups, by_project=False)  # runs, not charge-period slices
    if offers.unpriced:  # visible, and blocking nothing else
        summary.update(_unpriced_summary(m, offers, runs))
    if m.period.is_partial:
        summary = {"month": month, **period_summary(m.period), **summary}
    footprint = _carbon(m, costings)
    summary.update({k: v for k, v in footprint.items() if k != "carbon_intensities"})
    summary["carbon_intensities"] = [_intensity_text(i) for i in footprint["carbon_intensities"]]
    fx_rates = m.fx.rates_used(m.tz)
    if fx_rates:  # money was converted: say at which rates
        summary["fx_rates"] = [_rate_text(r) for r in fx_rates]
    project_rows = _projects(session, offers.detail, costings, m.facts.periods, runs) if projects else []
    runs = [] if lines is False else run_lines if run_lines is not None else _lines(
        session, m, None if lines is True else set(lines), costings)
    unpriced = [] if lines is False or not offers.unpriced else not_costed.month_not_costed(
        session, month, m.facts.live, offers.unpriced)
    if lines is not False and lines is not True:
        unpriced = [r for r in unpriced if r.run_id in set(lines)]
    return MonthlyReport(month=month, timezone=str(m.tz), currency=currency, summary=summary,
                         node_types=nt_months, projects=project_rows, runs=runs, fx_rates=fx_rates, carbon=footprint,
                         period=m.period, not_costed=unpriced)


def _unpriced_summary(m: "_Month", offers: "_Offers", runs: dict) -> dict[str, Any]:
    """The summary keys of a month with runs no offer can cost: how many (``unpriced_runs``), the node types
    without an offer, the runs without a node type and their node-hours (exact; in no money figure)."""
    out: dict[str, Any] = {"unpriced_runs": counts.count(runs, offers.unpriced),
                           "unpriced_node_types": sorted({m.cat.node_types[k[0]].name for k in offers.unpriced
                                                          if k[0] != NO_NODE_TYPE_ID})}
    no_nt = [k for k in offers.unpriced if k[0] == NO_NODE_TYPE_ID]
    if no_nt:
        out["runs_without_node_type"] = counts.count(runs, no_nt)
    out["not_costed_node_hours"] = _total(offers.unpriced.values()).node_hours
    return out


def period_summary(period: Period) -> dict[str, Any]:
    """The keys a month that has not ended adds to its summary (an ended month's summary is unchanged)."""
    return {"period": period.label, "is_partial": True, "period_start": period.start, "period_end": period.end,
            "elapsed_hours": period.hours, "month_hours": period.month_hours,
            "days_elapsed": period.days_elapsed, "days_in_month": period.days_in_month}


@dataclass
class _Offers:
    """The groups of the month and the offer each is costed under."""

    detail: dict[GroupKey, rollup.Facts]  # per (node type, offer, project, status)
    groups: dict[GroupKey, rollup.Facts]  # the same without the project
    resolved: dict[GroupKey, Offer]  # group → the offer it is costed under
    by_recorded: dict[tuple[int, Optional[int]], Offer]  # (node type, recorded offer) → offer used
    by_node_type: dict[int, list[GroupKey]]  # node type of the offer used → its groups
    unpriced: dict[GroupKey, rollup.Facts] = field(default_factory=dict)  # groups no offer can cost


def _resolve_offers(m: _Month) -> _Offers:
    """Each group's offer: as recorded on its runs, else the node type's default (its fleet, else elastic rent).

    A group no offer can cost (its node type has none; an import refuses such runs, a tracked run may still
    be one) is left out of the costing and kept in ``unpriced``: the month's other runs are reported, and the
    summary says how many runs are unpriced and on which node types."""
    detail = {k: f for k, f in m.facts.groups.items() if f.slices}
    resolved: dict[GroupKey, Offer] = {}
    by_recorded: dict[tuple[int, Optional[int]], Offer] = {}
    unpriced: dict[GroupKey, rollup.Facts] = {}
    for key in list(detail):
        if key[:2] not in by_recorded:
            nt_id, offer_id = key[0], key[1]
            offer = (m.cat.offers.get(offer_id) if offer_id else None) or default_offer(m.cat, nt_id, m.fleets)
            if offer is None:
                unpriced[key] = detail.pop(key)
                continue
            by_recorded[key[:2]] = offer
    groups = _without_project(detail)
    for key in groups:
        resolved[key] = by_recorded[key[:2]]
    by_nt: dict[int, list[GroupKey]] = defaultdict(list)
    for key, offer in resolved.items():
        by_nt[offer.node_type_id].append(key)
    for off_id in m.fleets:  # fleets with no runs still cost money
        by_nt.setdefault(m.cat.offers[off_id].node_type_id, [])
    return _Offers(detail, groups, resolved, by_recorded, by_nt, unpriced)


def _without_project(detail: dict[GroupKey, rollup.Facts]) -> dict[GroupKey, rollup.Facts]:
    """Groups of ``(node type, offer, project, status)`` summed over projects."""
    groups: dict[GroupKey, rollup.Facts] = defaultdict(rollup.Facts)
    for (nt_id, offer_id, _, status), f in detail.items():
        groups[(nt_id, offer_id, None, status)].add(f)
    return groups


# --- charge periods ---------------------------------------------------------------

def _cost_node_types(m: _Month, offers: _Offers, flags: tuple[Optional[str], Optional[str], Optional[str]]
                     ) -> tuple[dict[datetime, "_Costing"], list[NodeTypeMonth], set[str]]:
    """Step 3 for every node type and each of its charge periods; the periods of a node type added up.

    Returns the costing of each charge period (by its start), the node types' months and the currencies used.
    """
    views: dict[datetime, tuple[Catalog, _Offers, _Costing]] = {}
    if not m.facts.cuts:  # one charge period: the month itself
        views[m.start] = (m.cat, offers, _Costing(offers.by_recorded, {}, {}, {}, m.start, m.intensities, m.cat))
    nt_months, currencies = [], set()
    for nt_id in sorted(offers.by_node_type, key=lambda k: m.cat.node_types[k].name):
        parts = []
        for ps, pe in _periods_of(m, offers, nt_id):
            if ps not in views:
                views[ps] = _period_view(m, offers, ps)
            cat, op, costed = views[ps]
            mp = m if (ps, pe) == (m.start, m.end) and cat is m.cat else replace(
                m, start=ps, end=pe, span_hours=None, cat=cat)
            costed.period_end[nt_id] = pe
            part = _node_type_month(mp, op, nt_id, flags, costed, currencies)
            footprint = costed.node_type_carbon(nt_id, _total(op.groups[k] for k in op.by_node_type[nt_id]))
            part.energy_kwh, part.co2e_kg, part.co2e_basis = footprint.energy_kwh, footprint.co2e_kg, footprint.basis
            m.fx.note(_offers_used(mp, op, nt_id, part), ps, pe)
            parts.append(part)
        nt_months.append(parts[0] if len(parts) == 1 else _merge_periods(parts))
    return {ps: v[2] for ps, v in sorted(views.items())}, nt_months, currencies


def _periods_of(m: _Month, offers: _Offers, nt_id: int) -> list[tuple[datetime, datetime]]:
    """The charge periods of a node type in the month: the month cut where its prices, rates or intensity change
    (and where the runs it prices are cut, should a run be recorded with another node type's offer)."""
    edges = {m.start, *m.facts.cuts.get(nt_id, ())}
    if len(m.facts.periods) > 1:
        edges |= {ps for ps, groups in m.facts.periods.items()
                  if any(offers.by_recorded[k[:2]].node_type_id == nt_id for k in groups if k[:2] in offers.by_recorded)}
    edges = sorted(edges) + [m.end]
    return list(zip(edges, edges[1:]))


def _period_view(m: _Month, offers: _Offers, start: datetime) -> tuple[Catalog, _Offers, "_Costing"]:
    """The catalog priced at a charge period's start, the month's groups with that period's facts, a costing."""
    cat = m.cat if start == m.start else priced_catalog(m.base_cat, m.versions, start, m.fx.book, m.fx.target)
    facts = m.facts.periods.get(start, {})
    detail = {k: facts.get(k) or rollup.Facts() for k in offers.detail}
    resolved = {k: cat.offers[o.id] for k, o in offers.resolved.items()}
    by_recorded = {k: cat.offers[o.id] for k, o in offers.by_recorded.items()}
    op = _Offers(detail, _without_project(detail), resolved, by_recorded, offers.by_node_type, offers.unpriced)
    return cat, op, _Costing(by_recorded, {}, {}, {}, start, m.intensities, cat)


def _offers_used(m: _Month, offers: _Offers, nt_id: int, part: NodeTypeMonth) -> list[Offer]:
    """The offers a node type's charge period was priced with: its groups', its fleets', the alternatives."""
    used = [offers.resolved[k] for k in offers.by_node_type[nt_id]]
    used += [m.cat.offers[off_id] for off_id in m.fleets if m.cat.offers[off_id].node_type_id == nt_id]
    names = {part.own_offer, part.elastic_offer, part.reserved_offer}
    return used + [o for o in m.cat.offers.values() if o.node_type_id == nt_id and o.name in names]


def _merge_periods(parts: list[NodeTypeMonth]) -> NodeTypeMonth:
    """A node type's month from its charge periods: money, hours and energy added, the rest as in the first."""
    first = parts[0]
    add = ("node_hours", "gpu_hours", "capacity_node_hours", "actual_cost", "idle_cost", "fleet_used_node_hours",
           "elastic_node_hours")
    optional = ("own_cost", "own_idle_cost", "elastic_cost", "reserved_cost", "energy_kwh", "co2e_kg")
    merged = replace(first, **{k: sum((getattr(p, k) for p in parts), ZERO) for k in add},
                     **{k: _sum_opt(getattr(p, k) for p in parts) for k in optional})
    merged.time_utilization = costs.time_utilization(merged.fleet_used_node_hours, merged.capacity_node_hours)
    fleets: dict[str, FleetUse] = {}
    for f in (f for p in parts for f in p.fleets):
        g = fleets.setdefault(f.offer, FleetUse(f.offer, f.kind, ZERO, ZERO, ZERO, ZERO))
        for k in ("capacity_node_hours", "used_node_hours", "idle_node_hours", "idle_cost"):
            setattr(g, k, getattr(g, k) + getattr(f, k))
    merged.fleets = list(fleets.values())
    merged.over_capacity = any(p.over_capacity for p in parts)
    merged.power_basis = combine_bases([p.power_basis for p in parts])
    merged.co2e_basis = _combine_co2e([p.co2e_basis for p in parts])
    return merged


def _group_costs(costings: dict[datetime, "_Costing"]) -> dict[GroupKey, Decimal]:
    """The month's cost of each group: its charge periods' costs added up."""
    if len(costings) == 1:
        return next(iter(costings.values())).group_cost
    out: dict[GroupKey, Decimal] = {}
    for c in costings.values():
        for k, v in c.group_cost.items():
            out[k] = out[k] + v if k in out else v
    return out


def _node_type_month(m: _Month, offers: _Offers, nt_id: int, flags: tuple[Optional[str], Optional[str], Optional[str]],
                     costed: "_Costing", currencies: set[str]) -> NodeTypeMonth:
    """One node type's month: what it cost under the offers used, and under each alternative."""
    keys = offers.by_node_type[nt_id]
    actual = _actual_cost(m, offers, nt_id, costed, currencies)
    total = _total(offers.groups[k] for k in keys)
    alt = _alternatives(m, offers, nt_id, total, flags, costed)
    chosen = [o for o in (alt.own_offer, alt.rent_offer, alt.reserved_offer) if o is not None]
    currencies.update(o.currency for o in chosen)
    return NodeTypeMonth(
        node_type=m.cat.node_types[nt_id].name, currency=chosen[0].currency if chosen else m.currency_setting,
        node_hours=total.node_hours, gpu_hours=total.gpu_hours, peak_nodes=m.facts.peak(nt_id),
        capacity_node_hours=actual.capacity, actual_cost=actual.cost, idle_cost=actual.idle,
        own_offer=alt.own_offer.name if alt.own_offer else None, own_nodes=alt.own_nodes, own_nodes_from=alt.sized,
        own_cost=alt.own_cost, own_idle_cost=alt.own_idle,
        elastic_offer=alt.rent_offer.name if alt.rent_offer else None, elastic_cost=alt.elastic_cost,
        reserved_offer=alt.reserved_offer.name if alt.reserved_offer else None, reserved_cost=alt.reserved_cost,
        over_capacity=actual.over, power_basis=combine_bases(actual.bases + alt.bases),
        fleet_used_node_hours=actual.fleet_used, elastic_node_hours=actual.elastic,
        time_utilization=costs.time_utilization(actual.fleet_used, actual.capacity), fleets=actual.fleets)


@dataclass
class _Actual:
    cost: Decimal = ZERO
    idle: Decimal = ZERO
    capacity: Decimal = ZERO
    fleet_used: Decimal = ZERO  # node-hours drawn from the fleets, each at most its capacity
    elastic: Decimal = ZERO  # node-hours on elastic rent
    over: bool = False
    bases: list[str] = field(default_factory=list)
    fleets: list[FleetUse] = field(default_factory=list)


def _actual_cost(m: _Month, offers: _Offers, nt_id: int, costed: "_Costing", currencies: set[str]) -> _Actual:
    """Elastic groups billed per run; each fixed-cost offer's fleet month allocated to its groups, the rest idle."""
    out = _Actual()
    by_offer: dict[int, list[GroupKey]] = defaultdict(list)
    for k in offers.by_node_type[nt_id]:
        off = offers.resolved[k]
        currencies.add(off.currency)
        if off.kind == OfferKind.rent_elastic:
            costed.group_cost[k] = _elastic(off, offers.groups[k])
            out.cost += costed.group_cost[k]
            out.elastic += offers.groups[k].node_hours
        else:
            by_offer[off.id].append(k)
    for off_id in m.fleets:
        if m.cat.offers[off_id].node_type_id == nt_id:
            by_offer.setdefault(off_id, [])
    for off_id, members in by_offer.items():
        offer = m.cat.offers[off_id]
        if m.fleets.get(off_id):
            cap = fleet_capacity(m.fleets[off_id], m.start, m.capacity_end, m.tz)
        else:  # no fleet configured: implied by peak use
            cap = Decimal(m.facts.peak(nt_id, {k[1] or 0 for k in members})) * m.span_hours
        member_facts = [offers.groups[k] for k in members]
        kwh, basis = _fleet_energy_kwh(offer, _total(member_facts), cap)
        fm = costs.fleet_month(offer, cap, [f.node_hours for f in member_facts], m.hours, energy_kwh=kwh)
        costed.fleet_months[off_id] = fm
        for k, c in zip(members, fm.allocated):
            costed.group_cost[k] = c
        out.cost += fm.total
        out.idle += fm.idle
        out.capacity += cap
        used = min(fm.busy_node_hours, cap)  # over-use (inconsistent data) cannot make a fleet more than full
        out.fleet_used += used
        out.fleets.append(FleetUse(offer.name, offer.kind.value, cap, used, fm.idle_node_hours, fm.idle))
        out.over = out.over or fm.over_capacity
        out.bases.append(basis)
        currencies.add(offer.currency)
    return out


@dataclass
class _Alternatives:
    own_offer: Optional[Offer]
    rent_offer: Optional[Offer]
    reserved_offer: Optional[Offer]
    own_nodes: int
    sized: str  # "fleet" | "peak"
    own_cost: Optional[Decimal] = None
    own_idle: Optional[Decimal] = None
    elastic_cost: Optional[Decimal] = None
    reserved_cost: Optional[Decimal] = None
    bases: list[str] = field(default_factory=list)


def _alternatives(m: _Month, offers: _Offers, nt_id: int, total: rollup.Facts,
                  flags: tuple[Optional[str], Optional[str], Optional[str]], costed: "_Costing") -> _Alternatives:
    """The node type's month if owned (fleet sized to the own fleet, else to peak use), rented elastic
    (only used node-hours, billed per run) and rented reserved (sized as owning)."""
    keys = offers.by_node_type[nt_id]
    own, rent, reserved = flags
    own_fleets = m.fleets_of(nt_id, OfferKind.own)
    if own_fleets:
        own_cap, own_nodes, sized = fleet_capacity(own_fleets, m.start, m.capacity_end, m.tz), max(f.node_count for f in own_fleets), "fleet"
    else:
        peak = m.facts.peak(nt_id)
        own_cap, own_nodes, sized = Decimal(peak) * m.span_hours, peak, "peak"
    alt = _Alternatives(pick_offer(m.cat, own, nt_id, OfferKind.own, "--own"),
                        pick_offer(m.cat, rent, nt_id, OfferKind.rent_elastic, "--rent"),
                        pick_offer(m.cat, reserved, nt_id, OfferKind.rent_reserved, "--reserved"), own_nodes, sized)
    if alt.own_offer is not None:
        kwh, basis = _fleet_energy_kwh(alt.own_offer, total, own_cap)
        alt.bases.append(basis)
        fm = costs.fleet_month(alt.own_offer, own_cap, [offers.groups[k].node_hours for k in keys], m.hours, energy_kwh=kwh)
        alt.own_cost, alt.own_idle = fm.total, fm.idle
        costed.own_months[nt_id] = (alt.own_offer, fm)
    if alt.rent_offer is not None:
        costed.rent_offers[nt_id] = alt.rent_offer
        alt.elastic_cost = sum((_elastic(alt.rent_offer, offers.groups[k]) for k in keys), ZERO)
    if alt.reserved_offer is not None:
        alt.reserved_cost = costs.fixed_cost_per_node_month(alt.reserved_offer) * own_cap / m.hours
    return alt


def _one_currency(month: str, currencies: set[str]) -> Optional[str]:
    if len(currencies) > 1:
        raise LedgerInputError(
            f"month {month}: offers in use are priced in {', '.join(sorted(currencies))}; one report needs one "
            f"currency: present it in one with --currency {sorted(currencies)[0]} (the others converted at the rates "
            "of `trainledger fx set`), or set a default with `trainledger settings currency CODE`")
    return next(iter(currencies), None)


# --- rates, shares and lines ------------------------------------------------------

def _lost_work(offers: _Offers, costings: dict[datetime, _Costing], periods: dict[datetime, dict]) -> Decimal:
    """Lost work of the month: Σ over failed, crashed and cancelled runs of the cost after their last checkpoint
    (their whole cost when they never checkpointed), each charge period at its own rates (the goodput account's
    ``lost_work``; waste = badput + idle is the account's, ``trainledger.money.goodput.waste``)."""
    waste = {s.value for s in WASTE_STATUSES}
    lost = ZERO
    for costing, facts in _period_parts(offers.detail, costings, periods):
        for k, f in facts.items():
            if k[3] in waste:
                lost += sum(costing.lost(costing.offer(k[0], k[1]), f), ZERO)
    return lost


def _summary(month: str, offers: _Offers, nts: list[NodeTypeMonth], cost: dict[GroupKey, Decimal],
             lost_cost: Decimal) -> dict[str, Any]:
    """The month's totals over every node type: usage, utilizations, actual cost and alternatives, lost work, ROI."""
    t = _total(offers.groups.values())
    actual = sum((n.actual_cost for n in nts), ZERO)
    idle = sum((n.idle_cost for n in nts), ZERO)
    capacity = sum((n.capacity_node_hours for n in nts), ZERO)
    fleet_used = sum((n.fleet_used_node_hours for n in nts), ZERO)
    waste = {s.value for s in WASTE_STATUSES}
    failed_cost = sum((cost[k] for k in offers.groups if k[3] in waste), ZERO)
    choice = _choice(offers, nts, cost, actual, idle)
    alt_cost = choice["alternative_cost"]
    useful_known = t.useful_gpu_hours
    return {
        "month": month,
        "runs": t.slices,
        "node_hours": t.node_hours,
        "gpu_hours": t.gpu_hours,
        "tokens": t.tokens,
        "capacity_node_hours": capacity,
        "fleet_used_node_hours": fleet_used,
        "elastic_node_hours": sum((n.elastic_node_hours for n in nts), ZERO),
        "time_utilization": costs.time_utilization(fleet_used, capacity),
        "gpu_util_mean": (t.util_w / t.util_us) if t.util_us else None,
        "gpu_util_coverage": (Decimal(t.util_us) / Decimal(t.gpu_us)) if t.gpu_us else None,
        "gpu_util_sources": sorted(src for src, n in t.sources.items() if n),
        "mfu_mean": (t.mfu_w / t.mfu_us) if t.mfu_us else None,
        "actual_cost": actual,
        "idle_cost": idle,
        "failed_run_cost": failed_cost,
        "lost_work_cost": lost_cost,
        "own_cost": choice.pop("own_cost"),
        "elastic_cost": choice.pop("elastic_cost"),
        "reserved_cost": choice.pop("reserved_cost"),
        **choice,
        "savings_vs_alternative": (alt_cost - actual) if alt_cost is not None else None,
        "roi": costs.roi(actual, alt_cost) if alt_cost is not None else None,
        "tokens_per_1000": costs.per_thousand(t.tokens, actual) if t.tokens else None,
        "useful_gpu_hours_per_1000": costs.per_thousand(useful_known, actual) if useful_known is not None else None,
        "cost_per_1m_tokens": costs.cost_per_million_tokens(actual, t.tokens),
        "power_basis": combine_bases([n.power_basis for n in nts]),
        "measured_energy_kwh": _measured_kwh(offers.groups.values()),
    }


def _measured_kwh(groups: Iterable[rollup.Facts]) -> Optional[Decimal]:
    """Measured energy of the month's measured runs (None when no run was measured)."""
    measured = [f for f in groups if f.kwh_slices]
    return sum((f.kwh for f in measured), ZERO).quantize(Decimal("0.000001")) if measured else None


def _choice(offers: _Offers, nts: list[NodeTypeMonth], cost: dict[GroupKey, Decimal], actual: Decimal,
            idle: Decimal) -> dict[str, Any]:
    """The alternatives' totals, the cheapest, the option the month was mostly paid under and its alternative."""
    own_cost = _sum_opt(n.own_cost for n in nts)
    elastic_cost = _sum_opt(n.elastic_cost for n in nts)
    reserved_cost = _sum_opt(n.reserved_cost for n in nts)
    kinds = {k: offers.resolved[k].kind.value for k in offers.groups}
    fixed_actual = sum((cost[k] for k in offers.groups if kinds[k] != "rent_elastic"), ZERO) + idle
    elastic_actual = actual - fixed_actual
    chosen = "own" if fixed_actual >= elastic_actual and fixed_actual > 0 else "rent_elastic"
    if chosen == "own" and "rent_reserved" in kinds.values() and "own" not in kinds.values():
        chosen = "rent_reserved"
    alternative = "rent_elastic" if chosen != "rent_elastic" else "own"
    options = {k: v for k, v in (("own", own_cost), ("rent_elastic", elastic_cost), ("rent_reserved", reserved_cost)) if v is not None}
    return {"own_cost": own_cost, "elastic_cost": elastic_cost, "reserved_cost": reserved_cost,
            "cheapest_option": min(options, key=lambda k: (options[k], k)) if options else None,
            "chosen_option": chosen, "alternative_option": alternative,
            "alternative_cost": elastic_cost if alternative == "rent_elastic" else own_cost}


def _sum_opt(values) -> Optional[Decimal]:
    vals = [v for v in values if v is not None]
    return sum(vals, ZERO) if vals else None


def _projects(session: Session, groups: dict[tuple, rollup.Facts], costings: dict[datetime, _Costing],
              periods: dict[datetime, dict], runs: dict[GroupKey, int]) -> list[dict[str, Any]]:
    """Per project: the groups of ``(node type, offer, project, status)`` costed at each charge period's rates
    (``runs``: distinct runs per group, :func:`trainledger.money.facts.counts.runs_per_group`)."""
    cost, cost_el, cost_own, co2, lost = _detail_costs(groups, costings, periods)
    names = {pid: name for pid, name in session.exec(select(Project.id, Project.name))}
    by_project: dict[str, list[tuple]] = defaultdict(list)
    totals: dict[str, rollup.Facts] = defaultdict(rollup.Facts)
    for k, f in groups.items():
        name = names.get(k[2], "") if k[2] else ""
        by_project[name].append(k)
        totals[name].add(f)
    waste = {s.value for s in WASTE_STATUSES}
    out = []
    for project in sorted(by_project):
        ks = by_project[project]
        t = totals[project]
        c = sum((cost[k] for k in ks), ZERO)
        useful = t.useful_gpu_hours
        out.append({
            "project": project,
            "runs": counts.count(runs, ks),
            "node_hours": t.node_hours,
            "gpu_hours": t.gpu_hours,
            "tokens": t.tokens,
            "cost": c,
            "cost_if_elastic": _sum_opt(cost_el.get(k) for k in ks),
            "cost_if_own": _sum_opt(cost_own.get(k) for k in ks),
            "lost_work_cost": sum((lost[k] for k in ks if k[3] in waste), ZERO),
            "tokens_per_1000": costs.per_thousand(t.tokens, c) if t.tokens else None,
            "useful_gpu_hours_per_1000": costs.per_thousand(useful, c) if useful is not None else None,
            "co2e_kg": _sum_opt(co2.get(k) for k in ks),
        })
    return out


def _period_parts(groups: dict[tuple, rollup.Facts], costings: dict[datetime, _Costing],
                  periods: dict[datetime, dict]) -> list[tuple[_Costing, dict[tuple, rollup.Facts]]]:
    """The groups' facts in each charge period with that period's costing (one period: the groups themselves)."""
    if len(costings) == 1:
        return [(next(iter(costings.values())), groups)]
    return [(c, {k: f for k, f in periods.get(ps, {}).items() if k in groups}) for ps, c in costings.items()]


def _detail_costs(groups: dict[tuple, rollup.Facts], costings: dict[datetime, _Costing],
                  periods: dict[datetime, dict]) -> tuple[dict, dict, dict, dict, dict]:
    """Each group's actual cost, cost if elastic, cost if owned, CO2e and lost work: Σ over its charge periods."""
    cost: dict[tuple, Decimal] = {}
    cost_el: dict[tuple, Optional[Decimal]] = {}
    cost_own: dict[tuple, Optional[Decimal]] = {}
    co2: dict[tuple, Optional[Decimal]] = {}
    lost: dict[tuple, Decimal] = defaultdict(lambda: ZERO)
    for costing, facts in _period_parts(groups, costings, periods):
        for k, f in facts.items():
            offer = costing.offer(k[0], k[1])
            cost[k] = _add(cost.get(k), costing.cost(offer, f))
            cost_el[k] = _add(cost_el.get(k), costing.if_elastic(offer.node_type_id, f), k in cost_el)
            cost_own[k] = _add(cost_own.get(k), costing.if_own(offer.node_type_id, f), k in cost_own)
            footprint = costing.carbon(k[0], f)
            co2[k] = _add(co2.get(k), None if footprint.basis == "unknown" else footprint.co2e_kg, k in co2)
            lost[k] += sum(costing.lost(offer, f), ZERO)
    return cost, cost_el, cost_own, co2, lost


def report_to_dict(rep: MonthlyReport) -> dict[str, Any]:
    return {"month": rep.month, "timezone": rep.timezone, "currency": rep.currency,
            "summary": rep.summary, "node_types": [asdict(n) for n in rep.node_types],
            "projects": rep.projects, "runs": [asdict(r) for r in rep.runs]}


def month_charges(session: Session, month: str, *, currency: Optional[str] = None,
                  now: Optional[datetime] = None) -> MonthCharges:
    """The monthly report and the month's charges per charge period: each run's slices with the unit price and
    quantity they were costed at, and each fixed-cost fleet's cost, allocation and idle (the FOCUS export)."""
    m, offers, costings, nt_months, currencies = _cost_month(session, month, (None, None, None), now, currency)
    lines = _lines(session, m, None, costings, per_period=True)  # the report's run lines are these, added per run
    rep = _assemble(session, m, offers, costings, nt_months, currencies, True, True, merged_lines(lines))
    fleets = []
    for ps, c in costings.items():
        for off_id, fm in sorted(c.fleet_months.items(), key=lambda kv: c.cat.offers[kv[0]].name):
            offer = c.cat.offers[off_id]
            fleets.append(FleetCharge(offer, ps, c.period_end.get(offer.node_type_id, m.end), fm,
                                      sorted(f.name for f in m.fleets.get(off_id, []))))
    return MonthCharges(rep, lines, fleets, m.start, m.end)


def _carbon(m: _Month, costings: dict[datetime, _Costing]) -> dict[str, Any]:
    """The month's energy and CO2e of its runs (idle nodes' draw is not a run's) and the intensities used."""
    total, used = carbon.Carbon(), []
    for c in costings.values():
        for footprint, intensity in c.footprints:
            total.add(footprint)
            used.append(intensity)
    return carbon.summary(total, used)


def _intensity_text(i: dict[str, Any]) -> str:
    since = f" from {i['valid_from']}" if i["valid_from"] else ""
    return f"{format(i['g_per_kwh'].normalize(), 'f')} gCO2e/kWh, {i['location'] or 'no location'}{since}" + (
        f" ({i['source']})" if i["source"] else "")


def _rate_text(r: dict[str, Any]) -> str:
    inverse = f" (1 / the {r['inverse_of']} rate)" if r["inverse_of"] else ""
    return (f"{r['from']}→{r['to']} {format(r['rate'].normalize(), 'f')}{inverse}, rate from {r['rate_valid_from']}, "
            f"for {', '.join(r['charge_periods'])}")
