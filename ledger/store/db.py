"""Engine, sessions and schema upgrades for the ledger.

The ledger URL comes from ``--db URL``, else ``TRAINLEDGER_DB_URL``, else the
config file's ``db`` key (:mod:`trainledger.store.config`), else an embedded
SQLite file in the user's data directory. A new ledger is created in the
configured time zone (``TRAINLEDGER_TIMEZONE`` or the file's ``timezone``). SQLite runs in WAL mode
with a busy timeout, and every transaction starts with ``BEGIN IMMEDIATE`` so
that concurrent writers queue instead of failing with "database is locked".
PostgreSQL URLs use psycopg 3 (``postgresql+psycopg://user@host/db``).
"""

from __future__ import annotations

import contextlib
import fcntl
from functools import lru_cache, partial
from pathlib import Path
from typing import Iterator

from sqlalchemy import event, inspect
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError
from sqlmodel import Session, create_engine
from trainledger.errors import LedgerURLError  # noqa: F401  (raised here; its home is errors, import it from either)
from trainledger.store.config import ENV_URL, configured_url, default_sqlite_path, with_driver  # noqa: F401
from trainledger.store.migrations import HEAD_REVISION  # the newest migration (a test keeps it Alembic's head)
from trainledger.store.unchanged import note_begin

# which ledger (``configured_url``, ``default_sqlite_path``) is the configuration's to say, without SQLAlchemy: the
# run wrapper reads it before its command starts (issue #35); the names stay importable from here

SQLITE_BUSY_TIMEOUT_MS = 60_000
ENV_SQLITE_BUSY_S = "TRAINLEDGER_SQLITE_BUSY_S"


def resolve_url(url: str | None = None) -> str:
    """``--db`` value, else ``$TRAINLEDGER_DB_URL``, else the config file's ``db``, else the embedded SQLite file."""
    url, flag = (url, "--db") if url else configured_url()
    url = with_driver(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise LedgerURLError(
            f"{flag}: cannot parse {redact_url(url)!r}; use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
        ) from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise LedgerURLError(
            f"{flag}: backend {parsed.get_backend_name()!r} is not supported; use sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
        )
    return url


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe to print)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable url>"


def sqlite_busy_timeout_ms() -> int:
    """How long a SQLite writer waits for another writer's lock: ``TRAINLEDGER_SQLITE_BUSY_S`` seconds
    (default 60; :mod:`trainledger.store.envsettings`: a bad value is the default said once on the job's side,
    exit 2 in a CLI command). The run wrapper's checks before the start never wait this long (200 ms)."""
    from trainledger.store.envsettings import SQLITE_BUSY_S, process_setting

    return int(process_setting(SQLITE_BUSY_S) * 1000)


def _sqlite_pragmas(dbapi_conn, _record, busy_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
    # Autocommit at the driver level; SQLAlchemy's "begin" event below issues
    # BEGIN IMMEDIATE so writers take the lock up front (no deadlocking upgrades).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_begin(conn) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")
    note_begin(conn)  # whether this transaction writes: trainledger.store.unchanged


def make_engine(url: str | None = None, *, upgrade: bool = True) -> Engine:
    """Create an engine for the ledger at ``url`` and (by default) upgrade its schema."""
    url = resolve_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).expanduser().parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LedgerURLError(f"--db: cannot create the folder {folder} of the SQLite ledger: {exc.strerror or exc}") from None
        busy_ms = sqlite_busy_timeout_ms()
        engine = create_engine(url, connect_args={"timeout": busy_ms / 1000})
        event.listen(engine, "connect", partial(_sqlite_pragmas, busy_ms=busy_ms))
        event.listen(engine, "begin", _sqlite_begin)
    else:
        engine = create_engine(url, pool_pre_ping=True)
    if upgrade:
        upgrade_schema(engine)
    return engine


def _sqlite_read_pragmas(dbapi_conn, _record, busy_ms: int = SQLITE_BUSY_TIMEOUT_MS) -> None:
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
    cur.execute("PRAGMA query_only=ON")
    cur.close()


def _sqlite_begin_deferred(conn) -> None:
    conn.exec_driver_sql("BEGIN")


