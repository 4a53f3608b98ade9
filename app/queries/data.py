"""Cached reads for the pages: the ledger functions the CLI calls, behind st.cache_data.

Every reader takes the ledger URL as its first argument, so the cache is keyed
by the ledger and the arguments; entries live :data:`TTL` seconds. Writes go
through :func:`write_session` and clear the cache.

"Now" is :func:`now`: the current time, or ``$TRAINLEDGER_NOW`` (the reports'
clock, as the CLI's ``--now``): a month that has not ended at that instant is
reported to date, as ``trainledger report monthly`` does.
through :func:`write_session` and clear the cache. Readers of money take the
presentation currency the sidebar's selector chose (``currency``, as the CLI's
``--currency``; None: the Settings currency once set, else the offers' own).
"""

from __future__ import annotations

from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Iterator, Optional

import streamlit as st
from sqlmodel import Session, select
from trainledger.demo import is_demo
from trainledger.errors import LedgerInputError
from trainledger.money.account.compare import compare_node_type
from trainledger.money.account.monthly import MonthlyReport, monthly_report
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
from trainledger.store import prices
from trainledger.store.carbon import list_intensities
from trainledger.store.db import get_engine, resolve_url, session_scope
from trainledger.store.fleets import list_fleets
from trainledger.store.fx import list_rates
from trainledger.store.models import Offer
from trainledger.store.settings import DEFAULTS, display_timezone, get_setting, presentation_currency
from trainledger.store.types import report_clock

TTL = 30  # seconds


def now():
    """The reports' clock: ``$TRAINLEDGER_NOW`` when set, else the current time (UTC)."""
    return report_clock()


def ledger_url() -> str:
    """``$TRAINLEDGER_DB_URL`` (set by ``trainledger dashboard --db``), else the embedded ledger."""
    return resolve_url(None)


@contextmanager
def read_session(url: str) -> Iterator[Session]:
    # session_scope, not a bare Session: list_runs/show_run reap stale runs (a write), as in the CLI
    with session_scope(get_engine(url)) as s:
        yield s


@contextmanager
def write_session(url: str) -> Iterator[Session]:
    """A transaction for a form's write; caches are cleared after it commits."""
    with session_scope(get_engine(url)) as s:
        yield s
    st.cache_data.clear()


# --- months ---------------------------------------------------------------------

@st.cache_data(ttl=TTL, show_spinner=False)
def month_options(url: str) -> list[str]:
    """Months from the first run's to this month (or the last run's, if later), newest first."""
    with read_session(url) as s:
        span = registry.run_month_span(s)
        this = month_of(now(), display_timezone(s))
    if span is None:
        return [this]
    return list(reversed(months_between(span[0], max(span[1], this))))


@st.cache_data(ttl=TTL, show_spinner=False)
def current_month(url: str) -> str:
    with read_session(url) as s:
        return month_of(now(), display_timezone(s))


@st.cache_data(ttl=TTL, show_spinner=False)
def today(url: str):
    """Today's date in the display time zone (at :func:`now`)."""
    with read_session(url) as s:
        return now().astimezone(display_timezone(s)).date()


@st.cache_data(ttl=TTL, show_spinner=False)
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
            accounts[m] = month_goodput(url, m, currency).months[0]
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

@st.cache_data(ttl=TTL, show_spinner=False)
def report(url: str, month: str, lines: bool = False, currency: Optional[str] = None) -> MonthlyReport:
    """The month's report (to date while it runs); per-run lines only when asked for (the totals come from the rollup)."""
    with read_session(url) as s:
        return monthly_report(s, month, lines=lines, now=now(), currency=currency)


@st.cache_data(ttl=TTL, show_spinner=False)
def presented(url: str, month: str, lines: bool = False, currency: Optional[str] = None) -> dict[str, Any]:
    """``presented_report(monthly_report(...), its goodput account)``: the rounding the CLI table and the export use
    (with the month's waste = badput + idle and each run line's goodput and badput, as ``report monthly`` writes
    them; the account is :func:`month_goodput`, computed once per month and refresh)."""
    return presented_report(report(url, month, lines, currency), month_goodput(url, month, currency))


