"""Cached reads for the pages: the ledger functions the CLI calls, behind :func:`cached` (st.cache_data keyed by the page's clock).

Every reader takes the ledger URL as its first argument, so the cache is keyed
by the ledger and the arguments; entries live :data:`TTL` seconds. Writes go
through :func:`write_session` and clear the cache.

"Now" is :func:`now`: ``$TRAINLEDGER_NOW`` (the reports' clock, as the CLI's
``--now``), else the current time to the last whole :data:`TTL` seconds, read
once per page run (:func:`start_run`): a month that has not ended at that
instant is reported to date, as ``trainledger report monthly`` does. Every
reader is :func:`cached`, keyed by that instant too, so all the figures a page
run shows, cached or not, are at one clock and the same figure reads the same
cents everywhere (a fleet's idle cost to date grows by the second).

Readers of money take the presentation currency the sidebar's selector chose
(``currency``, as the CLI's ``--currency``; None: the Settings currency once
set, else the offers' own).

Project scope (docs/SCOPES.md): every reader of runs or project figures takes ``scope``, the signed-in user's
projects (``trainledger.app.views.access.scope_of``: a sorted tuple; None: team scope, every project). The scope
is applied here, where the rows are read, and is part of the cache key, so a cached frame read for one scope
never serves another. A run outside the scope is an unknown run: the same one-line error, word for word.
"""

from __future__ import annotations

import functools
import inspect
import os
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Callable, Iterator, Optional

import streamlit as st
from sqlmodel import Session, select
from trainledger.demo import is_demo
from trainledger.errors import LedgerInputError
from trainledger.money.account.compare import compare_node_type
from trainledger.money.account.ended import month_report
from trainledger.money.account.monthly import MonthlyReport
from trainledger.money.outlook.budgets import budget_status as ledger_budget_status
from trainledger.money.outlook.forecast import forecast as ledger_forecast
from trainledger.money.rates.fx import at_list_prices
from trainledger.money.rates.months import month_of, months_between, parse_month
from trainledger.money.rates.pricing import list_pricing, offers_with_node_types
from trainledger.money.rates.pricing import node_types as pricing_node_types
from trainledger.reports import weekly as ledger_strategies
from trainledger.reports.export import RUN_COLUMNS, presented_report
from trainledger.reports.present import jsonable
from trainledger.runs import registry
from trainledger.runs import sweep as ledger_sweep
from trainledger.store import audit
from trainledger.store.catalog import prices
from trainledger.store.catalog.carbon import list_intensities
from trainledger.store.catalog.fleets import list_fleets
from trainledger.store.catalog.fx import list_rates
from trainledger.store.db import get_engine, resolve_url, session_scope
from trainledger.store.models import Offer
from trainledger.store.settings import DEFAULTS, display_timezone, get_setting, presentation_currency
from trainledger.store.types import CLOCK_ENV, report_clock

TTL = 30  # seconds
Scope = Optional[tuple[str, ...]]  # the projects a user may see; None: every project (team scope)


def in_scope(project: Optional[str], scope: Scope) -> bool:
    """Whether a row of ``project`` may be read for ``scope`` (a run without a project: team scope only)."""
    return scope is None or (project is not None and project in scope)


def check_run(s: Session, run_id: str, scope: Scope) -> None:
    """For a scoped reader: the run ``run_id`` exactly (no id prefixes) and in the scope, else the error an unknown
    run id gets (``trainledger.store.lookup.unknown_run``), so a run of another project reads as no run at all."""
    if scope is None:
        return
    from trainledger.store.lookup import unknown_run
    from trainledger.store.models import Project, Run

    run = s.get(Run, run_id)
    project = s.get(Project, run.project_id) if run is not None and run.project_id is not None else None
    if project is None or project.name not in scope:
        raise unknown_run(run_id)


_RUN_CLOCK: ContextVar[Optional[datetime]] = ContextVar("trainledger_run_clock", default=None)


