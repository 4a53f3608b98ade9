"""The month-end forecast: ``trainledger forecast``.

What a month will have cost when it ends, from what it has cost so far and the
team's own run rate:

* **to date**: the monthly report at ``now`` (:func:`trainledger.money.account.monthly.monthly_report`:
  fleets prorated to ``now``, live runs up to ``now``);
* **the rest of the month** ``[now, month end)``: the fleets held then are known
  (their fixed cost, and their capacity), so only usage is projected: the node-hours,
  GPU-hours and elastic bills of every (project, offer) in the **trailing window**
  (default the last 7 days before ``now``, ``--window``; runs still running are
  counted up to ``now``) are carried forward at the window's hourly rate, and
  costed as the monthly report costs a month (``costs.fleet_month`` for owned and
  reserved fleets at the month's rates, nominal power; elastic runs at their bills);
* **the range** (p10, p90): each whole day of the window, carried over the rest
  of the month, gives a scenario; p10/p90 = expected ∓ ``1.2816 × σ(scenarios)``
  (normal approximation), clipped to what the fleets allow (no usage at all:
  spend's floor, idle's ceiling). The days are *not* taken as independent draws
  (which would narrow the spread by √days): a training team's days are not
  independent (one pretraining run spans several), and on the demo history the
  narrower range held the actual month in 1 of 5 back-tests at day 14, this one
  in 4 of 5 (docs/FORECAST.md);
* a month that has ended is its actual figures; a month that has not begun is
  projected from the window over all of it.

Identities: the forecast spend = Σ project forecasts + idle forecast (to date by the
monthly report's allocation, the rest by ``costs.fleet_month``'s). The budgets
(:mod:`trainledger.money.outlook.budgets`) and the Prometheus exporter read their figures here.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Mapping, Optional
from zoneinfo import ZoneInfo

from sqlalchemy import func, or_
from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import MonthlyReport, monthly_report
from trainledger.money.facts.rollup import sweep_peak
from trainledger.money.goodput.month_store import exact_decimal as _exact
from trainledger.money.rates import costs
from trainledger.money.rates.catalog import Catalog, default_offer, fleet_capacity, fleets_by_offer, load_catalog
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.fx import convert_offer, load_rates
from trainledger.money.rates.months import Period, date_start, month_of, month_period, run_interval, time_share
from trainledger.store.models import Fleet, Offer, OfferKind, Project, Run, RunStatus
from trainledger.store.settings import display_timezone, presentation_currency
from trainledger.store.types import utcnow

DEFAULT_WINDOW_DAYS = 7
MIN_RANGE_DAYS = 3  # whole days of history below which the p10-p90 range cannot be estimated
MAX_WINDOW_DAYS = 90
Z_P90 = Decimal("1.2815515655446004")  # the standard normal's 90th percentile
DAY = timedelta(days=1)
FIGURES = ("spend", "idle_cost", "gpu_hours", "node_hours")
#: a group of usage: (project name, "" for none; the id of the offer it is costed under)
Group = tuple[str, int]


@dataclass
class Usage:
    """Usage of one group in an interval: node-hours, GPU-hours, elastic bill."""

    node_hours: Decimal = ZERO
    gpu_hours: Decimal = ZERO
    elastic_cost: Decimal = ZERO

    def add(self, other: "Usage") -> None:
        self.node_hours += other.node_hours
        self.gpu_hours += other.gpu_hours
        self.elastic_cost += other.elastic_cost

    def scaled(self, factor: Decimal) -> "Usage":
        return Usage(self.node_hours * factor, self.gpu_hours * factor, self.elastic_cost * factor)


@dataclass
class Figures:
    """What an interval costs: spend, idle, GPU-hours, node-hours, and cost per project."""

    spend: Decimal = ZERO
    idle_cost: Decimal = ZERO
    gpu_hours: Decimal = ZERO
    node_hours: Decimal = ZERO
    projects: dict[str, Decimal] = field(default_factory=lambda: defaultdict(lambda: ZERO))

    def get(self, figure: str, project: Optional[str] = None) -> Decimal:
        return self.projects.get(project, ZERO) if project is not None else getattr(self, figure)


@dataclass
class _Ledger:
    """What the forecast reads once: the catalog, the fleets, and each run's costed interval as of ``now``."""

    tz: ZoneInfo
    now: datetime
    cat: Catalog
    fleets: dict[int, list[Fleet]]
    runs: list[tuple[str, Offer, int, int, datetime, datetime, Decimal]]  # project, offer, nodes, GPUs/node, start, end, bill
    peaks: dict[int, int]  # fixed-cost offer without a fleet → peak nodes in use (sizes it, as the report does)
    running: int  # runs still running at now
    first_start: Optional[datetime]  # the ledger's first run: a window never reaches before it


