"""fleet.idle_share: how a fleet's idle is charged back to projects (docs/MONEY.md, "Idle charged back")

NULL (every existing fleet) is ``none``: idle stays its own line (showback), so no figure changes.

Revision ID: 0016
Revises: 0014
Create Date: 2026-12-04
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fleet", schema=None) as batch_op:
        batch_op.add_column(sa.Column("idle_share", sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fleet", schema=None) as batch_op:
        batch_op.drop_column("idle_share")
