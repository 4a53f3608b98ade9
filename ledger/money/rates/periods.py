"""Report periods: a month, a quarter, a year to date or a custom date range, and the period before each.

A period is a run of whole calendar days ``first`` … ``last`` (both included) in the display time zone,
what ``trainledger report period --from FIRST --to LAST`` and the dashboard's Period selector both name:

* ``month`` 2026-11: ``--from 2026-11-01 --to 2026-11-30``;
* ``quarter`` 2026-Q4: ``--from 2026-10-01 --to 2026-12-31``;
* ``ytd`` (year to date) 2026 at 2026-12-04: ``--from 2026-01-01 --to 2026-12-04``;
* ``range``: any ``--from``/``--to`` (a ``YYYY-MM`` bound means that month's first or last day).

A period that runs past today is reported to now, as a month that has not ended is (``months.month_period``).

**The period before** (:func:`previous`) has the same length: the month, quarter or range of as many days right
before it; a year to date is compared with the same days of the year before. A period that has not ended is
compared with as many days of the period before as it has begun (today counted whole): the first 4 days of
November for December to date on its 4th day.

**Its pieces** (:func:`pieces`): the whole calendar months inside the period (a month that has not ended counts
whole: its report is to date) and the days left over at either end. The totals of a period (``trainledger.reports.periods``)
are the monthly reports of its months plus the daily reports of those days, so a period of whole months adds up to
its monthly reports to the cent. Pure functions of their arguments (no database).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Optional

from trainledger.errors import LedgerInputError
from trainledger.money.rates.months import MONTH_YEARS, check_month, parse_month

KINDS = ("month", "quarter", "ytd", "range")
KIND_LABELS = {"month": "Month", "quarter": "Quarter", "ytd": "Year to date", "range": "Date range"}
QUARTER_RE = re.compile(r"^(\d{4})-Q([1-4])$")
DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_DAYS = 3700  # about ten years: a longer range is a typo


@dataclass(frozen=True)
class ReportPeriod:
    """Calendar days ``first`` … ``last`` (inclusive) in the display time zone; ``kind`` and ``label`` say how it was chosen."""

    kind: str
    first: date
    last: date
    label: str

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    def flags(self) -> str:
        """The CLI's options for this period: ``--from 2026-10-01 --to 2026-12-31``."""
        return f"--from {self.first.isoformat()} --to {self.last.isoformat()}"


# --- months and days ------------------------------------------------------------------

def month_first(month: str) -> date:
    y, m = parse_month(month)
    return date(y, m, 1)


def month_last(month: str) -> date:
    y, m = parse_month(month)
    return date(y + (m == 12), m % 12 + 1, 1) - timedelta(days=1)


def month_text(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}"


def check_day(text: Optional[str], flag: str) -> date:
    """``YYYY-MM-DD`` (a real day, years 1970 to 9998), else a one-line error naming ``flag``."""
    text = text or ""
    try:
        if not DAY_RE.match(text):
            raise ValueError
        d = date.fromisoformat(text)
    except ValueError:
        raise LedgerInputError(f"{flag}: expected a day YYYY-MM-DD such as 2026-11-05, got {text!r}") from None
    if not MONTH_YEARS[0] <= d.year <= MONTH_YEARS[1]:
        raise LedgerInputError(f"{flag}: the year must be {MONTH_YEARS[0]} to {MONTH_YEARS[1]}, got {text!r}")
    return d


def check_bound(text: Optional[str], flag: str, end: bool) -> date:
    """``--from``/``--to``: a day ``YYYY-MM-DD`` or a month ``YYYY-MM`` (its first day, or its last for ``end``)."""
    if text and len(text) == 7:
        month = check_month(text, flag)
        return month_last(month) if end else month_first(month)
    try:
        return check_day(text, flag)
    except LedgerInputError:
        raise LedgerInputError(f"{flag}: expected a day YYYY-MM-DD or a month YYYY-MM such as 2026-11-05 or 2026-11, "
                               f"got {text!r}") from None


def check_quarter(text: Optional[str], flag: str = "--quarter") -> str:
    """``YYYY-Qn`` (n 1 to 4, years 1970 to 9998), else a one-line error naming ``flag``."""
    m = QUARTER_RE.match(text or "")
    if not m:
        raise LedgerInputError(f"{flag}: expected YYYY-Qn such as 2026-Q4, got {text!r}")
    if not MONTH_YEARS[0] <= int(m.group(1)) <= MONTH_YEARS[1]:
        raise LedgerInputError(f"{flag}: the year must be {MONTH_YEARS[0]} to {MONTH_YEARS[1]}, got {text!r}")
    return text  # type: ignore[return-value]


def check_year(text: Optional[str], flag: str = "--year") -> int:
    if not re.fullmatch(r"\d{4}", text or "") or not MONTH_YEARS[0] <= int(text) <= MONTH_YEARS[1]:  # type: ignore[arg-type]
        raise LedgerInputError(f"{flag}: expected a year {MONTH_YEARS[0]} to {MONTH_YEARS[1]} such as 2026, got {text!r}")
    return int(text)  # type: ignore[arg-type]


