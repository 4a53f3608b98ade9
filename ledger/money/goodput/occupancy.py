"""Where idle sits: the owned and reserved fleets' occupancy hour by hour, so idle has a *when*.

For one month (a calendar month in the display time zone; to date while it runs)
and every fixed-cost fleet (an ``own`` or ``rent_reserved`` offer with its
fleets, or the capacity implied by peak use where none is configured), each hour
of the month gets:

* ``held_node_hours``: node-hours the fleets held in the hour
  (:func:`trainledger.money.rates.catalog.fleet_capacity` on the hour, or the implied
  capacity's share of it);
* ``used_node_hours``: node-hours of the runs costed under that offer in the hour
  (the rollup's slices, aggregated in SQL into a step function of nodes in use:
  Σ nodes starting at each instant − Σ nodes ending at it, then integrated per
  hour in integer node-microseconds, so the hours add up to the runs exactly);
* ``idle_node_hours`` = max(0, held − used) and ``idle_cost``.

**Identity.** The month's idle cost is the monthly report's (``idle_cost``: each
fleet's idle node-hours at its idle rate, per charge period, as
:func:`trainledger.money.account.monthly.month_charges` lists them). Each fleet's idle cost of a charge
period is shared over its hours by their idle node-hours (an hour cut by a
charge period gets a part from each); with no over-use that is exactly idle
node-hours × the idle rate. The hours are then rounded to cents by largest
remainder against the report's idle cost in cents, so Σ hours' idle cost ==
the report's idle cost to the cent, always (``tests/test_occupancy.py`` checks
it on SQLite and PostgreSQL).

Hours are ``[month start + k h, + (k+1) h)`` in UTC, labelled with the local
day and hour of their start (an hour a DST change repeats appears twice, with
its own ``start``). The heat map (:func:`heat_map`) adds them up per local day
and hour.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import and_, func, or_, select
from sqlmodel import Session
from trainledger.money.account import monthly
from trainledger.money.account.monthly import SLICE_QUANTUM, FleetCharge, MonthlyReport
from trainledger.money.allocation.shares import UNITS
from trainledger.money.facts import rollup
from trainledger.money.rates import costs
from trainledger.money.rates.catalog import default_offer, fleet_capacity, fleets_by_offer, load_catalog
from trainledger.money.rates.costs import ZERO, cents, round_preserving_sum
from trainledger.money.rates.months import month_bounds, month_period, run_interval
from trainledger.store.models import Fleet, RollupSlice, Run
from trainledger.store.settings import display_timezone
from trainledger.store.types import utcnow

HOUR = timedelta(hours=1)
US_PER_HOUR = Decimal(3_600_000_000)


@dataclass
class Hour:
    """One hour of the month over every fixed-cost fleet (exact figures; ``idle_cost`` in cents once rounded)."""

    start: datetime  # UTC
    day: str  # local date of the start, YYYY-MM-DD
    hour: int  # local hour of the start, 0-23
    held_node_hours: Decimal = ZERO
    used_node_hours: Decimal = ZERO
    idle_node_hours: Decimal = ZERO
    idle_cost: Decimal = ZERO
    recovery_cost: Decimal = ZERO  # the part of idle_cost owned by an interrupted chain (see attribute_recovery)

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start, "day": self.day, "hour": self.hour, "held_node_hours": self.held_node_hours,
                "used_node_hours": self.used_node_hours, "idle_node_hours": self.idle_node_hours,
                "idle_cost": self.idle_cost, "recovery_cost": self.recovery_cost}


@dataclass
class Occupancy:
    """A month's hours and its fleets' totals; ``idle_cost`` is the monthly report's (Σ hours' cents)."""

    month: str
    timezone: str
    currency: str
    period: str  # "" for an ended month, else "to date (3 of 31 days)"
    idle_cost: Decimal
    hours: list[Hour]
    fleets: list[dict[str, Any]] = field(default_factory=list)
    recovery: list[dict[str, Any]] = field(default_factory=list)  # the chains' gaps (attribute_recovery)

    def totals(self) -> dict[str, Decimal]:
        return {k: sum((getattr(h, k) for h in self.hours), ZERO)
                for k in ("held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost", "recovery_cost")}


# --- nodes in use: a step function aggregated in SQL --------------------------------

def _usage_steps(session: Session, month: str, node_type_id: int, offer_keys: set[int],
                 live: Iterable[rollup.SliceFact]) -> list[tuple[datetime, int]]:
    """``[(instant, change in nodes in use)]`` sorted: the runs recorded with ``offer_keys`` (0: none); nodes
    in node units (:data:`trainledger.money.allocation.shares.UNITS`: a run holding part of a node counts its share)."""
    st = RollupSlice.__table__
    ids = sorted(k for k in offer_keys if k)
    none = [and_(st.c.offer_id.is_(None), st.c.node_type_id == node_type_id)] if 0 in offer_keys else []
    conds = [st.c.month == month, or_(st.c.offer_id.in_(ids), *none)]
    delta: dict[datetime, int] = defaultdict(int)
    conn = session.connection()
    for column, sign in ((st.c.start_at, 1), (st.c.end_at, -1)):
        for at, nodes in conn.execute(select(column, func.sum(rollup.held_units(st))).where(*conds).group_by(column)):
            delta[rollup._utc(at)] += sign * int(nodes)
    for s in live:
        if (s.offer_id in ids) or (s.offer_id is None and 0 in offer_keys and s.node_type_id == node_type_id):
            delta[s.start] += s.units
            delta[s.end] -= s.units
    return sorted((t, d) for t, d in delta.items() if d)


class _Usage:
    """Node-µs in use over any interval, from a step function (one pass per ascending series of queries)."""

    def __init__(self, steps: list[tuple[datetime, int]]):
        self.steps = steps

    def node_hours(self, windows: list[tuple[datetime, datetime]]) -> list[Decimal]:
        """Node-hours in use in each window (windows ascending and disjoint), exact (integer node-µs)."""
        out, i, level = [], 0, 0
        for a, b in windows:
            node_us = 0
            while i < len(self.steps) and self.steps[i][0] <= a:  # the level at a
                level += self.steps[i][1]
                i += 1
            at = a
            j = i
            lvl = level
            while j < len(self.steps) and self.steps[j][0] < b:
                node_us += lvl * rollup._micros(at, self.steps[j][0])
                at, lvl = self.steps[j][0], lvl + self.steps[j][1]
                j += 1
            node_us += lvl * rollup._micros(at, b)
            out.append(Decimal(node_us) / (US_PER_HOUR * UNITS))
        return out


# --- the month --------------------------------------------------------------------

def _members(session: Session, charges: list[FleetCharge], fleets: dict[int, list[Fleet]]) -> dict[int, set[int]]:
    """Fleet offer id → the recorded offer keys (0: none) of the runs costed under it, as the monthly report
    resolves them: a run's own offer, else its node type's default (:func:`trainledger.money.rates.catalog.default_offer`)."""
    cat = load_catalog(session)
    out: dict[int, set[int]] = {}
    for fc in charges:
        default = default_offer(cat, fc.offer.node_type_id, fleets)
        out[fc.offer.id] = {fc.offer.id} | ({0} if default is not None and default.id == fc.offer.id else set())
    return out


def _fleet_charges(session: Session, month: str, currency: Optional[str], now: datetime
                   ) -> tuple[MonthlyReport, list[FleetCharge]]:
    """The month's report (totals only) and each fixed-cost fleet's charge per charge period: what
    :func:`trainledger.money.account.monthly.month_charges` returns, without its per-run lines (not needed here, and most
    of its time on a large month)."""
    m, offers, costings, nt_months, currencies = monthly._cost_month(session, month, (None, None, None), now, currency)
    rep = monthly._assemble(session, m, offers, costings, nt_months, currencies, False, False)
    out = []
    for ps, c in costings.items():
        for off_id, fm in c.fleet_months.items():
            offer = c.cat.offers[off_id]
            out.append(FleetCharge(offer, ps, c.period_end.get(offer.node_type_id, m.end), fm,
                                   sorted(f.name for f in m.fleets.get(off_id, []))))
    return rep, out


def _hours(start: datetime, end: datetime, tz: ZoneInfo) -> list[Hour]:
    out, t = [], start
    while t < end:
        local = t.astimezone(tz)
        out.append(Hour(t, local.date().isoformat(), local.hour))
        t += HOUR
    return out


def _held(fc: FleetCharge, fleets: list[Fleet], a: datetime, b: datetime, cap_end: datetime, tz: ZoneInfo) -> Decimal:
    """Node-hours the fleet held in [a, b): its configured fleets', or the implied capacity's share by time."""
    if fc.fleets:
        return fleet_capacity(fleets, a, b, tz)
    span = costs.hours_between(fc.start, min(fc.end, cap_end))
    return fc.fleet.capacity_node_hours * costs.hours_between(a, b) / span if span else ZERO


def _fleet_hours(fc: FleetCharge, fleets: list[Fleet], usage: _Usage, hours: list[Hour], cap_end: datetime,
                 tz: ZoneInfo) -> dict[str, Decimal]:
    """Add one fleet's charge period to the hours it overlaps; its idle cost shared by idle node-hours."""
    end = min(fc.end, cap_end)
    idx = [i for i, h in enumerate(hours) if h.start < end and h.start + HOUR > fc.start]
    windows = [(max(hours[i].start, fc.start), min(hours[i].start + HOUR, end)) for i in idx]
    used = usage.node_hours(windows)
    held = [_held(fc, fleets, a, b, cap_end, tz) for a, b in windows]
    idle = [max(ZERO, h - u) for h, u in zip(held, used)]
    weight = sum(idle, ZERO)
    rate = fc.fleet.idle / weight if weight else ZERO  # the idle rate, when no hour was over-used
    for i, h, u, x in zip(idx, held, used, idle):
        hours[i].held_node_hours += h
        hours[i].used_node_hours += u
        hours[i].idle_node_hours += x
        hours[i].idle_cost += (x * rate).quantize(SLICE_QUANTUM)  # on a grid: equal idle, equal cost
    return {"held_node_hours": sum(held, ZERO), "used_node_hours": sum(used, ZERO), "idle_node_hours": weight,
            "idle_cost": fc.fleet.idle}


