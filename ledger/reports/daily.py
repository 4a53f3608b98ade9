"""The daily cluster utilization report: ``trainledger report daily``.

A day is a calendar day in the display time zone (23 or 25 hours on a DST
change). For that day:

* node-hours available (fixed-cost fleets held that day) vs used (runs),
  *time utilization* = node-hours runs drew from fixed-cost fleets (each at most its capacity) ÷ those fleets'
  node-hours available, as the monthly report and a period count it; elastic node-hours are reported apart
  (``elastic_node_hours``), in no utilization; ``node_hours`` is all the day's runs' (as the monthly report's);
* *GPU-Util* of the day's runs, weighted by their GPU-hours in the day, with
  its sources (dcgm, nvml, cpu) named — never MFU, never time utilization;
* idle: idle node-hours of each fleet and the nodes no run touched that day
  (exact from the runs' hostnames when every run recorded them, else an upper
  bound: fleet nodes − peak concurrent nodes);
* the day's spend, with the same cost functions as the monthly report:
  fixed-cost fleets prorated by the hours of the day
  (``costs.fleet_month`` on the day's capacity with the month's hours, so the
  days of a month add up to the month, measured energy included), elastic runs
  by their share of the day (telescoping shares, as the month split does).

Prices are those in force at the start of the day (a version that starts during
the day applies from the next day's report; the monthly report splits at the
instant), converted to the presentation currency (``--currency``) at the day's rate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import or_
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import SLICE_QUANTUM, RunSlice
from trainledger.money.facts.rollup import exact_kwh, sweep_peak
from trainledger.money.rates import costs
from trainledger.money.rates.catalog import (
    Catalog,
    combine_bases,
    default_offer,
    fleet_capacity,
    fleets_by_offer,
    load_catalog,
    load_versions,
    own_energy_kwh,
    priced_catalog,
)
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.fx import load_rates
from trainledger.money.rates.months import month_bounds, run_interval, time_share
from trainledger.store.defaults import NOT_COSTED
from trainledger.store.models import Fleet, Offer, OfferKind, Run, RunNode
from trainledger.store.settings import display_timezone, get_setting, presentation_currency
from trainledger.store.types import utcnow


def parse_day(text: Optional[str], tz, now: datetime) -> date:
    """``--date``: YYYY-MM-DD, ``today`` or ``yesterday`` (default) in the display time zone."""
    today = now.astimezone(tz).date()
    if not text or text == "yesterday":
        return today - timedelta(days=1)
    if text == "today":
        return today
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise LedgerInputError(f"--date: expected YYYY-MM-DD, today or yesterday, got {text!r}") from None


def day_bounds(day: date, tz) -> tuple[datetime, datetime]:
    """UTC start (inclusive) and end (exclusive) of a calendar day in ``tz``."""
    start = datetime.combine(day, time(0), tzinfo=tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz)
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


@dataclass
class _Day:
    """One calendar day (display time zone) and the month it belongs to."""

    day: date
    tz: ZoneInfo
    start: datetime
    end: datetime  # the day's end, or now for today
    partial: bool
    month_start: datetime
    month_end: datetime
    now: datetime
    cat: Catalog
    fleets: dict[int, list[Fleet]]  # by offer id

    @property
    def hours(self) -> Decimal:
        return costs.hours_between(self.start, self.end)

    @property
    def hours_in_month(self) -> Decimal:
        return costs.hours_between(self.month_start, self.month_end)


@dataclass
class _DayRuns:
    """The day's slices of runs, each with the run's whole interval and the offer it is costed under."""

    slices: list[RunSlice]
    full: list[tuple[datetime, datetime]]
    offers: list[Offer]
    month_use: dict[int, list[tuple[datetime, datetime, int]]]  # offer id → the month's intervals (peak sizing)
    #: runs of the day no offer can cost (no node type, or none for it): reason and node-hours, no money
    not_costed: list[dict[str, Any]] = field(default_factory=list)


def daily_report(session: Session, day: Optional[str | date] = None, now: Optional[datetime] = None,
                 currency: Optional[str] = None) -> dict[str, Any]:
    """Node-hours used vs available, time utilization, GPU-Util, idle nodes and spend of one day."""
    d = _load_day(session, day, now or utcnow(), currency)
    runs = _day_runs(session, d)
    elastic_cost = _cost_elastic_slices(runs)
    slice_kwh = _slice_energy_kwh(session, runs.slices, runs.full, d.start, d.end)
    hosts = _hosts(session, [sl.run_id for sl in runs.slices])
    fixed = _fixed_groups(d, runs)
    fleet_rows = [_fleet_day(d, off_id, members, runs, slice_kwh, hosts) for off_id, members in fixed]
    currencies = {o.currency for o in runs.offers} | {d.cat.offers[off_id].currency for off_id, _ in fixed}
    if len(currencies) > 1:
        raise LedgerInputError(f"{d.day.isoformat()}: offers in use are priced in {', '.join(sorted(currencies))}; "
                               "one report needs one currency")
    summary = _day_summary(runs.slices, fleet_rows, elastic_cost)
    if runs.not_costed:  # a day with none: the report is what it was
        summary["not_costed_runs"] = len(runs.not_costed)
        summary["not_costed_node_hours"] = sum((r["node_hours"] for r in runs.not_costed), ZERO)
    out = {
        "date": d.day.isoformat(), "timezone": str(d.tz),
        "currency": currencies.pop() if currencies else get_setting(session, "currency"),
        "day_hours": d.hours, "partial": d.partial, "summary": summary,
        "fleets": fleet_rows,
        "runs": [{"run_id": sl.run_id, "status": sl.status, "offer": sl.offer, "nodes": sl.nodes,
                  "node_hours": sl.node_hours, "gpu_hours": sl.gpu_hours, "gpu_util_mean": sl.gpu_util_mean,
                  "util_source": sl.util_source, "cost": sl.cost} for sl in runs.slices],
    }
    if runs.not_costed:
        out["not_costed"] = runs.not_costed
    return out


def _load_day(session: Session, day: Optional[str | date], now: datetime, currency: Optional[str] = None) -> _Day:
    tz = display_timezone(session)
    d = day if isinstance(day, date) else parse_day(day, tz, now)
    ds, de = day_bounds(d, tz)
    if ds >= now:
        raise LedgerInputError(f"--date: {d.isoformat()} has not started yet in {tz}")
    ms, me = month_bounds(ds.astimezone(tz).strftime("%Y-%m"), tz)
    target = presentation_currency(session, currency)
    cat = priced_catalog(load_catalog(session), load_versions(session), ds, load_rates(session, tz) if target else None, target)
    return _Day(d, tz, ds, min(de, now), de > now, ms, me, now, cat, fleets_by_offer(session, ms, me, tz))


def _day_runs(session: Session, d: _Day) -> _DayRuns:
    """Runs of the month with their offers resolved as the monthly report does; their slices in the day."""
    rows = session.exec(
        select(Run.id, Run.status, Run.node_type_id, Run.offer_id, Run.nodes, Run.gpus_per_node, Run.started_at,
               Run.ended_at, Run.heartbeat_at, Run.gpu_util_mean, Run.util_source, Run.tokens)
        .where(Run.started_at.is_not(None), Run.started_at < d.month_end,
               or_(Run.ended_at.is_(None), Run.ended_at > d.month_start))
        .order_by(Run.started_at, Run.id)).all()
    out = _DayRuns([], [], [], defaultdict(list))
    for rid, status, nt_id, offer_id, nodes, gpn, started, ended, hb, util, usrc, _tokens in rows:
        status_v = getattr(status, "value", status)
        iv = run_interval(started, ended, status_v, hb, d.now)
        if iv is None:
            continue
        s, e = iv
        offer = (d.cat.offers.get(offer_id) if offer_id else None) or (
            default_offer(d.cat, nt_id, d.fleets) if nt_id is not None else None)
        a, b = max(s, d.start), min(e, d.end)
        if offer is None:  # not costed: listed with its node-hours, in no money figure
            if b > a:
                out.not_costed.append(_not_costed_row(d, rid, status_v, nt_id, nodes, gpn, a, b))
            continue
        out.month_use[offer.id].append((max(s, d.month_start), min(e, d.month_end), nodes))
        if b <= a:
            continue
        nh = costs.node_hours(nodes, costs.hours_between(a, b))
        out.slices.append(RunSlice(run_id=rid, name="", project="", user="", status=status_v, strategy="",
                                   node_type=d.cat.node_types[nt_id].name, offer=offer.name, offer_kind=offer.kind.value,
                                   nodes=nodes, gpus_per_node=gpn, start=a, end=b, node_hours=nh,
                                   gpu_hours=costs.gpu_hours(nh, gpn), tokens=None, gpu_util_mean=util,
                                   util_source=usrc, mfu=None, split=(s < d.start or e > d.end)))
        out.full.append((s, e))
        out.offers.append(offer)
    return out


def _not_costed_row(d: _Day, rid: str, status: str, nt_id: Optional[int], nodes: int, gpn: int,
                    a: datetime, b: datetime) -> dict[str, Any]:
    """A run's day that no offer can cost: its node type ("" for none), the reason, node- and GPU-hours."""
    from trainledger.money.account import not_costed

    names = {k: v.name for k, v in d.cat.node_types.items()}
    nh = costs.node_hours(nodes, costs.hours_between(a, b))
    return {"run_id": rid, "status": status, "node_type": not_costed.node_type_name(nt_id, names),
            "cost": NOT_COSTED, "reason": not_costed.reason(nt_id, names), "nodes": nodes, "node_hours": nh,
            "gpu_hours": costs.gpu_hours(nh, gpn)}


