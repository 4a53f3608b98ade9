"""A period's totals and their change against the period before: ``trainledger report period --from --to``.

A period (``trainledger.money.rates.periods``) is its whole months plus the days left over at either end. Its totals are
the monthly reports of those months (``monthly_report``, to date for a month that has not ended; one that has ended
remembered while the ledger is unchanged: ``trainledger.money.account.ended``) plus the daily
reports of those days (``daily_report``), summed exactly and rounded only when presented, so:

* spend, GPU-hours, time utilization and GPU-Util (weighted by measured GPU-hours) exist for every period.
  Time utilization is one definition in the month, the day and the period: node-hours runs drew from
  fixed-cost fleets (own, reserved; each at most its capacity) ÷ those fleets' capacity, the period's being
  Σ fleet node-hours ÷ Σ capacity of its months and days (``fleet_used_node_hours``, ``capacity_node_hours``);
  node-hours on elastic rent are reported apart (``elastic_node_hours``), in no utilization;
* idle cost, waste (each whole month's badput + idle, its goodput account: ``trainledger.money.goodput.waste``),
  the alternatives (if owned, if rented elastic), savings vs the alternative, ROI, tokens
  and CO2e only for a period of whole months (the daily report does not split them by day); for a range
  with left-over days they are None, and the report says ``whole_months: false``.

The change (``change``) of each figure is (this − before) ÷ before, None when the period before has no such
figure or it is zero. The period before is the same span a step back (a year to date: the same days of the year
before; a quarter: the quarter before; a month to date: as many days of the month before); when nothing was recorded
in it (no spend, no GPU-hours: before the ledger's first run and fleet) there is no comparison and
``previous_missing`` says so. ``by_month`` lists the whole months from the first with anything recorded; the months
before it are ``empty_months`` (a year to date of a ledger started in March: no rows of zeros for January and
February). The dashboard's Overview, Monthly ROI and Export pages read the same dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Callable, Optional

from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.ended import month_report
from trainledger.money.goodput.month_store import month_totals
from trainledger.money.goodput.waste import IDLE, waste_by_reason, waste_cost
from trainledger.money.rates import costs
from trainledger.money.rates.costs import ZERO
from trainledger.money.rates.periods import ReportPeriod, is_partial, pieces, previous
from trainledger.reports.daily import daily_report
from trainledger.reports.present import jsonable, present
from trainledger.store.settings import display_timezone

#: figures every period has (from monthly and daily reports alike)
ALWAYS = ("actual_cost", "gpu_hours", "time_utilization", "gpu_util_mean")
#: figures only a period of whole months has
WHOLE_MONTHS = ("idle_cost", "waste_cost", "account_idle_cost", "own_cost", "elastic_cost", "alternative_cost", "savings_vs_alternative",
                "roi", "tokens", "tokens_per_1000", "co2e_kg")
#: the figures a change is shown for
CHANGE_KEYS = ("actual_cost", "idle_cost", "waste_cost", "gpu_hours", "time_utilization", "gpu_util_mean",
               "tokens", "co2e_kg", "savings_vs_alternative")


@dataclass
class _Sums:
    """Exact running sums over a period's pieces."""

    currency: Optional[str] = None
    spend: Decimal = ZERO
    gpu_hours: Decimal = ZERO
    capacity: Decimal = ZERO  # node-hours the fixed-cost fleets held
    fleet_used: Decimal = ZERO  # node-hours runs drew from them (each fleet at most its capacity)
    elastic: Decimal = ZERO  # node-hours on elastic rent
    util_w: Decimal = ZERO  # GPU-Util × measured GPU-hours
    util_gh: Decimal = ZERO  # measured GPU-hours
    sums: dict[str, Optional[Decimal]] = field(default_factory=dict)  # whole-month figures (None: one piece lacks it)
    chosen: Decimal = ZERO  # spend of the months with an alternative (ROI's denominator)
    not_costed_runs: int = 0  # per piece: a run in two months counts in each
    not_costed_node_hours: Decimal = ZERO  # of runs no offer can cost (exact; in no money figure)
    by_month: list[dict[str, Any]] = field(default_factory=list)
    empty_months: list[str] = field(default_factory=list)  # the whole months before anything was recorded

    def add_opt(self, key: str, value: Optional[Decimal]) -> None:
        if key in self.sums and self.sums[key] is None:
            return
        self.sums[key] = None if value is None else (self.sums.get(key) or ZERO) + Decimal(value)


def _add_month(t: _Sums, s: dict[str, Any]) -> None:
    t.spend += s["actual_cost"]
    t.gpu_hours += s["gpu_hours"]
    t.capacity += s["capacity_node_hours"]
    t.fleet_used += s["fleet_used_node_hours"]
    t.elastic += s["elastic_node_hours"]
    if s["gpu_util_mean"] is not None and s["gpu_util_coverage"]:
        measured = s["gpu_hours"] * Decimal(s["gpu_util_coverage"])
        t.util_w += Decimal(str(s["gpu_util_mean"])) * measured
        t.util_gh += measured
    for key in ("idle_cost", "waste_cost", "account_idle_cost", "own_cost", "elastic_cost", "tokens", "co2e_kg"):
        t.add_opt(key, s.get(key) if key != "tokens" else Decimal(s.get("tokens") or 0))
    t.not_costed_runs += s.get("unpriced_runs", 0)
    t.not_costed_node_hours += s.get("not_costed_node_hours", ZERO)
    if s["alternative_cost"] is not None:
        t.add_opt("alternative_cost", s["alternative_cost"])
        t.add_opt("savings_vs_alternative", s["savings_vs_alternative"])
        t.chosen += s["actual_cost"]


