"""tracked runs: process group, log path, tokens per epoch, memory kind

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("pgid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("log_path", sa.String(length=500), nullable=True))
        batch_op.add_column(sa.Column("tokens_per_epoch", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("mem_kind", sa.String(length=30), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("mem_kind")
        batch_op.drop_column("tokens_per_epoch")
        batch_op.drop_column("log_path")
        batch_op.drop_column("pgid")