# --- the forecast, in steps ---------------------------------------------------------

def forecast(session: Session, month: Optional[str] = None, *, now: Optional[datetime] = None,
             window_days: int = DEFAULT_WINDOW_DAYS, project: Optional[str] = None,
             report: Optional[MonthlyReport] = None, currency: Optional[str] = None,
             fingerprints: Optional[Mapping[str, Optional[str]]] = None) -> dict[str, Any]:
    """Month-end spend, idle, GPU-hours and each project's cost of ``month`` (default: the current
    month) as expected at ``now``, with a p10-p90 range; the method in ``method``.

    ``report``: the month's ``monthly_report(..., now=now, lines=False, currency=currency)`` when the caller
    has it. ``currency``: money in it (default: the Settings currency once set, else the offers'): to date as
    the monthly report converts it (each charge period at its rate), the rest of the month at the rate in
    force at ``now``. The daily path of a month that has ended is stored per ledger state
    (:mod:`trainledger.money.outlook.outlook_store`; ``fingerprints``: the month's, when the caller has it).
    """
    now = now or utcnow()
    tz = display_timezone(session)
    month = month or month_of(now, tz)
    _check(session, window_days, project)
    period = month_period(month, tz, now)
    rep = report if report is not None else monthly_report(session, month, now=now, lines=False, currency=currency)
    to_date = _to_date(rep)
    since, target = min(period.start, now - window_days * DAY), presentation_currency(session, currency)
    if period.is_partial:
        led = _read_ledger(session, tz, now, since, period.month_end, target)
        proj = _project(led, period, window_days, to_date)
        days, running = _days(led, period), led.running
    else:  # ended: the actual month
        days, running = _ended_days(session, period, now, since, target, fingerprints)
        proj = _Projection(to_date, to_date, to_date, None, [], running)
    return _result(rep, period, now, to_date, proj, project, _scaled_path(days, to_date))


def _ended_days(session: Session, period: Period, now: datetime, since: datetime, target: Optional[str],
                fingerprints: Optional[Mapping[str, Optional[str]]]) -> tuple[list[tuple[datetime, Figures]], int]:
    """:func:`_days` of a month that has ended and the runs still running, stored per ledger state when the read
    starts at the month's start (a longer window reads runs before it, which can size a fleet-less offer's peak)."""
    from trainledger.money.outlook import outlook_store

    tz = display_timezone(session)

    def compute() -> tuple[list[tuple[datetime, Figures]], int]:
        led = _read_ledger(session, tz, now, since, period.month_end, target, setup=setup)
        return _days(led, period), led.running

    setup = _setup(session, tz, now, since, period.month_end, target)
    if since != period.start:
        return compute()
    return outlook_store.read_or_compute(
        session, "forecast_days", period.month, (period.month,), target or "", now, period.month_end,
        setup_key(setup), compute, _days_to_json, _days_from_json, fingerprints)


def setup_key(setup: tuple[Catalog, dict[int, list[Fleet]]]) -> str:
    """What :func:`_read_ledger` reads that depends on ``now`` besides the runs (``outlook_store.setup_key``): the
    offers at the rate in force then, and which fleets are held up to then."""
    from trainledger.money.outlook import outlook_store

    cat, fleets = setup
    return outlook_store.setup_key(sorted((oid, repr(o)) for oid, o in cat.offers.items()),
                                   sorted((oid, sorted(f.id for f in fl)) for oid, fl in fleets.items()))


def _figures_to_json(f: Figures) -> list[Any]:
    return [str(f.spend), str(f.idle_cost), str(f.gpu_hours), str(f.node_hours),
            [[p, str(v)] for p, v in f.projects.items()]]


def _figures_from_json(v: list[Any]) -> Figures:
    spend, idle, gpu, node, projects = v
    out = Figures(_exact(spend), _exact(idle), _exact(gpu), _exact(node))
    for p, x in projects:
        out.projects[str(p)] = _exact(x)
    return out


def _days_to_json(value: tuple[list[tuple[datetime, Figures]], int]) -> dict[str, Any]:
    days, running = value
    return {"running": running, "days": [[t.isoformat(), _figures_to_json(f)] for t, f in days]}


