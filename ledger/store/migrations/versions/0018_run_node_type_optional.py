"""run.node_type_id may be NULL: a run recorded without a node type is kept, not costed (issue #35)

No default node type is assumed any more: a run with no ``--node-type``, no ``$TRAINLEDGER_NODE_TYPE`` and no
configured default is recorded with a NULL node type, and every report shows it as "not costed: no node type"
with its node-hours (``trainledger.store.defaults``). Every existing run keeps its node type, so no figure changes.

SQLite: dropping a NOT NULL constraint is the change SQLite documents as safe to make by editing the table's
SQL in ``sqlite_master`` (https://www.sqlite.org/lang_altertable.html, "Making Other Kinds Of Table Schema
Changes"). A batch copy of ``run`` would do too, but it writes the table's four foreign keys in an order that
changes from one process to the next, and ``db restore`` compares a backup's SQL with the schema the migrations
build; editing the one clause keeps the SQL byte for byte the same everywhere. PostgreSQL: ``ALTER COLUMN``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""
import re

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_COLUMN = re.compile(r"(\bnode_type_id INTEGER) NOT NULL\b")


def _sqlite_set_nullable(nullable: bool) -> None:
    """Drop (or put back) the NOT NULL of ``run.node_type_id`` in the table's SQL (SQLite's documented procedure)."""
    conn = op.get_bind()
    sql = conn.execute(sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'run'")).scalar()
    if nullable:
        new, n = _COLUMN.subn(r"\1", sql)
    else:
        new, n = re.subn(r"(\bnode_type_id INTEGER)(?= *,)", r"\1 NOT NULL", sql)
    if n != 1:
        raise RuntimeError(f"run.node_type_id: expected one column definition in the table's SQL, found {n}")
    version = conn.execute(sa.text("PRAGMA schema_version")).scalar()
    conn.execute(sa.text("PRAGMA writable_schema = ON"))
    conn.execute(sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = 'run'"), {"sql": new})
    conn.execute(sa.text(f"PRAGMA schema_version = {int(version) + 1}"))
    conn.execute(sa.text("PRAGMA writable_schema = OFF"))


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_set_nullable(True)
        return
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.alter_column("node_type_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    missing = op.get_bind().execute(sa.text("SELECT COUNT(*) FROM run WHERE node_type_id IS NULL")).scalar()
    if missing:
        raise RuntimeError(f"run.node_type_id: {missing} runs have no node type; delete them or give them one "
                           "before downgrading below 0018")
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_set_nullable(False)
        return
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.alter_column("node_type_id", existing_type=sa.Integer(), nullable=False)