def _cost_elastic_slices(runs: _DayRuns) -> Decimal:
    """Elastic runs: their bill × their share of the day (telescoping, as months are split); returns the total."""
    total_cost = ZERO
    for i, offer in enumerate(runs.offers):
        if offer.kind == OfferKind.rent_elastic:
            s, e = runs.full[i]
            sl = runs.slices[i]
            total = costs.elastic_run_cost(offer, sl.nodes, costs.hours_between(s, e)).quantize(SLICE_QUANTUM)
            sl.cost = ((total * time_share(s, e, sl.end)).quantize(SLICE_QUANTUM)
                       - (total * time_share(s, e, sl.start)).quantize(SLICE_QUANTUM))
            total_cost += sl.cost
    return total_cost


def _fixed_groups(d: _Day, runs: _DayRuns) -> list[tuple[int, list[int]]]:
    """Fixed-cost offers (own, reserved) of the day, by name: their run slices (indices), fleets with no run included."""
    groups: dict[int, list[int]] = defaultdict(list)
    for i, offer in enumerate(runs.offers):
        if offer.kind != OfferKind.rent_elastic:
            groups[offer.id].append(i)
    for off_id in d.fleets:
        if fleet_capacity(d.fleets[off_id], d.start, d.end, d.tz) > 0:
            groups.setdefault(off_id, [])
    return [(off_id, groups[off_id]) for off_id in sorted(groups, key=lambda k: d.cat.offers[k].name)]


