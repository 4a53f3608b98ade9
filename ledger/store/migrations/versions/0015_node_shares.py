"""shared nodes: a run's share of each node it held, Slurm billing per mapping rule, held node units per slice

* ``run.share`` (exact fraction ``N/D``; NULL = the whole node, as every run before) and ``run.share_basis``.
* ``slurm_map.billing_weights``, ``max_tres``, ``node_tres``: the partition's ``TRESBillingWeights``.
* ``rollup_slice.held``: nodes × share in 1/720720 node units (NULL = nodes × 720720), for peaks of shared nodes.

Existing rows keep NULL shares: no figure changes.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("share", sqlmodel.sql.sqltypes.AutoString(length=40), nullable=True))
        batch_op.add_column(sa.Column("share_basis", sqlmodel.sql.sqltypes.AutoString(length=60), nullable=True))
    with op.batch_alter_table("slurm_map", schema=None) as batch_op:
        batch_op.add_column(sa.Column("billing_weights", sqlmodel.sql.sqltypes.AutoString(length=400), nullable=True))
        batch_op.add_column(sa.Column("max_tres", sa.Boolean(), nullable=True))
        batch_op.add_column(sa.Column("node_tres", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True))
    with op.batch_alter_table("rollup_slice", schema=None) as batch_op:
        batch_op.add_column(sa.Column("held", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rollup_slice", schema=None) as batch_op:
        batch_op.drop_column("held")
    with op.batch_alter_table("slurm_map", schema=None) as batch_op:
        batch_op.drop_column("node_tres")
        batch_op.drop_column("max_tres")
        batch_op.drop_column("billing_weights")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("share_basis")
        batch_op.drop_column("share")