def month_occupancy(session: Session, month: str, *, now: Optional[datetime] = None,
                    currency: Optional[str] = None, recovery: bool = True) -> Occupancy:
    """The owned and reserved fleets' occupancy of ``month`` by hour (see the module docstring for the identity).

    ``currency`` as in ``report monthly --currency``; a month that has not ended is to date (hours to ``now``).
    ``recovery``: mark the idle that interrupted chains own (:func:`recovery_spans`, from the goodput account)."""
    now = now or utcnow()
    tz = display_timezone(session)
    period = month_period(month, tz, now)
    rep, fleet_charges = _fleet_charges(session, month, currency, now)
    fleets = fleets_by_offer(session, period.start, period.month_end, tz)
    cap_end = period.end
    hours = _hours(period.start, cap_end, tz)
    live = rollup.live_slices(session.connection(), month, tz, now, period.month_end)
    members = _members(session, fleet_charges, fleets)
    usage: dict[int, _Usage] = {}
    per_fleet: dict[int, dict[str, Any]] = {}
    for fc in sorted(fleet_charges, key=lambda c: (c.start, c.offer.name)):
        off = fc.offer
        if off.id not in usage:
            usage[off.id] = _Usage(_usage_steps(session, month, off.node_type_id, members[off.id], live))
        part = _fleet_hours(fc, fleets.get(off.id, []), usage[off.id], hours, cap_end, tz)
        row = per_fleet.setdefault(off.id, {"offer": off.name, "kind": off.kind.value, "fleets": fc.fleets,
                                            **{k: ZERO for k in part}})
        for k, v in part.items():
            row[k] += v
    total = cents(rep.summary["idle_cost"])
    for h, c in zip(hours, round_preserving_sum([h.idle_cost for h in hours], total=total)):
        h.idle_cost = c
    occ = Occupancy(month, str(tz), rep.currency, period.label, total, hours,
                    sorted(per_fleet.values(), key=lambda r: r["offer"]))
    if recovery:
        attribute_recovery(occ, recovery_spans(session, month, currency=currency, now=now))
    return occ


