"""month_lines: a month's presented lines (the monthly report with its run lines, the chargeback statements), stored
with the fingerprint of the ledger state they were computed from (issue 39 item 6, docs/PERFORMANCE.md)

A cache of the presented figures: read back only while the fingerprint still matches the ledger
(``trainledger.reports.month_lines_store``); dropping the table loses nothing. New table only: no existing
figure changes.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('month_lines',
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('fingerprint', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('digest', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('computed_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.PrimaryKeyConstraint('month', 'currency')
    )


def downgrade() -> None:
    op.drop_table('month_lines')
