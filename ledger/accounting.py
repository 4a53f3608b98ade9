"""Monthly accounting: the ledger's real usage costed under every option.

This is where ledger rows meet the cost engine (:mod:`ledger.costs`). The CLI
(``cost compare --month``, ``report monthly``), the export and the dashboard
all read their figures from :func:`monthly_report`, so a number is computed in
exactly one place.

A month is a calendar month in the display time zone. A run that crosses a
month boundary is split at the boundary: its node-hours are split exactly, and
its elastic cost and tokens are split by the share of its duration, so that
the slices of a run always add up to the run's total (telescoping shares).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import or_
from sqlmodel import Session, select

from ledger import costs, rollup
from ledger.costs import ZERO
from ledger.errors import LedgerInputError
from ledger.models import WASTE_STATUSES, Fleet, NodeType, Offer, OfferKind, Project, Run, RunStatus, User
from ledger.settings import display_timezone, get_setting
from ledger.types import utcnow

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
#: split costs are exact on this grid (a pico-unit of currency)
SLICE_QUANTUM = Decimal("1e-12")


# --- months ------------------------------------------------------------------

def parse_month(text: str) -> tuple[int, int]:
    """``YYYY-MM`` → (year, month), or a one-line error naming ``--month``."""
    m = MONTH_RE.match(text or "")
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise LedgerInputError(f"--month: expected YYYY-MM such as 2026-11, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def month_bounds(month: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """UTC start (inclusive) and end (exclusive) of a calendar month in ``tz``."""
    y, m = parse_month(month)
    start = datetime(y, m, 1, tzinfo=tz)
    end = datetime(y + (m == 12), m % 12 + 1, 1, tzinfo=tz)
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


def month_of(ts: datetime, tz: ZoneInfo) -> str:
    return ts.astimezone(tz).strftime("%Y-%m")


def months_between(first: str, last: str) -> list[str]:
    y, m = parse_month(first)
    y2, m2 = parse_month(last)
    out = []
    while (y, m) <= (y2, m2):
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def _date_start(d: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(d, time(0), tzinfo=tz).astimezone(timezone.utc)


# --- run slices ----------------------------------------------------------------

def run_interval(run_started: Optional[datetime], run_ended: Optional[datetime], status: str,
                 heartbeat: Optional[datetime], now: datetime) -> Optional[tuple[datetime, datetime]]:
    """The costed interval of a run: start → end (a live run: → now; never started: none)."""
    if run_started is None:
        return None
    if run_ended is not None:
        return run_started, max(run_started, run_ended)
    if status == RunStatus.running.value:
        return run_started, max(run_started, now)
    # finished without an end time (e.g. crashed before reaping): last heartbeat
    return run_started, max(run_started, heartbeat or run_started)


#: share of [start, end] before t; exactly 0 at start and 1 at end (telescopes)
_share = rollup.time_share


@dataclass
class RunSlice:
    """The part of one run inside one month, with its cost under each option."""

    run_id: str
    name: str
    project: str
    user: str
    status: str
    strategy: str
    node_type: str
    offer: str
    offer_kind: str
    nodes: int
    gpus_per_node: int
    start: datetime  # clipped to the month
    end: datetime
    node_hours: Decimal
    gpu_hours: Decimal
    tokens: Optional[int]
    gpu_util_mean: Optional[float]
    util_source: Optional[str]
    mfu: Optional[float]
    cost: Decimal = ZERO  # actual: under the run's own offer (allocated for fleets)
    cost_elastic: Optional[Decimal] = None  # if rented elastic
    cost_own: Optional[Decimal] = None  # if owned (allocated from the own alternative)
    split: bool = False  # the run crosses a month boundary

    @property
    def waste(self) -> bool:
        return self.status in {s.value for s in WASTE_STATUSES}


@dataclass
class NodeTypeMonth:
    """Comparison of options for one node type in one month."""

    node_type: str
    currency: str
    node_hours: Decimal
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


@dataclass
class MonthlyReport:
    month: str
    timezone: str
    currency: str
    summary: dict[str, Any]
    node_types: list[NodeTypeMonth]
    projects: list[dict[str, Any]]
    runs: list[RunSlice] = field(repr=False)


# --- loading -------------------------------------------------------------------

@dataclass
class _Catalog:
    node_types: dict[int, NodeType]
    offers: dict[int, Offer]

    def offers_for(self, node_type_id: int, kind: OfferKind) -> list[Offer]:
        return sorted((o for o in self.offers.values() if o.node_type_id == node_type_id and o.kind == kind),
                      key=lambda o: (o.source != "preset", o.name))


def _catalog(session: Session) -> _Catalog:
    """Node types and offers as plain read-only copies (attribute reads on ORM rows are slow)."""
    return _Catalog({n.id: SimpleNamespace(**n.model_dump()) for n in session.exec(select(NodeType)).all()},
                    {o.id: SimpleNamespace(**o.model_dump()) for o in session.exec(select(Offer)).all()})


def _pick(cat: _Catalog, name: Optional[str], node_type_id: int, kind: OfferKind, flag: str) -> Optional[Offer]:
    if name:
        for o in cat.offers.values():
            if o.name == name:
                if o.kind != kind:
                    raise LedgerInputError(f"{flag}: offer {name!r} is {o.kind.value}, not {kind.value}")
                if o.node_type_id != node_type_id:
                    continue
                return o
        names = [o.name for o in cat.offers.values() if o.kind == kind]
        raise LedgerInputError(f"{flag}: no {kind.value} offer named {name!r}; use one of {', '.join(sorted(names)) or '(none: pricing import one)'}")
    found = cat.offers_for(node_type_id, kind)
    return found[0] if found else None


#: largest number of nodes in use at the same instant (sweep line; ends before starts at a tie)
peak_concurrent_nodes = rollup.sweep_peak


def _fleet_capacity(fleets: list[Fleet], ms: datetime, me: datetime, tz: ZoneInfo) -> Decimal:
    cap = ZERO
    for f in fleets:
        fs = max(ms, _date_start(f.valid_from, tz))
        fe = min(me, _date_start(f.valid_to, tz)) if f.valid_to else me
        if fe > fs:
            cap += costs.hours_between(fs, fe) * f.node_count
    return cap


def monthly_report(session: Session, month: str, *, own: Optional[str] = None, rent: Optional[str] = None,
                   reserved: Optional[str] = None, now: Optional[datetime] = None,
                   lines: bool | Iterable[str] = True, projects: bool = True) -> MonthlyReport:
    """Cost the ledger's usage of ``month`` under its actual offers and every alternative.

    Per node type: actual cost (fleets allocated, elastic runs billed), cost if
    owned (fleet sized to the configured own fleet, else to the peak of
    concurrent nodes), cost if rented elastic (only used node-hours, billed per
    run) and cost if rented reserved (same sizing as owning).

    The figures come from the pre-aggregated rollup (:mod:`ledger.rollup`: exact
    sums per month, node type, offer, project and status, plus live runs), so
    their cost does not grow with the number of runs. The totals are computed per
    node type, recorded offer and status; projects and per-run lines are then
    costed at the same rates, so they add up to the totals. ``lines``: the per-run
    lines (``runs``) for every run (True), none (False) or only the given run ids;
    ``projects=False`` leaves out the per-project table (trend charts).
    """
    tz = display_timezone(session)
    ms, me = month_bounds(month, tz)
    now = now or utcnow()
    hours_in_month = costs.hours_between(ms, me)
    cat = _catalog(session)
    currency_setting = get_setting(session, "currency")
    mf = rollup.month_facts(session, month, tz, now)
    fleets_all = session.exec(
        select(Fleet).where(Fleet.valid_from < (me.astimezone(tz).date() + timedelta(days=1)),
                            or_(Fleet.valid_to.is_(None), Fleet.valid_to > (ms.astimezone(tz).date() - timedelta(days=1))))
    ).all()
    fleets_by_offer: dict[int, list[Fleet]] = defaultdict(list)
    for f in fleets_all:
        fleets_by_offer[f.offer_id].append(f)

    # 1) each group's offer: as recorded, else the node type's default --------------
    detail = {k: f for k, f in mf.groups.items() if f.slices}  # (node type, offer, project, status)
    groups: dict[tuple, rollup.Facts] = defaultdict(rollup.Facts)  # the same without the project
    for (nt_id, offer_id, _, status), f in detail.items():
        groups[(nt_id, offer_id, None, status)].add(f)
    resolved: dict[tuple, Offer] = {}
    by_recorded: dict[tuple[int, Optional[int]], Offer] = {}
    for key in groups:
        offer = by_recorded.get(key[:2])
        if offer is None:
            nt_id, offer_id = key[0], key[1]
            offer = cat.offers.get(offer_id) if offer_id else None
            if offer is None:
                offer = _default_offer(cat, nt_id, fleets_by_offer)
            if offer is None:
                raise LedgerInputError(f"node type {cat.node_types[nt_id].name}: runs in {month} have no offer to cost "
                                       "them; add one with `trainledger pricing import`")
            by_recorded[key[:2]] = offer
        resolved[key] = offer

    by_nt: dict[int, list[tuple]] = defaultdict(list)
    for key, offer in resolved.items():
        by_nt[offer.node_type_id].append(key)
    for off_id in fleets_by_offer:  # fleets with no runs still cost money
        by_nt.setdefault(cat.offers[off_id].node_type_id, [])

    # 2) per node type ----------------------------------------------------------
    cost: dict[tuple, Decimal] = {}
    cost_el: dict[tuple, Decimal] = {}
    cost_own: dict[tuple, Decimal] = {}
    fleet_months: dict[int, costs.FleetMonth] = {}  # by offer id: how its runs are allocated
    own_months: dict[int, tuple[Offer, costs.FleetMonth]] = {}  # by node type
    rent_offers: dict[int, Offer] = {}
    nt_months: list[NodeTypeMonth] = []
    nt_totals: list[rollup.Facts] = []
    currencies: set[str] = set()
    for nt_id in sorted(by_nt, key=lambda k: cat.node_types[k].name):
        keys = by_nt[nt_id]
        nt = cat.node_types[nt_id]
        actual = idle = capacity = ZERO
        over = False
        bases: list[str] = []
        by_offer: dict[int, list[tuple]] = defaultdict(list)
        for k in keys:
            off = resolved[k]
            currencies.add(off.currency)
            if off.kind == OfferKind.rent_elastic:
                cost[k] = _elastic(off, groups[k])
                actual += cost[k]
            else:
                by_offer[off.id].append(k)
        for off_id in fleets_by_offer:
            if cat.offers[off_id].node_type_id == nt_id:
                by_offer.setdefault(off_id, [])
        for off_id, members in by_offer.items():
            offer = cat.offers[off_id]
            cap = _fleet_capacity(fleets_by_offer.get(off_id, []), ms, me, tz)
            if not fleets_by_offer.get(off_id):  # no fleet configured: implied by peak use
                cap = Decimal(mf.peak(nt_id, {k[1] or 0 for k in members})) * hours_in_month
            kwh, basis = _fleet_energy_kwh(offer, [groups[k] for k in members], cap)
            bases.append(basis)
            fm = costs.fleet_month(offer, cap, [groups[k].node_hours for k in members], hours_in_month, energy_kwh=kwh)
            fleet_months[off_id] = fm
            for k, c in zip(members, fm.allocated):
                cost[k] = c
            actual += fm.total
            idle += fm.idle
            capacity += cap
            over = over or fm.over_capacity
            currencies.add(offer.currency)

        total = _total(groups[k] for k in keys)
        nt_totals.append(total)
        peak = mf.peak(nt_id)
        own_offer = _pick(cat, own, nt_id, OfferKind.own, "--own")
        rent_offer = _pick(cat, rent, nt_id, OfferKind.rent_elastic, "--rent")
        res_offer = _pick(cat, reserved, nt_id, OfferKind.rent_reserved, "--reserved")
        own_fleets = [f for f in fleets_all if cat.offers[f.offer_id].node_type_id == nt_id
                      and cat.offers[f.offer_id].kind == OfferKind.own]
        if own_fleets:
            own_cap = _fleet_capacity(own_fleets, ms, me, tz)
            own_nodes = max(f.node_count for f in own_fleets)
            sized = "fleet"
        else:
            own_cap = Decimal(peak) * hours_in_month
            own_nodes = peak
            sized = "peak"
        own_cost = own_idle = None
        if own_offer is not None:
            kwh, basis = _fleet_energy_kwh(own_offer, [groups[k] for k in keys], own_cap, total)
            bases.append(basis)
            fm = costs.fleet_month(own_offer, own_cap, [groups[k].node_hours for k in keys], hours_in_month, energy_kwh=kwh)
            own_cost, own_idle = fm.total, fm.idle
            own_months[nt_id] = (own_offer, fm)
            for k, c in zip(keys, fm.allocated):
                cost_own[k] = c
        elastic_cost = None
        if rent_offer is not None:
            rent_offers[nt_id] = rent_offer
            for k in keys:
                cost_el[k] = _elastic(rent_offer, groups[k])
            elastic_cost = sum((cost_el[k] for k in keys), ZERO)
        reserved_cost = None
        if res_offer is not None:
            reserved_cost = costs.fixed_cost_per_node_month(res_offer) * own_cap / hours_in_month
        nt_months.append(NodeTypeMonth(
            node_type=nt.name, currency=(own_offer or rent_offer or res_offer).currency if (own_offer or rent_offer or res_offer) else currency_setting,
            node_hours=total.node_hours, gpu_hours=total.gpu_hours, peak_nodes=peak,
            capacity_node_hours=capacity, actual_cost=actual, idle_cost=idle,
            own_offer=own_offer.name if own_offer else None, own_nodes=own_nodes, own_nodes_from=sized,
            own_cost=own_cost, own_idle_cost=own_idle,
            elastic_offer=rent_offer.name if rent_offer else None, elastic_cost=elastic_cost,
            reserved_offer=res_offer.name if res_offer else None, reserved_cost=reserved_cost,
            over_capacity=over, power_basis=_combine_bases(bases)))
        for o in (own_offer, rent_offer, res_offer):
            if o is not None:
                currencies.add(o.currency)

    if len(currencies) > 1:
        raise LedgerInputError(
            f"month {month}: offers in use are priced in {', '.join(sorted(currencies))}; "
            "one report needs one currency: re-price the offers (`trainledger pricing import`) in one currency")
    currency = currencies.pop() if currencies else currency_setting
    kinds = {k: resolved[k].kind.value for k in groups}
    summary = _summary(month, groups, _total(nt_totals), kinds, cost, nt_months)
    measured = [f for f in groups.values() if f.kwh_slices]
    summary["power_basis"] = _combine_bases([n.power_basis for n in nt_months])
    summary["measured_energy_kwh"] = sum((f.kwh for f in measured), ZERO).quantize(Decimal("0.000001")) if measured else None
    costing = _Costing(by_recorded, fleet_months, own_months, rent_offers)
    project_rows = _projects(session, detail, costing) if projects else []
    runs: list[RunSlice] = []
    if lines is not False:
        runs = _lines(session, cat, mf, month, None if lines is True else set(lines), costing)
    return MonthlyReport(month=month, timezone=str(tz), currency=currency, summary=summary,
                         node_types=nt_months, projects=project_rows, runs=runs)


@dataclass
class _Costing:
    """The month's rates, to cost any part of a group (a project's share, one run's slice)."""

    by_recorded: dict[tuple[int, Optional[int]], Offer]  # (node type, recorded offer) → offer used
    fleet_months: dict[int, costs.FleetMonth]  # fixed-cost offer id → its month
    own_months: dict[int, tuple[Offer, costs.FleetMonth]]  # node type → the own alternative
    rent_offers: dict[int, Offer]  # node type → the elastic alternative

    def offer(self, node_type_id: int, offer_id: Optional[int]) -> Offer:
        return self.by_recorded[(node_type_id, offer_id)]

    def cost(self, offer: Offer, f: rollup.Facts) -> Decimal:
        if offer.kind == OfferKind.rent_elastic:
            return _elastic(offer, f)
        return self.fleet_months[offer.id].allocate(f.node_hours)

    def if_elastic(self, node_type_id: int, f: rollup.Facts) -> Optional[Decimal]:
        o = self.rent_offers.get(node_type_id)
        return _elastic(o, f) if o is not None else None

    def if_own(self, node_type_id: int, f: rollup.Facts) -> Optional[Decimal]:
        pair = self.own_months.get(node_type_id)
        return pair[1].allocate(f.node_hours) if pair is not None else None