def _add_day(t: _Sums, d: dict[str, Any]) -> None:
    s = d["summary"]
    t.spend += s["spend"]
    t.gpu_hours += s["gpu_hours"]
    t.capacity += s["available_node_hours"]
    t.fleet_used += s["fleet_used_node_hours"]
    t.elastic += s["elastic_node_hours"]
    t.not_costed_runs += s.get("not_costed_runs", 0)
    t.not_costed_node_hours += s.get("not_costed_node_hours", ZERO)
    if s["gpu_util_mean"] is not None and s["gpu_util_coverage"]:
        measured = s["gpu_hours"] * Decimal(s["gpu_util_coverage"])
        t.util_w += Decimal(str(s["gpu_util_mean"])) * measured
        t.util_gh += measured


def _totals(session: Session, p: ReportPeriod, today: date, now: datetime, currency: Optional[str],
            tick: Optional[Callable[[], None]] = None,
            month_goodput: Optional[Callable[[str], Any]] = None) -> dict[str, Any]:
    """The period's summary (exact Decimals) and its months; ``tick()`` after each month and day reported."""
    parts = pieces(p, today)
    t = _Sums()
    tick = tick or (lambda: None)
    for month in parts.months:
        rep = month_report(session, month, now=now, currency=currency)  # an ended month: remembered per ledger state
        # the month's goodput totals (a caller that has them already passes month_goodput; else stored per ledger
        # state, trainledger.money.goodput.month_store): waste = badput + idle
        acct = month_goodput(month) if month_goodput else month_totals(session, month, currency, now)
        waste, account_idle = waste_cost(acct), waste_by_reason(acct)[IDLE]
        t.currency = t.currency or rep.currency
        _add_month(t, {**rep.summary, "waste_cost": waste, "account_idle_cost": account_idle})
        tick()
        if not t.by_month and not (rep.summary["actual_cost"] or rep.summary["gpu_hours"] or waste):
            t.empty_months.append(month)  # before anything was recorded: not a row of zeros
            continue
        t.by_month.append({"month": month + (" (to date)" if rep.is_partial else ""), "actual_cost": rep.summary["actual_cost"],
                           "idle_cost": rep.summary["idle_cost"], "waste_cost": waste,
                           "gpu_hours": rep.summary["gpu_hours"]})
    for day in parts.days:
        rep = daily_report(session, day, now=now, currency=currency)
        t.currency = t.currency or rep["currency"]
        _add_day(t, rep)
        tick()
    whole = parts.whole_months and bool(parts.months)
    summary: dict[str, Any] = {
        "actual_cost": t.spend, "gpu_hours": t.gpu_hours,
        "time_utilization": costs.time_utilization(t.fleet_used, t.capacity),
        "fleet_used_node_hours": t.fleet_used, "capacity_node_hours": t.capacity, "elastic_node_hours": t.elastic,
        "gpu_util_mean": (t.util_w / t.util_gh) if t.util_gh else None,
    }
    for key in ("idle_cost", "waste_cost", "account_idle_cost", "own_cost", "elastic_cost", "alternative_cost",
                "savings_vs_alternative", "tokens", "co2e_kg"):
        summary[key] = t.sums.get(key) if whole else None
    alt = summary["alternative_cost"]
    summary["roi"] = (summary["savings_vs_alternative"] / t.chosen) if whole and alt is not None and t.chosen else None
    tokens = summary["tokens"]
    summary["tokens"] = int(tokens) if tokens is not None else None
    summary["tokens_per_1000"] = costs.per_thousand(tokens, t.spend) if tokens and t.spend else None
    if t.not_costed_runs:  # runs no offer can cost: counted, with their node-hours (a period with none: as before)
        summary.update(not_costed_runs=t.not_costed_runs, not_costed_node_hours=t.not_costed_node_hours)
    return {"summary": summary, "months": list(parts.months), "days": [d.isoformat() for d in parts.days],
            "whole_months": whole, "by_month": t.by_month, "empty_months": t.empty_months, "currency": t.currency}


def _ticker(progress: Optional[Callable[[int, Optional[int]], None]], period: ReportPeriod, today: date,
            compare: bool) -> Optional[Callable[[], None]]:
    """A ``tick()`` that calls ``progress(done, total)`` with one more of the pieces (months and days) of
    ``period`` and, with ``compare``, the period before done; None without ``progress``."""
    if progress is None:
        return None
    periods = [period, previous(period, today)] if compare else [period]
    total = sum(len(parts.months) + len(parts.days) for parts in (pieces(p, today) for p in periods))
    done = [0]

    def tick() -> None:
        done[0] += 1
        progress(done[0], total)

    return tick


