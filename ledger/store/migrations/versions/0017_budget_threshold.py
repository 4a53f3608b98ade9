"""budget.threshold_pct: a budget's alert threshold in percent of its amount (docs/FORECAST.md, "Budgets")

NULL (every existing budget) is 100: at risk only when the month-end forecast is above the amount, as
before, so no state changes.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""
import sqlalchemy as sa
from alembic import op

import trainledger.store.types

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("budget", schema=None) as batch_op:
        batch_op.add_column(sa.Column("threshold_pct", trainledger.store.types.Money(precision=20, scale=6), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("budget", schema=None) as batch_op:
        batch_op.drop_column("threshold_pct")