def _elastic(offer: Offer, facts: rollup.Facts) -> Decimal:
    """Elastic rent of a set of slices = hourly rate × their billed node-hours under the offer's rule."""
    rate, rule = _rate_rule(offer)
    return rate * facts.billed.get(rule, ZERO)


def _rate_rule(offer: Offer) -> tuple[Decimal, str]:
    key = (offer.id, offer.price_per_node_hour, offer.price_per_node_month, offer.billing_granularity_hours,
           offer.minimum_hours)
    found = _RATE_RULE.get(key)
    if found is None:
        found = _RATE_RULE[key] = (costs.hourly_rate(offer), rollup.offer_rule(offer))
    return found


_RATE_RULE: dict[tuple, tuple[Decimal, str]] = {}


def _total(facts: Iterable[rollup.Facts]) -> rollup.Facts:
    out = rollup.Facts()
    for f in facts:
        out.add(f)
    return out


def _lines(session: Session, cat: _Catalog, mf: rollup.MonthFacts, month: str, run_ids: Optional[set[str]],
           costing: _Costing) -> list[RunSlice]:
    """Per-run lines of the month, costed with the same rates as the group totals."""
    slices = rollup.month_slices(session, month, mf.live, run_ids)
    info: dict[str, tuple] = {}
    ids = sorted({s.run_id for s in slices})
    for i in range(0, len(ids), 500):
        for row in session.exec(
                select(Run.id, Run.name, Run.strategy, Run.util_source, Run.gpu_util_mean, Run.mfu, Run.tokens,
                       Run.started_at, Project.name, User.name)
                .outerjoin(Project, Project.id == Run.project_id).outerjoin(User, User.id == Run.user_id)
                .where(Run.id.in_(ids[i:i + 500]))):
            info[row[0]] = tuple(row)
    out = []
    for s in sorted(slices, key=lambda s: (info[s.run_id][7], s.run_id)):
        _, name, strategy, usrc, util, mfu_, tokens, _, project, user = info[s.run_id]
        offer = costing.offer(s.node_type_id, s.offer_id)
        f = s.facts
        nh = f.node_hours
        nt_id = offer.node_type_id
        out.append(RunSlice(
            run_id=s.run_id, name=name or "", project=project or "", user=user or "", status=s.status,
            strategy=strategy or "", node_type=cat.node_types[s.node_type_id].name, offer=offer.name,
            offer_kind=offer.kind.value, nodes=s.nodes, gpus_per_node=s.gpus_per_node, start=s.start, end=s.end,
            node_hours=nh, gpu_hours=f.gpu_hours, tokens=None if tokens is None else f.tokens, gpu_util_mean=util,
            util_source=usrc, mfu=mfu_, cost=costing.cost(offer, f), cost_elastic=costing.if_elastic(nt_id, f),
            cost_own=costing.if_own(nt_id, f), split=s.split))
    return out