def now() -> datetime:
    """The reports' clock of this page run (:func:`start_run`), or of the cached read being computed (:func:`cached`);
    outside both, :func:`clock`."""
    at = _RUN_CLOCK.get()
    return at if at is not None else clock()


def clock() -> datetime:
    """``$TRAINLEDGER_NOW`` when set, else the current time (UTC) to the last whole :data:`TTL` seconds: one instant
    for every read within a cache period, the key under which they are cached."""
    at = report_clock()
    if os.environ.get(CLOCK_ENV):
        return at
    return at.replace(microsecond=0) - timedelta(seconds=int(at.timestamp()) % TTL)


def start_run() -> None:
    """Read the clock once for this page run (app/main.py, first): every figure of the run is at that instant, even
    when the run takes longer than the clock's tick."""
    _RUN_CLOCK.set(clock())


def cached(*, ttl: int = TTL, show_spinner: bool | str = False, shared: bool = False) -> Callable:
    """``st.cache_data`` (``shared``: ``st.cache_resource``, the object itself, never changed by a reader) keyed by
    the arguments and by :func:`now`: a read computed at one instant never serves a page run at another, and the
    reads it makes (other cached readers, :func:`now`) are at that same instant."""

    def wrap(fn: Callable) -> Callable:
        def at(instant: datetime, *args: Any, **kwargs: Any) -> Any:
            token = _RUN_CLOCK.set(instant)
            try:
                return fn(*args, **kwargs)
            finally:
                _RUN_CLOCK.reset(token)

        # Streamlit keys a cache by the function's module and qualified name, and each argument by its name in the
        # signature: the reader's own, so each reader has its own cache and an argument given by name or by place
        # is one key
        at.__module__, at.__name__, at.__qualname__ = fn.__module__, fn.__name__, fn.__qualname__
        sig = inspect.signature(fn)
        at.__signature__ = sig.replace(parameters=[inspect.Parameter("instant", inspect.Parameter.POSITIONAL_ONLY),
                                                   *sig.parameters.values()])
        store = (st.cache_resource if shared else st.cache_data)(ttl=ttl, show_spinner=show_spinner)(at)

        @functools.wraps(fn)
        def read(*args: Any, **kwargs: Any) -> Any:
            return store(now(), *args, **kwargs)

        read.clear, read.cache = store.clear, store  # cache: Streamlit's cached function underneath
        return read

    return wrap


def ledger_url() -> str:
    """``$TRAINLEDGER_DB_URL`` (set by ``trainledger dashboard --db``), else the embedded ledger."""
    return resolve_url(None)


@contextmanager
def read_session(url: str) -> Iterator[Session]:
    # session_scope, not a bare Session: list_runs/show_run reap stale runs (a write), as in the CLI
    with session_scope(get_engine(url)) as s:
        yield s


@contextmanager
def write_session(url: str, actor: audit.Actor) -> Iterator[Session]:
    """A transaction for a form's write, recorded in the audit log as ``actor``'s (the signed-in user's:
    ``trainledger.app.views.access.require_lead`` returns it); caches are cleared after it commits."""
    if not isinstance(actor, audit.Actor) or actor.origin != "dashboard":
        raise TypeError("write_session: a dashboard write needs the writer (access.require_lead's answer)")
    with session_scope(get_engine(url)) as s:
        yield audit.bind(s, actor)
    clear_caches()


def clear_caches() -> None:
    """Forget every cached read (after a write): st.cache_data's and the shared reports and accounts."""
    st.cache_data.clear()
    report.clear()
    charges.clear()
    month_goodput.clear()
    month_lines.clear()