# --- recovery: idle with an owner ------------------------------------------------------

@dataclass(frozen=True)
class RecoverySpan:
    """Held capacity between an interruption and the resumed run of the same chain (the goodput account's
    ``recovery``): the gap ``[start, end)`` and its cost, moved from idle to the chain."""

    chain: str
    run_id: str  # the resumed run the account charges it to
    nodes: int
    start: datetime
    end: datetime
    cost: Decimal


def attribute_recovery(occ: Occupancy, spans: Iterable[RecoverySpan]) -> None:
    """Mark the part of each hour's idle cost that is a chain's recovery (never more than the hour's idle).

    Each span's cost is shared over the hours it overlaps by the idle node-hours the gap could have held in
    each, min(its nodes × overlap, the hour's idle node-hours) (by overlap when the fleet had no idle during
    the gap), each hour capped at its idle cost not yet owned; what the caps leave goes to the span's other
    hours with idle left, then to the month's, by the idle left in each. Rounded to cents by largest
    remainder against Σ spans' cost in cents."""
    parts = [ZERO] * len(occ.hours)
    total = ZERO
    for sp in spans:
        if sp.end <= sp.start or sp.cost <= 0:
            continue
        total += sp.cost
        occ.recovery.append({"chain": sp.chain, "run_id": sp.run_id, "nodes": sp.nodes, "start": sp.start,
                             "end": sp.end, "recovery_cost": sp.cost})
        overlap = {i: Decimal(rollup._micros(max(h.start, sp.start), min(h.start + HOUR, sp.end))) / US_PER_HOUR
                   for i, h in enumerate(occ.hours) if h.start < sp.end and h.start + HOUR > sp.start}
        weight = {i: min(sp.nodes * o, occ.hours[i].idle_node_hours) for i, o in overlap.items()}
        if not sum(weight.values(), ZERO):
            weight = overlap
        w_total = sum(weight.values(), ZERO)
        excess = ZERO
        for i, w in weight.items():
            want = sp.cost * w / w_total
            take = max(ZERO, min(want, occ.hours[i].idle_cost - parts[i]))
            parts[i] += take
            excess += want - take
        for scope in (list(overlap), range(len(occ.hours))):
            excess = _spread(parts, occ.hours, scope, excess)
        if excess > 0:  # more recovery than idle (the account caps it: rounding at most)
            parts[max(overlap or [0], key=lambda i: parts[i])] += excess
    exact = [p.quantize(SLICE_QUANTUM) for p in parts]
    for h, c in zip(occ.hours, round_preserving_sum(exact, total=cents(total))):
        h.recovery_cost = c


