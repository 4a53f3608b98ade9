"""The current month's cost figures as Prometheus metrics (``trainledger exporter``).

:func:`month_metrics` assembles the metric families from the same ledger
functions as the CLI (:func:`trainledger.money.outlook.forecast.forecast`, which reads the
monthly report, :func:`trainledger.money.outlook.budgets.budget_status` and
:func:`trainledger.money.goodput.account.goodput_account`);
:class:`LedgerCollector` caches them and recomputes them at most every
``refresh_s`` seconds, whatever the scrape interval. The HTTP serving lives in
``ledger/cli/reports/exporter.py``; both use the official ``prometheus_client``.

Names follow Prometheus' conventions: prefix ``trainledger_``, base units
(GPU time in seconds), ratios 0-1, low-cardinality labels (``month``,
``scope`` = team | project, ``project``, ``currency``, ``state``, ``bound``,
``reason``, ``category``: the goodput account's categories). Money is in the
ledger's currency, named by the ``currency`` label. Every family is listed in
docs/PROMETHEUS.md, and the alerting rules in deploy/alerts/ and the Grafana
dashboard in deploy/grafana/ use them.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Callable, Iterable, Optional
from zoneinfo import ZoneInfo

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, select
from trainledger.money.account.monthly import monthly_report
from trainledger.money.goodput.waste import waste_by_reason
from trainledger.money.outlook.budgets import STATES, budget_status
from trainledger.money.outlook.forecast import DEFAULT_WINDOW_DAYS, forecast
from trainledger.money.rates.months import date_start, month_of
from trainledger.store.models import Run, RunStatus
from trainledger.store.settings import display_timezone

log = logging.getLogger(__name__)

BOUNDS = ("expected", "p10", "p90")
COST_LABELS = ["scope", "project", "month", "currency"]


def _help(key: str, tail: str) -> str:
    """A family's HELP: the figure's label and definition from the metrics layer (docs/METRICS.md), then ``tail``
    (what the series holds: to date, a forecast, its labels)."""
    from trainledger.money.metrics.registry import help_text, label

    return f"{label(key)}: {help_text(key)} {tail}"


def _f(x: Optional[Decimal]) -> float:
    return float(x) if x is not None else float("nan")


def month_metrics(session: Session, now: datetime, window_days: int = DEFAULT_WINDOW_DAYS) -> list[Metric]:
    """The current month's figures at ``now`` as metric families (see the module docstring)."""
    month = month_of(now, display_timezone(session))
    rep = monthly_report(session, month, now=now, lines=False)
    fc = forecast(session, month, now=now, window_days=window_days, report=rep)
    status = budget_status(session, month, now=now, window_days=window_days, fc=fc)
    cur = fc["currency"]
    out = _cost_families(fc, month, cur) + _budget_families(status, month, cur)
    from trainledger.money.goodput.account import goodput_account

    account = goodput_account(session, month=month, now=now)  # once: the goodput families and the waste
    out += _usage_families(session, fc, rep.summary, month, now, account)
    out += _goodput_families(account, month)
    return out


def _cost_families(fc: dict[str, Any], month: str, cur: str) -> list[Metric]:
    to_date = GaugeMetricFamily("trainledger_cost_to_date", _help("spend", "This month so far (scope team), or a "
                                "project's cost (scope project), in the currency label: fleets prorated to now, live "
                                "runs to now."), labels=COST_LABELS)
    expected = GaugeMetricFamily("trainledger_cost_forecast", "Month-end forecast of spend (team) or a project's cost "
                                 "(bound: expected, p10, p90); trainledger forecast.", labels=COST_LABELS + ["bound"])
    to_date.add_metric(["team", "", month, cur], _f(fc["spend"]["to_date"]))
    for b in BOUNDS:
        expected.add_metric(["team", "", month, cur, b], _f(fc["spend"][b]))
    for p in fc["projects"]:
        to_date.add_metric(["project", p["project"], month, cur], _f(p["cost"]["to_date"]))
        for b in BOUNDS:
            expected.add_metric(["project", p["project"], month, cur, b], _f(p["cost"][b]))
    idle = GaugeMetricFamily("trainledger_idle_cost_to_date", _help("idle_cost", "This month so far."),
                             labels=["month", "currency"])
    idle.add_metric([month, cur], _f(fc["idle_cost"]["to_date"]))
    idle_fc = GaugeMetricFamily("trainledger_idle_cost_forecast", _help("idle_cost", "Month-end forecast (bound)."),
                                labels=["month", "currency", "bound"])
    for b in BOUNDS:
        idle_fc.add_metric([month, cur, b], _f(fc["idle_cost"][b]))
    return [to_date, expected, idle, idle_fc]


