"""security: dashboard sessions (a signed-in browser survives a reload; sign-out and password changes revoke)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('dashboard_session',
    sa.Column('token_hash', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('user_name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('password_fp', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('created_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('expires_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('token_hash')
    )
    op.create_index(op.f('ix_dashboard_session_expires_at'), 'dashboard_session', ['expires_at'], unique=False)
    op.create_index(op.f('ix_dashboard_session_user_name'), 'dashboard_session', ['user_name'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_dashboard_session_user_name'), table_name='dashboard_session')
    op.drop_index(op.f('ix_dashboard_session_expires_at'), table_name='dashboard_session')
    op.drop_table('dashboard_session')