def _spread(parts: list[Decimal], hours: list[Hour], scope: Iterable[int], excess: Decimal) -> Decimal:
    """Give ``excess`` to the hours of ``scope`` by the idle cost each has left (none beyond it); the rest back."""
    room = {i: hours[i].idle_cost - parts[i] for i in scope if hours[i].idle_cost > parts[i]}
    left = sum(room.values(), ZERO)
    if excess <= 0 or not left:
        return excess
    give = min(excess, left)
    for i, r in room.items():
        parts[i] += give * r / left
    return excess - give


def recovery_spans(session: Session, month: str, *, currency: Optional[str] = None,
                   now: Optional[datetime] = None) -> list[RecoverySpan]:
    """The month's recovery gaps with their cost, from the goodput account (``trainledger.money.goodput.account``): for each
    run that resumes an interrupted one and was charged recovery, [the interrupted run's end, its start] inside
    the month."""
    from trainledger.money.goodput.account import Category, goodput_account
    from trainledger.money.goodput.month_store import is_storable, month_summary, recovered_runs

    now = now or utcnow()
    if is_storable(session, month, now):  # a month that is over: its runs charged recovery, stored with its totals
        charged = month_summary(session, month, currency=currency, now=now).recovered or []
    else:
        charged = recovered_runs(goodput_account(session, month=month, currency=currency, now=now).runs, month)
    if not charged:
        return []
    ms, me = month_bounds(month, display_timezone(session))
    prev = {r.id: r for r in session.scalars(select(Run).where(Run.id.in_(sorted({a.resume_of for a in charged}))))}
    out = []
    for a in charged:
        p = prev.get(a.resume_of)
        mine = session.get(Run, a.run_id)
        theirs = run_interval(p.started_at, p.ended_at, p.status.value, p.heartbeat_at, now) if p else None
        if theirs is None or mine is None or mine.started_at is None:
            continue
        out.append(RecoverySpan(a.chain, a.run_id, a.nodes, max(theirs[1], ms), min(mine.started_at, me),
                                a.cost[Category.recovery]))
    return out