def _days_from_json(v: dict[str, Any]) -> tuple[list[tuple[datetime, Figures]], int]:
    if type(v["running"]) is not int:
        raise ValueError("malformed running count")
    days = []
    for t, f in v["days"]:
        at = datetime.fromisoformat(t)
        if at.utcoffset() != timedelta(0):
            raise ValueError(f"not a UTC instant: {t!r}")
        days.append((at.replace(tzinfo=timezone.utc), _figures_from_json(f)))
    return days, v["running"]


def _check(session: Session, window_days: int, project: Optional[str]) -> None:
    if not isinstance(window_days, int) or not 1 <= window_days <= MAX_WINDOW_DAYS:
        raise LedgerInputError(f"--window: days of run rate, 1 to {MAX_WINDOW_DAYS}, got {window_days!r}")
    if project is not None and session.exec(select(Project.id).where(Project.name == project)).first() is None:
        names = session.exec(select(Project.name).order_by(Project.name)).all()
        raise LedgerInputError(f"--project: no project named {project!r}; projects: {', '.join(names) or '(none)'}")


def _to_date(rep: MonthlyReport) -> Figures:
    s = rep.summary
    out = Figures(s["actual_cost"], s["idle_cost"], s["gpu_hours"], s["node_hours"])
    for p in rep.projects:
        out.projects[p["project"]] = p["cost"]
    return out


def _setup(session: Session, tz: ZoneInfo, now: datetime, since: datetime, until: datetime,
           target: Optional[str] = None) -> tuple[Catalog, dict[int, list[Fleet]]]:
    """The catalog with the offers' money in ``target`` at the rate in force at ``now`` (None: their own currency),
    and the fleets held in ``[since, until)`` and up to ``now``, by offer."""
    cat = load_catalog(session)
    if target:
        book = load_rates(session, tz)
        cat = Catalog(cat.node_types, {oid: convert_offer(o, book, target, now) for oid, o in cat.offers.items()})
    return cat, fleets_by_offer(session, min(since, now), max(until, now), tz)


def _read_ledger(session: Session, tz: ZoneInfo, now: datetime, since: datetime, until: datetime,
                 target: Optional[str] = None, *,
                 setup: Optional[tuple[Catalog, dict[int, list[Fleet]]]] = None) -> _Ledger:
    """Runs whose costed interval (clipped at ``now``) touches ``[since, min(now, until))``, with their offers and
    bills; the offers' money in ``target`` at the rate in force at ``now`` (None: their own currency). ``setup``:
    :func:`_setup` of the same arguments, when the caller has it."""
    cat, fleets = setup if setup is not None else _setup(session, tz, now, since, until, target)
    names = dict(session.exec(select(Project.id, Project.name)).all())
    rows = session.exec(
        select(Run.project_id, Run.node_type_id, Run.offer_id, Run.nodes, Run.gpus_per_node, Run.status,
               Run.started_at, Run.ended_at, Run.heartbeat_at)
        .where(Run.started_at.is_not(None), Run.started_at < min(now, until),
               or_(Run.ended_at.is_(None), Run.ended_at > since))).all()
    runs, intervals = [], defaultdict(list)
    running = 0
    for pid, nt_id, offer_id, nodes, gpn, status, started, ended, hb in rows:
        status_v = getattr(status, "value", status)
        iv = run_interval(started, ended, status_v, hb, now)
        if iv is None:
            continue
        s, e = iv[0], min(iv[1], now)  # as of now: a run that ends later is running at now
        if e <= since:
            continue
        running += status_v == RunStatus.running.value and ended is None
        offer = (cat.offers.get(offer_id) if offer_id else None) or default_offer(cat, nt_id, fleets)
        if offer is None:  # unpriced (the monthly report counts it as such): nothing to project
            continue
        bill = costs.elastic_run_cost(offer, nodes, costs.hours_between(s, e)) if offer.kind == OfferKind.rent_elastic else ZERO
        runs.append((names.get(pid, "") if pid else "", offer, nodes, gpn, s, e, bill))
        intervals[offer.id].append((max(s, since), min(e, until), nodes))
    peaks = {off_id: sweep_peak(ivs) for off_id, ivs in intervals.items() if not fleets.get(off_id)}
    first = session.exec(select(func.min(Run.started_at)).where(Run.started_at.is_not(None))).one()
    return _Ledger(tz, now, cat, fleets, runs, peaks, running, first)


