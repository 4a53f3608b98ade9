"""Whether the ledger's database is unchanged since an earlier look, asked of the database itself (issue 39 item 6).

A figure computed from the ledger (a month's fingerprint: ``trainledger.money.goodput.month_store``) can be
remembered per database connection while the database proves nothing was committed since it was computed
(:func:`remembered`); reading that proof costs one statement, not a pass over the rows.

:func:`marker` is equal at two looks through the same connection only when no write was committed to the database
between them, by any connection or process:

* **SQLite:** ``PRAGMA data_version`` (a connection's value changes when another connection commits to the file) and
  the connection's own ``total_changes`` (rows it inserted, updated or deleted, committed or rolled back: it never
  goes back). Every transaction begins with ``BEGIN IMMEDIATE`` (``trainledger.store.db``), so no other connection
  commits while one is open.
* **PostgreSQL:** ``txid_current_snapshot()``: a transaction that writes takes an id, which moves ``xmax``, and a
  transaction in progress that commits leaves the snapshot's list, so any commit in between changes it; with the
  server's start time and the database's name.

None (nothing remembered or read back) while this connection's transaction has written anything (SQLite: its
``total_changes`` moved since ``BEGIN``; PostgreSQL: ``txid_current_if_assigned()``): such a transaction may still be
rolled back, and on PostgreSQL its own writes are not in its snapshot's ids. Other databases: always None.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional, TypeVar

from sqlalchemy.engine import Connection

T = TypeVar("T")

#: ``Connection.info`` keys (the info of the driver's connection: it lives as long as that connection)
AT_BEGIN = "trainledger_total_changes_at_begin"
_MEMO = "trainledger_unchanged_memo"


def note_begin(conn: Connection) -> None:
    """At ``BEGIN`` (SQLite): the connection's ``total_changes``, so :func:`marker` can tell whether this transaction
    has written."""
    conn.info[AT_BEGIN] = conn.connection.dbapi_connection.total_changes


def marker(conn: Connection) -> Optional[tuple]:
    """A value equal at two looks through ``conn`` only if nothing was committed to the database in between; None
    when it cannot tell (this transaction has written; another database)."""
    backend = conn.dialect.name
    if backend == "sqlite":
        changes = conn.connection.dbapi_connection.total_changes
        if conn.info.get(AT_BEGIN) != changes:
            return None
        return ("sqlite", conn.exec_driver_sql("PRAGMA data_version").scalar(), changes)
    if backend == "postgresql":
        row = conn.exec_driver_sql("SELECT txid_current_if_assigned(), txid_current_snapshot()::text, "
                                   "pg_postmaster_start_time(), current_database()").one()
        return None if row[0] is not None else ("postgresql", *row[1:])
    return None


def remembered(conn: Connection, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, or the value it gave for ``key`` through this connection while :func:`marker` has not changed
    since (``key`` must name everything the value depends on besides the database's contents)."""
    seen = marker(conn)
    if seen is None:
        return compute()
    memo: Any = conn.info.get(_MEMO)
    if memo is None or memo[0] != seen:
        memo = conn.info[_MEMO] = (seen, {})
    if key in memo[1]:
        return memo[1][key]
    value = compute()
    if marker(conn) == seen:  # nothing committed while it was computed
        memo[1][key] = value
    return value


__all__ = ["AT_BEGIN", "marker", "note_begin", "remembered"]