# --- presentation -------------------------------------------------------------------

def heat_map(occ: Occupancy, value: str = "idle_cost") -> list[dict[str, Any]]:
    """``[{"day", "hour", value}]``: the hours added up per local day and hour (a repeated DST hour once)."""
    cells: dict[tuple[str, int], Decimal] = defaultdict(lambda: ZERO)
    for h in occ.hours:
        cells[(h.day, h.hour)] += getattr(h, value)
    return [{"day": d, "hour": hr, value: v} for (d, hr), v in sorted(cells.items())]


def by_hour_of_day(occ: Occupancy) -> list[dict[str, Any]]:
    """Per hour of the day (0-23) over the month: held, used and idle node-hours, idle cost."""
    rows = {hr: {"hour": hr, "held_node_hours": ZERO, "used_node_hours": ZERO, "idle_node_hours": ZERO,
                 "idle_cost": ZERO, "recovery_cost": ZERO} for hr in range(24)}
    for h in occ.hours:
        for k in ("held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost", "recovery_cost"):
            rows[h.hour][k] += getattr(h, k)
    return list(rows.values())


def by_day(occ: Occupancy) -> list[dict[str, Any]]:
    """Per local day: held, used and idle node-hours, idle cost and its costliest hour."""
    days: dict[str, dict[str, Any]] = {}
    for h in occ.hours:
        d = days.setdefault(h.day, {"day": h.day, "held_node_hours": ZERO, "used_node_hours": ZERO,
                                    "idle_node_hours": ZERO, "idle_cost": ZERO, "recovery_cost": ZERO,
                                    "costliest_hour": None, "_max": ZERO})
        for k in ("held_node_hours", "used_node_hours", "idle_node_hours", "idle_cost", "recovery_cost"):
            d[k] += getattr(h, k)
        if h.idle_cost > d["_max"]:
            d["_max"], d["costliest_hour"] = h.idle_cost, h.hour
    return [{k: v for k, v in d.items() if k != "_max"} for d in days.values()]


def occupancy_to_dict(occ: Occupancy, hours: bool = True) -> dict[str, Any]:
    """What ``trainledger goodput idle --json`` prints: summary, fleets, days, hours of day, and every hour."""
    t = occ.totals()
    out = {"month": occ.month, "timezone": occ.timezone, "currency": occ.currency, "period": occ.period,
           "idle_cost": occ.idle_cost, "recovery_cost": t["recovery_cost"],
           "held_node_hours": t["held_node_hours"], "used_node_hours": t["used_node_hours"],
           "idle_node_hours": t["idle_node_hours"], "fleets": occ.fleets, "days": by_day(occ),
           "hours_of_day": by_hour_of_day(occ), "recovery": occ.recovery}
    if hours:
        out["hours"] = [h.as_dict() for h in occ.hours]
    return out