def _budget_families(status: dict[str, Any], month: str, cur: str) -> list[Metric]:
    amount = GaugeMetricFamily("trainledger_budget", "The budget that applies this month (team or project).", labels=COST_LABELS)
    state = GaugeMetricFamily("trainledger_budget_state", "1 for the budget's state (ok, at_risk: the forecast is above "
                              "it, over: spent to date above it), 0 for the others.", labels=["scope", "project", "month", "state"])
    used = GaugeMetricFamily("trainledger_budget_used_ratio", "Spent to date ÷ budget.", labels=["scope", "project", "month"])
    crossing = GaugeMetricFamily("trainledger_budget_crossing_timestamp_seconds", "When the forecast crosses the "
                                 "budget (at risk) or when spend went over it (over): start of that day, Unix time.",
                                 labels=["scope", "project", "month"])
    for b in status["budgets"]:
        scope = [b["scope"], b["project"], month]
        amount.add_metric([*scope, cur], _f(b["amount"]))
        for s in STATES:
            state.add_metric([*scope, s], 1.0 if b["state"] == s else 0.0)
        used.add_metric(scope, _f(b["cost"]["to_date"] / b["amount"]))
        if b["crossed_on"] is not None:
            crossing.add_metric(scope, _day_start(b["crossed_on"], status["timezone"]))
    return [amount, state, used, crossing]


def _day_start(day: date, tz_name: str) -> float:
    return date_start(day, ZoneInfo(tz_name)).timestamp()


def _usage_families(session: Session, fc: dict[str, Any], s: dict[str, Any], month: str, now: datetime,
                    account: Any) -> list[Metric]:
    cur = fc["currency"]
    gpu = GaugeMetricFamily("trainledger_gpu_seconds_to_date", _help("gpu_hours", "This month so far, in GPU-seconds "
                            "(GPU-hours × 3600)."),
                            labels=["month"])
    gpu.add_metric([month], _f(fc["gpu_hours"]["to_date"] * 3600))
    gpu_fc = GaugeMetricFamily("trainledger_gpu_seconds_forecast", "Month-end forecast of GPU time in runs.",
                               labels=["month", "bound"])
    for b in BOUNDS:
        gpu_fc.add_metric([month, b], _f(fc["gpu_hours"][b] * 3600))
    util = GaugeMetricFamily("trainledger_time_utilization_ratio", _help("time_utilization", "This month so far."),
                             labels=["month"])
    if s.get("time_utilization") is not None:
        util.add_metric([month], _f(s["time_utilization"]))
    waste = GaugeMetricFamily("trainledger_waste_cost_to_date", _help("waste_cost", "This month so far, by reason (label "
                              "reason: each badput category, failed runs' lost work as lost_work, then idle)."),
                              labels=["month", "currency", "reason"])
    for m in account.months:
        for reason, amount in waste_by_reason(m).items():
            waste.add_metric([month, cur, reason], _f(amount))
    elapsed = GaugeMetricFamily("trainledger_month_elapsed_ratio", "Share of the month elapsed (1 once it has ended).",
                                labels=["month"])
    elapsed.add_metric([month], _f(fc["elapsed_hours"] / fc["month_hours"]))
    running = GaugeMetricFamily("trainledger_runs_running", "Runs running now.")
    running.add_metric([], session.exec(select(func.count()).select_from(Run).where(
        Run.status == RunStatus.running, Run.ended_at.is_(None), Run.started_at.is_not(None), Run.started_at <= now)).one())
    return [gpu, gpu_fc, util, waste, elapsed, running]


