"""the planner learns from the ledger: plan_calibration (fitted factors per node type) and run_prediction

* ``plan_calibration``: the planning model's factors fitted to measured runs, with their provenance.
* ``run_prediction``: what the planner predicted for a launched run (step time, memory, ranges).

Both start empty; no existing figure changes.

Revision ID: 0014
Revises: 0011
Create Date: 2026-12-04
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0014"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("plan_calibration",
                    sa.Column("id", sa.Integer(), nullable=False),
                    sa.Column("node_type_id", sa.Integer(), nullable=False),
                    sa.Column("device", sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
                    sa.Column("created_at", trainledger.store.types.UTCDateTime(), nullable=False),
                    sa.Column("sweep_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
                    sa.Column("n_runs", sa.Integer(), nullable=False),
                    sa.Column("factors", sa.JSON(), nullable=False),
                    sa.Column("provenance", sa.JSON(), nullable=False),
                    sa.ForeignKeyConstraint(["node_type_id"], ["node_type.id"]),
                    sa.PrimaryKeyConstraint("id"))
    with op.batch_alter_table("plan_calibration", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_plan_calibration_node_type_id"), ["node_type_id"], unique=False)
    op.create_table("run_prediction",
                    sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
                    sa.Column("created_at", trainledger.store.types.UTCDateTime(), nullable=False),
                    sa.Column("calibration_id", sa.Integer(), nullable=True),
                    sa.Column("step_time_s", sa.Float(), nullable=True),
                    sa.Column("memory_bytes", sa.Float(), nullable=True),
                    sa.Column("detail", sa.JSON(), nullable=False),
                    sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
                    sa.ForeignKeyConstraint(["calibration_id"], ["plan_calibration.id"]),
                    sa.PrimaryKeyConstraint("run_id"))


def downgrade() -> None:
    op.drop_table("run_prediction")
    with op.batch_alter_table("plan_calibration", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_plan_calibration_node_type_id"))
    op.drop_table("plan_calibration")
