"""``trainledger db backup|restore``.

SQLite: the online backup API (consistent while runs are writing).
PostgreSQL: ``pg_dump --format=custom`` / ``pg_restore --clean``, run as
argument lists; the password travels in ``PGPASSWORD``, never on the command line.
A backup is written through ``trainledger.store.files.write_output`` (an existing
file needs ``--force``); a restore first checks that the file is exactly a
trainledger ledger (:func:`check_backup`) and changes nothing otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Optional

from sqlalchemy.engine import make_url
from trainledger.errors import LedgerInputError
from trainledger.store.append_only import PG_FUNCTIONS, PG_TRIGGERS, reapply_pg_guard
from trainledger.store.db import make_engine, resolve_url
from trainledger.store.files import check_output, write_output


def _pg_args(url: str) -> tuple[list[str], dict[str, str]]:
    u = make_url(url)
    env = dict(os.environ)
    if u.password:
        env["PGPASSWORD"] = u.password
    args = ["--host", u.host or "localhost", "--port", str(u.port or 5432), "--username", u.username or "postgres"]
    return args + ["--dbname", u.database or "postgres"], env


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LedgerInputError(f"{name}: not found on PATH; install the PostgreSQL client tools (Debian: postgresql-client)")
    return path


def _sqlite_copy(src: sqlite3.Connection, dst_path) -> None:
    """Copy a whole SQLite database with the online backup API (consistent under writers)."""
    dst = sqlite3.connect(dst_path)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def backup(db: Optional[str], out: Path, force: bool = False) -> Path:
    """Write a backup of the ledger to ``out`` (``trainledger.store.files.write_output``: an existing file needs ``force``;
    ``-``: standard output, refused on a terminal)."""
    url = resolve_url(db)
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LedgerInputError(f"--out: cannot create the folder {Path(out).parent}: {exc.strerror or exc}") from None
    check_output(out, force=force, flag="--out", binary=True)  # before connecting; `-`: standard output
    engine = make_engine(url)  # upgrade first so a backup is always at a known schema

    def sqlite_writer(tmp: Path) -> None:
        try:
            _sqlite_copy(sqlite3.connect(make_url(url).database), tmp)
        except sqlite3.Error as exc:  # e.g. "database or disk is full": write_output removes the partial copy
            raise LedgerInputError(f"--out: cannot write {out}: {exc}") from None

    def pg_writer(tmp: Path) -> None:
        args, env = _pg_args(url)
        proc = subprocess.run([_tool("pg_dump"), "--format=custom", "--file", str(tmp), *args], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise LedgerInputError(f"--out: pg_dump failed writing {out}: {_last_line(proc.stderr, proc.returncode)}")

    writer = sqlite_writer if engine.dialect.name == "sqlite" else pg_writer
    engine.dispose()
    return write_output(out, force=force, flag="--out", writer=writer, mode=0o600,  # it holds the whole ledger
                        binary=True)


def _last_line(stderr: str, code: int) -> str:
    return stderr.strip().splitlines()[-1] if stderr.strip() else str(code)


def restore(db: Optional[str], file: Path, force: bool = False) -> None:
    """Replace the ledger with a backup, after :func:`check_backup` found it to be exactly a trainledger ledger."""
    from sqlmodel import Session, select
    from trainledger.store.models import Run

    url = resolve_url(db)
    file = Path(file)
    if not file.is_file():
        raise LedgerInputError(f"FILE: {file} does not exist")
    engine = make_engine(url)  # an unreachable ledger fails here, before any work
    sqlite = engine.dialect.name == "sqlite"
    check_backup(file, "sqlite" if sqlite else "postgresql")  # refused: nothing was touched
    with Session(engine) as s:
        if s.exec(select(Run.id).limit(1)).first() is not None and not force:
            raise LedgerInputError("restore: the target ledger has runs; pass --force to replace it, or restore into a new --db")
    engine.dispose()
    if sqlite:
        _sqlite_copy(sqlite3.connect(f"file:{file}?mode=ro", uri=True), make_url(url).database)
    else:
        args, env = _pg_args(url)
        proc = subprocess.run([_tool("pg_restore"), "--clean", "--if-exists", "--no-owner", "--no-privileges",
                               "--single-transaction", *args, str(file)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LedgerInputError(f"pg_restore failed: {_last_line(proc.stderr, proc.returncode)}")
        engine = make_engine(url)  # an older backup is brought up to the current schema here
        reapply_pg_guard(engine)  # the audit log's guard as trainledger defines it, never the backup's body
    make_engine(url).dispose()  # bring an older backup up to the current schema


# --- what a backup may hold ---------------------------------------------------------------------

def check_backup(file: Path, backend: str) -> None:
    """Refuse (one line, naming the file) a backup that is not exactly a trainledger ledger.

    SQLite: the file passes ``PRAGMA integrity_check`` and ``foreign_key_check``,
    and its schema (every table, index, trigger and view in ``sqlite_master``)
    equals, object for object and statement for statement, the schema that
    trainledger's migrations build at the backup's own revision: no extra
    trigger, view, table or index, nothing missing or altered.
    PostgreSQL: ``pg_restore --list`` reads the archive, every entry is one a
    ``pg_dump`` of a ledger has (the ledger's tables and their data, sequences,
    defaults, constraints, indexes and enum types, in schema ``public``), and
    every column default is a sequence's ``nextval``; its only function and triggers are the audit log's
    append-only guard by name (:mod:`trainledger.store.append_only`), re-created from trainledger's own
    definition after the restore.
    """
    if backend == "sqlite":
        _check_sqlite_backup(file)
    else:
        _check_pg_backup(file)


def _sqlite_objects(conn: sqlite3.Connection) -> dict[tuple[str, str], tuple[str, str]]:
    """(type, name) -> (table, SQL with whitespace collapsed) of every schema object but SQLite's own."""
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    return {(t, n): (tbl, " ".join((sql or "").split())) for t, n, tbl, sql in rows if not n.startswith("sqlite_")}