def _goodput_families(rep: Any, month: str) -> list[Metric]:
    """The month's goodput account (:func:`trainledger.money.goodput.account.goodput_account`, as ``trainledger
    goodput``) per category: the team's (the month's, recovery included) and each project's."""
    from trainledger.money.goodput.account import NAMED

    cur = rep.currency
    cost = GaugeMetricFamily("trainledger_goodput_cost_to_date", "The goodput account this month so far: the runs' "
                             "cost by category (productive = goodput; the others badput), team or project; "
                             "trainledger goodput.", labels=["scope", "project", "month", "category", "currency"])
    secs = GaugeMetricFamily("trainledger_goodput_node_seconds_to_date", "Node-time of the goodput account's "
                             "categories this month so far (node-seconds), team or project.",
                             labels=["scope", "project", "month", "category"])
    groups = [("team", "", {n: m.by_category[c] for c, n in NAMED}, {n: m.seconds[c] for c, n in NAMED})
              for m in rep.months]
    groups += [("project", p["project"] or "", p["cost"], p["node_seconds"]) for p in rep.projects]
    for scope, project, by_cost, by_secs in groups:
        for _, name in NAMED:
            cost.add_metric([scope, project, month, name, cur], _f(by_cost[name]))
            secs.add_metric([scope, project, month, name], _f(by_secs[name]))
    return [cost, secs]


class LedgerCollector(Collector):
    """The ledger's month metrics, recomputed at most every ``refresh_s`` seconds (a scrape in between gets
    the cached families), plus the exporter's own: when and how long the last refresh took, and errors.

    ``engine``: a read-only engine (:func:`trainledger.store.db.read_only_engine`). ``clock``: "now" for the
    figures (``trainledger.store.types.report_clock``). A refresh that fails keeps the last good figures.
    """

    def __init__(self, engine: Engine, refresh_s: float = 60.0, window_days: int = DEFAULT_WINDOW_DAYS,
                 clock: Optional[Callable[[], datetime]] = None):
        from trainledger.store.types import report_clock

        self.engine, self.refresh_s, self.window_days = engine, refresh_s, window_days
        self.clock = clock or report_clock
        self._lock = threading.Lock()
        self._cached: list[Metric] = []
        self._at = float("-inf")  # monotonic time of the last refresh attempt
        self._last_ok: Optional[float] = None  # Unix time of the last good refresh
        self._took = 0.0
        self._errors = 0
        self.refreshes = 0

    def refresh(self) -> None:
        t0 = time.perf_counter()
        try:
            with Session(self.engine) as s:
                try:
                    self._cached = month_metrics(s, self.clock(), self.window_days)
                finally:
                    s.rollback()  # never writes
            self._last_ok = time.time()
            self.refreshes += 1
        except Exception:
            self._errors += 1
            log.exception("trainledger exporter: refreshing the figures failed; serving the last good ones")
        self._took = time.perf_counter() - t0

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            if time.monotonic() - self._at >= self.refresh_s:
                self._at = time.monotonic()
                self.refresh()
            families = list(self._cached)
        yield from families
        yield from self._own_families()

    def _own_families(self) -> Iterable[Metric]:
        last = GaugeMetricFamily("trainledger_exporter_refresh_timestamp_seconds", "When the figures were last computed.")
        if self._last_ok is not None:
            last.add_metric([], self._last_ok)
        took = GaugeMetricFamily("trainledger_exporter_refresh_duration_seconds", "How long the last refresh took.")
        took.add_metric([], self._took)
        errors = CounterMetricFamily("trainledger_exporter_refresh_errors", "Refreshes that failed.")
        errors.add_metric([], self._errors)
        yield from (last, took, errors)
