"""Waste per run: which reason of the monthly report's ``waste_by_reason`` a run's lost work counts under."""

from __future__ import annotations

from typing import Any, Iterable

from sqlmodel import Session, col, select
from trainledger.errors import LedgerInputError
from trainledger.store.models import WASTE_STATUSES, Run

SINCE_CHECKPOINT = "lost_since_checkpoint"
#: the reasons runs are behind (idle is the fleet's, no run's)
RUN_REASONS = tuple(s.value for s in WASTE_STATUSES) + (SINCE_CHECKPOINT,)


def check_reason(value: str, flag: str = "?waste=") -> str:
    """A waste reason runs are behind, or a one-line error naming ``flag`` and the choices."""
    if value not in RUN_REASONS:
        raise LedgerInputError(f"{flag}: expected one of {', '.join(RUN_REASONS)}, got {value!r}")
    return value


def run_reasons(session: Session, lines: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Run id → its waste reason, for the run lines (presented or not) with lost work: a run that never
    checkpointed counts under its status (failed, crashed, cancelled), one that did under
    ``lost_since_checkpoint`` — as ``trainledger.money.account.monthly._waste`` splits the month's lost work."""
    waste = {s.value for s in WASTE_STATUSES}
    ids = sorted({r["run_id"] for r in lines if r["status"] in waste})
    checkpointed: set[str] = set()
    for i in range(0, len(ids), 500):
        checkpointed |= set(session.exec(select(Run.id).where(col(Run.id).in_(ids[i:i + 500]),
                                                              col(Run.last_checkpoint_at).is_not(None))).all())
    status = {r["run_id"]: r["status"] for r in lines}
    return {rid: SINCE_CHECKPOINT if rid in checkpointed else status[rid] for rid in ids}
