"""Waste per run (trainledger.money.account.waste): each run's lost work under one reason; the runs of a reason add up to
the monthly report's ``waste_by_reason`` for it, exactly (SQLite and PostgreSQL)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from trainledger.errors import LedgerInputError
from trainledger.money.account.monthly import monthly_report
from trainledger.money.account.waste import check_reason, run_reasons
from trainledger.money.rates.costs import ZERO, cents
from trainledger.store.models import RunStatus

from tests.helpers import add_fleet, add_run

NOV = datetime(2026, 11, 1, tzinfo=timezone.utc)


def test_runs_by_reason_add_up_to_the_reports_waste(session):
    add_fleet(session, 8)
    add_run(session, "ok", NOV + timedelta(days=1), 10, nodes=4)
    add_run(session, "f1", NOV + timedelta(days=2), 10, nodes=2, status=RunStatus.failed)
    add_run(session, "c1", NOV + timedelta(days=3), 4, nodes=2, status=RunStatus.cancelled, offer_name="rtx4090-rent")
    ck = add_run(session, "k1", NOV + timedelta(days=4), 10, nodes=2, status=RunStatus.crashed)
    ck.last_checkpoint_at, ck.last_checkpoint_step = NOV + timedelta(days=4, hours=6), 600
    session.add(ck)
    session.flush()
    rep = monthly_report(session, "2026-11")
    lines = [asdict(r) for r in rep.runs]
    reasons = run_reasons(session, lines)
    assert reasons == {"f1": "failed", "c1": "cancelled", "k1": "lost_since_checkpoint"}
    by = {k: ZERO for k in rep.summary["waste_by_reason"] if k != "idle"}
    for r in rep.runs:
        if r.run_id in reasons:
            by[reasons[r.run_id]] += r.lost_work_cost
    assert by == {k: v for k, v in rep.summary["waste_by_reason"].items() if k != "idle"}
    assert by["lost_since_checkpoint"] > 0 and by["crashed"] == ZERO
    assert sum(by.values(), ZERO) + rep.summary["idle_cost"] == rep.summary["waste_cost"]
    # the crashed run lost its last 4 of 10 hours: 2 nodes × 4 h at the fleet's busy rate
    k1 = next(r for r in rep.runs if r.run_id == "k1")
    busy = (Decimal(120000) / 36 + Decimal("6.67")) / 720 + Decimal("4.0") * Decimal("0.5")  # rtx4090-own
    assert cents(k1.lost_work_cost) == cents(2 * 4 * busy) == Decimal("53.11")
    assert cents(k1.cost) == cents(2 * 10 * busy)


def test_a_bad_reason_is_one_line():
    assert check_reason("failed") == "failed"
    with pytest.raises(LedgerInputError, match=r"^\?waste=: expected one of failed, crashed, cancelled, "
                                               r"lost_since_checkpoint, got 'idle'$"):
        check_reason("idle")
