"""The rollup's session events: every ORM write of runs, offers, prices, rates or the time zone reaches the rollup.

Registered once, when the tables are loaded (:mod:`trainledger.store.models` calls
``trainledger._load_session_hooks``), so that every program that can write a run
keeps the monthly rollup in step, whatever it imported first. The handlers
load :mod:`trainledger.money.facts.rollup` on first use; this module itself imports
only SQLAlchemy, so ``import trainledger`` stays light and no import order can
meet a half-initialised module.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session as SASession


def _before_flush(session: SASession, flush_context: Any, instances: Any) -> None:
    from trainledger.money.facts import rollup

    rollup.collect(session, flush_context, instances)


def _before_commit(session: SASession) -> None:
    from trainledger.money.facts import rollup

    rollup.before_commit(session)


def _after_soft_rollback(session: SASession, previous_transaction: Any) -> None:
    from trainledger.money.facts import rollup

    rollup.after_rollback(session, previous_transaction)


if not event.contains(SASession, "before_flush", _before_flush):
    event.listen(SASession, "before_flush", _before_flush)
    event.listen(SASession, "before_commit", _before_commit)
    event.listen(SASession, "after_soft_rollback", _after_soft_rollback)
