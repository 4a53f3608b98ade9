"""Ledger-wide settings stored in the ledger itself (``setting`` table)."""

from __future__ import annotations

from typing import Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.store.audit import record_change
from trainledger.store.models import Setting

DEFAULTS = {
    "timezone": "UTC",  # display time zone; months are calendar months in it
    "currency": "CNY",  # presentation currency once set; unset: the offers' own (see presentation_currency)
}


def get_setting(session: Session, key: str) -> str:
    row = session.get(Setting, key)
    return row.value if row else DEFAULTS[key]


def set_setting(session: Session, key: str, value: str) -> None:
    if key not in DEFAULTS:
        raise LedgerInputError(f"setting: unknown key {key!r}; use one of {', '.join(DEFAULTS)}")
    if key == "timezone":
        parse_timezone(value)
    if key == "currency":
        from trainledger.store.catalog.fx import check_currency

        check_currency(value, "currency")
    row = session.get(Setting, key)
    before = {"value": row.value} if row is not None else None
    if row is None:
        session.add(Setting(key=key, value=value))
    else:
        row.value = value
    record_change(session, "setting.set", key, before, {"value": value})


def parse_timezone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise LedgerInputError(f"timezone: unknown time zone {name!r}; use an IANA name such as UTC or Asia/Shanghai") from None


def display_timezone(session: Session) -> ZoneInfo:
    return parse_timezone(get_setting(session, "timezone"))


def presentation_currency(session: Session, requested: Optional[str] = None) -> Optional[str]:
    """The currency reports present money in: ``requested`` (``--currency``), else ``$TRAINLEDGER_CURRENCY``,
    else the config file's ``currency`` (:mod:`trainledger.store.config`), else the ``currency`` setting
    once it has been set, else None (the offers' own currency, when they share one)."""
    if requested:
        from trainledger.store.catalog.fx import check_currency

        return check_currency(requested, "--currency")
    from trainledger.store import config

    configured = config.configured("currency").value
    if configured:
        return configured
    row = session.get(Setting, "currency")
    return row.value if row else None
