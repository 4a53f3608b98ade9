"""Calendar months, time zones and the costed interval of a run.

A month is a calendar month in the display time zone (SPEC §4); its bounds
are UTC instants, start inclusive and end exclusive. A run that crosses a
month boundary is split there: :func:`months_of` yields each month an
interval touches, and :func:`time_share` gives the exact share of the
interval before an instant (0 at its start, 1 at its end, so the shares of
consecutive slices telescope and the slices add up to the whole).

Pure functions of their arguments (no database), used by the monthly report,
the rollup, the daily report, the run detail and the dashboard alike.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timezone
from decimal import Decimal
from functools import lru_cache
from typing import Iterator, Optional
from zoneinfo import ZoneInfo

from ledger.errors import LedgerInputError
from ledger.money.costs import ONE, ZERO, hours_between
from ledger.store.models import WASTE_STATUSES, RunStatus

MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")


def parse_month(text: str) -> tuple[int, int]:
    """``YYYY-MM`` → (year, month), or a one-line error naming ``--month``."""
    m = MONTH_RE.match(text or "")
    if not m or not 1 <= int(m.group(2)) <= 12:
        raise LedgerInputError(f"--month: expected YYYY-MM such as 2026-11, got {text!r}")
    return int(m.group(1)), int(m.group(2))


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