@st.cache_data(ttl=TTL, show_spinner=False)
def month_goodput(url: str, month: str, currency: Optional[str] = None) -> Any:
    """The month's goodput account (``GoodputReport``, ``trainledger goodput --month M``) from the cached report with
    its lines (:func:`report`, the export's): every page reads a month's account, and its waste, from here."""
    from trainledger.money.goodput.goodput_ledger import report_account

    rep = report(url, month, True, currency)
    with read_session(url) as s:
        return report_account(s, rep, now())


@st.cache_data(ttl=TTL, show_spinner=False)
def trend(url: str, months: tuple[str, ...], currency: Optional[str] = None, own: Optional[str] = None) -> list[dict[str, Any]]:
    """For trend charts, per month: the presented summary, and the report without its run lines
    (a month the currency cannot be shown in for want of a rate is left out: ``missing`` says which);
    ``own``: the own offer its "if owned" figures are costed with (``report monthly --own``)."""
    out = []
    with read_session(url) as s:
        for m in months:
            try:
                rep = monthly_report(s, m, lines=False, projects=False, now=now(), currency=currency, own=own)
            except LedgerInputError as exc:
                out.append({"month": m, "summary": None, "report": None, "missing": str(exc).splitlines()[0]})
                continue
            out.append({"month": m, "summary": presented_report(rep)["summary"], "report": rep, "missing": None})
    return out


@st.cache_data(ttl=TTL, show_spinner=False)
def export_bytes(url: str, month: str, fmt: str, currency: Optional[str] = None) -> bytes:
    """The monthly export, byte for byte what ``trainledger report monthly --format FMT [--currency C]`` writes
    (with its data-quality warnings, when there are any)."""
    from trainledger.reports.quality import render_report, with_warnings

    return render_report(with_warnings(presented(url, month, lines=True, currency=currency),
                                       capacity_warnings(url, month)), fmt)


