"""The checks before a wrapped command starts (``trainledger run``): what the ledger must agree to.

A wrong node type or offer, an unknown ``--resume-of`` or a run id that already ended refuses the command
before it starts (one line, exit 2); a ledger that cannot be reached, is locked or cannot be created never
does (the run starts and its events wait in the journal). The checks never wait on a lock for more than
:data:`CHECK_BUSY_MS`.

They read the ledger with a few plain queries (:data:`READS`), through one of two connections:

* a SQLite ledger file at the current schema (``sqlite:///PATH``, the common case): the standard library's
  ``sqlite3``, so the command starts before SQLAlchemy, SQLModel and the tables are loaded; the writer loads
  them while the command runs (issue #35: the wrapper's start and its added wall time);
* anything else (a new or older ledger, which is created or upgraded first; PostgreSQL; a URL with options):
  SQLAlchemy, as every other command opens the ledger.

Either way the reads run in a transaction that takes the write lock as the writers' do (``BEGIN IMMEDIATE`` on
SQLite), then rolls back: a ledger another writer holds is said at once (the run's registration would wait for it).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Optional

from trainledger.errors import LedgerInputError

#: how long the checks before the start may wait for a locked ledger (the command waits for them)
CHECK_BUSY_MS = 200
#: the statuses of a run that has not ended (``trainledger.store.models.LIVE_STATUSES``; a test keeps them equal)
LIVE = ("queued", "running")
#: every read of the checks, in SQL that SQLite and PostgreSQL both take (named parameters)
READS = {
    "revision": "SELECT version_num FROM alembic_version",
    "offer": "SELECT id, node_type_id FROM offer WHERE name = :name",
    "node_type": "SELECT id, name, gpu_model, gpus_per_node FROM node_type WHERE name = :name",
    "node_type_name": "SELECT name FROM node_type WHERE id = :id",
    "node_type_names": "SELECT name FROM node_type ORDER BY name",
    "any_offer": "SELECT id FROM offer WHERE node_type_id = :id LIMIT 1",
    "run_status": "SELECT status FROM run WHERE id = :id",
}

#: ``rows(read, params)``: the rows of one of :data:`READS`
Rows = Callable[..., list[tuple]]


def check_ledger(req: Any) -> Optional[str]:
    """Refuse an unknown node type or offer, or an unknown ``--resume-of``; never wait on a lock.

    ``req`` is the :class:`~trainledger.sources.capture.wrapper.WrapRequest`; its ``node_type``, ``share``,
    ``share_note`` and ``costed`` are set here. Returns a warning when the ledger cannot be reached, is locked by
    another writer or cannot be created (the run then starts anyway and its events wait in the journal); raises
    :class:`LedgerInputError` otherwise. A run id that already ended makes a later wrapped part of a Slurm job a
    part of its run (``topology.part``); elsewhere it is refused.
    """
    try:
        with _reader(req.db_url) as rows:
            _check_run(rows, req)
    except LedgerInputError:
        raise
    except Exception as exc:  # unreachable, locked, uncreatable: never a reason not to run the job
        return (f"ledger {_shown(req.db_url)} not usable now ({_reason(exc)}); the run starts and its events wait "
                "in the journal")
    return None


def _check_run(rows: Rows, req: Any) -> None:
    topo = req.topology
    _check_node_type_and_offer(rows, req)
    if topo.resume_of and not rows("run_status", id=topo.resume_of) and topo.run_id_from != "slurm":
        raise LedgerInputError(f"--resume-of: no run {topo.resume_of!r} in the ledger")
    existing = rows("run_status", id=topo.run_id)
    if existing and topo.owns_run and existing[0][0] not in LIVE:
        if topo.run_id_from == "slurm":
            topo.make_part(f"part-{os.getpid()}")
            return
        raise LedgerInputError(f"--run-id: run {topo.run_id} already ended ({existing[0][0]}); "
                               f"a restart is a new run: --resume-of {topo.run_id}")


def _check_node_type_and_offer(rows: Rows, req: Any) -> None:
    """Refuse an unknown node type or an offer of another one; an offer alone names its node type.
    Sets the run's share of its node and whether an offer can cost it (``req.costed``)."""
    off = next(iter(rows("offer", name=req.offer)), None) if req.offer else None  # (id, node_type_id)
    if req.offer and off is None and req.node_type is None:
        raise LedgerInputError(f"--offer: no offer {req.offer!r} (see `trainledger pricing list`)")
    if req.node_type is None and off is not None:  # the offer says which node type it pays for
        req.node_type = rows("node_type_name", id=off[1])[0][0]
    if req.node_type is None:
        return
    found = rows("node_type", name=req.node_type)
    if not found:
        names = ", ".join(name for (name,) in rows("node_type_names"))
        raise LedgerInputError(f"--node-type: unknown node type {req.node_type!r}; known: {names} "
                               "(add one with `trainledger pricing import`)")
    nt_id, nt_name, gpu_model, gpus_per_node = found[0]
    from trainledger.money.allocation.shares import alloc_share

    try:
        req.share = alloc_share(req.topology.alloc, nt_name, gpu_model, gpus_per_node)
    except LedgerInputError as exc:  # a wrong site-wide MIG or GPU setting never refuses the job (issue 37)
        req.share, req.share_note = None, f"{exc}; the run is costed as the whole node"
    if req.offer and (off is None or off[1] != nt_id):
        raise LedgerInputError(f"--offer: {req.offer!r} is not an offer for node type {req.node_type} "
                               "(see `trainledger pricing list`)")
    req.costed = off is not None or bool(rows("any_offer", id=nt_id))


