"""Calendar months, time zones and the costed interval of a run.

A month is a calendar month in the display time zone (SPEC §4); its bounds
are UTC instants, start inclusive and end exclusive. A run that crosses a
month boundary is split there: :func:`months_of` yields each month an
interval touches, and :func:`time_share` gives the exact share of the
interval before an instant (0 at its start, 1 at its end, so the shares of
consecutive slices telescope and the slices add up to the whole).

:func:`month_period` is the part of a month elapsed at an instant (all of it once
the month has ended): a month that has not ended is reported over that part,
labelled "to date (3 of 31 days)".

Pure functions of their arguments (no database), used by the monthly report,
the rollup, the daily report, the run detail and the dashboard alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Iterator, Optional
from zoneinfo import ZoneInfo

from trainledger.errors import LedgerInputError
from trainledger.money.rates.costs import ONE, ZERO, hours_between
from trainledger.store.models import WASTE_STATUSES, RunStatus

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")


def parse_month(text: str) -> tuple[int, int]:
    """``YYYY-MM`` → (year, month), or a one-line error naming ``--month``."""
    m = MONTH_RE.match(text or "")
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise LedgerInputError(f"--month: expected YYYY-MM such as 2026-11, got {text!r}")
    return int(m.group(1)), int(m.group(2))


#: the years a month may name (the ledger's dates, and one year of room for time-zone shifts at either end)
MONTH_YEARS = (1970, 9998)


def check_month(text: str, flag: str = "--month") -> str:
    """``text`` if it is ``YYYY-MM`` within :data:`MONTH_YEARS`, else a one-line error naming ``flag``."""
    try:
        year, _ = parse_month(text)
    except LedgerInputError:
        raise LedgerInputError(f"{flag}: expected YYYY-MM such as 2026-11, got {text!r}") from None
    if not MONTH_YEARS[0] <= year <= MONTH_YEARS[1]:
        raise LedgerInputError(f"{flag}: the year must be {MONTH_YEARS[0]} to {MONTH_YEARS[1]}, got {text!r}")
    return text


def month_bounds(month: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """UTC start (inclusive) and end (exclusive) of a calendar month in ``tz``."""
    y, m = parse_month(month)
    start = datetime(y, m, 1, tzinfo=tz)
    end = datetime(y + (m == 12), m % 12 + 1, 1, tzinfo=tz)
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)


@lru_cache(maxsize=4096)
def cached_month_bounds(month: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """:func:`month_bounds`, memoised (the rollup asks for the same few months millions of times)."""
    return month_bounds(month, tz)


def month_of(ts: datetime, tz: ZoneInfo) -> str:
    """The calendar month (``YYYY-MM``) of an instant in ``tz``."""
    d = ts.astimezone(tz)
    return f"{d.year:04d}-{d.month:02d}"


def months_between(first: str, last: str) -> list[str]:
    """Every month from ``first`` to ``last`` inclusive (empty when ``last`` < ``first``)."""
    y, m = parse_month(first)
    y2, m2 = parse_month(last)
    out = []
    while (y, m) <= (y2, m2):
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def months_of(start: datetime, end: datetime, tz: ZoneInfo) -> Iterator[tuple[str, datetime, datetime]]:
    """``(month, month start, month end)`` for every month that ``[start, end]`` touches, in order."""
    first, last = month_of(start, tz), month_of(end, tz)
    for m in [first] if first == last else months_between(first, last):
        yield (m, *cached_month_bounds(m, tz))


def date_start(d: date, tz: ZoneInfo) -> datetime:
    """The UTC instant at which calendar day ``d`` begins in ``tz``."""
    return datetime.combine(d, time(0), tzinfo=tz).astimezone(timezone.utc)


def time_share(start: datetime, end: datetime, t: datetime) -> Decimal:
    """Share of [start, end] before t; exactly 0 at start and 1 at end (telescopes)."""
    if t >= end:
        return ONE
    if t <= start:
        return ZERO
    return hours_between(start, t) / hours_between(start, end)


def run_interval(run_started: Optional[datetime], run_ended: Optional[datetime], status: str,
                 heartbeat: Optional[datetime], now: datetime) -> Optional[tuple[datetime, datetime]]:
    """The costed interval of a run: start → end (a live run: → now; never started: none).

    A run that finished without an end time (crashed before it was reaped) ends
    at its last heartbeat.
    """
    if run_started is None:
        return None
    if run_ended is not None:
        return run_started, max(run_started, run_ended)
    if status == RunStatus.running.value:
        return run_started, max(run_started, now)
    return run_started, max(run_started, heartbeat or run_started)


@dataclass(frozen=True)
class Period:
    """The part of a calendar month that has elapsed at ``now``: all of it once the month has ended.

    ``end`` is the end of what is reported (the month's end, or ``now`` while it runs;
    the month's start for a month that has not begun); ``hours`` is the elapsed part
    to the microsecond and ``month_hours`` the whole month's. Fixed costs, idle and
    capacity of a month that has not ended are prorated to ``hours``.
    """

    month: str
    start: datetime
    end: datetime
    month_end: datetime
    hours: Decimal
    month_hours: Decimal
    days_elapsed: int  # calendar days begun, in the display time zone
    days_in_month: int

    @property
    def is_partial(self) -> bool:
        return self.end < self.month_end

    @property
    def label(self) -> str:
        """``to date (3 of 31 days)`` for a month that has not ended, else ``""``."""
        return f"to date ({self.days_elapsed} of {self.days_in_month} days)" if self.is_partial else ""


def month_period(month: str, tz: ZoneInfo, now: datetime) -> Period:
    """The elapsed part of ``month`` (display time zone ``tz``) at the instant ``now``."""
    start, month_end = month_bounds(month, tz)
    end = min(max(now, start), month_end)
    first = start.astimezone(tz).date()
    days_in_month = (month_end.astimezone(tz).date() - first).days
    if end >= month_end:
        days = days_in_month
    elif end <= start:
        days = 0
    else:  # the day of ``end`` counts once it has begun (by a microsecond)
        last = (end - timedelta(microseconds=1)).astimezone(tz).date()
        days = (last - first).days + 1
    return Period(month, start, end, month_end, hours_between(start, end), hours_between(start, month_end),
                  days, days_in_month)


_LOSING = frozenset(s.value for s in WASTE_STATUSES)


def lost_interval(status: str, interval: Optional[tuple[datetime, datetime]],
                  last_checkpoint_at: Optional[datetime]) -> Optional[tuple[datetime, datetime]]:
    """Lost work: the part of a run's costed interval whose results were not saved.

    A run that ends ``failed``, ``crashed`` or ``cancelled`` loses the work since
    its last recorded checkpoint, or since its start when it never checkpointed:
    lost = [last checkpoint (clamped to the interval), end]. A run that succeeded
    or is still running loses nothing (None). The interval may be empty (a
    checkpoint at the very end).
    """
    status = getattr(status, "value", status)
    if interval is None or status not in _LOSING:
        return None
    start, end = interval
    if last_checkpoint_at is None:
        return start, end
    return min(max(last_checkpoint_at, start), end), end