def quarter_of(d: date) -> str:
    return f"{d.year:04d}-Q{(d.month - 1) // 3 + 1}"


# --- the periods ------------------------------------------------------------------------

def month_period(month: str) -> ReportPeriod:
    return ReportPeriod("month", month_first(month), month_last(month), month)


def quarter_period(quarter: str) -> ReportPeriod:
    check_quarter(quarter)
    year, q = int(quarter[:4]), int(quarter[-1])
    first = date(year, 3 * q - 2, 1)
    return ReportPeriod("quarter", first, month_last(month_text(date(year, 3 * q, 1))), quarter)


def ytd_period(year: int, today: date) -> ReportPeriod:
    """1 January of ``year`` to today (to 31 December for a year that has ended)."""
    last = min(date(year, 12, 31), max(today, date(year, 1, 1)))
    return ReportPeriod("ytd", date(year, 1, 1), last, f"{year} to date" if last < date(year, 12, 31) else str(year))


def range_period(first: date, last: date, flags: tuple[str, str] = ("--from", "--to")) -> ReportPeriod:
    if last < first:
        raise LedgerInputError(f"{flags[1]}: {last.isoformat()} is before {flags[0]} {first.isoformat()}")
    if (last - first).days + 1 > MAX_DAYS:
        raise LedgerInputError(f"{flags[1]}: at most {MAX_DAYS} days from {flags[0]}, got {(last - first).days + 1}")
    return ReportPeriod("range", first, last, f"{first.isoformat()} to {last.isoformat()}")


def parse_range(from_text: Optional[str], to_text: Optional[str], flags: tuple[str, str] = ("--from", "--to"),
                today: Optional[date] = None) -> ReportPeriod:
    """``--from``/``--to`` (days or months) as a period; one that is a whole month or quarter, or 1 January to
    ``today``, is named so (and compared as such: :func:`previous`)."""
    first, last = check_bound(from_text, flags[0], end=False), check_bound(to_text, flags[1], end=True)
    p = range_period(first, last, flags)
    if today is not None and (first.month, first.day) == (1, 1) and last == today and first.year == today.year:
        return ytd_period(first.year, today)
    if first.day == 1 and last == month_last(month_text(first)):
        return month_period(month_text(first))
    if first.day == 1 and first.month % 3 == 1 and last == month_last(month_text(date(first.year, first.month + 2, 1))):
        return quarter_period(quarter_of(first))
    return p


def is_partial(p: ReportPeriod, today: date) -> bool:
    """True while the period has not ended (today is one of its days)."""
    return p.first <= today <= p.last


def previous(p: ReportPeriod, today: date) -> ReportPeriod:
    """The period before ``p``, of the same length (see the module's docstring); cut to as many days as ``p`` has
    begun while ``p`` has not ended."""
    if p.kind == "month":
        before = month_period(month_text(p.first - timedelta(days=1)))
    elif p.kind == "quarter":
        before = quarter_period(quarter_of(p.first - timedelta(days=1)))
    elif p.kind == "ytd":
        year = p.first.year - 1
        last = _same_day(p.last, year)
        before = ReportPeriod("ytd", date(year, 1, 1), last,
                              f"{year}-01-01 to {last.isoformat()}" if last < date(year, 12, 31) else str(year))
    else:
        before = range_period(p.first - timedelta(days=p.days), p.first - timedelta(days=1))
    if is_partial(p, today) and p.kind != "ytd":  # a year to date is already cut to the same day
        begun = (today - p.first).days + 1
        last = min(before.last, before.first + timedelta(days=begun - 1))
        if last < before.last:
            before = ReportPeriod(before.kind, before.first, last,
                                  f"{before.label}, first {begun} day{'s' if begun > 1 else ''}")
    return before


def _same_day(d: date, year: int) -> date:
    try:
        return d.replace(year=year)
    except ValueError:  # 29 February
        return date(year, 2, 28)


@dataclass(frozen=True)
class Pieces:
    """A period as whole months (``YYYY-MM``, each reported by its monthly report) and left-over days (each by its
    daily report), up to ``today``: days after it are not reported."""

    months: tuple[str, ...]
    days: tuple[date, ...]

    @property
    def whole_months(self) -> bool:
        return not self.days


def pieces(p: ReportPeriod, today: date) -> Pieces:
    """The whole months inside ``p`` and the days left over, none after ``today`` (a month that has not ended
    counts whole when ``p`` runs to today or past it: its report is to date)."""
    last = min(p.last, today)
    months: list[str] = []
    days: list[date] = []
    d = p.first
    while d <= last:
        month = month_text(d)
        end = month_last(month)
        if d.day == 1 and (p.last >= end or (last == today and end >= today)):
            months.append(month)
            d = end + timedelta(days=1)
            continue
        days.append(d)
        d += timedelta(days=1)
    return Pieces(tuple(months), tuple(days))
