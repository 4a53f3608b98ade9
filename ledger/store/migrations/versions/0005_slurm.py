"""slurm: the mapping of partitions, GPU types and node names to node types (run.resume_of comes with 0004)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slurm_map",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
        sa.Column("partition", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("gpu_type", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("node_pattern", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("node_type_id", sa.Integer(), nullable=False),
        sa.Column("offer_id", sa.Integer(), nullable=True),
        sa.Column("by_node", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["node_type_id"], ["node_type.id"]),
        sa.ForeignKeyConstraint(["offer_id"], ["offer.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("cluster", "partition", "gpu_type", "node_pattern", name="uq_slurm_map_rule"),
    )
    with op.batch_alter_table("slurm_map", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_slurm_map_node_type_id"), ["node_type_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_slurm_map_offer_id"), ["offer_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("slurm_map", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_slurm_map_offer_id"))
        batch_op.drop_index(batch_op.f("ix_slurm_map_node_type_id"))
    op.drop_table("slurm_map")
