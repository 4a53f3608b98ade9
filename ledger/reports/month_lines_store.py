"""A month's presented lines, stored with the fingerprint of the ledger state they were computed from (issue 39 item 6).

The pages that show every run line of a month (Export, Runs) and the chargeback statements present the month's report
with its lines (``trainledger.money.account.monthly.month_charges``), its goodput account
(``trainledger.money.goodput.goodput_ledger.report_account``) and the statements
(``trainledger.money.account.chargeback.from_charges``): seconds at 100,000 runs. :class:`PresentedLines` holds what
they show, as the export and the CLI present it: ``presented_report`` with its lines, the chargeback's
``presented``, and per run line the two figures the Runs page adds (cost per 1M tokens, the largest badput reason).
:func:`month_lines` reads them from ``month_lines`` (migration 0022) while the row's fingerprint still matches the
ledger, else computes them with that same code and stores them. The values are the computed ones exactly: they are
presented values already (cent strings, floats, text), stored as JSON, which gives each back as it was (a float by
its shortest repr; a value JSON would not give back, a tuple or a Decimal, is refused and the month is not stored).

**Stored** as the goodput totals are (``trainledger.money.goodput.month_store``): only a month that is over at
``now`` and touched by no live run, never a month to date; in a savepoint that never fails the caller; and not when
the chargeback cannot be made (its error is then the caller's, each time).

**The fingerprint** is the goodput totals' (``month_store.fingerprint``: the month's rollup rows, its runs and the
runs their recovery reads, their phases, every configuration table), with :data:`FORMAT` at its head and the run
columns a line shows besides (:data:`RUN_COLUMNS`: name, user, strategy, tokens, GPU-Util and its source, MFU).
Complete because the lines read nothing else: the report's lines are its rollup slices, the run
rows and the configuration (offers, prices, node types, fleets and their idle-share policies, projects, users, FX
rates, carbon intensities, settings) at read time; the account and the statements are computed from them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from sqlmodel import Session
from trainledger.errors import LedgerInputError
from trainledger.money.account.chargeback import from_charges
from trainledger.money.account.monthly import month_charges
from trainledger.money.goodput.goodput_ledger import report_account
from trainledger.money.goodput.month_store import RUN_COLUMNS as GOODPUT_RUN_COLUMNS
from trainledger.money.goodput.month_store import fingerprint as month_fingerprint
from trainledger.money.goodput.month_store import read_or_compute, store_payload, stored_payload
from trainledger.money.goodput.waste import run_reason
from trainledger.money.rates.costs import cost_per_million_tokens
from trainledger.money.rates.months import check_month
from trainledger.reports.chargeback import presented as presented_chargeback
from trainledger.reports.export import presented_report
from trainledger.reports.present import present
from trainledger.store.models import MonthLines
from trainledger.store.settings import presentation_currency
from trainledger.store.types import utcnow

log = logging.getLogger(__name__)

#: bumped when the stored payload or what the fingerprint covers changes: every stored row is then recomputed
FORMAT = "month-lines/1"
#: the run columns the fingerprint hashes (``id`` first): the goodput account's and those a run line shows (its name,
#: user, strategy, tokens, GPU-Util and its source, MFU); tests/test_month_lines_store.py checks that the code of the
#: lines reads no other column of ``run``
RUN_COLUMNS = GOODPUT_RUN_COLUMNS + ("name", "user_id", "strategy", "tokens", "gpu_util_mean", "util_source", "mfu")


@dataclass
class PresentedLines:
    """A month's lines as presented: ``presented`` = ``presented_report(report with lines, its goodput account)``,
    ``chargeback`` = ``trainledger.reports.chargeback.presented(from_charges(...))`` (None: ``chargeback_error``, the
    one line it failed with), ``runs`` = run id → [cost per 1M tokens (:func:`per_1m`), its largest badput reason
    (``run_reason``; None without an account or badput)]. Shared and read-only where a page keeps it."""

    presented: dict[str, Any]
    chargeback: Optional[dict[str, Any]]
    runs: dict[str, list]
    chargeback_error: Optional[str] = None
    stored: bool = False  # read back from month_lines (False: computed by this call)


def per_1m(line: Any) -> Optional[str]:
    """A run line's cost per 1M tokens from its exact cost, presented once (4 decimals: the metrics layer's)."""
    per = cost_per_million_tokens(line.cost, line.tokens) if line.tokens else None
    return None if per is None else present("cost_per_1m_tokens", per)


def presented_lines(session: Session, charges: Any, account: Any) -> PresentedLines:
    """The month's :class:`PresentedLines` from its ``month_charges`` and that report's goodput account
    (``report_account``): what :func:`month_lines` stores, and what a month to date shows."""
    rep = charges.report
    try:
        cb, error = presented_chargeback(from_charges(session, charges)), None
    except LedgerInputError as exc:
        cb, error = None, str(exc)
    accounts = {a.run_id: a for a in account.runs}
    runs = {r.run_id: [per_1m(r), run_reason(accounts[r.run_id]) if r.run_id in accounts else None] for r in rep.runs}
    return PresentedLines(presented_report(rep, account), cb, runs, error)


def month_lines(session: Session, month: str, *, currency: Optional[str] = None,
                now: Optional[datetime] = None) -> PresentedLines:
    """The month's presented lines: the stored ones while their fingerprint matches, else computed (and stored when
    the month is over, no live run touches it and the chargeback could be made)."""
    now = now or utcnow()
    month = check_month(month)
    key = presentation_currency(session, currency) or ""

    def compute() -> PresentedLines:
        charges = month_charges(session, month, currency=currency, now=now)
        return presented_lines(session, charges, report_account(session, charges.report, now))

    return read_or_compute(session, lambda: fingerprint(session, month, key, now),
                           lambda fp: _read(session, month, key, fp), compute,
                           lambda fp, lines: _store(session, month, key, fp, lines))


def _store(session: Session, month: str, key: str, fp: str, lines: PresentedLines) -> None:
    if lines.chargeback_error is not None:  # the statements could not be made: the caller's error, each time
        return
    try:
        payload = _payload(month, key, lines)
    except TypeError as exc:  # a value JSON would not give back as it is: not stored
        log.info("month_lines %s %r not stored: %s", month, key, exc)
        return
    store_payload(session, MonthLines.__table__, month, key, fp, payload, FORMAT)


def fingerprint(session: Session, month: str, currency_key: str, now: datetime) -> Optional[str]:
    """The sha256 of everything the month's lines depend on (the module's docstring); None when the month may not be
    stored (to date, or a live run touches it)."""
    return month_fingerprint(session, month, currency_key, now, head=FORMAT, run_columns=RUN_COLUMNS)


def _plain(v: Any) -> Any:
    """``v`` itself when JSON gives it back equal and of the same type (str, int, float, bool, None, lists and dicts
    with text keys of those); TypeError otherwise."""
    t = type(v)
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                raise TypeError(f"not storable: a {type(k).__name__} key")
            _plain(x)
    elif t is list:
        for x in v:
            _plain(x)
    elif not (v is None or t in (str, int, float, bool)):
        raise TypeError(f"not storable: {t.__name__}")
    return v


def _payload(month: str, key: str, lines: PresentedLines) -> str:
    return json.dumps(_plain({"format": FORMAT, "month": month, "currency_key": key, "presented": lines.presented,
                              "chargeback": lines.chargeback, "runs": lines.runs}))


def _read(session: Session, month: str, key: str, fp: str) -> Optional[PresentedLines]:
    payload = stored_payload(session, MonthLines.__table__, month, key, fp, FORMAT)
    if payload is None:
        return None
    try:
        p = json.loads(payload)
        if not isinstance(p, dict) or (p.get("format"), p.get("month"), p.get("currency_key")) != (FORMAT, month, key):
            raise ValueError("a payload of another format, month or currency")
        if not (isinstance(p["presented"], dict) and isinstance(p["chargeback"], dict) and isinstance(p["runs"], dict)):
            raise ValueError("malformed payload")
        return PresentedLines(p["presented"], p["chargeback"], p["runs"], stored=True)
    except (ValueError, KeyError) as exc:
        log.warning("month_lines %s %r: stored lines unreadable (%s); computed again", month, key, exc)
        return None


__all__ = ["FORMAT", "PresentedLines", "fingerprint", "month_lines", "per_1m", "presented_lines"]