# --- the two connections ------------------------------------------------------------------------

@contextlib.contextmanager
def _reader(url: str) -> Iterator[Rows]:
    """The reads on the ledger at ``url``: plain ``sqlite3`` when it is a SQLite file at the current schema,
    else SQLAlchemy (which creates or upgrades the schema first)."""
    conn = _sqlite_at_head(url)
    if conn is None:
        with _sqlalchemy_reader(url) as rows:
            yield rows
        return
    try:
        yield lambda read, **params: conn.execute(READS[read], params).fetchall()
    finally:
        conn.close()  # rolls back: the checks write nothing


def sqlite_file(url: str) -> Optional[str]:
    """The file of a plain ``sqlite:///PATH`` URL (what SQLAlchemy's ``make_url(url).database`` is; a test keeps
    them equal), None for any other URL: in memory, with options (``?...``), escapes (``%``), or not SQLite."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    path = url[len(prefix):]
    if not path or path == ":memory:" or any(c in path for c in "?%#"):
        return None
    return path


def _sqlite_at_head(url: str):
    """A ``sqlite3`` connection to the ledger file of ``url`` when its schema is the current one (nothing to
    create or upgrade), else None. Its reads wait at most :data:`CHECK_BUSY_MS` for a lock (in WAL mode a
    writer's lock does not stop them at all)."""
    path = sqlite_file(url)
    if path is None or not os.path.isfile(path):
        return None
    import sqlite3

    from trainledger.store.migrations import HEAD_REVISION

    conn = sqlite3.connect(os.path.abspath(path), timeout=CHECK_BUSY_MS / 1000, isolation_level=None)
    try:
        try:
            revision = conn.execute(READS["revision"]).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise  # locked, unreadable, not a database: the warning says why
            revision = None  # an empty file: SQLAlchemy's way creates the ledger
        if revision is None or revision[0] != HEAD_REVISION:
            conn.close()
            return None
        conn.execute("BEGIN IMMEDIATE")  # the writers' lock, taken as theirs is (store.db); held: an error
    except BaseException:
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def _sqlalchemy_reader(url: str) -> Iterator[Rows]:
    """The reads through SQLAlchemy, after creating or upgrading the ledger's schema."""
    from sqlalchemy import text
    from trainledger.store.db import upgrade_schema

    engine = _engine_without_waiting(url)
    try:
        upgrade_schema(engine)
        with engine.connect() as conn:
            yield lambda read, **params: [tuple(r) for r in conn.execute(text(READS[read]), params)]
    finally:
        engine.dispose()


def _engine_without_waiting(url: str):
    """The ledger's engine for the checks before the start: a locked SQLite file answers "database is locked"
    after :data:`CHECK_BUSY_MS` instead of the writers' busy timeout; PostgreSQL gives up on a lock as soon."""
    from sqlalchemy import event
    from trainledger.store.db import make_engine

    engine = make_engine(url, upgrade=False)

    def short_waits(dbapi_conn, _record) -> None:
        cur = dbapi_conn.cursor()
        if engine.dialect.name == "sqlite":
            cur.execute(f"PRAGMA busy_timeout={CHECK_BUSY_MS}")
        else:
            cur.execute(f"SET lock_timeout = {CHECK_BUSY_MS}")
            dbapi_conn.commit()
        cur.close()

    event.listen(engine, "connect", short_waits)
    return engine


def _shown(url: str) -> str:
    """The URL safe to print: a plain SQLite file's as it is (it holds no password), else redacted."""
    if sqlite_file(url) is not None:
        return url
    from trainledger.store.db import redact_url

    return redact_url(url)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "orig", exc)).strip().splitlines()[0][:200]
