"""A month's outlook figures stored with the ledger state they were computed from (issue 39 item 6).

The forecast of a month that has ended draws its daily spend path, and the month's spend anomalies judge each of its
days against the 28 days before, from every run touching the days (``forecast._read_ledger``: the month's runs, or
the month's and the month before's, read and costed day by day). Once the months are over and no live run touches
them, those daily figures change only when the ledger does: they are stored in the month's ``goodput_month`` row
(``trainledger.money.goodput.month_store``, beside the goodput totals, under the ``outlook`` key of its payload; no
schema change) and read back while the ledger is as it was.

**Read back only when all of these still hold**, else computed (and stored when they hold):

* each month the figure reads (``months``: the month, and for the anomalies the month before, whose last days are the
  baseline) is over at ``now`` and touched by no live run, and its fingerprint (``month_store.fingerprint``: the
  month's rollup rows, its runs, their phases and every configuration table) is the one the entry was stored with;
* the month's ``goodput_month`` row is the one of that fingerprint (the entry lives in it: a row computed again for
  another ledger state drops it);
* the inputs that depend on ``now`` and not only on the ledger (``setup_key``: the offers converted at the exchange
  rate in force at ``now``, and which fleets the read selects up to ``now``) are the same;
* no run that starts before the figure's end ends after ``now`` (such a run is costed up to ``now``).

The figures are the computed ones to the last digit (Decimals as their exact strings; tests/test_outlook_store.py,
SQLite and PostgreSQL). Storing never fails the caller (``month_store.store_payload``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime
from typing import Any, Callable, Mapping, Optional, TypeVar

from sqlalchemy import select
from sqlmodel import Session
from trainledger.money.goodput.month_store import FORMAT as TOTALS_FORMAT
from trainledger.money.goodput.month_store import fingerprint, store_payload, stored_payload
from trainledger.store.models import GoodputMonth, Run

log = logging.getLogger(__name__)
T = TypeVar("T")

#: bumped when a stored entry's shape or what its key covers changes: every stored entry is then computed again
FORMAT = "month-outlook/1"


def setup_key(*parts: Any) -> str:
    """The sha256 of the ``repr`` of what a figure reads that depends on ``now`` (converted offers, fleets selected)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def read_or_compute(session: Session, what: str, month: str, months: tuple[str, ...], currency_key: str,
                    now: datetime, until: datetime, setup: str, compute: Callable[[], T],
                    dump: Callable[[T], Any], load: Callable[[Any], T],
                    fingerprints: Optional[Mapping[str, Optional[str]]] = None) -> T:
    """``what`` of ``month`` (stored under the month's ``goodput_month`` row): read back while the module's conditions
    hold, else ``compute()`` (stored when they hold before and after). ``until``: the end of the figure's last day.
    ``fingerprints``: the months' fingerprints the caller already has (read only; a store hashes them again)."""
    if _runs_past(session, until, now):
        return compute()
    if fingerprints and all(fingerprints.get(m) for m in months):
        got = _read(session, what, month, currency_key, dict(fingerprints), months, setup, load)
        if got is not None:
            return got
    fps = _fingerprints(session, months, currency_key, now)
    if fps is None:
        return compute()
    got = _read(session, what, month, currency_key, fps, months, setup, load)
    if got is not None:
        return got
    value = compute()
    if _fingerprints(session, months, currency_key, now) == fps:
        _store(session, what, month, currency_key, fps, months, setup, dump(value))
    return value


def _runs_past(session: Session, until: datetime, now: datetime) -> bool:
    """A run that starts before ``until`` and ends after ``now`` (its costed interval is clipped at ``now``)."""
    return session.connection().execute(select(Run.id).where(Run.ended_at > now, Run.started_at < until)
                                        .limit(1)).first() is not None


def _fingerprints(session: Session, months: tuple[str, ...], currency_key: str,
                  now: datetime) -> Optional[dict[str, str]]:
    out = {}
    for m in months:
        fp = fingerprint(session, m, currency_key, now)
        if fp is None:  # to date, or a live run touches it
            return None
        out[m] = fp
    return out


def _entry_key(what: str, month: str, currency_key: str, fps: Mapping[str, str], months: tuple[str, ...],
               setup: str) -> str:
    text = "\x1f".join([FORMAT, what, month, currency_key, *(f"{m}={fps[m]}" for m in months), setup])
    return hashlib.sha256(text.encode()).hexdigest()


def _row(session: Session, month: str, currency_key: str, fp: str) -> Optional[dict[str, Any]]:
    payload = stored_payload(session, GoodputMonth.__table__, month, currency_key, fp, TOTALS_FORMAT)
    if payload is None:
        return None
    try:
        p = json.loads(payload)
    except ValueError:
        return None
    return p if isinstance(p, dict) else None


def _read(session: Session, what: str, month: str, currency_key: str, fps: Mapping[str, str],
          months: tuple[str, ...], setup: str, load: Callable[[Any], T]) -> Optional[T]:
    p = _row(session, month, currency_key, fps[month])
    entry = (p or {}).get("outlook", {}).get(what) if isinstance((p or {}).get("outlook"), dict) else None
    if not isinstance(entry, dict) or entry.get("key") != _entry_key(what, month, currency_key, fps, months, setup):
        return None
    try:
        return load(entry["value"])
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
        log.warning("goodput_month %s %r: stored %s unreadable (%s); computed again", month, currency_key, what, exc)
        return None


def _store(session: Session, what: str, month: str, currency_key: str, fps: Mapping[str, str],
           months: tuple[str, ...], setup: str, value: Any) -> None:
    """Add the entry to the month's ``goodput_month`` row of this fingerprint (none: nothing stored)."""
    p = _row(session, month, currency_key, fps[month])
    if p is None:
        return
    outlook = p.get("outlook") if isinstance(p.get("outlook"), dict) else {}
    outlook[what] = {"key": _entry_key(what, month, currency_key, fps, months, setup), "value": value}
    p["outlook"] = outlook
    store_payload(session, GoodputMonth.__table__, month, currency_key, fps[month], json.dumps(p, sort_keys=True),
                  TOTALS_FORMAT)


__all__ = ["FORMAT", "read_or_compute", "setup_key"]