def audit_log(url: str, limit: int = 200) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of the audit log (not cached: it is read where it is shown, by admins)."""
    with read_session(url) as s:
        return audit.entries(s, limit=limit)


# --- months ---------------------------------------------------------------------

@cached()
def month_options(url: str) -> list[str]:
    """Months from the first run's to this month (or the last run's, if later), newest first."""
    with read_session(url) as s:
        span = registry.run_month_span(s)
        this = month_of(now(), display_timezone(s))
    if span is None:
        return [this]
    return list(reversed(months_between(span[0], max(span[1], this))))


@cached()
def current_month(url: str) -> str:
    with read_session(url) as s:
        return month_of(now(), display_timezone(s))


@cached()
def today(url: str):
    """Today's date in the display time zone (at :func:`now`)."""
    with read_session(url) as s:
        return now().astimezone(display_timezone(s)).date()


@cached()
def period_report(url: str, period: Any, currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger report period --from F --to T [--currency C] --json``: the period's totals (presented, as the
    CLI prints them), the period before and each headline figure's change in percent (``change``: ``KEY_pct``)."""
    from trainledger.money.rates.periods import pieces, previous
    from trainledger.reports.periods import period_report as report_of
    from trainledger.reports.periods import presented_period

    day = today(url)  # each whole month's goodput account, cached (one per page and refresh), read before the
    accounts = {}  # period's session (a session inside another waits on the first's lock)
    for m in dict.fromkeys(pieces(period, day).months + pieces(previous(period, day), day).months):
        try:
            accounts[m] = month_totals(url, m, currency).account
        except LedgerInputError:  # no exchange rate for it: the period report says so for its month
            continue
    with read_session(url) as s:
        rep = report_of(s, period, now=now(), currency=currency, month_goodput=accounts.__getitem__)
    return presented_period(rep)


def add_months(month: str, delta: int) -> str:
    y, m = parse_month(month)
    idx = y * 12 + m - 1 + delta
    return f"{idx // 12:04d}-{idx % 12 + 1:02d}"


def trend_months(url: str, month: str, n: int = 12) -> list[str]:
    """Up to ``n`` months ending with ``month``, none before the ledger's first month."""
    first = month_options(url)[-1]
    kept = [m for m in months_between(add_months(month, -(n - 1)), month) if m >= first]
    return kept or [month]


# --- monthly figures (monthly_report is the single source) -------------------------

# The two largest objects a page reads, a month's report with its run lines and its goodput account (thousands of
# lines on a busy ledger), are kept as they are (st.cache_resource), not pickled on every store and read as
# st.cache_data does (1.9 s of the Overview's 5 s at 100,000 runs): they are shared by every session, so nothing
# may change them (tests/app/test_dashboard_cache.py checks that no page does). clear_caches() empties them (and
# :func:`charges`, the costing the report with lines comes from).
@cached(shared=True)
def report(url: str, month: str, lines: bool = False, currency: Optional[str] = None) -> MonthlyReport:
    """The month's report (to date while it runs); per-run lines only when asked for (the totals come from the rollup;
    with lines, the report of :func:`charges`: the chargeback reads the same costing; without, a month that has ended
    is remembered while the ledger is unchanged: ``trainledger.money.account.ended``). Shared, read-only."""
    if lines:
        return charges(url, month, currency).report
    with read_session(url) as s:  # a month that has ended: remembered while the ledger is unchanged
        return month_report(s, month, now=now(), currency=currency, projects=True)


@cached(shared=True)
def charges(url: str, month: str, currency: Optional[str] = None) -> Any:
    """``trainledger.money.account.monthly.month_charges``: the month's report with its run lines (:func:`report`'s)
    and its lines per charge period, costed once for the pages that show run lines and the chargeback (its
    statements: ``chargeback_view.statements``). Shared, read-only."""
    from trainledger.money.account.monthly import month_charges

    with read_session(url) as s:
        return month_charges(s, month, currency=currency, now=now())


