"""The wrapper's checks before the start read a SQLite ledger without SQLAlchemy (issue #35): the same answers.

The refusals themselves (unknown node type or offer, ``--resume-of``, a run id that ended, a locked ledger) are
tested through real wrappers in test_wrapper.py and test_wrapper_never_hurts.py, on SQLite (``sqlite3``) and
PostgreSQL (SQLAlchemy) alike.
"""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from sqlalchemy.engine import make_url
from trainledger.sources.capture import precheck
from trainledger.store.db import HEAD_REVISION
from trainledger.store.models import LIVE_STATUSES


@pytest.mark.parametrize("url", ["sqlite:////abs/ledger.db", "sqlite:///rel/ledger.db", "sqlite:///with space/l.db",
                                 "sqlite:///a:b@c/l.db", "sqlite:///~/l.db", "sqlite:////x/.hidden/l"])
def test_a_plain_sqlite_url_names_the_file_sqlalchemy_opens(url):
    assert precheck.sqlite_file(url) == make_url(url).database


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///l.db?mode=ro",
                                 "sqlite:///a%20b.db", "sqlite:///l.db#x", "postgresql+psycopg://u@h/db",
                                 "sqlite+pysqlite:///l.db", "not a url"])
def test_any_other_url_goes_through_sqlalchemy(url):
    assert precheck.sqlite_file(url) is None


def test_the_live_statuses_are_the_models():
    assert precheck.LIVE == tuple(s.value for s in LIVE_STATUSES)


def test_sqlite3_and_sqlalchemy_read_the_same_rows(sqlite_url, monkeypatch):
    with contextlib.closing(sqlite3.connect(precheck.sqlite_file(sqlite_url))) as conn:
        offer, node_type_id = conn.execute("SELECT name, node_type_id FROM offer ORDER BY id").fetchone()
    asks = [("revision", {}), ("offer", {"name": offer}), ("offer", {"name": "nope"}),
            ("node_type", {"name": "rtx4090-8x"}), ("node_type", {"name": "nope"}), ("node_type_name", {"id": 1}),
            ("node_type_names", {}), ("any_offer", {"id": node_type_id}), ("run_status", {"id": "nope"})]
    assert {read for read, _ in asks} == set(precheck.READS)
    with precheck._sqlalchemy_reader(sqlite_url) as full:
        want = [full(read, **params) for read, params in asks]
    monkeypatch.setattr(precheck, "_sqlalchemy_reader", None)  # a SQLite file at head is read with sqlite3 alone
    with precheck._reader(sqlite_url) as light:
        assert [light(read, **params) for read, params in asks] == want
    assert want[0] == [(HEAD_REVISION,)] and want[1] and want[3] and not want[4] and want[6] and want[7]