# --- measured energy (``trainledger collect``) --------------------------------------

def _fleet_energy_kwh(offer: Offer, members: list[rollup.Facts], capacity_nh: Decimal,
                      total: Optional[rollup.Facts] = None) -> tuple[Optional[Decimal], str]:
    """The kWh that replaces an own fleet's nominal power term, and its basis.

    kWh = Σ measured runs' kWh + unmeasured node-hours × load kW + idle node-hours × idle kW
    (idle nodes run no collected run, so their draw stays nominal). None (nominal
    power) when no run of the fleet was measured or the offer is not ``own``.
    A run counts as measured when it has ended and every one of its nodes has a
    RunNode with an energy figure; a slice of it gets its share of the kWh by time.
    """
    if offer.kind != OfferKind.own:
        return None, "nominal"
    total = total if total is not None else _total(members)
    if not total.kwh_slices:
        return None, "nominal"
    load_kw = Decimal(offer.power_kw_load or 0)
    idle_kw = Decimal(offer.power_kw_idle) if offer.power_kw_idle is not None else load_kw
    busy = total.node_hours
    kwh = (total.kwh + total.unmeasured_node_hours * load_kw + max(ZERO, Decimal(capacity_nh) - busy) * idle_kw)
    return kwh, "measured" if total.kwh_slices == total.slices else "mixed"


