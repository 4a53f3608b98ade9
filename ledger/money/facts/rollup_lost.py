"""The lost interval stored on each run (``run.lost_from``/``lost_until``), kept by the rollup's
session events (:mod:`trainledger.money.facts.rollup`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from sqlalchemy import (
    String,
    select,
    type_coerce,
    update,
)
from sqlalchemy.engine import Connection
from trainledger.money.facts.rollup_facts import _utc
from trainledger.money.rates.months import (
    lost_interval,
    run_interval,
)
from trainledger.store.models import (
    Run,
)


def run_lost_interval(status: Any, started: Any, ended: Any, heartbeat: Any,
                      last_checkpoint: Any) -> tuple[Optional[datetime], Optional[datetime]]:
    """``(lost_from, lost_until)`` of a run from its row (:func:`trainledger.money.rates.months.lost_interval`); Nones
    when it lost nothing."""
    status_v = getattr(status, "value", status)
    started, ended, heartbeat = _utc(started), _utc(ended), _utc(heartbeat)
    iv = run_interval(started, ended, status_v, heartbeat, ended or heartbeat or started) if started else None
    lost = lost_interval(status_v, iv, _utc(last_checkpoint))
    return lost if lost is not None else (None, None)


def keep_lost(run: Run) -> None:
    """Set ``run.lost_from``/``lost_until`` from its other columns (called for every ORM write of a run)."""
    lf, lu = run_lost_interval(run.status, run.started_at, run.ended_at, run.heartbeat_at, run.last_checkpoint_at)
    if _utc(run.lost_from) != lf:
        run.lost_from = lf
    if _utc(run.lost_until) != lu:
        run.lost_until = lu


_LOST_COLUMNS = (Run.id, type_coerce(Run.status, String), Run.started_at, Run.ended_at, Run.heartbeat_at,
                 Run.last_checkpoint_at, Run.lost_from, Run.lost_until)


def lost_mismatches(conn: Connection, fix: bool = False) -> list[str]:
    """Runs whose stored lost interval differs from the one their columns give (a raw SQL write);
    ``fix`` rewrites them (``db rollup --rebuild``)."""
    out = []
    for rid, st, s, e, hb, ck, lf, lu in conn.execute(select(*_LOST_COLUMNS)):
        want = run_lost_interval(st, s, e, hb, ck)
        if (_utc(lf), _utc(lu)) != want:
            out.append(f"run {rid}: stored lost interval {lf} → {lu} != recomputed {want[0]} → {want[1]}")
            if fix:
                conn.execute(update(Run).where(Run.id == rid).values(lost_from=want[0], lost_until=want[1]))
    return out
