"""The audit log's append-only guard on PostgreSQL, as migration 0020 creates it (issue 40).

A restore (``trainledger db restore``) accepts from a backup only this function and these triggers by name
(:data:`PG_FUNCTIONS`, :data:`PG_TRIGGERS`), and afterwards replaces them with the definitions below, so a
backup cannot bring a function body of its own. Migrations are history and keep their own copy of the SQL;
a test checks that the two create the same guard.
"""

from __future__ import annotations

from typing import Any

#: ``pg_restore --list`` names of the guard's function, and of its triggers on table ``audit_log``
PG_FUNCTIONS = frozenset({"audit_log_append_only()"})
PG_TRIGGERS = frozenset({"audit_log_append_only", "audit_log_no_truncate"})

PG_GUARD = (
    "CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP; END $$",
    "DROP TRIGGER IF EXISTS audit_log_append_only ON audit_log",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
    "DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log",
    "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
    "FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()",
)


def reapply_pg_guard(engine: Any) -> None:
    """(Re)create the guard with trainledger's own definitions, in one transaction (after a restore)."""
    from sqlalchemy import inspect, text

    if "audit_log" not in inspect(engine).get_table_names():  # a ledger older than 0020: its upgrade creates it
        return
    with engine.begin() as conn:
        for statement in PG_GUARD:
            conn.execute(text(statement))