def _fleet_day(d: _Day, off_id: int, members: list[int], runs: _DayRuns, slice_kwh: list[Optional[Decimal]],
               hosts: dict[str, set[str]]) -> dict[str, Any]:
    """A fixed-cost offer's day: the fleet's day allocated to its runs, the rest idle; nodes no run touched."""
    offer, slices = d.cat.offers[off_id], runs.slices
    held = [f for f in d.fleets.get(off_id, []) if f.valid_from <= d.day and (f.valid_to is None or f.valid_to > d.day)]
    if d.fleets.get(off_id):
        cap = fleet_capacity(d.fleets[off_id], d.start, d.end, d.tz)
        node_count, sized = sum(f.node_count for f in held), "fleet"
    else:  # no fleet configured: implied by the month's peak use, as in the monthly report
        node_count, sized = sweep_peak(runs.month_use[off_id]), "peak of the month"
        cap = Decimal(node_count) * d.hours
    kwh, basis = _fleet_energy_kwh(offer, members, cap, slices, slice_kwh)
    fm = costs.fleet_month(offer, cap, [slices[i].node_hours for i in members], d.hours_in_month, energy_kwh=kwh)
    for i, c in zip(members, fm.allocated):
        slices[i].cost = c
    used = fm.busy_node_hours
    run_hosts = [hosts.get(slices[i].run_id, set()) for i in members]
    if all(len(h) >= slices[i].nodes for h, i in zip(run_hosts, members)):
        touched, never_basis = len(set().union(*run_hosts)) if run_hosts else 0, "hostnames"
    else:
        touched = sweep_peak([(slices[i].start, slices[i].end, slices[i].nodes) for i in members])
        never_basis = "at most (fleet nodes - peak concurrent nodes)"
    return {
        "offer": offer.name, "kind": offer.kind.value, "fleets": [f.name for f in held], "sized_by": sized,
        "nodes": node_count, "available_node_hours": cap, "used_node_hours": used,
        "idle_node_hours": fm.idle_node_hours, "time_utilization": costs.time_utilization(min(used, cap), cap),
        "nodes_never_used": max(0, node_count - touched), "nodes_never_used_basis": never_basis,
        "runs": len(members), "cost": fm.total, "idle_cost": fm.idle, "power_basis": basis,
        "over_capacity": fm.over_capacity,
    }