@cached()
def presented(url: str, month: str, lines: bool = False, currency: Optional[str] = None) -> dict[str, Any]:
    """``presented_report(monthly_report(...), its goodput account)``: the rounding the CLI table and the export use
    (with the month's waste = badput + idle and each run line's goodput and badput, as ``report monthly`` writes
    them; the account is :func:`month_goodput`, computed once per month and refresh; without lines, the month's
    totals: :func:`month_totals`, stored per ledger state once the month is over)."""
    if not lines:  # report's arguments as the pages pass them: one cache entry
        return presented_report(report(url, month, currency=currency), month_totals(url, month, currency))
    return month_lines(url, month, currency).presented


@cached(shared=True)
def month_lines(url: str, month: str, currency: Optional[str] = None) -> Any:
    """The month's presented lines (``trainledger.reports.month_lines_store.PresentedLines``): :func:`presented`
    with its lines, the chargeback's presented statements and each run line's cost per 1M tokens and badput reason.
    A month that is over, touched by no live run, is read from ``month_lines`` while the ledger is as it was computed
    (``month_lines_store.month_lines``, computed and stored otherwise); a month to date from the pages' shared
    costing (:func:`charges`) and account (:func:`month_goodput`). Shared, read-only."""
    from trainledger.money.goodput.month_store import is_storable
    from trainledger.reports import month_lines_store

    with read_session(url) as s:
        if is_storable(s, month, now()):
            return month_lines_store.month_lines(s, month, currency=currency, now=now())
    ch, acct = charges(url, month, currency), month_goodput(url, month, currency)  # outside the session above
    with read_session(url) as s:
        return month_lines_store.presented_lines(s, ch, acct)


@cached()
def month_totals(url: str, month: str, currency: Optional[str] = None) -> Any:
    """The month's goodput totals (``MonthTotals``: its ``MonthAccount`` and each project's waste) where only totals
    are shown: a month that is over, touched by no live run, is read from ``goodput_month`` while the ledger is as it
    was computed (``trainledger.money.goodput.month_store``, computed and stored otherwise); a month to date from
    :func:`month_goodput` (the page's whole account of it, shared)."""
    from trainledger.money.goodput.month_store import MonthTotals, is_storable, month_summary
    from trainledger.money.goodput.waste import project_waste

    with read_session(url) as s:
        if is_storable(s, month, now()):
            return month_summary(s, month, currency=currency, now=now())
    acct = month_goodput(url, month, currency)  # outside the session above: a session inside another waits on it
    return MonthTotals(acct.months[0], project_waste(acct.runs))


@cached(shared=True)
def month_goodput(url: str, month: str, currency: Optional[str] = None) -> Any:
    """The month's goodput account (``GoodputReport``, ``trainledger goodput --month M``) from the cached report with
    its lines (:func:`report`, the export's): every page reads a month's account, and its waste, from here.
    Shared, read-only."""
    from trainledger.money.goodput.goodput_ledger import report_account

    rep = report(url, month, True, currency)
    with read_session(url) as s:
        return report_account(s, rep, now())


@cached()
def trend(url: str, months: tuple[str, ...], currency: Optional[str] = None, own: Optional[str] = None) -> list[dict[str, Any]]:
    """For trend charts, per month: the presented summary, and the report without its run lines
    (a month the currency cannot be shown in for want of a rate is left out: ``missing`` says which);
    ``own``: the own offer its "if owned" figures are costed with (``report monthly --own``). The months' reports
    read the configuration and their rollup facts once for all of them (``month_load.Months``): the same reports;
    a month that has ended is remembered while the ledger is unchanged (``trainledger.money.account.ended``) and
    read nothing."""
    from trainledger.money.account.month_load import Months

    out = []
    at = now()
    with read_session(url) as s:
        read = Months(s, months, now=at, currency=currency)
        for m in months:
            try:
                rep = month_report(s, m, now=at, currency=currency, own=own, months=read)
            except LedgerInputError as exc:
                out.append({"month": m, "summary": None, "report": None, "missing": str(exc).splitlines()[0]})
                continue
            out.append({"month": m, "summary": presented_report(rep)["summary"], "report": rep, "missing": None})
    return out