@lru_cache(maxsize=8)
def expected_sqlite_schema(revision: str) -> dict[tuple[str, str], tuple[str, str]]:
    """The schema trainledger's migrations build on SQLite at ``revision`` (built in a scratch file)."""
    from alembic import command
    from trainledger.store.db import alembic_config

    with tempfile.TemporaryDirectory(prefix="trainledger-schema-") as d:
        engine = make_engine(f"sqlite:///{d}/expected.db", upgrade=False)
        try:
            command.upgrade(alembic_config(engine), revision)
        finally:
            engine.dispose()
        conn = sqlite3.connect(f"{d}/expected.db")
        try:
            return _sqlite_objects(conn)
        finally:
            conn.close()


def known_revisions() -> list[str]:
    from alembic.script import ScriptDirectory
    from trainledger.store.db import alembic_config

    return [r.revision for r in ScriptDirectory.from_config(alembic_config(None)).walk_revisions()]


def _open_sqlite_backup(file: Path) -> tuple[sqlite3.Connection, str]:
    """A read-only connection to the backup and its revision; one-line errors for anything else."""
    try:
        conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
        versions = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
        conn.execute("SELECT count(*) FROM run").fetchone()
    except sqlite3.DatabaseError:
        raise LedgerInputError(f"FILE: {file} is not a trainledger SQLite backup") from None
    if len(versions) != 1 or versions[0] not in known_revisions():
        conn.close()
        raise LedgerInputError(f"FILE: {file} is at revision {versions!r}, which this trainledger does not know "
                               "(a backup of a newer trainledger, or not a trainledger backup)")
    return conn, versions[0]


def _check_sqlite_backup(file: Path) -> None:
    conn, revision = _open_sqlite_backup(file)
    try:
        try:
            integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            foreign = conn.execute("PRAGMA foreign_key_check").fetchone()
            got = _sqlite_objects(conn)
        except sqlite3.DatabaseError as exc:
            raise LedgerInputError(f"FILE: {file} is damaged: {exc}") from None
    finally:
        conn.close()
    if integrity != ["ok"]:
        raise LedgerInputError(f"FILE: {file} fails PRAGMA integrity_check: {integrity[0]}")
    if foreign is not None:
        raise LedgerInputError(f"FILE: {file} fails PRAGMA foreign_key_check: a row of {foreign[0]} points at a "
                               f"missing row of {foreign[2]}")
    want = expected_sqlite_schema(revision)
    for kind, name in sorted(got.keys() - want.keys()):
        raise LedgerInputError(f"FILE: {file} has a {kind} {name!r} on {got[kind, name][0]!r} that a trainledger "
                               f"ledger at revision {revision} does not have; not restored")
    for kind, name in sorted(want.keys() - got.keys()):
        raise LedgerInputError(f"FILE: {file} lacks the {kind} {name!r} of a trainledger ledger at revision {revision}; "
                               "not restored")
    for key in sorted(want):
        if got[key] != want[key]:
            raise LedgerInputError(f"FILE: {file}: the {key[0]} {key[1]!r} differs from trainledger's schema at revision "
                                   f"{revision}; not restored")


#: pg_restore --list entry types a ledger's dump has (longest first, for prefix matching)
PG_ENTRY_TYPES = sorted(["TABLE", "TABLE DATA", "SEQUENCE", "SEQUENCE OWNED BY", "SEQUENCE SET", "DEFAULT",
                         "CONSTRAINT", "FK CONSTRAINT", "INDEX", "TYPE", "ACL", "ENCODING", "STDSTRINGS",
                         "SEARCHPATH", "FUNCTION", "TRIGGER"], key=len, reverse=True)
