"""Budgets: spending limits per project or for the whole team, and where each month stands against them.

A budget is for one month (``--month YYYY-MM``) or for every month
(``--monthly``); in its month a one-month budget replaces the every-month one
of the same scope. A budget is kept in the currency it was set in (default: the
ledger's, the offers'); any other needs an exchange rate between the two
(``trainledger fx set``). Where a month stands is told in the presented currency
(``--currency``, else the Settings one, else the offers'): a budget set in another
is converted at the rate in force at ``now`` (``budget_amount``/``budget_currency``
keep it as set, ``fx_rate`` the rate used).

Where a month stands at ``now`` (:func:`budget_status`), per budget that applies to it.

Each row has the budget (``amount``), the scope's ``cost`` (``to_date``,
``expected`` at the month's end, ``p10``, ``p90``), ``used_pct`` and the state:

* ``over``: spent to date above the budget (``crossed_on``: the day it went over);
* ``at_risk``: the month-end forecast (:mod:`trainledger.money.outlook.forecast`, expected
  figure) above the budget (``crossed_on``: the day the forecast crosses it, on
  a straight line from to date to the expected month end), or spent to date at
  or above the budget's alert threshold (``threshold_pct`` percent of the amount,
  when one below 100 is set: ``threshold_reached``);
* ``ok``: none of these (``p90_above`` says when the forecast's p90 is above it).

A budget's threshold (``--threshold PCT``, 1 to 100) defaults to 100: the
forecast alone decides, as before thresholds existed (stored as NULL).

``trainledger budget check`` prints one line per budget and exits 1 when any is
at risk or over (for cron); the dashboard's Overview and the Prometheus exporter
show the same rows.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

from sqlmodel import Session, select
from trainledger.errors import LedgerInputError
from trainledger.money.outlook.forecast import DEFAULT_WINDOW_DAYS, crossing_day, forecast
from trainledger.money.rates import costs
from trainledger.money.rates.fx import RateBook, load_rates
from trainledger.money.rates.months import month_of, parse_month
from trainledger.store.audit import record_change
from trainledger.store.catalog.fx import check_currency
from trainledger.store.models import Budget, FxRate, Offer, Project
from trainledger.store.settings import display_timezone, get_setting
from trainledger.store.types import utcnow

MONTHLY = "monthly"
STATES = ("ok", "at_risk", "over")
MAX_AMOUNT = Decimal("1e13")  # the Money column holds 20 digits, 6 after the point
FULL = Decimal(100)  # a budget's threshold when none is set: the forecast alone decides
TEAM = ""  # the scope of a team-wide budget, as a project name


# --- the budget rows ------------------------------------------------------------------

def ledger_currency(session: Session) -> str:
    """The currency costs are reported in: the offers' when they share one, else the ``currency`` setting."""
    found = set(session.exec(select(Offer.currency).distinct()).all())
    return found.pop() if len(found) == 1 else get_setting(session, "currency")


def parse_amount(text: Any, flag: str = "AMOUNT") -> Decimal:
    """A budget amount: a number of cents above 0 and below 10^13, as typed (``20000``, ``1.5e4``, ``99.95``)."""
    try:
        amount = Decimal(str(text).strip().replace("_", ""))
    except (InvalidOperation, ValueError):
        raise LedgerInputError(f"{flag}: expected an amount of money such as 20000, got {text!r}") from None
    if not amount.is_finite():
        raise LedgerInputError(f"{flag}: expected a finite amount, got {text!r}")
    if amount <= 0:
        raise LedgerInputError(f"{flag}: a budget must be more than 0, got {text!r}")
    if amount >= MAX_AMOUNT:
        raise LedgerInputError(f"{flag}: at most 10^13, got {text!r}")
    if amount != amount.quantize(costs.CENT):
        raise LedgerInputError(f"{flag}: a budget is in whole cents (at most 2 decimal places), got {text!r}")
    return amount