def _day_summary(slices: list[RunSlice], fleet_rows: list[dict[str, Any]], elastic_cost: Decimal) -> dict[str, Any]:
    available = sum((f["available_node_hours"] for f in fleet_rows), ZERO)
    fleet_used = sum((min(f["used_node_hours"], f["available_node_hours"]) for f in fleet_rows), ZERO)
    fixed_cost = sum((f["cost"] for f in fleet_rows), ZERO)
    gpu_hours = sum((sl.gpu_hours for sl in slices), ZERO)
    measured_gh = sum((sl.gpu_hours for sl in slices if sl.gpu_util_mean is not None), ZERO)
    return {
        "runs": len(slices),
        "available_node_hours": available,
        "node_hours": sum((sl.node_hours for sl in slices), ZERO),  # of all its runs, as the monthly report's
        "fleet_used_node_hours": fleet_used,
        "elastic_node_hours": sum((sl.node_hours for sl in slices if sl.offer_kind == OfferKind.rent_elastic.value),
                                  ZERO),
        "idle_node_hours": sum((f["idle_node_hours"] for f in fleet_rows), ZERO),
        "time_utilization": costs.time_utilization(fleet_used, available),
        "gpu_hours": gpu_hours,
        "gpu_util_mean": costs.weighted_mean((sl.gpu_util_mean, sl.gpu_hours) for sl in slices),
        "gpu_util_sources": sorted({sl.util_source for sl in slices if sl.util_source}),
        "gpu_util_coverage": (measured_gh / gpu_hours) if gpu_hours else None,
        "nodes_never_used": sum(f["nodes_never_used"] for f in fleet_rows),
        "fixed_cost": fixed_cost,
        "elastic_rent_cost": elastic_cost,  # billed elastic rent (monthly `elastic_cost` is the what-if)
        "idle_cost": sum((f["idle_cost"] for f in fleet_rows), ZERO),
        "spend": fixed_cost + elastic_cost,
        "power_basis": combine_bases([f["power_basis"] for f in fleet_rows]),
    }


def _hosts(session: Session, run_ids: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for i in range(0, len(run_ids), 1000):
        for rid, host in session.exec(select(RunNode.run_id, RunNode.hostname).where(RunNode.run_id.in_(run_ids[i:i + 1000]))).all():
            out[rid].add(host)
    return out


# --- measured energy of a day's slices (per run: days are small) -------------------

def _slice_energy_kwh(session: Session, slices: list[RunSlice], full: list[tuple[datetime, datetime]],
                      ms: datetime, me: datetime) -> list[Optional[Decimal]]:
    """Measured kWh of each slice: the run's Σ RunNode.energy_kwh × the slice's share of its duration.

    A run counts as measured only when it has ended and every one of its nodes
    has a RunNode with an energy figure (summed exactly: ``rollup.exact_kwh``).
    """
    run_kwh = exact_kwh(session.exec(
        select(RunNode.run_id, RunNode.energy_kwh, Run.nodes)
        .join(Run, Run.id == RunNode.run_id)
        .where(Run.started_at.is_not(None), Run.started_at < me, Run.ended_at.is_not(None), Run.ended_at > ms)
    ).all())
    out: list[Optional[Decimal]] = []
    for sl, (s, e) in zip(slices, full):
        kwh = run_kwh.get(sl.run_id)
        if kwh is not None and e > s:
            kwh = kwh * costs.hours_between(sl.start, sl.end) / costs.hours_between(s, e)
        out.append(kwh)
    return out


def _fleet_energy_kwh(offer: Offer, members: list[int], capacity_nh: Decimal, slices: list[RunSlice],
                      slice_kwh: list[Optional[Decimal]]) -> tuple[Optional[Decimal], str]:
    """The kWh that replaces an own fleet's nominal power term, and its basis (None: nominal power)."""
    known = [i for i in members if slice_kwh[i] is not None]
    if offer.kind != OfferKind.own or not known:
        return None, "nominal"
    return own_energy_kwh(offer, sum((slice_kwh[i] for i in known), ZERO),
                          sum((slices[i].node_hours for i in members if slice_kwh[i] is None), ZERO),
                          sum((slices[i].node_hours for i in members), ZERO), capacity_nh, len(known) == len(members))