def _usage(led: _Ledger, a: datetime, b: datetime) -> dict[Group, Usage]:
    """Each group's usage in ``[a, b)``: node-hours and GPU-hours exactly, elastic bills by time share."""
    return _usage_in(led, [(a, b)])[0]


def _usage_in(led: _Ledger, spans: list[tuple[datetime, datetime]]) -> list[dict[Group, Usage]]:
    """:func:`_usage` of each of consecutive ``spans`` (in time order), in one pass over the runs."""
    out: list[dict[Group, Usage]] = [defaultdict(Usage) for _ in spans]
    ends = [b for _, b in spans]
    for project, offer, nodes, gpn, s, e, bill in led.runs:
        i = bisect_right(ends, s)
        while i < len(spans) and spans[i][0] < e:
            a, b = spans[i]
            lo, hi = max(s, a), min(e, b)
            if hi > lo:
                nh = costs.node_hours(nodes, costs.hours_between(lo, hi))
                share = time_share(s, e, hi) - time_share(s, e, lo) if bill else ZERO
                out[i][(project, offer.id)].add(Usage(nh, costs.gpu_hours(nh, gpn), bill * share))
            i += 1
    return out


def cost_interval(led: _Ledger, a: datetime, b: datetime, usage: dict[Group, Usage], month_hours: Decimal) -> Figures:
    """What ``[a, b)`` costs with ``usage``: fixed-cost fleets held then (``costs.fleet_month`` on their
    capacity in the interval at the month's rates, runs allocated, the rest idle) + elastic bills."""
    out = Figures()
    fixed: dict[int, list[Group]] = defaultdict(list)
    for g, u in usage.items():
        offer = led.cat.offers[g[1]]
        out.gpu_hours += u.gpu_hours
        out.node_hours += u.node_hours
        if offer.kind == OfferKind.rent_elastic:
            out.spend += u.elastic_cost
            out.projects[g[0]] += u.elastic_cost
        else:
            fixed[offer.id].append(g)
    for off_id in set(led.fleets) | set(led.peaks):
        if led.cat.offers[off_id].kind != OfferKind.rent_elastic:
            fixed.setdefault(off_id, [])
    for off_id, groups in fixed.items():
        if led.fleets.get(off_id):
            cap = fleet_capacity(led.fleets[off_id], a, b, led.tz)
        else:
            cap = Decimal(led.peaks.get(off_id, 0)) * costs.hours_between(a, b)
        fm = costs.fleet_month(led.cat.offers[off_id], cap, [usage[g].node_hours for g in groups], month_hours)
        out.spend += fm.total
        out.idle_cost += fm.idle
        for g, c in zip(groups, fm.allocated):
            out.projects[g[0]] += c
    return out


# --- projection and range ----------------------------------------------------------

@dataclass
class _Projection:
    expected: Figures
    low: Figures
    high: Figures
    window: Optional[tuple[datetime, datetime]]
    days: list[Figures]  # the window's whole days, each carried over the rest of the month
    running: int = 0  # runs still running at now


def _project(led: _Ledger, period: Period, window_days: int, to_date: Figures) -> _Projection:
    """To date + the rest of the month at the window's run rate; p10/p90 from the window's days."""
    now, end = led.now, period.month_end
    rest_from = max(now, period.start)
    rest_hours = costs.hours_between(rest_from, end)
    w0 = max(now - window_days * DAY, min(_first_day(led) or now, now))
    window_hours = costs.hours_between(w0, now)
    total = _usage(led, w0, now)
    rate = {g: u.scaled(rest_hours / window_hours) for g, u in total.items()} if window_hours else {}
    expected = _plus(to_date, cost_interval(led, rest_from, end, rate, period.month_hours))
    zero = _plus(to_date, cost_interval(led, rest_from, end, {g: Usage() for g in rate}, period.month_hours))
    spans = []
    t = now
    while t - DAY >= w0:  # whole days back from now
        spans.insert(0, (t - DAY, t))
        t -= DAY
    days = [_plus(to_date, cost_interval(led, rest_from, end, {g: u.scaled(rest_hours / 24) for g, u in day.items()},
                                         period.month_hours))
            for day in reversed(_usage_in(led, spans))]
    if len(days) >= MIN_RANGE_DAYS:
        low, high = _range(expected, zero, days)
    else:  # too little history for a spread: from no further usage to twice the expected rest
        low, high = _unestimated_range(expected, zero)
    return _Projection(expected, low, high, (w0, now), days, led.running)


