"""Spend anomalies: the days of a month whose spend or idle cost is far above their own recent past.

``trainledger report anomalies --month M`` and the dashboard's Overview read :func:`anomalies`.

**The days.** Each calendar day (display time zone) is costed as the month-end forecast costs
an interval (:func:`trainledger.money.outlook.forecast.cost_interval`): the fixed-cost fleets held that day
(their capacity in the day, at the day's month's rates, nominal power), the runs' node-hours in
it allocated, the rest idle; elastic runs' bills by time share. Only whole days up to ``now`` are
judged (today, still running, is not).

**The rule.** A day's spend (or idle cost) is flagged when it is above

    median + max(3 × MAD, 50% of the median daily spend, 1.00)

of the same figure over the :data:`WINDOW_DAYS` days before it (MAD: the median absolute
deviation from the median). The floor keeps a flat history quiet: when every day costs the same,
MAD is 0 and a day must still cost half a typical day more than usual to be flagged.
Only days on or after the ledger's first day with any spend are a baseline; a day with fewer
than :data:`MIN_BASELINE_DAYS` of them is not judged (``judged`` false).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from statistics import median
from typing import Any, Mapping, Optional

from sqlalchemy import or_
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.outlook import outlook_store
from trainledger.money.outlook.budgets import ledger_currency
from trainledger.money.outlook.forecast import (  # the forecast's day costing, reused
    _exact,
    _read_ledger,
    _setup,
    _usage_in,
    cost_interval,
    setup_key,
)
from trainledger.money.rates import costs
from trainledger.money.rates.months import date_start, month_bounds, month_of, month_period, parse_month, run_interval
from trainledger.store.models import Project, Run, User
from trainledger.store.settings import display_timezone, presentation_currency
from trainledger.store.types import utcnow

WINDOW_DAYS = 28
MAD_FACTOR = Decimal(3)
FLOOR_SHARE = Decimal("0.5")  # of the baseline's median daily spend
FLOOR_MIN = Decimal("1.00")  # in the presented currency
MIN_BASELINE_DAYS = 7
MEASURES = {"spend": "spend", "idle_cost": "idle cost"}
RULE = (f"a day is flagged when its spend (or idle cost) is above the median of the {WINDOW_DAYS} days before it + "
        f"max(3 × MAD, 50% of their median daily spend, 1.00); MAD = median absolute deviation; days before the ledger's "
        f"first spend are no baseline, and a day with fewer than {MIN_BASELINE_DAYS} baseline days is not judged")


def mad(values: list[Decimal]) -> tuple[Decimal, Decimal]:
    """(median, median absolute deviation) of ``values``."""
    mid = median(values)
    return mid, median([abs(v - mid) for v in values])


def threshold(values: list[Decimal], spend: list[Decimal]) -> dict[str, Decimal]:
    """The level above which a day is flagged, from the baseline ``values`` of its measure and the baseline's
    daily ``spend``: median + max(3 × MAD, 50% × median(spend), 1.00)."""
    mid, dev = mad(values)
    floor = max(FLOOR_SHARE * median(spend), FLOOR_MIN)
    return {"median": mid, "mad": dev, "floor": floor, "threshold": mid + max(MAD_FACTOR * dev, floor)}


def daily_costs(session: Session, first: date, last: date, *, now: datetime,
                currency: Optional[str] = None, setup: Optional[tuple[Any, Any]] = None) -> list[dict[str, Any]]:
    """Spend, idle cost and GPU-hours of every whole day from ``first`` to ``last`` (inclusive, display time zone)
    that has ended by ``now``, costed as the forecast costs an interval. ``setup``: ``forecast._setup`` of the days'
    span, when the caller has it."""
    tz = display_timezone(session)
    spans = _spans(first, last, tz, now)
    if not spans:
        return []
    led = _read_ledger(session, tz, now, spans[0][1], spans[-1][2], presentation_currency(session, currency),
                       setup=setup)
    hours = {}
    out = []
    for (d, a, b), usage in zip(spans, _usage_in(led, [(a, b) for _, a, b in spans])):
        m = f"{d.year:04d}-{d.month:02d}"
        if m not in hours:
            hours[m] = month_period(m, tz, now).month_hours
        f = cost_interval(led, a, b, usage, hours[m])
        out.append({"date": d, "spend": costs.cents(f.spend), "idle_cost": costs.cents(f.idle_cost),
                    "gpu_hours": f.gpu_hours})
    return out


def _spans(first: date, last: date, tz: Any, now: datetime) -> list[tuple[date, datetime, datetime]]:
    """Each whole day from ``first`` to ``last`` that has ended by ``now``: (day, its start, its end)."""
    spans, day = [], first
    while day <= last and (b := date_start(day + timedelta(days=1), tz)) <= now:
        spans.append((day, date_start(day, tz), b))
        day += timedelta(days=1)
    return spans


def anomalies(session: Session, month: Optional[str] = None, *, now: Optional[datetime] = None,
              currency: Optional[str] = None, fingerprints: Optional[Mapping[str, Optional[str]]] = None
              ) -> dict[str, Any]:
    """The days of ``month`` (default: the current one) whose spend or idle cost breaks :data:`RULE`.

    ``days``: each whole day of the month so far with its figures, baseline and flags; ``flagged``: one row
    per (day, measure) above its threshold, in date order. The days' figures of a month that is over are stored per
    ledger state (:func:`month_series`; ``fingerprints``: the month's and the month before's, when the caller has them).
    """
    now = now or utcnow()
    tz = display_timezone(session)
    month = month or month_of(now, tz)
    parse_month(month)
    start, end = month_bounds(month, tz)
    first, last = start.astimezone(tz).date(), (end - timedelta(microseconds=1)).astimezone(tz).date()
    series = month_series(session, month, first - timedelta(days=WINDOW_DAYS), last, now=now, currency=currency,
                          fingerprints=fingerprints)
    began = next((i for i, d in enumerate(series) if d["spend"] > 0), len(series))
    days, flagged = [], []
    for i, d in enumerate(series):
        if d["date"] < first:
            continue
        base = series[max(began, i - WINDOW_DAYS):i]
        row = {**d, "baseline_days": len(base), "judged": len(base) >= MIN_BASELINE_DAYS, "flags": []}
        if row["judged"]:
            spend = [x["spend"] for x in base]
            for key in MEASURES:
                t = threshold([x[key] for x in base], spend)
                row[key + "_threshold"] = costs.cents(t["threshold"])
                if d[key] > t["threshold"]:
                    row["flags"].append(key)
                    flagged.append({"date": d["date"], "measure": key, "value": d[key],
                                    "median": costs.cents(t["median"]), "mad": costs.cents(t["mad"]),
                                    "threshold": costs.cents(t["threshold"]), "baseline_days": len(base)})
        days.append(row)
    return {"month": month, "timezone": str(tz), "now": now,
            "currency": presentation_currency(session, currency) or ledger_currency(session),
            "rule": RULE, "days": days, "flagged": flagged}


def month_series(session: Session, month: str, first: date, last: date, *, now: datetime,
                 currency: Optional[str] = None, fingerprints: Optional[Mapping[str, Optional[str]]] = None
                 ) -> list[dict[str, Any]]:
    """:func:`daily_costs` of ``first`` to ``last`` (``month``'s days and its baseline's), stored in the month's
    ``goodput_month`` row (``trainledger.money.outlook.outlook_store``) when every day has ended, the days lie in
    the month and the month before, and both are over and touched by no live run; read back while the ledger (both
    months' fingerprints) and what depends on ``now`` (the rates in force, the fleets read) are as they were."""
    tz = display_timezone(session)
    spans = _spans(first, last, tz, now)
    if not spans:
        return []
    target = presentation_currency(session, currency)
    setup = _setup(session, tz, now, spans[0][1], spans[-1][2], target)

    def compute() -> list[dict[str, Any]]:
        return daily_costs(session, first, last, now=now, currency=currency, setup=setup)

    y, m = parse_month(month)
    before = f"{y - (m == 1):04d}-{(m - 2) % 12 + 1:02d}"
    whole = spans[-1][0] == last and len(spans) == (last - first).days + 1
    if not whole or not {f"{d.year:04d}-{d.month:02d}" for d, _, _ in spans} <= {before, month}:
        return compute()
    return outlook_store.read_or_compute(session, "anomaly_days", month, (before, month), target or "", now,
                                         spans[-1][2], setup_key(setup), compute, _series_to_json, _series_from_json,
                                         fingerprints)


def _series_to_json(series: list[dict[str, Any]]) -> list[list[str]]:
    return [[d["date"].isoformat(), str(d["spend"]), str(d["idle_cost"]), str(d["gpu_hours"])] for d in series]


def _series_from_json(rows: list[list[str]]) -> list[dict[str, Any]]:
    out = []
    for day, spend, idle, gpu in rows:
        out.append({"date": date.fromisoformat(day), "spend": _exact(spend), "idle_cost": _exact(idle),
                    "gpu_hours": _exact(gpu)})
    return out


def parse_day(text: str, flag: str = "--day") -> date:
    """A calendar day typed as YYYY-MM-DD; anything else: one line naming the flag."""
    try:
        return date.fromisoformat(str(text).strip())
    except ValueError:
        raise LedgerInputError(f"{flag}: expected a day as YYYY-MM-DD, got {text!r}") from None


def runs_on_day(session: Session, day: date, *, now: Optional[datetime] = None) -> list[dict[str, Any]]:
    """The runs that ran during calendar ``day`` (display time zone); ``node_hours``: theirs within that day, most first."""
    now = now or utcnow()
    tz = display_timezone(session)
    a, b = date_start(day, tz), date_start(day + timedelta(days=1), tz)
    rows = session.exec(
        select(Run.id, Run.name, Project.name, User.name, Run.status, Run.nodes, Run.started_at, Run.ended_at,
               Run.heartbeat_at)
        .outerjoin(Project, Project.id == Run.project_id).outerjoin(User, User.id == Run.user_id)
        .where(Run.started_at.is_not(None), Run.started_at < b,
               or_(Run.ended_at.is_(None), Run.ended_at > a))).all()
    out = []
    for rid, name, project, user, status, nodes, started, ended, hb in rows:
        status_v = getattr(status, "value", status)
        iv = run_interval(started, ended, status_v, hb, now)
        if iv is None or iv[1] <= a:
            continue
        lo, hi = max(iv[0], a), min(iv[1], b)
        if hi <= lo:
            continue
        out.append({"id": rid, "name": name, "project": project or "", "user": user or "", "status": status_v,
                    "nodes": nodes, "started_at": iv[0], "ended_at": ended,
                    "node_hours": costs.node_hours(nodes, costs.hours_between(lo, hi))})
    return sorted(out, key=lambda r: (-r["node_hours"], r["id"]))