_PG_ENTRY = re.compile(r"^\d+; \d+ \d+ (?P<rest>.+)$")
_PG_DEFAULT = re.compile(r"SET DEFAULT nextval\('public\.[A-Za-z0-9_]+'::regclass\);$")
#: a constant column default (the rollup's zero facts, migration 0004): a literal, no function call
_PG_CONST_DEFAULT = re.compile(r"^\s*[a-z_]+ [a-z ]+(\(\d+\))? DEFAULT (-?\d+|'[^'\\()]*'::[a-z ]+(\(\d+\))?)( NOT NULL)?,?$")


def _ledger_names() -> tuple[set[str], set[str]]:
    """The ledger's table names (with alembic_version) and enum type names."""
    import trainledger.store.models  # noqa: F401  (registers the tables)
    from sqlalchemy import Enum
    from sqlmodel import SQLModel

    tables = set(SQLModel.metadata.tables) | {"alembic_version"}
    enums = {c.type.name for t in SQLModel.metadata.tables.values() for c in t.columns
             if isinstance(c.type, Enum) and c.type.name}
    return tables, enums


def _pg_entry(line: str) -> Optional[tuple[str, list[str]]]:
    m = _PG_ENTRY.match(line)
    if m is None:
        return None
    rest = m.group("rest")
    for kind in PG_ENTRY_TYPES:
        if rest.startswith(kind + " "):
            return kind, rest[len(kind) + 1:].split()
    return rest.rsplit(" ", 1)[0], []  # an entry a ledger never has: its type, schema and name (no owner)


def _check_pg_entry(file: Path, kind: str, words: list[str], tables: set[str], enums: set[str]) -> None:
    if kind not in PG_ENTRY_TYPES:
        raise LedgerInputError(f"FILE: {file} holds {kind!r}, which a trainledger backup never has "
                               "(only the ledger's tables, sequences, indexes, constraints and enum types); not restored")
    if kind in ("ENCODING", "STDSTRINGS", "SEARCHPATH", "ACL"):
        return  # settings of the dump, and grants (restored with --no-privileges)
    schema, name = (words + ["", ""])[:2]
    if schema != "public":
        raise LedgerInputError(f"FILE: {file} holds a {kind} in schema {schema!r}; a trainledger backup has only "
                               "schema public; not restored")
    if kind in ("TABLE", "TABLE DATA", "CONSTRAINT", "FK CONSTRAINT", "DEFAULT") and name not in tables:
        raise LedgerInputError(f"FILE: {file} holds a {kind} of table {name!r}, which is not a trainledger table; "
                               "not restored")
    if kind == "TYPE" and name not in enums:
        raise LedgerInputError(f"FILE: {file} holds a type {name!r}, which is not a trainledger enum; not restored")
    if kind == "FUNCTION" and name not in PG_FUNCTIONS:
        raise LedgerInputError(f"FILE: {file} holds a function {name!r}; a trainledger backup has only the audit "
                               "log's guard; not restored")
    if kind == "TRIGGER" and (name != "audit_log" or (words + ["", "", ""])[2] not in PG_TRIGGERS):
        raise LedgerInputError(f"FILE: {file} holds a trigger on {name!r} that is not the audit log's guard; "
                               "not restored")


def _check_pg_backup(file: Path) -> None:
    tool = _tool("pg_restore")
    listing = subprocess.run([tool, "--list", str(file)], capture_output=True, text=True)
    if listing.returncode != 0:
        raise LedgerInputError(f"FILE: {file} is not a pg_dump archive (pg_restore --list: "
                               f"{_last_line(listing.stderr, listing.returncode)})")
    tables, enums = _ledger_names()
    seen = set()
    for line in listing.stdout.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        entry = _pg_entry(line)
        if entry is None:
            raise LedgerInputError(f"FILE: {file}: unexpected pg_restore --list line {line[:80]!r}; not restored")
        _check_pg_entry(file, *entry, tables, enums)
        if entry[0] == "TABLE":
            seen.add(entry[1][1])
    if not {"run", "alembic_version"} <= seen:
        raise LedgerInputError(f"FILE: {file} is a pg_dump archive, but not of a trainledger ledger (no run table)")
    schema = subprocess.run([tool, "--schema-only", "--file", "-", str(file)], capture_output=True, text=True)
    for line in schema.stdout.splitlines():
        if " DEFAULT " in line and not (_PG_DEFAULT.search(line) or _PG_CONST_DEFAULT.match(line)):
            raise LedgerInputError(f"FILE: {file} sets a column default that is not a sequence ({line.strip()[:80]!r}); "
                                   "not restored")