@st.cache_data(ttl=TTL, show_spinner=False)
def forecast(url: str, month: str, currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.money.outlook.forecast.forecast``: what ``trainledger forecast --month M [--currency C]`` prints."""
    with read_session(url) as s:
        return ledger_forecast(s, month, now=now(), currency=currency)


@st.cache_data(ttl=TTL, show_spinner=False)
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

@st.cache_data(ttl=TTL, show_spinner=False)
def runs(url: str, *, month: Optional[str], project: Optional[str], user: Optional[str], status: Optional[str],
         strategy: Optional[str], limit: int, offset: int) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return registry.list_runs(s, month=month, project=project, user=user, status=status, strategy=strategy,
                         limit=limit, offset=offset)


@st.cache_data(ttl=TTL, show_spinner=False)
def run_detail(url: str, run_id: str, currency: Optional[str] = None) -> dict[str, Any]:
    with read_session(url) as s:
        return registry.show_run(s, run_id, currency, now=now())


@st.cache_data(ttl=TTL, show_spinner=False)
def compare_runs(url: str, run_ids: tuple[str, ...], currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.runs.compare.compare_runs``, presented (money in cents, as ``runs compare --json``)."""
    from trainledger.runs.compare import compare_runs as compare

    with read_session(url) as s:
        return jsonable(compare(s, list(run_ids), currency=currency, now=now()))


@st.cache_data(ttl=TTL, show_spinner=False)
def run_utilization(url: str, run_id: str) -> dict[str, Any]:
    """``trainledger.runs.utilization.run_utilization``: the run's nodes hour by hour."""
    from trainledger.runs.utilization import run_utilization as hourly

    with read_session(url) as s:
        return hourly(s, run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def fleet_node_types(url: str, month: str) -> list[str]:
    from trainledger.runs.utilization import fleet_node_types as types

    with read_session(url) as s:
        return types(s, month)


@st.cache_data(ttl=TTL, show_spinner=False)
def fleet_utilization(url: str, node_type: str, month: str) -> dict[str, Any]:
    """``trainledger.runs.utilization.fleet_utilization``: a node type's nodes in the month, hour by hour."""
    from trainledger.runs.utilization import fleet_utilization as hourly

    with read_session(url) as s:
        return hourly(s, node_type, month, now())


@st.cache_data(ttl=TTL, show_spinner=False)
def loss_curve(url: str, run_id: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return registry.loss_curve(s, run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def filter_values(url: str) -> dict[str, list[str]]:
    with read_session(url) as s:
        return registry.filter_values(s)


@st.cache_data(ttl=5, show_spinner=False)  # short: a running sweep adds runs
def sweeps(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return ledger_sweep.list_sweeps(s)


@st.cache_data(ttl=TTL, show_spinner=False)
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

@st.cache_data(ttl=TTL, show_spinner=False)
def pricing(url: str) -> dict[str, Any]:
    with read_session(url) as s:
        return list_pricing(s)


@st.cache_data(ttl=TTL, show_spinner=False)
def offers(url: str, currency: Optional[str] = None) -> list[tuple[Any, str]]:
    """(Offer, node type name) pairs, detached; with ``currency``, at their list prices converted at today's rate."""
    with read_session(url) as s:
        pairs = offers_with_node_types(s)
        if currency is None:
            return pairs
        return list(zip(at_list_prices(s, [o for o, _ in pairs], currency), [n for _, n in pairs]))


@st.cache_data(ttl=TTL, show_spinner=False)
def node_types(url: str) -> list[Any]:
    with read_session(url) as s:
        return pricing_node_types(s)


@st.cache_data(ttl=TTL, show_spinner=False)
def fleets(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_fleets(s)


@st.cache_data(ttl=TTL, show_spinner=False)
def settings(url: str) -> dict[str, str]:
    with read_session(url) as s:
        return {k: get_setting(s, k) for k in DEFAULTS}


@st.cache_data(ttl=TTL, show_spinner=False)
def display_timezone_name(url: str) -> str:
    """The display time zone's name (Settings → time zone): tables show times in it."""
    with read_session(url) as s:
        return str(display_timezone(s))


@st.cache_data(ttl=TTL, show_spinner=False)
def demo_ledger(url: str) -> bool:
    with read_session(url) as s:
        return is_demo(s)


@st.cache_data(ttl=TTL, show_spinner=False)
def compare(url: str, node_type: str, utilization: Decimal, own: Optional[str], rent: Optional[str],
            currency: Optional[str] = None) -> dict[str, Any]:
    """``trainledger.money.account.compare.compare_node_type``: what ``trainledger cost compare --node-type`` prints."""
    with read_session(url) as s:
        return compare_node_type(s, node_type, utilization, own=own, rent=rent, currency=currency)


# --- currencies, price history, rates, carbon ---------------------------------------------

@st.cache_data(ttl=TTL, show_spinner=False)
def currencies(url: str) -> dict[str, Any]:
    """The sidebar's currency choices: the default (the Settings currency once set, else the offers'),
    the offers' currencies and every currency an exchange rate converts to or from."""
    with read_session(url) as s:
        offered = sorted(set(s.exec(select(Offer.currency)).all()))
        rated = {c for r in list_rates(s) for c in (r["base"], r["quote"])}
        default = presentation_currency(s) or (offered[0] if offered else get_setting(s, "currency"))
    return {"default": default, "options": sorted(set(offered) | rated | {default})}


@st.cache_data(ttl=TTL, show_spinner=False)
def price_history(url: str, offer: str) -> dict[str, Any]:
    with read_session(url) as s:
        return prices.history(s, offer)


@st.cache_data(ttl=TTL, show_spinner=False)
def rates(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_rates(s)


@st.cache_data(ttl=TTL, show_spinner=False)
def intensities(url: str) -> list[dict[str, Any]]:
    with read_session(url) as s:
        return list_intensities(s)



# --- waste (badput + idle), spend by project, capacity (issues #18, #36) -------------------------------------

@st.cache_data(ttl=TTL, show_spinner=False)
def month_run_lines(url: str, month: str, currency: Optional[str] = None) -> list[dict[str, Any]]:
    """The month's run lines (``trainledger report monthly``'s per-run rows) with each line's waste: ``waste_cost``,
    its badput in the month's goodput account (``trainledger.money.goodput.waste.run_waste``, the export's
    ``badput_cost``) and ``waste_reason``, its largest badput category (None when it has none). Money outside an
    export is each figure half-up to the cent on its own (docs/MONEY.md, "Rounding"): two runs of the same cost read
    the same."""
    from trainledger.money.goodput.waste import run_reason, run_waste
    from trainledger.money.rates.costs import cents

    exact = {r.run_id: r for r in report(url, month, True, currency).runs}
    accounts = {a.run_id: a for a in month_goodput(url, month, currency).runs}
    out = []
    for r in presented(url, month, lines=True, currency=currency)["runs"]:
        a = accounts.get(r["run_id"])
        out.append({**r, "cost": str(cents(exact[r["run_id"]].cost)),
                    "lost_work_cost": str(cents(exact[r["run_id"]].lost_work_cost)),
                    "waste_cost": str(cents(run_waste(a))) if a else None, "waste_reason": run_reason(a) if a else None})
    return out


@st.cache_data(ttl=TTL, show_spinner=False)
def all_months_accounts(url: str, currency: Optional[str] = None) -> dict[str, Any]:
    """Run id → its goodput account over all months (``trainledger.money.goodput.waste.over_months`` of every
    month's cached :func:`month_goodput`)."""
    from trainledger.money.goodput.waste import over_months

    return over_months(a for m in reversed(month_options(url)) for a in month_goodput(url, m, currency).runs)


@st.cache_data(ttl=TTL, show_spinner=False)
def all_months_run_lines(url: str, currency: Optional[str] = None) -> list[dict[str, Any]]:
    """Every run's line over all months, in :func:`month_run_lines`' shape: its monthly report lines summed
    (``trainledger.money.account.month_lines.over_months``) and its waste and reason over its monthly goodput
    accounts (``trainledger.money.goodput.waste.over_months``), each half-up to the cent once, from the exact sums.
    The Runs page's "All months" ranks by these; each month is the cached :func:`report` and :func:`month_goodput`."""
    from trainledger.money.account.month_lines import over_months as lines_over_months
    from trainledger.money.goodput.waste import run_reason, run_waste
    from trainledger.money.rates.costs import cents

    months = month_options(url)
    lines = lines_over_months(r for m in reversed(months) for r in report(url, m, True, currency).runs)
    accounts = all_months_accounts(url, currency)
    out = []
    for run_id, r in lines.items():
        a = accounts.get(run_id)
        row = jsonable(r)
        out.append({**{k: row.get(k) for k in RUN_COLUMNS}, "cost": str(cents(r.cost)),
                    "lost_work_cost": str(cents(r.lost_work_cost)),
                    "waste_cost": str(cents(run_waste(a))) if a else None, "waste_reason": run_reason(a) if a else None})
    return out


@st.cache_data(ttl=TTL, show_spinner=False)
def spend_by_project(url: str, month: str, currency: Optional[str] = None) -> list[dict[str, Any]]:
    """``trainledger.money.account.spend.spend_by_project``: each project, "(no project)", idle; Σ = the month's spend."""
    from trainledger.money.account.spend import spend_by_project as lines

    return lines(report(url, month, currency=currency))


@st.cache_data(ttl=TTL, show_spinner=False)
def spend_by_project_months(url: str, months: tuple[str, ...], currency: Optional[str] = None) -> list[dict[str, Any]]:
    """``trainledger.money.account.spend.spend_by_project_months`` over ``months`` (a period's whole months): Σ = their spend."""
    from trainledger.money.account.spend import spend_by_project_months as lines

    return lines([report(url, m, currency=currency) for m in months])


@st.cache_data(ttl=TTL, show_spinner=False)
def capacity_warnings(url: str, month: str) -> list[dict[str, Any]]:
    """``trainledger.money.allocation.capacity.capacity_warnings``: node types whose runs used more nodes at once than the fleet."""
    from trainledger.money.allocation.capacity import capacity_warnings as warnings

    with read_session(url) as s:
        return warnings(s, month, now=now())
