"""The daily cluster utilization report: ``trainledger report daily``.

A day is a calendar day in the display time zone (23 or 25 hours on a DST
change). For that day:

* node-hours available (fixed-cost fleets held that day) vs used (runs),
  *time utilization* = fleet node-hours in runs ÷ fleet node-hours available;
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
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional

from sqlalchemy import or_
from sqlmodel import Session, select

from ledger import costs
from sqlalchemy import func

from ledger.accounting import (SLICE_QUANTUM, RunSlice, _catalog, _combine_bases, _default_offer, _fleet_capacity,
                               _share, month_bounds, peak_concurrent_nodes, run_interval)
from ledger.costs import ZERO
from ledger.errors import LedgerInputError
from ledger.models import Fleet, Offer, OfferKind, Run, RunNode
from ledger.settings import display_timezone, get_setting
from ledger.types import utcnow


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


def daily_report(session: Session, day: Optional[str | date] = None, now: Optional[datetime] = None) -> dict[str, Any]:
    """Node-hours used vs available, time utilization, GPU-Util, idle nodes and spend of one day."""
    tz = display_timezone(session)
    now = now or utcnow()
    d = day if isinstance(day, date) else parse_day(day, tz, now)
    ds, de = day_bounds(d, tz)
    if ds >= now:
        raise LedgerInputError(f"--date: {d.isoformat()} has not started yet in {tz}")
    partial = de > now
    de_eff = min(de, now)  # today: up to now
    day_hours = costs.hours_between(ds, de_eff)
    month = ds.astimezone(tz).strftime("%Y-%m")
    ms, me = month_bounds(month, tz)
    hours_in_month = costs.hours_between(ms, me)
    cat = _catalog(session)

    fleets = session.exec(select(Fleet).where(Fleet.valid_from < me.astimezone(tz).date() + timedelta(days=1),
                                              or_(Fleet.valid_to.is_(None), Fleet.valid_to > ms.astimezone(tz).date() - timedelta(days=1)))).all()
    fleets_by_offer: dict[int, list[Fleet]] = defaultdict(list)
    for f in fleets:
        fleets_by_offer[f.offer_id].append(f)

    # runs of the month: offers resolved as the monthly report does; the day's slices
    rows = session.exec(
        select(Run.id, Run.status, Run.node_type_id, Run.offer_id, Run.nodes, Run.gpus_per_node, Run.started_at,
               Run.ended_at, Run.heartbeat_at, Run.gpu_util_mean, Run.util_source, Run.tokens)
        .where(Run.started_at.is_not(None), Run.started_at < me, or_(Run.ended_at.is_(None), Run.ended_at > ms))
        .order_by(Run.started_at, Run.id)).all()
    month_use: dict[int, list[tuple[datetime, datetime, int]]] = defaultdict(list)  # offer → month intervals
    slices: list[RunSlice] = []
    full: list[tuple[datetime, datetime]] = []
    offers = []
    for rid, status, nt_id, offer_id, nodes, gpn, started, ended, hb, util, usrc, tokens in rows:
        status_v = getattr(status, "value", status)
        iv = run_interval(started, ended, status_v, hb, now)
        if iv is None:
            continue
        s, e = iv
        offer = cat.offers.get(offer_id) if offer_id else None
        offer = offer or _default_offer(cat, nt_id, fleets_by_offer)
        if offer is None:
            raise LedgerInputError(f"run {rid}: node type has no offer; add one with `trainledger pricing import`")
        month_use[offer.id].append((max(s, ms), min(e, me), nodes))
        a, b = max(s, ds), min(e, de_eff)
        if b <= a:
            continue
        nh = costs.node_hours(nodes, costs.hours_between(a, b))
        slices.append(RunSlice(run_id=rid, name="", project="", user="", status=status_v, strategy="",
                               node_type=cat.node_types[nt_id].name, offer=offer.name, offer_kind=offer.kind.value,
                               nodes=nodes, gpus_per_node=gpn, start=a, end=b, node_hours=nh,
                               gpu_hours=costs.gpu_hours(nh, gpn), tokens=None, gpu_util_mean=util,
                               util_source=usrc, mfu=None, split=(s < ds or e > de_eff)))
        full.append((s, e))
        offers.append(offer)

    slice_kwh = _slice_energy_kwh(session, slices, full, ds, de_eff)
    hosts = _hosts(session, [sl.run_id for sl in slices])

    # elastic runs: their bill × their share of the day (telescoping, as months are split)
    elastic_cost = ZERO
    for i, offer in enumerate(offers):
        if offer.kind == OfferKind.rent_elastic:
            s, e = full[i]
            total = costs.elastic_run_cost(offer, slices[i].nodes, costs.hours_between(s, e)).quantize(SLICE_QUANTUM)
            slices[i].cost = ((total * _share(s, e, slices[i].end)).quantize(SLICE_QUANTUM)
                              - (total * _share(s, e, slices[i].start)).quantize(SLICE_QUANTUM))
            elastic_cost += slices[i].cost

    # fixed-cost offers (own, reserved): the fleet's day, allocated to runs, the rest idle
    groups: dict[int, list[int]] = defaultdict(list)
    for i, offer in enumerate(offers):
        if offer.kind != OfferKind.rent_elastic:
            groups[offer.id].append(i)
    for off_id in fleets_by_offer:
        if _fleet_capacity(fleets_by_offer[off_id], ds, de_eff, tz) > 0:
            groups.setdefault(off_id, [])
    fleet_rows = []
    currencies = {o.currency for o in offers}
    for off_id in sorted(groups, key=lambda k: cat.offers[k].name):
        members = groups[off_id]
        offer = cat.offers[off_id]
        held = [f for f in fleets_by_offer.get(off_id, []) if f.valid_from <= d and (f.valid_to is None or f.valid_to > d)]
        if fleets_by_offer.get(off_id):
            cap = _fleet_capacity(fleets_by_offer[off_id], ds, de_eff, tz)
            node_count, sized = sum(f.node_count for f in held), "fleet"
        else:  # no fleet configured: implied by the month's peak use, as in the monthly report
            node_count, sized = peak_concurrent_nodes(month_use[off_id]), "peak of the month"
            cap = Decimal(node_count) * day_hours
        kwh, basis = _fleet_energy_kwh(offer, members, cap, slices, slice_kwh)
        fm = costs.fleet_month(offer, cap, [slices[i].node_hours for i in members], hours_in_month, energy_kwh=kwh)
        for i, c in zip(members, fm.allocated):
            slices[i].cost = c
        used = fm.busy_node_hours
        run_hosts = [hosts.get(slices[i].run_id, set()) for i in members]
        if all(len(h) >= slices[i].nodes for h, i in zip(run_hosts, members)):
            touched, never_basis = len(set().union(*run_hosts)) if run_hosts else 0, "hostnames"
        else:
            touched = peak_concurrent_nodes([(slices[i].start, slices[i].end, slices[i].nodes) for i in members])
            never_basis = "at most (fleet nodes - peak concurrent nodes)"
        currencies.add(offer.currency)
        fleet_rows.append({
            "offer": offer.name, "kind": offer.kind.value, "fleets": [f.name for f in held], "sized_by": sized,
            "nodes": node_count, "available_node_hours": cap, "used_node_hours": used,
            "idle_node_hours": fm.idle_node_hours, "time_utilization": costs.time_utilization(min(used, cap), cap),
            "nodes_never_used": max(0, node_count - touched), "nodes_never_used_basis": never_basis,
            "runs": len(members), "cost": fm.total, "idle_cost": fm.idle, "power_basis": basis,
            "over_capacity": fm.over_capacity,
        })
    if len(currencies) > 1:
        raise LedgerInputError(f"{d.isoformat()}: offers in use are priced in {', '.join(sorted(currencies))}; "
                               "one report needs one currency")

    available = sum((f["available_node_hours"] for f in fleet_rows), ZERO)
    fleet_used = sum((min(f["used_node_hours"], f["available_node_hours"]) for f in fleet_rows), ZERO)
    fixed_cost = sum((f["cost"] for f in fleet_rows), ZERO)
    gpu_hours = sum((sl.gpu_hours for sl in slices), ZERO)
    measured_gh = sum((sl.gpu_hours for sl in slices if sl.gpu_util_mean is not None), ZERO)
    summary = {
        "runs": len(slices),
        "available_node_hours": available,
        "used_node_hours": sum((sl.node_hours for sl in slices), ZERO),
        "fleet_used_node_hours": fleet_used,
        "idle_node_hours": sum((f["idle_node_hours"] for f in fleet_rows), ZERO),
        "time_utilization": costs.time_utilization(fleet_used, available) if available else None,
        "gpu_hours": gpu_hours,
        "gpu_util_mean": costs.weighted_mean((sl.gpu_util_mean, sl.gpu_hours) for sl in slices),
        "gpu_util_sources": sorted({sl.util_source for sl in slices if sl.util_source}),
        "gpu_util_coverage": (measured_gh / gpu_hours) if gpu_hours else None,
        "nodes_never_used": sum(f["nodes_never_used"] for f in fleet_rows),
        "fixed_cost": fixed_cost,
        "elastic_cost": elastic_cost,
        "idle_cost": sum((f["idle_cost"] for f in fleet_rows), ZERO),
        "spend": fixed_cost + elastic_cost,
        "power_basis": _combine_bases([f["power_basis"] for f in fleet_rows]),
    }
    return {
        "date": d.isoformat(), "timezone": str(tz), "currency": currencies.pop() if currencies else get_setting(session, "currency"),
        "day_hours": day_hours, "partial": partial, "summary": summary, "fleets": fleet_rows,
        "runs": [{"run_id": sl.run_id, "status": sl.status, "offer": sl.offer, "nodes": sl.nodes,
                  "node_hours": sl.node_hours, "gpu_hours": sl.gpu_hours, "gpu_util_mean": sl.gpu_util_mean,
                  "util_source": sl.util_source, "cost": sl.cost} for sl in slices],
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