@cached()
def export_bytes(url: str, month: str, fmt: str, currency: Optional[str] = None, scope: Scope = None) -> bytes:
    """The monthly export, byte for byte what ``trainledger report monthly --format FMT [--currency C]`` writes
    (with its data-quality warnings, when there are any). ``scope``: :func:`scoped_presented` (the scope's project
    and run lines, no team totals) in the same format."""
    from trainledger.reports.quality import render_report, with_warnings

    if scope is not None:
        return render_report(scoped_presented(url, month, scope, currency), fmt)
    return render_report(with_warnings(presented(url, month, lines=True, currency=currency),
                                       capacity_warnings(url, month)), fmt)


#: the summary keys a project-scoped export keeps: which month, in what currency and time zone, to when (no totals)
SCOPED_SUMMARY = ("month", "timezone", "currency", "period", "period_start", "period_end", "is_partial")


@cached()
def scoped_presented(url: str, month: str, scope: tuple[str, ...], currency: Optional[str] = None) -> dict[str, Any]:
    """The monthly report (:func:`presented` with its lines) for a project-scoped user: the lines of the scope's
    projects and runs exactly as ``trainledger report monthly`` writes them, a summary without the team's totals
    (``projects``: the scope), and no node types, rounding lines or runs not costed (team figures)."""
    p = presented(url, month, lines=True, currency=currency)
    summary = {k: v for k, v in p["summary"].items() if k in SCOPED_SUMMARY}
    return {"summary": {**summary, "projects": ", ".join(scope)}, "node_types": [],
            "projects": [r for r in p["projects"] if in_scope(r["project"], scope)],
            "runs": [r for r in p["runs"] if in_scope(r["project"], scope)]}


