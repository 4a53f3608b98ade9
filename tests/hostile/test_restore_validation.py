"""`db restore` takes only a file that is exactly a trainledger ledger; anything else is one line and changes nothing.

The finding: a SQLite backup carrying ``CREATE TRIGGER ... AFTER INSERT ON run`` was restored; a
later 8-node import was stored as 1 node and `db rollup` still said "consistent". Now:

* SQLite: the backup's schema must equal, object for object, what the migrations build at its
  revision (no extra trigger, view, table or index, nothing missing or altered), and it must pass
  ``PRAGMA integrity_check``.
* PostgreSQL: every ``pg_restore --list`` entry must be one a ledger's dump has (tables, data,
  sequences, defaults, constraints, indexes, enum types in schema public), and every default
  a sequence's nextval: a trigger (and its function), a view, a foreign table or an odd default
  is refused.

Every refusal: exit 2, one line naming FILE and the object, and the target ledger unchanged;
after it an 8-node import is stored with 8 nodes.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from trainledger.store.db import get_engine, make_engine

from tests.hostile.conftest import assert_clean, assert_refused, invoke, snapshot, unchanged
from tests.hostile.test_migrations_backups import write_history

EIGHT_NODES = "id,name,node_type,nodes,start,end,status\nafter-restore,big,rtx4090-8x,8,2026-11-02T00:00:00+00:00,2026-11-02T05:00:00+00:00,succeeded\n"

SQLITE_TAMPERING = {
    "trigger": ("CREATE TRIGGER shrink AFTER INSERT ON run BEGIN UPDATE run SET nodes = 1 WHERE id = NEW.id; END",
                "trigger 'shrink'"),
    "view": ("CREATE VIEW everything AS SELECT * FROM run", "view 'everything'"),
    "table": ("CREATE TABLE stash (x TEXT)", "table 'stash'"),
    "index": ("CREATE INDEX ix_extra ON run (name)", "index 'ix_extra'"),
    "dropped index": ("DROP INDEX ix_run_status_heartbeat", "lacks the index 'ix_run_status_heartbeat'"),
    "altered table": ("ALTER TABLE setting ADD COLUMN note TEXT", "table 'setting' differs"),
}


def _nodes_of(url: str, run_id: str):
    eng = create_engine(url)
    with eng.connect() as c:
        nodes = c.execute(text("SELECT nodes FROM run WHERE id = :i"), {"i": run_id}).scalar()
    eng.dispose()
    return nodes


def _backup(url: str, path: Path) -> Path:
    assert_clean(invoke(["db", "backup", "--out", path], url), codes=(0,))
    return path


@pytest.mark.parametrize("kind", list(SQLITE_TAMPERING))
def test_a_tampered_sqlite_backup_is_refused(sqlite_url, tmp_path, kind):
    make_engine(sqlite_url).dispose()
    write_history(sqlite_url)
    good = _backup(sqlite_url, tmp_path / "good.db")
    bad = tmp_path / "bad.db"
    shutil.copy(good, bad)
    statement, named = SQLITE_TAMPERING[kind]
    conn = sqlite3.connect(bad)
    conn.executescript(statement)
    conn.close()

    target = f"sqlite:///{tmp_path / 'target.db'}"
    make_engine(target).dispose()
    write_history(target)
    get_engine.cache_clear()
    before = snapshot(target)
    out = invoke(["db", "restore", bad, "--force"], target)
    assert_refused(out, "FILE", named, context=kind)
    get_engine.cache_clear()
    unchanged(target, before, context=kind)
    csv = tmp_path / "eight.csv"
    csv.write_text(EIGHT_NODES)
    assert_clean(invoke(["import", csv], target), codes=(0,))
    assert _nodes_of(target, "after-restore") == 8
    assert_clean(invoke(["db", "restore", good, "--force"], target), codes=(0,))  # the untouched backup still restores


def test_a_damaged_sqlite_backup_fails_the_integrity_check(sqlite_url, tmp_path):
    make_engine(sqlite_url).dispose()
    write_history(sqlite_url)
    good = _backup(sqlite_url, tmp_path / "good.db")
    bad = tmp_path / "damaged.db"
    shutil.copy(good, bad)
    conn = sqlite3.connect(bad)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'ix_run_status_heartbeat'").fetchone()[0]
    conn.close()
    with open(bad, "r+b") as fh:  # scribble over the cell pointers of the index's b-tree page
        fh.seek((root - 1) * page_size + 8)
        fh.write(b"\xff" * 16)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    make_engine(target).dispose()
    before = snapshot(target)
    out = invoke(["db", "restore", bad], target)
    assert_refused(out, "FILE")
    assert "integrity_check" in out.stderr or "damaged" in out.stderr or "not a trainledger" in out.stderr, out.stderr
    get_engine.cache_clear()
    unchanged(target, before)


PG_TAMPERING = {
    "trigger": ("CREATE FUNCTION shrink() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.nodes := 1; RETURN NEW; END $$;"
                "CREATE TRIGGER shrink BEFORE INSERT ON run FOR EACH ROW EXECUTE FUNCTION shrink()",
                "function 'shrink()'"),
    # the audit log's guard by name, on another table: only its own triggers on audit_log are accepted
    "guard_on_run": ("CREATE FUNCTION shrink() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.nodes := 1; "
                     "RETURN NEW; END $$; CREATE TRIGGER audit_log_append_only BEFORE INSERT ON run "
                     "FOR EACH ROW EXECUTE FUNCTION shrink()", "function 'shrink()'"),
    "view": ("CREATE VIEW everything AS SELECT * FROM run", "'VIEW public everything'"),
    "table": ("CREATE TABLE stash (x text)", "table 'stash'"),
    "schema": ("CREATE SCHEMA side; CREATE TABLE side.run (x text)", "'SCHEMA - side'"),
    "default": ("ALTER TABLE run ALTER COLUMN name SET DEFAULT current_user", "default"),
}


@pytest.mark.parametrize("kind", list(PG_TAMPERING))
def test_a_tampered_postgresql_dump_is_refused(pg_databases, tmp_path, kind):
    if shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is required (Debian: postgresql-client)")
    source = pg_databases()
    make_engine(source).dispose()
    write_history(source)
    eng = create_engine(source)
    with eng.begin() as c:
        c.exec_driver_sql(PG_TAMPERING[kind][0])
    eng.dispose()
    get_engine.cache_clear()
    bad = _backup(source, tmp_path / "bad.dump")

    target = pg_databases()
    make_engine(target).dispose()
    write_history(target)
    get_engine.cache_clear()
    before = snapshot(target)
    out = invoke(["db", "restore", bad, "--force"], target)
    assert_refused(out, "FILE", PG_TAMPERING[kind][1], context=kind)
    get_engine.cache_clear()
    unchanged(target, before, context=kind)
    csv = tmp_path / "eight.csv"
    csv.write_text(EIGHT_NODES)
    assert_clean(invoke(["import", csv], target), codes=(0,))
    assert _nodes_of(target, "after-restore") == 8


def test_a_postgresql_dump_cannot_bring_its_own_audit_guard_body(pg_databases, tmp_path):
    """A dump whose audit-log guard function (accepted by name) has a body of its own is restored with trainledger's
    body: afterwards an UPDATE of the audit log is refused, not let through by the dump's function."""
    from sqlalchemy.exc import DBAPIError
    from trainledger.store.append_only import PG_FUNCTIONS

    if shutil.which("pg_dump") is None:
        pytest.fail("pg_dump is required (Debian: postgresql-client)")
    assert PG_FUNCTIONS == {"audit_log_append_only()"}
    source = pg_databases()
    make_engine(source).dispose()
    write_history(source)
    eng = create_engine(source)
    with eng.begin() as c:
        c.exec_driver_sql("INSERT INTO audit_log (at, actor, origin, client, action, target) "
                          "VALUES (now(), 'ops', 'cli', 'host', 'setting.set', 'currency')")
        c.exec_driver_sql("CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql "
                          "AS $$ BEGIN RETURN NEW; END $$")  # lets every change through
    eng.dispose()
    get_engine.cache_clear()
    dump = _backup(source, tmp_path / "guard.dump")

    target = pg_databases()
    make_engine(target).dispose()
    get_engine.cache_clear()
    assert_clean(invoke(["db", "restore", dump, "--force"], target), codes=(0,))
    get_engine.cache_clear()
    eng = create_engine(target)
    try:
        with eng.begin() as c:
            assert c.exec_driver_sql("SELECT actor, action FROM audit_log").all() == [("ops", "setting.set")]
        for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log",
                          "TRUNCATE audit_log"):
            with pytest.raises(DBAPIError, match="append-only"):
                with eng.begin() as c:
                    c.exec_driver_sql(statement)
        with eng.begin() as c:
            assert c.exec_driver_sql("SELECT actor FROM audit_log").all() == [("ops",)]
    finally:
        eng.dispose()


def test_the_restored_guard_is_the_migrations_guard():
    """trainledger.store.append_only re-creates after a restore exactly what migration 0020 created."""
    import importlib.util
    from pathlib import Path

    from trainledger.store.append_only import PG_GUARD

    path = Path(__file__).parents[2] / "ledger/store/migrations/versions/0020_audit_and_identity.py"
    spec = importlib.util.spec_from_file_location("m0020", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    created = [s.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION") for s in module._PG_GUARDS]
    assert created == [s for s in PG_GUARD if not s.startswith("DROP")]