def parse_threshold(text: Any, flag: str = "--threshold") -> Optional[Decimal]:
    """A budget's alert threshold: a percent of its amount from 1 to 100 with at most 2 decimals (``80``, ``92.5``);
    None or ``""``: none (100). Returns None for 100 (stored as NULL: the forecast alone decides)."""
    if text is None or str(text).strip() == "":
        return None
    try:
        pct = Decimal(str(text).strip().rstrip("%").strip())
    except (InvalidOperation, ValueError):
        pct = None
    if pct is None or not pct.is_finite() or not 1 <= pct <= FULL or pct != pct.quantize(costs.CENT):
        raise LedgerInputError(f"{flag}: expected a percent of the budget from 1 to 100 (e.g. 80 to be warned at 80% "
                               f"spent; 100 for none), got {text!r}")
    return None if pct == FULL else pct


def _period(month: Optional[str]) -> str:
    if month is None:
        return MONTHLY
    year, _ = parse_month(month)
    if not 1970 <= year <= 9998:
        raise LedgerInputError(f"--month: the year must be 1970 to 9998, got {month!r}")
    return month


def _project_key(session: Session, project: Optional[str]) -> int:
    if project is None or project == TEAM:
        return 0
    pid = session.exec(select(Project.id).where(Project.name == project)).first()
    if pid is None:
        names = session.exec(select(Project.name).order_by(Project.name)).all()
        raise LedgerInputError(f"--project: no project named {project!r}; projects: {', '.join(names) or '(none)'} "
                               "(leave --project out for a team-wide budget)")
    return pid


def set_budget(session: Session, amount: Any, *, project: Optional[str] = None, month: Optional[str] = None,
               currency: Optional[str] = None, threshold: Any = None) -> dict[str, Any]:
    """Add or replace the budget of ``project`` (None: the team) for ``month`` (None: every month), with its
    alert ``threshold`` in percent (None: 100; a replaced budget takes the one given, not the old one).

    Everything is checked before anything is written; returns the row as :func:`list_budgets` shows it.
    """
    value = parse_amount(amount)
    pct = parse_threshold(threshold)
    period = _period(month)
    key = _project_key(session, project)
    have = _budget_currency(session, currency)
    row = session.exec(select(Budget).where(Budget.project_key == key, Budget.period == period)).first()
    before = _audited(row)
    if row is None:
        row = Budget(project_key=key, period=period, amount=value, currency=have, threshold_pct=pct)
        session.add(row)
    else:
        row.amount, row.currency, row.threshold_pct, row.updated_at = value, have, pct, utcnow()
    session.flush()
    record_change(session, "budget.set", _target(project, period), before, _audited(row))
    return _row(row, project or TEAM)


def _target(project: Optional[str], period: str) -> str:
    """A budget as the audit log names it: ``team monthly``, ``project llm 2026-12``."""
    return f"{'project ' + project if project and project != TEAM else 'team'} {period}"


def _audited(row: Optional[Budget]) -> Optional[dict[str, Any]]:
    if row is None:
        return None
    pct = FULL if row.threshold_pct is None else Decimal(row.threshold_pct)
    return {"amount": Decimal(row.amount), "currency": row.currency, "threshold_pct": pct}


def _budget_currency(session: Session, currency: Optional[str]) -> str:
    """The currency a budget is set in: ``currency`` when the ledger can convert between it and its own, else its own."""
    have = ledger_currency(session)
    if currency is None:
        return have
    want = check_currency(currency.strip().upper(), "--currency")
    pairs = {(r.base, r.quote) for r in session.exec(select(FxRate))}
    if want != have and (want, have) not in pairs and (have, want) not in pairs:
        raise LedgerInputError(f"--currency: this ledger's costs are in {have} and it has no exchange rate between "
                               f"{have} and {want}; add one with `trainledger fx set {have} {want} RATE` or give the "
                               f"budget in {have}")
    return want


def remove_budget(session: Session, *, project: Optional[str] = None, month: Optional[str] = None) -> None:
    """Delete the budget of ``project`` (None: the team) for ``month`` (None: the every-month one)."""
    period = _period(month)
    key = _project_key(session, project)
    row = session.exec(select(Budget).where(Budget.project_key == key, Budget.period == period)).first()
    if row is None:
        scope = f"project {project}" if project else "the team"
        raise LedgerInputError(f"budget: {scope} has no {'every-month' if period == MONTHLY else period} budget; "
                               "see `trainledger budget list`")
    before = _audited(row)
    session.delete(row)
    session.flush()
    record_change(session, "budget.remove", _target(project, period), before, None)


