"""audit log and sign-in identities (issue 40, docs/SECURITY.md)

``audit_log`` records every write from the dashboard or the CLI: who, when, from where, what, before and
after. It is append-only: a trigger refuses UPDATE and DELETE on SQLite and on PostgreSQL (where only the
table's owner could drop it). ``dashboard_session`` learns where its user came from (``source``: the users
file or an OpenID provider), and for a provider's user the role and project scope mapped from its claims at
sign-in (``projects``: a JSON list, NULL for every project). ``oidc_login`` keeps a sign-in in flight
(the hash of its ``state``, its nonce and PKCE verifier) until the provider sends the browser back, once.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_SQLITE_GUARDS = (
    "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: rows cannot be changed'); END",
    "CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log "
    "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only: rows cannot be deleted'); END",
)
_PG_GUARDS = (
    "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP; END $$",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log "
    "FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
    "CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log "
    "FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only()",
)


def upgrade() -> None:
    op.create_table('audit_log',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('actor', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('origin', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('client', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('action', sqlmodel.sql.sqltypes.AutoString(length=80), nullable=False),
    sa.Column('target', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('before', sa.JSON(), nullable=True),
    sa.Column('after', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_audit_log_at'), 'audit_log', ['at'], unique=False)
    op.create_index(op.f('ix_audit_log_action'), 'audit_log', ['action'], unique=False)
    guards = _PG_GUARDS if op.get_bind().dialect.name == "postgresql" else _SQLITE_GUARDS
    for statement in guards:
        op.execute(statement)
    with op.batch_alter_table('dashboard_session') as batch:
        batch.add_column(sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False,
                                   server_default='file'))
        batch.add_column(sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True))
        batch.add_column(sa.Column('projects', sa.JSON(), nullable=True))
    op.create_table('oidc_login',
    sa.Column('state_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('nonce', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('code_verifier', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('next_path', sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
    sa.Column('created_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('state_hash')
    )


def downgrade() -> None:
    op.drop_table('oidc_login')
    with op.batch_alter_table('dashboard_session') as batch:
        batch.drop_column('projects')
        batch.drop_column('role')
        batch.drop_column('source')
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_log_no_truncate ON audit_log")
        op.execute("DROP TRIGGER audit_log_append_only ON audit_log")
        op.execute("DROP FUNCTION audit_log_append_only()")
    op.drop_index(op.f('ix_audit_log_action'), table_name='audit_log')
    op.drop_index(op.f('ix_audit_log_at'), table_name='audit_log')
    op.drop_table('audit_log')
