"""Bulk insert of ``MetricSample`` rows, with a fast path per dialect.

:func:`insert_samples` is the one way the ledger writes metric samples in bulk
(``trainledger collect``; the run journal's ``samples`` events). Semantics are
those of the unique key ``(run_id, node, gpu, metric, ts)``:

* default (*insert once*): rows whose key is already stored are skipped, so a
  replay or a repeated collect never counts anything twice;
* ``fill_missing=True``: as above, but a stored ``value IS NULL`` (a point that
  was missing) takes the new row's value; a measured value is never rewritten;
* ``new=True``: the caller states the rows are new (a fresh run, a bulk
  load); they are inserted as they are and a duplicate key raises.

Fast paths (``python -m bench`` measures them, docs/PERFORMANCE.md):

* SQLite: one ``executemany`` of plain tuples on the session's connection
  (``INSERT … ON CONFLICT DO NOTHING``), timestamps pre-formatted the way
  SQLAlchemy stores them, so rows written here and through the ORM compare equal;
* PostgreSQL: binary ``COPY``. Insert-once first tries a ``COPY`` straight into
  ``metric_sample`` inside a savepoint (new samples, the usual case, go in at
  ``COPY`` speed); if a key is stored already (a replay) the savepoint is rolled
  back and the chunk goes through a session-local temp table: ``COPY`` into it,
  then one ``INSERT … SELECT … ON CONFLICT DO NOTHING``. ``fill_missing`` always
  takes the temp table (``ON CONFLICT DO UPDATE … WHERE value IS NULL``);
  ``new=True`` is the plain ``COPY``.

Everything runs in the caller's transaction (a session is flushed first, so
pending ORM rows such as the samples' run are there); nothing is committed here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from itertools import islice
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from sqlalchemy.engine import Connection
from sqlmodel import Session

COLUMNS = ("run_id", "node", "gpu", "metric", "ts", "value")
KEY = "run_id, node, gpu, metric, ts"
TABLE = "metric_sample"
#: rows handed to the driver at a time (bounds memory for a generator of rows)
CHUNK = 100_000
PG_TEMP = "tl_ingest_samples"

_UTC = timezone.utc
_COLS = ", ".join(COLUMNS)


def _naive_utc(ts: Any) -> datetime:
    """A sample timestamp (aware or naive-UTC datetime, or ISO text) as naive UTC, as ``UTCDateTime`` stores it."""
    if isinstance(ts, str):
        ts = datetime.fromisoformat(ts)
    tz = ts.tzinfo
    if tz is None:
        return ts
    if tz is not _UTC:
        ts = ts.astimezone(_UTC)
    return ts.replace(tzinfo=None)


def _sqlite_ts(ts: Any) -> str:
    """SQLAlchemy's SQLite DATETIME text ("YYYY-MM-DD HH:MM:SS.ffffff") of a sample timestamp."""
    if isinstance(ts, str):
        # ISO text as the journal writes it (datetime.isoformat of an aware UTC value): sliced, not parsed
        if ts.endswith("+00:00") and len(ts) in (25, 32) and ts[10] == "T":
            return f"{ts[:10]} {ts[11:26]}" if len(ts) == 32 else f"{ts[:10]} {ts[11:19]}.000000"
        ts = datetime.fromisoformat(ts)
    tz = ts.tzinfo
    if tz is not None and tz is not _UTC:
        ts = ts.astimezone(_UTC)
    # isoformat is C code; [:26] drops "+00:00" of an aware UTC value
    return ts.isoformat(" ", "microseconds")[:26]


def _with_ts(rows: list[Sequence[Any]], conv: Callable[[Any], Any]) -> list[tuple]:
    """Plain tuples with the timestamp converted by ``conv``. Converting a timestamp costs more than
    inserting the row, and samples share timestamps (the metrics of one step, the hosts of one
    collect grid point), so each distinct timestamp is converted once per chunk."""
    cache: dict[Any, Any] = {}
    get = cache.get
    out = []
    append = out.append
    for r in rows:
        t = r[4]
        v = get(t)
        if v is None:
            v = cache[t] = conv(t)
        append((r[0], r[1], r[2], r[3], v, r[5]))
    return out


def _sqlite_params(rows: list[Sequence[Any]]) -> list[tuple]:
    return _with_ts(rows, _sqlite_ts)


def _connection(target: Union[Session, Connection]) -> Connection:
    if isinstance(target, Session):
        target.flush()  # pending ORM rows (e.g. the run the samples belong to) first, as autoflush would
        return target.connection()
    return target


def _chunks(rows: Iterable[Sequence[Any]], n: int):
    it = iter(rows)
    while True:
        chunk = list(islice(it, n))
        if not chunk:
            return
        yield chunk


