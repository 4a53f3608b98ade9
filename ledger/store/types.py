"""Column types shared by the ledger tables.

* ``Money``: exact ``Decimal`` on every backend. PostgreSQL stores NUMERIC(20, 6);
  SQLite has no decimal type (SQLAlchemy would round-trip through float), so
  there the value is stored as its canonical text.
* ``Rate``: the same with 12 decimal places (NUMERIC(30, 12)): exchange rates such as
  0.000061 USD per IDR keep their digits.
* ``UTCDateTime``: timestamps are stored as naive UTC and always come back as
  timezone-aware UTC ``datetime`` objects, whatever the backend.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from decimal import Decimal
from typing import Optional

from sqlalchemy import DateTime, Numeric, String
from sqlalchemy.types import TypeDecorator

MONEY_SCALE = Decimal("0.000001")


class Money(TypeDecorator):
    """Exact decimal money column (6 decimal places kept, rounded only on output)."""

    impl = Numeric(20, 6)
    cache_ok = True
    precision, scale = 20, MONEY_SCALE

    def load_dialect_impl(self, dialect):
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(40))
        return dialect.type_descriptor(Numeric(self.precision, -self.scale.as_tuple().exponent, asdecimal=True))

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        value = Decimal(value).quantize(self.scale)
        return str(value) if dialect.name == "sqlite" else value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        return Decimal(value).quantize(self.scale)


RATE_SCALE = Decimal("1e-12")


class Rate(Money):
    """Exact decimal rate column (exchange rates, carbon intensities): 12 decimal places kept."""

    impl = Numeric(30, 12)
    precision, scale = 30, RATE_SCALE


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes stored as naive UTC."""

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        if isinstance(value, str):  # raw SQLite text from a hand-written query
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def utcnow() -> datetime:
    """Current time, timezone-aware UTC, microseconds kept."""
    return datetime.now(timezone.utc)


#: the reports' clock: an ISO 8601 instant that reports, forecasts, budgets, the exporter and the
#: dashboard take as "now" (a demo or a test on a fixed date); tracking and heartbeats never read it
CLOCK_ENV = "TRAINLEDGER_NOW"


def parse_instant(text: str, flag: str = "--now") -> datetime:
    """An ISO 8601 date or time (``2026-12-03``, ``2026-12-03T08:00``, ``...+08:00``) as aware UTC; UTC
    when it names no zone. A one-line error naming ``flag`` otherwise."""
    from trainledger.errors import LedgerInputError

    try:
        value = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError):
        raise LedgerInputError(f"{flag}: expected an ISO 8601 time such as 2026-12-03T08:00:00Z, got {text!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    if not 1970 <= value.year <= 9998:  # months and windows around it stay representable
        raise LedgerInputError(f"{flag}: the year must be 1970 to 9998, got {text!r}")
    return value.astimezone(timezone.utc)


def report_clock(text: Optional[str] = None) -> datetime:
    """"Now" for a report: ``text`` (``--now``), else ``$TRAINLEDGER_NOW``, else :func:`utcnow`."""
    if text:
        return parse_instant(text, "--now")
    env = os.environ.get(CLOCK_ENV)
    return parse_instant(env, CLOCK_ENV) if env else utcnow()