def list_budgets(session: Session) -> list[dict[str, Any]]:
    """Every budget: team-wide first, then by project; every-month before one-month, by month."""
    names = dict(session.exec(select(Project.id, Project.name)).all())
    rows = [_row(b, names.get(b.project_key, f"#{b.project_key}") if b.project_key else TEAM)
            for b in session.exec(select(Budget)).all()]
    return sorted(rows, key=lambda r: (r["project"] != TEAM, r["project"], r["period"] != MONTHLY, r["period"]))


def _row(b: Budget, project: str) -> dict[str, Any]:
    return {"scope": "team" if not project else "project", "project": project, "period": b.period,
            "amount": Decimal(b.amount), "currency": b.currency,
            "threshold_pct": FULL if b.threshold_pct is None else Decimal(b.threshold_pct).normalize() + 0,
            "updated_at": b.updated_at}


# --- where a month stands ------------------------------------------------------------

def budgets_for(session: Session, month: str) -> list[dict[str, Any]]:
    """The budget of each scope that applies in ``month``: its one-month budget, else its every-month one."""
    chosen: dict[str, dict[str, Any]] = {}
    for b in list_budgets(session):
        if b["period"] == month or (b["period"] == MONTHLY and b["project"] not in chosen):
            chosen[b["project"]] = b
    return sorted(chosen.values(), key=lambda r: (r["project"] != TEAM, r["project"]))


def budget_status(session: Session, month: Optional[str] = None, *, now: Optional[datetime] = None,
                  window_days: int = DEFAULT_WINDOW_DAYS, fc: Optional[dict[str, Any]] = None,
                  currency: Optional[str] = None) -> dict[str, Any]:
    """Each budget of ``month`` (default: the current one) at ``now``: to date, forecast, state, crossing day,
    in ``currency`` (default: the Settings currency once set, else the offers'; a budget set in another
    currency is converted at the rate in force at ``now``).

    ``fc``: the month's forecast when the caller already has it (the same ``now``, window and currency).
    """
    now = now or utcnow()
    tz = display_timezone(session)
    month = month or month_of(now, tz)
    budgets = budgets_for(session, month)
    if fc is None and budgets:
        fc = forecast(session, month, now=now, window_days=window_days, currency=currency)
    book = load_rates(session, tz) if any(b["currency"] != fc["currency"] for b in budgets) else None
    rows = [_status(_in_currency(b, fc["currency"], book, min(now, fc["period_end"])), fc) for b in budgets]
    return {"month": month, "timezone": str(tz), "now": now, "period": fc["period"] if fc else None,
            "currency": fc["currency"] if fc else ledger_currency(session), "budgets": rows,
            "worst": max((r["state"] for r in rows), key=STATES.index, default="ok")}


def _in_currency(b: dict[str, Any], currency: str, book: Optional[RateBook], at: datetime) -> dict[str, Any]:
    """The budget's amount in ``currency`` (at the rate in force at ``at``), its amount as set kept beside it."""
    out = {**b, "budget_amount": b["amount"], "budget_currency": b["currency"], "fx_rate": None}
    if b["currency"] == currency:
        return out
    used = book.rate(b["currency"], currency, at)
    if used is None:
        raise LedgerInputError(f"budget {b['project'] or 'team'} {b['period']}: " + book.missing(b["currency"], currency, at))
    return {**out, "amount": costs.convert(b["amount"], used.rate), "currency": currency, "fx_rate": used.rate}


def _status(b: dict[str, Any], fc: dict[str, Any]) -> dict[str, Any]:
    project = b["project"] or None
    if project is None:
        fig = fc["spend"]
    else:
        fig = next((p["cost"] for p in fc["projects"] if p["project"] == project), None) or \
            {k: costs.ZERO for k in ("to_date", "expected", "p10", "p90")}
    amount, threshold = b["amount"], b["threshold_pct"]
    reached = threshold < FULL and fig["to_date"] * 100 >= amount * threshold
    state = "over" if fig["to_date"] > amount else "at_risk" if fig["expected"] > amount or reached else "ok"
    return {**b, "state": state, "threshold_reached": reached, "cost": dict(fig), "used_pct": fig["to_date"] / amount * 100,
            "expected_pct": fig["expected"] / amount * 100, "p90_above": fig["p90"] > amount,
            "crossed_on": crossing_day(fc, amount, project)}
