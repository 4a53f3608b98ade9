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
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import and_, func, or_
from sqlmodel import Session, select

from ledger import costs
from ledger.costs import ZERO
from ledger.errors import LedgerInputError
from ledger.models import WASTE_STATUSES, Fleet, NodeType, Offer, OfferKind, Project, Run, RunNode, RunStatus, User
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


def _share(start: datetime, end: datetime, t: datetime) -> Decimal:
    """Share of [start, end] before t; exactly 0 at start and 1 at end (telescopes)."""
    if t >= end:
        return costs.ONE
    if t <= start:
        return ZERO
    return costs.hours_between(start, t) / costs.hours_between(start, end)


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
    return _Catalog({n.id: n for n in session.exec(select(NodeType)).all()},
                    {o.id: o for o in session.exec(select(Offer)).all()})


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


def peak_concurrent_nodes(intervals: list[tuple[datetime, datetime, int]]) -> int:
    """Largest number of nodes in use at the same instant (sweep line)."""
    events: list[tuple[datetime, int]] = []
    for s, e, n in intervals:
        if e > s:
            events.append((s, n))
            events.append((e, -n))
    peak = cur = 0
    for _, delta in sorted(events, key=lambda x: (x[0], x[1])):  # ends before starts at a tie
        cur += delta
        peak = max(peak, cur)
    return peak


def _fleet_capacity(fleets: list[Fleet], ms: datetime, me: datetime, tz: ZoneInfo) -> Decimal:
    cap = ZERO
    for f in fleets:
        fs = max(ms, _date_start(f.valid_from, tz))
        fe = min(me, _date_start(f.valid_to, tz)) if f.valid_to else me
        if fe > fs:
            cap += costs.hours_between(fs, fe) * f.node_count
    return cap