def _combine_bases(bases: list[str]) -> str:
    if bases and all(b == "measured" for b in bases):
        return "measured"
    return "mixed" if any(b != "nominal" for b in bases) else "nominal"


def _default_offer(cat: _Catalog, nt_id: int, fleets_by_offer: dict[int, list[Fleet]]) -> Optional[Offer]:
    """A run without an offer uses its node type's fleet if one is held, else elastic rent."""
    for o in cat.offers_for(nt_id, OfferKind.own) + cat.offers_for(nt_id, OfferKind.rent_reserved):
        if fleets_by_offer.get(o.id):
            return o
    for kind in (OfferKind.rent_elastic, OfferKind.own, OfferKind.rent_reserved):
        found = cat.offers_for(nt_id, kind)
        if found:
            return found[0]
    return None


def _summary(month: str, groups: dict[tuple, rollup.Facts], t: rollup.Facts, kinds: dict[tuple, str],
             cost: dict[tuple, Decimal], nts: list[NodeTypeMonth]) -> dict[str, Any]:
    actual = sum((n.actual_cost for n in nts), ZERO)
    idle = sum((n.idle_cost for n in nts), ZERO)
    capacity = sum((n.capacity_node_hours for n in nts), ZERO)
    node_hours, gpu_hours, tokens = t.node_hours, t.gpu_hours, t.tokens
    own_cost = _sum_opt(n.own_cost for n in nts)
    elastic_cost = _sum_opt(n.elastic_cost for n in nts)
    reserved_cost = _sum_opt(n.reserved_cost for n in nts)
    waste = {s.value for s in WASTE_STATUSES}
    failed_cost = sum((cost[k] for k in groups if k[3] in waste), ZERO)
    fixed_actual = sum((cost[k] for k in groups if kinds[k] != "rent_elastic"), ZERO) + idle
    elastic_actual = actual - fixed_actual
    chosen = "own" if fixed_actual >= elastic_actual and fixed_actual > 0 else "rent_elastic"
    if chosen == "own" and "rent_reserved" in kinds.values() and "own" not in kinds.values():
        chosen = "rent_reserved"
    alternative = "rent_elastic" if chosen != "rent_elastic" else "own"
    alt_cost = elastic_cost if alternative == "rent_elastic" else own_cost
    options = {k: v for k, v in (("own", own_cost), ("rent_elastic", elastic_cost), ("rent_reserved", reserved_cost)) if v is not None}
    cheapest = min(options, key=lambda k: (options[k], k)) if options else None
    useful_known = t.useful_gpu_hours
    return {
        "month": month,
        "runs": t.slices,
        "node_hours": node_hours,
        "gpu_hours": gpu_hours,
        "tokens": tokens,
        "capacity_node_hours": capacity,
        "time_utilization": costs.time_utilization(node_hours, capacity) if capacity else None,
        "gpu_util_mean": (t.util_w / t.util_us) if t.util_us else None,
        "gpu_util_coverage": (Decimal(t.util_us) / Decimal(t.gpu_us)) if t.gpu_us else None,
        "gpu_util_sources": sorted(src for src, n in t.sources.items() if n),
        "mfu_mean": (t.mfu_w / t.mfu_us) if t.mfu_us else None,
        "actual_cost": actual,
        "idle_cost": idle,
        "failed_run_cost": failed_cost,
        "waste_cost": failed_cost + idle,
        "own_cost": own_cost,
        "elastic_cost": elastic_cost,
        "reserved_cost": reserved_cost,
        "cheapest_option": cheapest,
        "chosen_option": chosen,
        "alternative_option": alternative,
        "alternative_cost": alt_cost,
        "savings_vs_alternative": (alt_cost - actual) if alt_cost is not None else None,
        "roi": costs.roi(actual, alt_cost) if alt_cost is not None else None,
        "tokens_per_1000": costs.per_thousand(tokens, actual) if tokens else None,
        "useful_gpu_hours_per_1000": costs.per_thousand(useful_known, actual) if useful_known is not None else None,
        "cost_per_1m_tokens": costs.cost_per_million_tokens(actual, tokens),
    }