@cached()
def forecast(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.money.outlook.forecast.forecast``: what ``trainledger forecast --month M [--currency C]`` prints.
    A month that has ended is its actual figures: the month's report the pages read (:func:`report`) is its to date."""
    rep = report(url, month, currency=currency)  # outside the session below: a session inside another waits on it
    fps = None if rep.is_partial else known_fingerprints(url, (month,), currency)
    with read_session(url) as s:
        return ledger_forecast(s, month, now=now(), currency=currency, report=None if rep.is_partial else rep,
                               fingerprints=fps)


def known_fingerprints(url: str, months: tuple[str, ...], currency: Optional[str] = None) -> dict[str, str]:
    """The ledger-state fingerprints of ``months``' stored goodput totals (:func:`month_totals`, cached: the Overview
    reads them before its forecast and anomalies), for what else is stored per ledger state of those months
    (``trainledger.money.outlook.outlook_store``) to be read without hashing them again; none unless every one of
    ``months`` is over and touched by no live run (nothing is stored then: no month's totals are computed for it)."""
    from trainledger.money.goodput.month_store import is_storable

    with read_session(url) as s:
        if not all(is_storable(s, m, now()) for m in months):
            return {}
    out = {}
    for m in months:
        try:
            fp = month_totals(url, m, currency).fingerprint
        except LedgerInputError:
            continue
        if fp:
            out[m] = fp
    return out


@cached()
def budget_status(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.money.outlook.budgets.budget_status``: what ``trainledger budget check --month M [--currency C]`` prints."""
    with read_session(url) as s:
        return ledger_budget_status(s, month, now=now(), fc=forecast(url, month, currency), currency=currency)


def last_full_month(url: str, month: str) -> Optional[str]:
    """``month`` if it has ended, else the month before it (none before the ledger's first month)."""
    if not report(url, month).is_partial:
        return month
    before = add_months(month, -1)
    return before if before >= month_options(url)[-1] else None


# --- runs ------------------------------------------------------------------------

@cached()
def runs(url: str, *, month: Optional[str], project: Optional[str], user: Optional[str], status: Optional[str],
         strategy: Optional[str], limit: int, offset: int, scope: Scope = None) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return registry.list_runs(s, month=month, project=project, user=user, status=status, strategy=strategy,
                                  limit=limit, offset=offset, projects=scope)


@cached()
def run_detail(url: str, run_id: str, currency: Optional[str] = None, scope: Scope = None) -> dict[str, Any]:
    with read_session(url) as s:
        check_run(s, run_id, scope)
        d = registry.show_run(s, run_id, currency, now=now())
        if scope is not None and d.get("resume_chain"):
            d["resume_chain"] = scoped_chain(s, d["resume_chain"], scope)
        return d


def scoped_chain(s: Session, chain: dict[str, Any], scope: tuple[str, ...]) -> Optional[dict[str, Any]]:
    """A run's resume chain for a scoped reader: only its runs of the scope (a chain that crossed projects keeps
    no trace of the others: their ids blanked where a kept run resumed one), totals summed again; None: one run."""
    from trainledger.store.models import Project, Run

    ids = [r["id"] for r in chain["runs"]]
    names = dict(s.exec(select(Run.id, Project.name).join(Project, Project.id == Run.project_id)
                        .where(Run.id.in_(ids))).all())
    kept = [r for r in chain["runs"] if in_scope(names.get(r["id"]), scope)]
    if len(kept) == len(ids):
        return chain
    if len(kept) < 2:
        return None
    mine = {r["id"] for r in kept}
    kept = [{**r, "resume_of": r["resume_of"] if r["resume_of"] in mine else None} for r in kept]
    return {"runs": kept, **{k: sum((r[k] for r in kept), Decimal(0)) for k in ("node_hours", "cost", "lost_work_cost")}}


@cached()
def compare_runs(url: str, run_ids: tuple[str, ...], currency: Optional[str] = None, scope: Scope = None) -> dict[str, Any]:
    """``trainledger.runs.compare.compare_runs``, presented (money in cents, as ``runs compare --json``)."""
    from trainledger.runs.compare import compare_runs as compare

    with read_session(url) as s:
        for rid in run_ids:
            check_run(s, rid, scope)
        return jsonable(compare(s, list(run_ids), currency=currency, now=now()))


@cached()
def run_utilization(url: str, run_id: str, scope: Scope = None) -> dict[str, Any]:
    """``trainledger.runs.utilization.run_utilization``: the run's nodes hour by hour."""
    from trainledger.runs.utilization import run_utilization as hourly

    with read_session(url) as s:
        check_run(s, run_id, scope)
        return hourly(s, run_id)


@cached()
def fleet_node_types(url: str, month: str) -> list[str]:
    from trainledger.runs.utilization import fleet_node_types as types

    with read_session(url) as s:
        return types(s, month)


@cached()
def fleet_utilization(url: str, node_type: str, month: str) -> dict[str, Any]:
    """``trainledger.runs.utilization.fleet_utilization``: a node type's nodes in the month, hour by hour."""
    from trainledger.runs.utilization import fleet_utilization as hourly

    with read_session(url) as s:
        return hourly(s, node_type, month, now())


@cached()
def loss_curve(url: str, run_id: str, scope: Scope = None) -> list[dict[str, Any]]:
    with read_session(url) as s:
        check_run(s, run_id, scope)
        return registry.loss_curve(s, run_id)


@cached()
def filter_values(url: str, scope: Scope = None) -> dict[str, list[str]]:
    with read_session(url) as s:
        return registry.filter_values(s, projects=scope)


@cached(ttl=5)  # short: a running sweep adds runs
def sweeps(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return ledger_sweep.list_sweeps(s)


@cached()
def strategy_comparison(url: str, sweep_id: str, version: str = "", currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.reports.weekly.strategy_comparison``: what ``trainledger report weekly --sweep ID`` prints.

    ``version`` (``sweep_progress``'s run:status list) is part of the cache key, so a live
    sweep's table is read again as soon as one of its runs changes status.
    """
    with read_session(url) as s:
        return ledger_strategies.strategy_comparison(s, sweep_id=sweep_id, currency=currency)


# --- live (not cached: read on every refresh of a progress fragment) -----------------

def sweep_progress(url: str, sweep_id: str) -> dict[str, Any]:
    """``trainledger.runs.sweep.sweep_progress``: strategies measured / running / waiting, and the sweep's state."""
    with read_session(url) as s:
        return ledger_sweep.sweep_progress(s, sweep_id)


def run_progress(url: str, run_id: str) -> dict[str, Any]:
    """``registry.run_progress`` with the run's log tail (``trainledger.app.queries.launch.with_log``): status, step, heartbeat, loss."""
    from trainledger.app.queries.launch import with_log

    with read_session(url) as s:
        return with_log(registry.run_progress(s, run_id))


def active_runs(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return registry.active_runs(s)


# --- catalog and settings ----------------------------------------------------------

@cached()
def pricing(url: str) -> dict[str, Any]:
    with read_session(url) as s:
        return list_pricing(s)


@cached()
def offers(url: str, currency: Optional[str] = None) -> list[tuple[Any, str]]:
    """(Offer, node type name) pairs, detached; with ``currency``, at their list prices converted at today's rate."""
    with read_session(url) as s:
        pairs = offers_with_node_types(s)
        if currency is None:
            return pairs
        return list(zip(at_list_prices(s, [o for o, _ in pairs], currency), [n for _, n in pairs]))


@cached()
def node_types(url: str) -> list[Any]:
    with read_session(url) as s:
        return pricing_node_types(s)


@cached()
def fleets(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_fleets(s)


@cached()
def settings(url: str) -> dict[str, str]:
    with read_session(url) as s:
        return {k: get_setting(s, k) for k in DEFAULTS}


@cached()
def display_timezone_name(url: str) -> str:
    """The display time zone's name (Settings → time zone): tables show times in it."""
    with read_session(url) as s:
        return str(display_timezone(s))


@cached()
def demo_ledger(url: str) -> bool:
    with read_session(url) as s:
        return is_demo(s)


@cached()
def compare(url: str, node_type: str, utilization: Decimal, own: Optional[str], rent: Optional[str],
            currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.money.account.compare.compare_node_type``: what ``trainledger cost compare --node-type`` prints."""
    with read_session(url) as s:
        return compare_node_type(s, node_type, utilization, own=own, rent=rent, currency=currency)


# --- currencies, price history, rates, carbon ---------------------------------------------

@cached()
def currencies(url: str) -> dict[str, Any]:
    """The sidebar's currency choices: the default (the Settings currency once set, else the offers'),
    the offers' currencies and every currency an exchange rate converts to or from."""
    with read_session(url) as s:
        offered = sorted(set(s.exec(select(Offer.currency)).all()))
        rated = {c for r in list_rates(s) for c in (r["base"], r["quote"])}
        default = presentation_currency(s) or (offered[0] if offered else get_setting(s, "currency"))
    return {"default": default, "options": sorted(set(offered) | rated | {default})}


@cached()
def price_history(url: str, offer: str) -> dict[str, Any]:
    with read_session(url) as s:
        return prices.history(s, offer)


@cached()
def rates(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_rates(s)


@cached()
def intensities(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_intensities(s)



# --- waste (badput + idle), spend by project, capacity (issues #18, #36) -------------------------------------

@cached()
def month_run_lines(url: str, month: str, currency: Optional[str] = None, scope: Scope = None) -> list[dict[str, Any]]:
    """The month's run lines (``trainledger report monthly``'s per-run rows) with each line's waste: ``waste_cost``,
    its badput in the month's goodput account (``trainledger.money.goodput.waste.run_waste``, the export's
    ``badput_cost``) and ``waste_reason``, its largest badput category (None when it has none), and its cost per 1M
    tokens: :func:`month_lines`. Money outside an export is each figure half-up to the cent on its own (docs/MONEY.md,
    "Rounding"): two runs of the same cost read the same."""
    ml = month_lines(url, month, currency)
    out = []
    for r in ml.presented["runs"]:
        if not in_scope(r["project"], scope):
            continue
        per_1m, reason = ml.runs[r["run_id"]]
        out.append({**r, "cost_per_1m_tokens": per_1m, "waste_cost": r["badput_cost"], "waste_reason": reason})
    return out


@cached()
def all_months_accounts(url: str, currency: Optional[str] = None, scope: Scope = None) -> dict[str, Any]:
    """Run id → its goodput account over all months (``trainledger.money.goodput.waste.over_months`` of every
    month's cached :func:`month_goodput`); ``scope``: the runs of its projects."""
    from trainledger.money.goodput.waste import over_months

    return over_months(a for m in reversed(month_options(url)) for a in month_goodput(url, m, currency).runs
                       if in_scope(a.project, scope))


@cached()
def all_months_run_lines(url: str, currency: Optional[str] = None, scope: Scope = None) -> list[dict[str, Any]]:
    """Every run's line over all months, in :func:`month_run_lines`' shape: its monthly report lines summed
    (``trainledger.money.account.month_lines.over_months``) and its waste and reason over its monthly goodput
    accounts (``trainledger.money.goodput.waste.over_months``), each half-up to the cent once, from the exact sums.
    The Runs page's "All months" ranks by these; each month is the cached :func:`report` and :func:`month_goodput`."""
    from trainledger.money.account.month_lines import over_months as lines_over_months
    from trainledger.money.goodput.waste import run_reason, run_waste
    from trainledger.money.rates.costs import cents
    from trainledger.reports.month_lines_store import per_1m

    months = month_options(url)
    lines = lines_over_months(r for m in reversed(months) for r in report(url, m, True, currency).runs
                              if in_scope(r.project, scope))
    accounts = all_months_accounts(url, currency, scope)
    out = []
    for run_id, r in lines.items():
        a = accounts.get(run_id)
        row = jsonable(r)
        out.append({**{k: row.get(k) for k in RUN_COLUMNS}, "cost": str(cents(r.cost)),
                    "lost_work_cost": str(cents(r.lost_work_cost)), "cost_per_1m_tokens": per_1m(r),
                    "waste_cost": str(cents(run_waste(a))) if a else None, "waste_reason": run_reason(a) if a else None})
    return out


@cached()
def spend_by_project(url: str, month: str, currency: Optional[str] = None, scope: Scope = None) -> list[dict[str, Any]]:
    """``trainledger.money.account.spend.spend_by_project``: each project, "(no project)", idle; Σ = the month's spend.
    ``scope``: only the lines of its projects (no idle, no rounding: they are the team's)."""
    from trainledger.money.account.spend import spend_by_project as lines

    out = lines(report(url, month, currency=currency))
    return out if scope is None else [x for x in out if x["line"] in scope]


@cached()
def spend_by_project_months(url: str, months: tuple[str, ...], currency: Optional[str] = None) -> list[dict[str, Any]]:
    """``trainledger.money.account.spend.spend_by_project_months`` over ``months`` (a period's whole months): Σ = their spend."""
    from trainledger.money.account.spend import spend_by_project_months as lines

    return lines([report(url, m, currency=currency) for m in months])


@cached()
def capacity_warnings(url: str, month: str) -> list[dict[str, Any]]:
    """``trainledger.money.allocation.capacity.capacity_warnings``: node types whose runs used more nodes at once than the fleet."""
    from trainledger.money.allocation.capacity import capacity_warnings as warnings

    with read_session(url) as s:
        return warnings(s, month, now=now())
