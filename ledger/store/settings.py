"""Ledger-wide settings stored in the ledger itself (``setting`` table)."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlmodel import Session

from ledger.errors import LedgerInputError
from ledger.store.models import Setting

DEFAULTS = {
    "timezone": "UTC",  # display time zone; months are calendar months in it
    "currency": "CNY",
}


def get_setting(session: Session, key: str) -> str:
    row = session.get(Setting, key)
    return row.value if row else DEFAULTS[key]


def set_setting(session: Session, key: str, value: str) -> None:
    if key not in DEFAULTS:
        raise LedgerInputError(f"setting: unknown key {key!r}; use one of {', '.join(DEFAULTS)}")
    if key == "timezone":
        parse_timezone(value)
    if key == "currency" and not (len(value) == 3 and value.isalpha() and value.isupper()):
        raise LedgerInputError(f"currency: expected a 3-letter ISO code such as CNY or USD, got {value!r}")
    row = session.get(Setting, key)
    if row is None:
        session.add(Setting(key=key, value=value))
    else:
        row.value = value


def parse_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise LedgerInputError(f"timezone: unknown time zone {name!r}; use an IANA name such as UTC or Asia/Shanghai") from None


def display_timezone(session: Session) -> ZoneInfo:
    return parse_timezone(get_setting(session, "timezone"))