def monthly_report(session: Session, month: str, *, own: Optional[str] = None, rent: Optional[str] = None,
                   reserved: Optional[str] = None, now: Optional[datetime] = None) -> MonthlyReport:
    """Cost the ledger's usage of ``month`` under its actual offers and every alternative.

    Per node type: actual cost (fleets allocated, elastic runs billed), cost if
    owned (fleet sized to the configured own fleet, else to the peak of
    concurrent nodes), cost if rented elastic (only used node-hours, billed per
    run) and cost if rented reserved (same sizing as owning).
    """
    tz = display_timezone(session)
    ms, me = month_bounds(month, tz)
    now = now or utcnow()
    hours_in_month = costs.hours_between(ms, me)
    cat = _catalog(session)
    currency_setting = get_setting(session, "currency")

    rows = session.exec(
        select(Run.id, Run.name, Run.status, Run.strategy, Run.node_type_id, Run.offer_id, Run.nodes,
               Run.gpus_per_node, Run.started_at, Run.ended_at, Run.heartbeat_at, Run.tokens,
               Run.gpu_util_mean, Run.util_source, Run.mfu, Project.name, User.name)
        .outerjoin(Project, Project.id == Run.project_id)
        .outerjoin(User, User.id == Run.user_id)
        .where(Run.started_at.is_not(None), Run.started_at < me,
               or_(Run.ended_at.is_(None), Run.ended_at > ms))
        .order_by(Run.started_at, Run.id)
    ).all()
    fleets_all = session.exec(
        select(Fleet).where(Fleet.valid_from < (me.astimezone(tz).date() + timedelta(days=1)),
                            or_(Fleet.valid_to.is_(None), Fleet.valid_to > (ms.astimezone(tz).date() - timedelta(days=1))))
    ).all()

    # fleets by offer
    fleets_by_offer: dict[int, list[Fleet]] = defaultdict(list)
    for f in fleets_all:
        fleets_by_offer[f.offer_id].append(f)

    # 1) slices ---------------------------------------------------------------
    slices: list[RunSlice] = []
    slice_offer: list[Offer] = []
    full: list[tuple[datetime, datetime]] = []
    for (rid, name, status, strategy, nt_id, offer_id, nodes, gpn, started, ended, hb, tokens,
         util, usrc, mfu_, project, user) in rows:
        status_v = getattr(status, "value", status)
        interval = run_interval(started, ended, status_v, hb, now)
        if interval is None:
            continue
        s, e = interval
        a, b = max(s, ms), min(e, me)
        if b <= a and not (s == e and ms <= s < me):
            continue
        offer = cat.offers.get(offer_id) if offer_id else None
        if offer is None:
            offer = _default_offer(cat, nt_id, fleets_by_offer)
        if offer is None:
            raise LedgerInputError(f"run {rid}: node type has no offer; add one with `trainledger pricing import`")
        nt = cat.node_types[nt_id]
        nh = costs.node_hours(nodes, costs.hours_between(a, b))
        tok = None
        if tokens is not None:
            tok = int(tokens * _share(s, e, b)) - int(tokens * _share(s, e, a))
        slices.append(RunSlice(
            run_id=rid, name=name or "", project=project or "", user=user or "", status=status_v,
            strategy=strategy or "", node_type=nt.name, offer=offer.name, offer_kind=offer.kind.value,
            nodes=nodes, gpus_per_node=gpn, start=a, end=b, node_hours=nh,
            gpu_hours=costs.gpu_hours(nh, gpn), tokens=tok, gpu_util_mean=util,
            util_source=usrc, mfu=mfu_, split=(s < ms or e > me)))
        slice_offer.append(offer)
        full.append((s, e))

    def elastic_slice(i: int, offer: Offer) -> Decimal:
        # cumulative cost at both ends of the slice, on a fixed 1e-12 grid, so
        # that a run's slices add up to its bill exactly (telescoping sum)
        s, e = full[i]
        sl = slices[i]
        total = costs.elastic_run_cost(offer, sl.nodes, costs.hours_between(s, e)).quantize(SLICE_QUANTUM)
        def upto(t: datetime) -> Decimal:
            return (total * _share(s, e, t)).quantize(SLICE_QUANTUM)
        return upto(sl.end) - upto(sl.start)

    # measured energy (trainledger collect) of each slice; None = not measured
    slice_kwh = _slice_energy_kwh(session, slices, full, ms, me)

    # 2) per node type ----------------------------------------------------------
    by_nt: dict[int, list[int]] = defaultdict(list)
    for i, offer in enumerate(slice_offer):
        by_nt[offer.node_type_id].append(i)
    for off_id in fleets_by_offer:  # fleets with no runs still cost money
        by_nt.setdefault(cat.offers[off_id].node_type_id, [])

    nt_months: list[NodeTypeMonth] = []
    currencies: set[str] = set()
    for nt_id in sorted(by_nt, key=lambda k: cat.node_types[k].name):
        idx = by_nt[nt_id]
        nt = cat.node_types[nt_id]
        actual = ZERO
        idle = ZERO
        capacity = ZERO
        over = False
        bases: list[str] = []
        # actual: fixed-cost offers share their fleet; elastic runs are billed
        groups: dict[int, list[int]] = defaultdict(list)
        for i in idx:
            if slice_offer[i].kind == OfferKind.rent_elastic:
                slices[i].cost = elastic_slice(i, slice_offer[i])
                actual += slices[i].cost
            else:
                groups[slice_offer[i].id].append(i)
        for off_id, fl in fleets_by_offer.items():
            if cat.offers[off_id].node_type_id == nt_id:
                groups.setdefault(off_id, [])
        for off_id, members in groups.items():
            offer = cat.offers[off_id]
            cap = _fleet_capacity(fleets_by_offer.get(off_id, []), ms, me, tz)
            if not fleets_by_offer.get(off_id):  # no fleet configured: implied by peak use
                cap = Decimal(peak_concurrent_nodes([(slices[i].start, slices[i].end, slices[i].nodes) for i in members])) * hours_in_month
            kwh, basis = _fleet_energy_kwh(offer, members, cap, slices, slice_kwh)
            bases.append(basis)
            fm = costs.fleet_month(offer, cap, [slices[i].node_hours for i in members], hours_in_month, energy_kwh=kwh)
            for i, c in zip(members, fm.allocated):
                slices[i].cost = c
            actual += fm.total
            idle += fm.idle
            capacity += cap
            over = over or fm.over_capacity
            currencies.add(offer.currency)
        for i in idx:
            currencies.add(slice_offer[i].currency)

        nh_total = sum((slices[i].node_hours for i in idx), ZERO)
        peak = peak_concurrent_nodes([(slices[i].start, slices[i].end, slices[i].nodes) for i in idx])
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
            kwh, basis = _fleet_energy_kwh(own_offer, idx, own_cap, slices, slice_kwh)
            bases.append(basis)
            fm = costs.fleet_month(own_offer, own_cap, [slices[i].node_hours for i in idx], hours_in_month, energy_kwh=kwh)
            own_cost, own_idle = fm.total, fm.idle
            for i, c in zip(idx, fm.allocated):
                slices[i].cost_own = c
        elastic_cost = None
        if rent_offer is not None:
            elastic_cost = ZERO
            for i in idx:
                slices[i].cost_elastic = elastic_slice(i, rent_offer)
                elastic_cost += slices[i].cost_elastic
        reserved_cost = None
        if res_offer is not None:
            reserved_cost = costs.fixed_cost_per_node_month(res_offer) * own_cap / hours_in_month
        nt_months.append(NodeTypeMonth(
            node_type=nt.name, currency=(own_offer or rent_offer or res_offer).currency if (own_offer or rent_offer or res_offer) else currency_setting,
            node_hours=nh_total, gpu_hours=sum((slices[i].gpu_hours for i in idx), ZERO), peak_nodes=peak,
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
    summary = _summary(month, slices, nt_months)
    measured_kwh = [k for k in slice_kwh if k is not None]
    summary["power_basis"] = _combine_bases([n.power_basis for n in nt_months])
    summary["measured_energy_kwh"] = sum(measured_kwh, ZERO).quantize(Decimal("0.000001")) if measured_kwh else None
    projects = _projects(slices)
    return MonthlyReport(month=month, timezone=str(tz), currency=currency, summary=summary,
                         node_types=nt_months, projects=projects, runs=slices)


# --- measured energy (``trainledger collect``) --------------------------------------

def _slice_energy_kwh(session: Session, slices: list[RunSlice], full: list[tuple[datetime, datetime]],
                      ms: datetime, me: datetime) -> list[Optional[Decimal]]:
    """Measured kWh of each slice: the run's Σ RunNode.energy_kwh × the slice's share of its duration.

    A run counts as measured only when it has ended and every one of its nodes
    has a RunNode with an energy figure (one aggregate query for the month).
    """
    rows = session.exec(
        select(RunNode.run_id, func.sum(RunNode.energy_kwh), func.count(RunNode.energy_kwh), func.count(RunNode.id), Run.nodes)
        .join(Run, Run.id == RunNode.run_id)
        .where(Run.started_at.is_not(None), Run.started_at < me, Run.ended_at.is_not(None), Run.ended_at > ms)
        .group_by(RunNode.run_id, Run.nodes)
    ).all()
    run_kwh = {rid: Decimal(str(total)) for rid, total, measured, n, nodes in rows if n and measured == n and n >= nodes}
    out: list[Optional[Decimal]] = []
    for sl, (s, e) in zip(slices, full):
        kwh = run_kwh.get(sl.run_id)
        if kwh is not None and e > s:
            kwh = kwh * costs.hours_between(sl.start, sl.end) / costs.hours_between(s, e)
        out.append(kwh)
    return out


def _fleet_energy_kwh(offer: Offer, members: list[int], capacity_nh: Decimal, slices: list[RunSlice],
                      slice_kwh: list[Optional[Decimal]]) -> tuple[Optional[Decimal], str]:
    """The kWh that replaces an own fleet's nominal power term, and its basis.

    kWh = Σ measured runs' kWh + unmeasured node-hours × load kW + idle node-hours × idle kW
    (idle nodes run no collected run, so their draw stays nominal). None (nominal
    power) when no run of the fleet was measured or the offer is not ``own``.
    """
    if offer.kind != OfferKind.own:
        return None, "nominal"
    known = [i for i in members if slice_kwh[i] is not None]
    if not known:
        return None, "nominal"
    load_kw = Decimal(offer.power_kw_load or 0)
    idle_kw = Decimal(offer.power_kw_idle) if offer.power_kw_idle is not None else load_kw
    busy = sum((slices[i].node_hours for i in members), ZERO)
    kwh = (sum((slice_kwh[i] for i in known), ZERO)
           + sum((slices[i].node_hours for i in members if slice_kwh[i] is None), ZERO) * load_kw
           + max(ZERO, Decimal(capacity_nh) - busy) * idle_kw)
    return kwh, "measured" if len(known) == len(members) else "mixed"


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


def _sum_opt(values) -> Optional[Decimal]:
    vals = [v for v in values if v is not None]
    return sum(vals, ZERO) if vals else None


def _summary(month: str, slices: list[RunSlice], nts: list[NodeTypeMonth]) -> dict[str, Any]:
    actual = sum((n.actual_cost for n in nts), ZERO)
    idle = sum((n.idle_cost for n in nts), ZERO)
    capacity = sum((n.capacity_node_hours for n in nts), ZERO)
    node_hours = sum((s.node_hours for s in slices), ZERO)
    gpu_hours = sum((s.gpu_hours for s in slices), ZERO)
    tokens = sum((s.tokens or 0) for s in slices)
    own_cost = _sum_opt(n.own_cost for n in nts)
    elastic_cost = _sum_opt(n.elastic_cost for n in nts)
    reserved_cost = _sum_opt(n.reserved_cost for n in nts)
    failed_cost = sum((s.cost for s in slices if s.waste), ZERO)
    fixed_actual = sum((s.cost for s in slices if s.offer_kind != "rent_elastic"), ZERO) + idle
    elastic_actual = actual - fixed_actual
    chosen = "own" if fixed_actual >= elastic_actual and fixed_actual > 0 else "rent_elastic"
    if chosen == "own" and any(s.offer_kind == "rent_reserved" for s in slices) and not any(s.offer_kind == "own" for s in slices):
        chosen = "rent_reserved"
    alternative = "rent_elastic" if chosen != "rent_elastic" else "own"
    alt_cost = elastic_cost if alternative == "rent_elastic" else own_cost
    options = {k: v for k, v in (("own", own_cost), ("rent_elastic", elastic_cost), ("rent_reserved", reserved_cost)) if v is not None}
    cheapest = min(options, key=lambda k: (options[k], k)) if options else None
    useful = [costs.useful_gpu_hours(s.gpu_hours, s.gpu_util_mean) for s in slices]
    useful_known = _sum_opt(useful)
    measured_gpu_hours = sum((s.gpu_hours for s, u in zip(slices, useful) if u is not None), ZERO)
    return {
        "month": month,
        "runs": len({s.run_id for s in slices}),
        "node_hours": node_hours,
        "gpu_hours": gpu_hours,
        "tokens": tokens,
        "capacity_node_hours": capacity,
        "time_utilization": costs.time_utilization(node_hours, capacity) if capacity else None,
        "gpu_util_mean": costs.weighted_mean((s.gpu_util_mean, s.gpu_hours) for s in slices),
        "gpu_util_coverage": (measured_gpu_hours / gpu_hours) if gpu_hours else None,
        "gpu_util_sources": sorted({s.util_source for s in slices if s.util_source}),
        "mfu_mean": costs.weighted_mean((s.mfu, s.gpu_hours) for s in slices),
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


def _projects(slices: list[RunSlice]) -> list[dict[str, Any]]:
    groups: dict[str, list[RunSlice]] = defaultdict(list)
    for s in slices:
        groups[s.project].append(s)
    out = []
    for project in sorted(groups):
        ss = groups[project]
        cost = sum((s.cost for s in ss), ZERO)
        tokens = sum((s.tokens or 0) for s in ss)
        useful = _sum_opt(costs.useful_gpu_hours(s.gpu_hours, s.gpu_util_mean) for s in ss)
        out.append({
            "project": project,
            "runs": len({s.run_id for s in ss}),
            "node_hours": sum((s.node_hours for s in ss), ZERO),
            "gpu_hours": sum((s.gpu_hours for s in ss), ZERO),
            "tokens": tokens,
            "cost": cost,
            "cost_if_elastic": _sum_opt(s.cost_elastic for s in ss),
            "cost_if_own": _sum_opt(s.cost_own for s in ss),
            "waste_cost": sum((s.cost for s in ss if s.waste), ZERO),
            "tokens_per_1000": costs.per_thousand(tokens, cost) if tokens else None,
            "useful_gpu_hours_per_1000": costs.per_thousand(useful, cost) if useful is not None else None,
        })
    return out


def report_to_dict(rep: MonthlyReport) -> dict[str, Any]:
    return {"month": rep.month, "timezone": rep.timezone, "currency": rep.currency,
            "summary": rep.summary, "node_types": [asdict(n) for n in rep.node_types],
            "projects": rep.projects, "runs": [asdict(r) for r in rep.runs]}