def insert_samples(target: Union[Session, Connection], rows: Iterable[Sequence[Any]], *,
                   run_id: Optional[str] = None, new: bool = False, fill_missing: bool = False) -> int:
    """Insert metric samples in the caller's transaction; returns the number of rows written.

    ``rows``: ``(run_id, node, gpu, metric, ts, value)``, or with ``run_id=``
    given, ``(node, gpu, metric, ts, value)``. ``ts``: an aware datetime, a
    naive UTC datetime, or ISO 8601 text. ``value``: a float or ``None``
    (missing). See the module docstring for ``new`` and ``fill_missing``.
    """
    if new and fill_missing:
        raise ValueError("insert_samples: new=True and fill_missing=True exclude each other")
    conn = _connection(target)
    dialect = conn.dialect.name
    if run_id is not None:
        rows = ((run_id, *r) for r in rows)
    if dialect == "sqlite":
        return _sqlite(conn, rows, new, fill_missing)
    if dialect == "postgresql":
        return _postgresql(conn, rows, new, fill_missing)
    raise ValueError(f"insert_samples: unsupported dialect {dialect!r}")


# --- SQLite -----------------------------------------------------------------------

def _sqlite_sql(new: bool, fill_missing: bool) -> str:
    sql = f"INSERT INTO {TABLE} ({_COLS}) VALUES (?, ?, ?, ?, ?, ?)"
    if new:
        return sql
    if fill_missing:
        return (sql + f" ON CONFLICT ({KEY}) DO UPDATE SET value = excluded.value"
                f" WHERE {TABLE}.value IS NULL AND excluded.value IS NOT NULL")
    return sql + f" ON CONFLICT ({KEY}) DO NOTHING"


def _sqlite(conn: Connection, rows: Iterable[Sequence[Any]], new: bool, fill_missing: bool) -> int:
    sql = _sqlite_sql(new, fill_missing)
    written = 0
    for chunk in _chunks(rows, CHUNK):
        res = conn.exec_driver_sql(sql, _sqlite_params(chunk))
        written += max(0, res.rowcount or 0)
    return written


# --- PostgreSQL ---------------------------------------------------------------------

_PG_TYPES = ["text", "text", "int4", "text", "timestamp", "float8"]


def _pg_params(rows: list[Sequence[Any]]) -> list[tuple]:
    """Tuples with naive-UTC timestamps for binary COPY."""
    return _with_ts(rows, _naive_utc)


def _copy(cur, table: str, rows: list[tuple], with_seq: bool = False) -> None:
    cols = _COLS + (", seq" if with_seq else "")
    with cur.copy(f"COPY {table} ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
        cp.set_types(_PG_TYPES + (["int8"] if with_seq else []))
        write = cp.write_row
        if with_seq:
            for i, r in enumerate(rows):
                write((*r, i))
        else:
            for r in rows:
                write(r)


def _via_temp(cur, rows: list[tuple], fill_missing: bool) -> int:
    """COPY into a session-local temp table, then one INSERT … SELECT … ON CONFLICT."""
    cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {PG_TEMP} (run_id text, node text, gpu int4, metric text, "
                "ts timestamp, value float8, seq int8) ON COMMIT DELETE ROWS")
    cur.execute(f"TRUNCATE {PG_TEMP}")
    if fill_missing:
        _copy(cur, PG_TEMP, rows, with_seq=True)
        # per-row semantics of a sequence of upserts: the first non-missing value of a key wins
        cur.execute(f"INSERT INTO {TABLE} ({_COLS}) SELECT DISTINCT ON ({KEY}) {_COLS} FROM {PG_TEMP} "
                    f"ORDER BY {KEY}, value IS NULL, seq "
                    f"ON CONFLICT ({KEY}) DO UPDATE SET value = EXCLUDED.value "
                    f"WHERE {TABLE}.value IS NULL AND EXCLUDED.value IS NOT NULL")
    else:
        _copy(cur, PG_TEMP, rows)
        # a fresh temp table is scanned in insertion order: of duplicates in one call, the first is kept
        cur.execute(f"INSERT INTO {TABLE} ({_COLS}) SELECT {_COLS} FROM {PG_TEMP} ON CONFLICT ({KEY}) DO NOTHING")
    return max(0, cur.rowcount or 0)


def _postgresql(conn: Connection, rows: Iterable[Sequence[Any]], new: bool, fill_missing: bool) -> int:
    from psycopg.errors import UniqueViolation

    raw = conn.connection.driver_connection  # psycopg 3, inside the caller's transaction
    written = 0
    with raw.cursor() as cur:
        for chunk in _chunks(rows, CHUNK):
            params = _pg_params(chunk)
            if new:
                _copy(cur, TABLE, params)
                written += len(params)
            elif fill_missing:
                written += _via_temp(cur, params, fill_missing=True)
            else:
                # optimistic: new samples (the usual case) go in by COPY at full speed; if any key is
                # stored already (a replay) or repeats in the chunk, the savepoint undoes the attempt
                # and the chunk goes through the temp table with ON CONFLICT DO NOTHING
                cur.execute("SAVEPOINT tl_ingest")
                try:
                    _copy(cur, TABLE, params)
                except UniqueViolation:
                    cur.execute("ROLLBACK TO SAVEPOINT tl_ingest")
                    cur.execute("RELEASE SAVEPOINT tl_ingest")
                    written += _via_temp(cur, params, fill_missing=False)
                else:
                    cur.execute("RELEASE SAVEPOINT tl_ingest")
                    written += len(params)
    return written
