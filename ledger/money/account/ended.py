"""A month's report without run lines once the month has ended, remembered while the ledger is unchanged (issue 39
item 6).

The dashboard's Overview reads the reports of thirteen months and more on every render (the 12-month trend, the
period report's months, the month's own report): each one reads the configuration and the month's ``rollup_month``
rows and costs them again. A month that has **ended** at ``now`` and that no live run touches (:func:`is_storable`,
the rule of the stored goodput totals, ``trainledger.money.goodput.month_store``) has a report that is a function of
the database's contents alone: its period is the whole month whatever ``now`` is, and its rollup facts hold no live
slice. :func:`month_report` remembers such a report per database connection while the database proves nothing was
committed since it was computed (``trainledger.store.unchanged.remembered``, the mechanism the month fingerprints use);
the key names everything else it depends on: the month, the currency argument and the currency it resolves to (the
environment's and the config file's are not in the database), the own offer, whether projects are costed. A month to
date, or one a live run touches, is computed every time.

What is remembered is the report's pickle: each read returns a new object (``pickle.loads``), so no caller can change
what another reads (tests/test_ended_report.py). Pickling keeps every Decimal with its exponent, every instant and time
zone: the report read back equals the one computed, repr for repr.
"""

from __future__ import annotations

import pickle
from datetime import datetime
from typing import Optional

from sqlalchemy import select
from sqlmodel import Session
from trainledger.money.account.month_load import Months
from trainledger.money.account.monthly import MonthlyReport, monthly_report
from trainledger.money.facts import rollup
from trainledger.money.rates.months import month_bounds
from trainledger.store.models import Run, RunStatus
from trainledger.store.settings import display_timezone, presentation_currency
from trainledger.store.unchanged import remembered


def is_storable(session: Session, month: str, now: datetime) -> bool:
    """The month is over at ``now`` and no live run (status running, started before its end) touches it."""
    _, hi = month_bounds(month, display_timezone(session))
    if hi > now:
        return False
    live = session.connection().execute(select(Run.id).where(Run.status == RunStatus.running, Run.started_at < hi)
                                        .limit(1)).first()
    return live is None


def month_report(session: Session, month: str, *, now: datetime, currency: Optional[str] = None,
                 own: Optional[str] = None, projects: bool = False, months: Optional[Months] = None) -> MonthlyReport:
    """``monthly_report(session, month, lines=False, projects=projects, now=now, currency=currency, own=own,
    months=months)``; for a month :func:`is_storable` at ``now``, remembered per ledger state (a new copy each read).
    This session's pending run changes are folded into the rollup first (``rollup.sync``), as a report does."""
    def compute() -> MonthlyReport:
        return monthly_report(session, month, lines=False, projects=projects, now=now, currency=currency, own=own,
                              months=months)

    rollup.sync(session)
    if not is_storable(session, month, now):
        return compute()
    # the key: what the report depends on besides the database; the currency as the report resolves it, for
    # ``$TRAINLEDGER_CURRENCY`` and the config file's are not in the database
    key = ("month_report", month, currency, presentation_currency(session, currency), own, projects)
    blob = remembered(session.connection(), key,
                      lambda: pickle.dumps(compute(), pickle.HIGHEST_PROTOCOL))
    return pickle.loads(blob)


__all__ = ["is_storable", "month_report"]