def _change(now_: dict[str, Any], before: dict[str, Any]) -> dict[str, Optional[Decimal]]:
    out: dict[str, Optional[Decimal]] = {}
    for key in CHANGE_KEYS:
        a, b = now_.get(key), before.get(key)
        out[key] = None if a is None or b is None or Decimal(str(b)) == 0 else \
            (Decimal(str(a)) - Decimal(str(b))) / abs(Decimal(str(b)))
    return out


def period_report(session: Session, period: ReportPeriod, *, now: datetime, currency: Optional[str] = None,
                  compare: bool = True, progress: Optional[Callable[[int, Optional[int]], None]] = None,
                  month_goodput: Optional[Callable[[str], Any]] = None) -> dict[str, Any]:
    """The period's totals (exact), the period before (same length) and the change of each headline figure.
    ``progress(pieces reported, pieces)`` after each month and left-over day of both periods. ``month_goodput(month)``:
    a month's goodput account (``MonthAccount``) the caller already has (default: computed here, once per month)."""
    tz = display_timezone(session)
    today = now.astimezone(tz).date()
    if period.first > today:
        raise LedgerInputError(f"--from: {period.first.isoformat()} has not begun yet in {tz}")
    tick = _ticker(progress, period, today, compare)
    this = _totals(session, period, today, now, currency, tick, month_goodput)
    out = {"period": period.label, "kind": period.kind, "from": period.first, "to": period.last,
           "is_partial": is_partial(period, today), "timezone": str(tz), "currency": this.pop("currency"), **this}
    if compare:
        before = previous(period, today)
        try:
            prev = _totals(session, before, today, now, currency, tick, month_goodput)
        except LedgerInputError as exc:  # e.g. no exchange rate back then: no change, and why
            out["previous"], out["change"] = None, {k: None for k in CHANGE_KEYS}
            out["previous_missing"] = f"{before.label}: {str(exc).splitlines()[0]}"
            return out
        if not any(prev["summary"][k] for k in ("actual_cost", "gpu_hours")):  # nothing recorded back then
            out["previous"], out["change"] = None, {k: None for k in CHANGE_KEYS}
            span = f"{before.first} to {before.last}"
            out["previous_missing"] = (f"{before.label if before.label == span else f'{before.label} ({span})'} "
                                       "has no spend and no GPU-hours in the ledger")
            return out
        out["previous"] = {"period": before.label, "from": before.first, "to": before.last,
                           "whole_months": prev["whole_months"], "summary": prev["summary"]}
        out["change"] = _change(this["summary"], prev["summary"])
    return out


def presented_period(rep: dict[str, Any]) -> dict[str, Any]:
    """The period report rounded for people (money in cents, ratios 4 decimals, changes as ``*_pct`` 1 decimal)."""
    out = jsonable({k: v for k, v in rep.items() if k != "change"})
    if "change" in rep:
        out["change"] = {f"{k}_pct": present(f"{k}_pct", None if v is None else v * 100) for k, v in rep["change"].items()}
    return out


#: the figures of the period's CSV and the CLI's table, in order
FIGURES = ("actual_cost", "idle_cost", "waste_cost", "own_cost", "elastic_cost", "savings_vs_alternative", "roi",
           "gpu_hours", "time_utilization", "gpu_util_mean", "tokens", "tokens_per_1000", "co2e_kg")

#: the figures of runs no offer can cost (no node type, or none for it), shown only when there are such runs
NOT_COSTED_FIGURES = ("not_costed_runs", "not_costed_node_hours")


def period_csv(p: dict[str, Any]) -> bytes:
    """A presented period as CSV: a head (period, from, to, currency, ...), then figure,value,before,change_pct."""
    import io

    from trainledger.reports.export import LFWriter, _csv_value

    buf = io.StringIO()
    w = LFWriter(buf)
    w.writerow(["metric", "value"])
    for key in ("period", "from", "to", "timezone", "currency", "is_partial", "whole_months"):
        w.writerow([key, _csv_value(p[key])])
    w.writerow(["months", _csv_value(p["months"])])
    prev = p.get("previous")
    if prev:
        w.writerow(["previous", _csv_value(prev["period"])])
    w.writerow([])
    w.writerow(["figure", "value", "before", "change_pct"])
    for key in FIGURES:
        w.writerow([key, _csv_value(p["summary"][key]), _csv_value(prev["summary"][key]) if prev else "",
                    _csv_value(p["change"].get(f"{key}_pct")) if prev and key in CHANGE_KEYS else ""])
    for key in NOT_COSTED_FIGURES:
        if key in p["summary"]:
            w.writerow([key, _csv_value(p["summary"][key]), _csv_value(prev["summary"].get(key)) if prev else "", ""])
    return buf.getvalue().encode("utf-8")


def period_json(p: dict[str, Any]) -> bytes:
    """A presented period as JSON: what ``trainledger report period --format json`` prints."""
    import json

    return (json.dumps(jsonable(p), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
