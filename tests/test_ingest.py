"""ledger/ingest.py: insert-once, fill-missing and new-rows semantics on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import select
from trainledger.store.ingest import insert_samples
from trainledger.store.models import MetricSample
from trainledger.store.models import MetricSample as MS

from tests.helpers import add_run

UTC = timezone.utc
T0 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)


def _stored(session, run_id="r1"):
    rows = session.exec(select(MS.node, MS.gpu, MS.metric, MS.ts, MS.value).where(MS.run_id == run_id)
                        .order_by(MS.metric, MS.node, MS.gpu, MS.ts)).all()
    return [tuple(r) for r in rows]


@pytest.fixture
def run(session):
    add_run(session, "r1", T0, 1)
    add_run(session, "r2", T0, 1)
    session.commit()


def test_insert_once_skips_stored_keys_and_duplicates(session, run):
    rows = [("r1", "", -1, "loss", T0 + timedelta(seconds=i), float(i)) for i in range(5)]
    assert insert_samples(session, rows) == 5
    # again, plus duplicates inside one call and two new points: only the new points are written
    again = rows + [("r1", "", -1, "loss", T0 + timedelta(seconds=9), 9.0)] * 2 + [("r2", "n0", 0, "u", T0, None)]
    assert insert_samples(session, again) == 2
    session.commit()
    got = _stored(session)
    assert len(got) == 6 and got[0][3] == T0 and got[0][4] == 0.0 and got[-1][4] == 9.0
    assert _stored(session, "r2") == [("n0", 0, "u", T0, None)]


def test_timestamps_in_any_form_are_one_key_and_match_orm_rows(session, run):
    # an ORM-written row, then the same instant as aware (other zone), naive UTC and ISO text: all the same key
    session.add(MetricSample(run_id="r1", node="", gpu=-1, metric="loss", ts=T0, value=1.0))
    session.commit()
    shanghai = T0.astimezone(ZoneInfo("Asia/Shanghai"))
    forms = [shanghai, T0.replace(tzinfo=None), T0.isoformat(), T0]
    assert insert_samples(session, [("r1", "", -1, "loss", ts, 2.0) for ts in forms]) == 0
    assert insert_samples(session, [("", -1, "loss", (T0 + timedelta(microseconds=5)).isoformat(), 3.0)], run_id="r1") == 1
    session.commit()
    got = _stored(session)
    assert [g[4] for g in got] == [1.0, 3.0]
    assert got[1][3] == T0 + timedelta(microseconds=5)


def test_fill_missing_fills_none_but_never_rewrites_a_value(session, run):
    insert_samples(session, [("r1", "n0", 0, "util", T0, None), ("r1", "n0", 0, "util", T0 + timedelta(seconds=1), 0.5)])
    n = insert_samples(session, [("n0", 0, "util", T0, 0.7), ("n0", 0, "util", T0 + timedelta(seconds=1), 0.9),
                                 ("n0", 0, "util", T0 + timedelta(seconds=2), None)], run_id="r1", fill_missing=True)
    assert n == 2  # the filled point and the new (missing) one
    # duplicates in one call behave like a sequence of upserts: the first value of a missing point wins
    k = T0 + timedelta(seconds=2)
    assert insert_samples(session, [("r1", "n0", 0, "util", k, None), ("r1", "n0", 0, "util", k, 0.1),
                                    ("r1", "n0", 0, "util", k, 0.2)], fill_missing=True) == 1
    session.commit()
    assert [g[4] for g in _stored(session)] == [0.7, 0.5, 0.1]


def test_new_rows_insert_as_they_are_and_a_duplicate_raises(session, run):
    rows = [("r1", "", -1, "loss", T0 + timedelta(seconds=i), float(i)) for i in range(1000)]
    assert insert_samples(session, iter(rows), new=True) == 1000
    session.commit()
    assert len(_stored(session)) == 1000
    with pytest.raises(IntegrityError if session.get_bind().dialect.name == "sqlite" else Exception):
        insert_samples(session, rows[:1], new=True)
        session.flush()
    session.rollback()
    with pytest.raises(ValueError):
        insert_samples(session, rows, new=True, fill_missing=True)


def test_a_pending_run_is_flushed_before_its_samples(session):
    from trainledger.store.models import NodeType, Run, RunStatus

    nt = session.exec(select(NodeType).where(NodeType.name == "rtx4090-8x")).one()
    session.add(Run(id="fresh", node_type_id=nt.id, nodes=1, gpus_per_node=8, status=RunStatus.running, started_at=T0))
    assert insert_samples(session, [("fresh", "", -1, "loss", T0, 1.0)]) == 1  # no FK error: the run went first
    session.commit()
    assert _stored(session, "fresh") == [("", -1, "loss", T0, 1.0)]