def _first_day(led: _Ledger) -> Optional[datetime]:
    """The start of the day (display time zone) of the ledger's first run: a young ledger's window starts
    there, at a day boundary like every whole day it is made of, not at the first run's start instant
    (which would count a partial day as a whole one and over-project)."""
    if led.first_start is None:
        return None
    return date_start(led.first_start.astimezone(led.tz).date(), led.tz)


def _unestimated_range(expected: Figures, zero: Figures) -> tuple[Figures, Figures]:
    """The range when it cannot be estimated (fewer than :data:`MIN_RANGE_DAYS` whole days of history):
    p10 = no usage for the rest of the month, p90 = the rest at twice the expected rate (idle the reverse)."""
    low, high = Figures(), Figures()
    for f in FIGURES:
        a, b = zero.get(f), max(ZERO, expected.get(f) * 2 - zero.get(f))
        setattr(low, f, min(a, b))
        setattr(high, f, max(a, b))
    for p in expected.projects:
        a, b = zero.get("projects", p), max(ZERO, expected.get("projects", p) * 2 - zero.get("projects", p))
        low.projects[p], high.projects[p] = min(a, b), max(a, b)
    return low, high


def _days(led: _Ledger, period: Period) -> list[tuple[datetime, Figures]]:
    """Spend and project costs to the end of each day of the month so far (display time zone), each day costed as
    the rest of the month is (nominal power); :func:`_scaled_path` makes them the path."""
    spans = []
    day = period.start.astimezone(led.tz).date()
    while (a := date_start(day, led.tz)) < period.end:
        spans.append((a, min(date_start(day + DAY, led.tz), period.end)))
        day += DAY
    out, total = [], Figures()
    for (a, b), usage in zip(spans, _usage_in(led, spans)):
        total = _plus(total, cost_interval(led, a, b, usage, period.month_hours))
        out.append((b, total))
    return out


def _scaled_path(days: list[tuple[datetime, Figures]], to_date: Figures) -> list[tuple[datetime, Figures]]:
    """The daily path: :func:`_days` scaled so that the last day ends on the to-date figures of the monthly report
    (which use measured energy where it was collected)."""
    total = days[-1][1] if days else Figures()
    return [(t, _scaled_to(f, total, to_date)) for t, f in days]


def _scaled_to(f: Figures, last: Figures, target: Figures) -> Figures:
    def scale(x: Decimal, lx: Decimal, tx: Decimal) -> Decimal:
        return x * tx / lx if lx else tx * 0

    out = Figures(scale(f.spend, last.spend, target.spend), scale(f.idle_cost, last.idle_cost, target.idle_cost),
                  f.gpu_hours, f.node_hours)
    for p in target.projects:
        out.projects[p] = scale(f.projects.get(p, ZERO), last.projects.get(p, ZERO), target.projects[p])
    return out


def crossing_day(fc: dict[str, Any], amount: Decimal, project: Optional[str] = None) -> Optional[date]:
    """The day (display time zone) ``fc``'s spend, or ``project``'s cost, goes above ``amount``.

    Already above it to date: the first day of the month's daily path above it. Expected above it
    by the month's end: where the straight line from to date to the expected month end crosses it.
    Otherwise None.
    """
    fig = fc["spend"] if project is None else next((p["cost"] for p in fc["projects"] if p["project"] == project), None)
    if fig is None:
        return None
    tz = ZoneInfo(fc["timezone"])
    if fig["to_date"] > amount:
        for d in fc["daily"]:
            if (d["spend"] if project is None else d["cost_by_project"].get(project, ZERO)) > amount:
                return d["date"]
        return fc["daily"][-1]["date"] if fc["daily"] else None
    if fig["expected"] > amount and fig["expected"] > fig["to_date"]:
        share = (amount - fig["to_date"]) / (fig["expected"] - fig["to_date"])
        t = fc["period_end"] + timedelta(microseconds=int(share * fc["remaining_hours"] * 3_600_000_000))
        return t.astimezone(tz).date()
    return None


def _plus(a: Figures, b: Figures) -> Figures:
    out = Figures(a.spend + b.spend, a.idle_cost + b.idle_cost, a.gpu_hours + b.gpu_hours, a.node_hours + b.node_hours)
    for p in set(a.projects) | set(b.projects):
        out.projects[p] = a.projects.get(p, ZERO) + b.projects.get(p, ZERO)
    return out


