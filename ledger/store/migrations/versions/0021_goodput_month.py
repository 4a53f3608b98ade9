"""goodput_month: a month's goodput totals, stored with the fingerprint of the ledger state they were computed from
(issue 39 item 6, docs/GOODPUT.md "Stored month totals")

A cache of exact figures: read back only while the fingerprint still matches the ledger
(``trainledger.money.goodput.month_totals``); dropping the table loses nothing. New table only: no existing
figure changes.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('goodput_month',
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('fingerprint', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('digest', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('computed_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('month', 'currency')
    )


def downgrade() -> None:
    op.drop_table('goodput_month')