def _sum_opt(values) -> Optional[Decimal]:
    vals = [v for v in values if v is not None]
    return sum(vals, ZERO) if vals else None


def _projects(session: Session, groups: dict[tuple, rollup.Facts], costing: _Costing) -> list[dict[str, Any]]:
    """Per project: the groups of ``(node type, offer, project, status)`` costed at the month's rates."""
    cost: dict[tuple, Decimal] = {}
    cost_el: dict[tuple, Optional[Decimal]] = {}
    cost_own: dict[tuple, Optional[Decimal]] = {}
    for k, f in groups.items():
        offer = costing.offer(k[0], k[1])
        cost[k] = costing.cost(offer, f)
        cost_el[k] = costing.if_elastic(offer.node_type_id, f)
        cost_own[k] = costing.if_own(offer.node_type_id, f)
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
            "runs": t.slices,
            "node_hours": t.node_hours,
            "gpu_hours": t.gpu_hours,
            "tokens": t.tokens,
            "cost": c,
            "cost_if_elastic": _sum_opt(cost_el.get(k) for k in ks),
            "cost_if_own": _sum_opt(cost_own.get(k) for k in ks),
            "waste_cost": sum((cost[k] for k in ks if k[3] in waste), ZERO),
            "tokens_per_1000": costs.per_thousand(t.tokens, c) if t.tokens else None,
            "useful_gpu_hours_per_1000": costs.per_thousand(useful, c) if useful is not None else None,
        })
    return out


def report_to_dict(rep: MonthlyReport) -> dict[str, Any]:
    return {"month": rep.month, "timezone": rep.timezone, "currency": rep.currency,
            "summary": rep.summary, "node_types": [asdict(n) for n in rep.node_types],
            "projects": rep.projects, "runs": [asdict(r) for r in rep.runs]}