def _range(expected: Figures, zero: Figures, days: list[Figures]) -> tuple[Figures, Figures]:
    """p10 and p90 of every figure: expected ∓ 1.2816 × σ(day scenarios), clipped by the no-usage
    scenario (a floor of spend, GPU-hours, node-hours and project costs; idle's ceiling)."""
    low, high = Figures(), Figures()
    keys = [(f, None) for f in FIGURES] + [("projects", p) for p in expected.projects]
    for f, p in keys:
        mid = expected.get(f, p)
        half = Z_P90 * _stdev([d.get(f, p) for d in days])
        lo, hi = mid - half, mid + half
        if f == "idle_cost":
            lo, hi = max(lo, ZERO), min(hi, zero.get(f, p))
        else:
            lo, hi = max(lo, zero.get(f, p)), max(hi, zero.get(f, p))
        lo, hi = min(lo, mid), max(hi, mid)
        if p is None:
            setattr(low, f, lo)
            setattr(high, f, hi)
        else:
            low.projects[p], high.projects[p] = lo, hi
    return low, high


def _stdev(values: list[Decimal]) -> Decimal:
    """Sample standard deviation (0 with fewer than two values)."""
    if len(values) < 2:
        return ZERO
    mean = sum(values, ZERO) / len(values)
    return (sum(((v - mean) ** 2 for v in values), ZERO) / (len(values) - 1)).sqrt()


# --- the result ----------------------------------------------------------------------

def _result(rep: MonthlyReport, period: Period, now: datetime, to_date: Figures, proj: _Projection,
            project: Optional[str], path: list[tuple[datetime, Figures]]) -> dict[str, Any]:
    def fig(f: str, p: Optional[str] = None) -> dict[str, Decimal]:
        return {"to_date": to_date.get(f, p), "expected": proj.expected.get(f, p),
                "p10": proj.low.get(f, p), "p90": proj.high.get(f, p)}

    names = sorted(set(proj.expected.projects) | set(to_date.projects))
    if project is not None:
        names = [n for n in names if n == project] or [project]
    out: dict[str, Any] = {
        "month": rep.month, "timezone": rep.timezone, "currency": rep.currency, "now": now,
        "is_partial": period.is_partial, "period": period.label or "ended", "period_end": period.end,
        "elapsed_hours": period.hours, "month_hours": period.month_hours,
        "remaining_hours": costs.hours_between(max(period.end, period.start), period.month_end),
        "running_runs": proj.running,
        "method": _method(period, proj),
        **{f: fig(f) for f in FIGURES},
        "projects": [{"project": n, "cost": fig("projects", n)} for n in names],
        "daily": [{"date": (t - timedelta(microseconds=1)).astimezone(ZoneInfo(rep.timezone)).date(), "end": t,
                   "spend": f.spend, "idle_cost": f.idle_cost, "gpu_hours": f.gpu_hours,
                   "cost_by_project": {n: f.projects.get(n, ZERO) for n in names}} for t, f in path],
    }
    return out


def _method(period: Period, proj: _Projection) -> dict[str, Any]:
    if proj.window is None:
        return {"basis": "actual", "text": f"{period.month} has ended: the figures are its actual ones."}
    w0, w1 = proj.window
    days = costs.hours_between(w0, w1) / 24
    rest = f"after {period.end:%Y-%m-%d %H:%M} UTC" if period.hours else "(it has not begun)"
    estimated = len(proj.days) >= MIN_RANGE_DAYS
    spread = (f"Range: p10-p90 from the variation between the window's {len(proj.days)} whole days, each carried "
              "over the rest of the month (expected ± 1.2816 σ of those scenarios)." if estimated else
              f"Range: cannot be estimated from {len(proj.days)} whole day(s) of history (at least {MIN_RANGE_DAYS} are "
              "needed); shown from no further usage (p10) to twice the expected rest of the month (p90).")
    text = (f"To date: the monthly report to now. The rest of the month {rest}: fixed costs "
            f"of the fleets held are known; usage (node-hours, GPU-hours and elastic bills per project and offer) goes on "
            f"at the rate of the last {days.normalize():f} days ({w0:%Y-%m-%d %H:%M} to {w1:%Y-%m-%d %H:%M} UTC), running "
            f"runs counted to now; owned fleets' power at the offers' nominal kW. {spread}")
    return {"basis": "run_rate", "window_start": w0, "window_end": w1, "window_days": float(round(days, 3)),
            "window_whole_days": len(proj.days), "range_estimated": estimated, "text": text}
