"""A month's fingerprint remembered while the database proves it unchanged (``trainledger.store.unchanged``).

The remembered fingerprint is the hash of the month's rows as they are: read again without hashing while nothing is
committed, hashed again after a commit by this session, by another connection (another process's write), by a Core
statement, and never remembered or read back inside a transaction that has written (its writes may be rolled back).
The goodput store's tests (tests/test_goodput_month_store.py: every write that can change a past month) read through
it too. On SQLite and PostgreSQL (``ledger_url``).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import update
from sqlmodel import Session
from trainledger.money.facts import rollup
from trainledger.money.goodput import month_store
from trainledger.store import unchanged
from trainledger.store.db import make_engine
from trainledger.store.models import Run, RunStatus

from tests.helpers import add_fleet, add_run

UTC = timezone.utc
NOW = datetime(2027, 1, 10, tzinfo=UTC)
NOV = "2026-11"
HASH = month_store._hash  # the hash itself (the tests count its calls through the fingerprint)


@pytest.fixture
def s(session):
    add_fleet(session, 4)
    add_run(session, "a", datetime(2026, 11, 3, tzinfo=UTC), 10, nodes=2, status=RunStatus.failed)
    add_run(session, "b", datetime(2026, 11, 12, tzinfo=UTC), 30, nodes=3, offer_name="rtx4090-rent", project="p2")
    session.commit()
    rollup.ensure(session)  # the rollup built, as the first report builds it
    session.commit()
    return session


@pytest.fixture
def hashed(monkeypatch):
    """The months hashed (each call of the fingerprint's hash)."""
    calls: list[str] = []
    def counted(session, month, *a):
        calls.append(month)
        return HASH(session, month, *a)

    monkeypatch.setattr(month_store, "_hash", counted)
    return calls


def fp(s: Session) -> str:
    return month_store.fingerprint(s, NOV, "", NOW)


def fresh(s: Session) -> str:
    """The hash itself, never remembered."""
    return HASH(s, NOV, "", month_store.FORMAT, month_store.RUN_COLUMNS)


def one_state(s: Session) -> bool:
    """Commit, then read in a state that nothing committed elsewhere can move: on SQLite every transaction (the
    ledger's file is this test's alone); on PostgreSQL one REPEATABLE READ transaction, begun here (its snapshot is
    fixed, while the shared server's other databases, other tests', move the snapshot between transactions). True
    where that state holds across commits (SQLite)."""
    s.commit()
    if s.get_bind().dialect.name == "sqlite":
        return True
    s.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    return False


def test_read_again_without_hashing_while_nothing_is_committed(s, hashed):
    """Hashed once, then read back while the database shows nothing committed: on SQLite across transactions, on
    PostgreSQL within one snapshot (:func:`one_state`)."""
    first = fp(s)
    across = one_state(s)
    assert fp(s) == first  # the first look in this state may hash (PostgreSQL: a new snapshot)
    hashed.clear()
    for _ in range(3):
        assert fp(s) == first
        if across:
            s.commit()
    assert hashed == []
    assert fresh(s) == first


def _end_later(s: Session) -> None:
    s.get(Run, "a").ended_at += timedelta(hours=1)


def test_a_commit_by_this_session_is_seen(s, hashed):
    before = fp(s)
    s.commit()
    _end_later(s)
    s.commit()
    after = fp(s)
    assert after != before and after == fresh(s)
    assert len(hashed) >= 2  # hashed again after the write


def test_a_core_statement_committed_is_seen(s, hashed):
    before = fp(s)
    s.commit()
    s.connection().execute(update(Run).where(Run.id == "b").values(nodes=1))
    s.commit()
    assert fp(s) != before and fp(s) == fresh(s)


def test_a_commit_by_another_connection_is_seen(s, ledger_url, hashed):
    """Another engine (another process's write): its commit changes the marker this connection reads."""
    before = fp(s)
    s.commit()
    other = make_engine(ledger_url, upgrade=False)
    try:
        with Session(other) as o:
            o.get(Run, "b").nodes = 2
            o.commit()
    finally:
        other.dispose()
    after = fp(s)
    assert after != before and after == fresh(s)
    assert len(hashed) >= 2  # hashed again after the write


def test_nothing_is_remembered_inside_a_transaction_that_wrote(s, hashed):
    before = fp(s)
    s.commit()
    _end_later(s)
    s.flush()
    assert unchanged.marker(s.connection()) is None
    pending = fp(s)  # hashed: the pending write is in it ...
    assert pending != before and fp(s) == pending
    assert hashed == [NOV, NOV, NOV]
    s.rollback()  # ... and after the rollback the month is as it was
    assert fp(s) == before == fresh(s)


def test_a_rolled_back_write_leaves_the_remembered_value_true(s, hashed):
    before = fp(s)
    s.commit()
    s.connection().execute(update(Run).where(Run.id == "a").values(nodes=4))
    s.rollback()
    assert fp(s) == before == fresh(s)