def read_only_engine(url: str | None = None) -> Engine:
    """An engine that can only read the ledger (the exporter's): SQLite with ``query_only`` and plain
    (deferred) transactions, so it never takes the write lock; PostgreSQL with read-only transactions.
    The schema is not upgraded here: open the ledger once with :func:`make_engine` first."""
    url = resolve_url(url)
    if make_url(url).get_backend_name() == "sqlite":
        busy_ms = sqlite_busy_timeout_ms()
        engine = create_engine(url, connect_args={"timeout": busy_ms / 1000})
        event.listen(engine, "connect", partial(_sqlite_read_pragmas, busy_ms=busy_ms))
        event.listen(engine, "begin", _sqlite_begin_deferred)
        return engine
    return create_engine(url, pool_pre_ping=True).execution_options(postgresql_readonly=True)


@lru_cache(maxsize=8)
def get_engine(url: str | None = None) -> Engine:
    """A process-wide engine per URL (upgraded on first use)."""
    return make_engine(url)


@contextlib.contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that commits on success and rolls back on any error."""
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


# --- migrations -------------------------------------------------------------

def alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.attributes["engine"] = engine
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory
    from trainledger.store.migrations import __name__ as _  # noqa: F401  (package must exist)

    cfg = alembic_config(None)  # type: ignore[arg-type]
    return ScriptDirectory.from_config(cfg).get_current_head()


def current_revision(bind: Engine | Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    if isinstance(bind, Connection):
        return MigrationContext.configure(bind).get_current_revision()
    with bind.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Serialise ledger creation and upgrades between processes starting at the same time.

    SQLite: an exclusive ``flock`` on ``<ledger>.migrate.lock`` beside the file;
    PostgreSQL: a session advisory lock (``pg_advisory_lock``) held on its own
    connection while the upgrade runs on another.
    """
    if engine.dialect.name == "sqlite":
        db = engine.url.database
        if not db or db == ":memory:":
            yield
            return
        lock_path = Path(db).expanduser().with_suffix(".migrate.lock")
        with open(lock_path, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    else:
        from sqlalchemy import text

        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(7261001)"))
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(7261001)"))
                conn.commit()


def stored_revision(engine: Engine) -> str | None:
    """The ledger's revision read straight from ``alembic_version`` (None: no schema yet)."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    except DBAPIError as exc:
        if "alembic_version" in str(exc.orig):  # no such table: a new ledger
            return None
        raise


def upgrade_schema(engine: Engine, revision: str = "head") -> str:
    """Create or upgrade the ledger (``trainledger db upgrade``) and seed the presets; returns the revision.

    Creation, migration and preset seeding are one serialized step: under
    :func:`_migration_lock`, in one transaction, so the new revision in
    ``alembic_version`` (what the fast path below reads) becomes visible only
    together with the schema and the presets. Processes that start on a ledger
    that does not exist yet wait for the first one, then find it complete.
    """
    if revision in ("head", HEAD_REVISION) and stored_revision(engine) == HEAD_REVISION:
        return HEAD_REVISION
    from alembic import command
    from trainledger.store.catalog.presets import ensure_presets

    target = head_revision() if revision == "head" else revision
    with _migration_lock(engine):
        with engine.begin() as conn:
            current = current_revision(conn)
            if current != target:
                cfg = alembic_config(engine)
                _check_known(cfg, current, engine)
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, revision)
                if current is None and target == HEAD_REVISION:  # a new ledger: in the configured time zone
                    _seed_timezone(conn)
            ensure_presets(conn)
    return target


def _seed_timezone(conn: Connection) -> None:
    """Store the configured time zone (``TRAINLEDGER_TIMEZONE``, else the config file's ``timezone``) as the
    ``timezone`` setting of a ledger being created. An existing ledger keeps its own: its monthly rollup is
    built in it (``trainledger settings timezone NAME`` changes it and rebuilds the rollup)."""
    from sqlalchemy import text
    from trainledger.store import config

    zone = config.configured("timezone").value
    if zone and conn.execute(text("SELECT 1 FROM setting WHERE key = 'timezone'")).first() is None:
        conn.execute(text("INSERT INTO setting (key, value) VALUES ('timezone', :zone)"), {"zone": zone})


def _check_known(cfg, current: str | None, engine: Engine) -> None:
    """A ledger at a revision these migrations do not have (a newer trainledger wrote it): one line, nothing done."""
    from alembic.script import ScriptDirectory

    if current is not None and current not in {r.revision for r in ScriptDirectory.from_config(cfg).walk_revisions()}:
        raise LedgerURLError(f"--db: the ledger at {redact_url(engine.url.render_as_string(hide_password=False))} is at "
                             f"schema revision {current}, which this trainledger does not know (a newer version wrote "
                             "it); upgrade trainledger")


def has_schema(engine: Engine) -> bool:
    return inspect(engine).has_table("run")
