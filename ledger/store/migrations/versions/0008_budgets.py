"""budgets: spending limits per project or team-wide, per month or every month (ledger/money/outlook/budgets.py)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('budget',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('project_key', sa.Integer(), nullable=False),
    sa.Column('period', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('amount', trainledger.store.types.Money(precision=20, scale=6), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('updated_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_key', 'period', name='uq_budget')
    )


def downgrade() -> None:
    op.drop_table('budget')
