"""monthly rollup: pre-aggregated slices, months and peaks (ledger/rollup.py)

The tables start empty; the first read of the ledger builds them from the run rows.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('rollup_month',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('node_type_id', sa.Integer(), nullable=False),
    sa.Column('offer_key', sa.Integer(), nullable=False),
    sa.Column('project_key', sa.Integer(), nullable=False),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('slices', sa.Integer(), nullable=False),
    sa.Column('node_us', sa.BigInteger(), nullable=False),
    sa.Column('gpu_us', sa.BigInteger(), nullable=False),
    sa.Column('tokens', sa.BigInteger(), nullable=False),
    sa.Column('util_slices', sa.Integer(), nullable=False),
    sa.Column('util_us', sa.BigInteger(), nullable=False),
    sa.Column('util_w', sa.BigInteger(), nullable=False),
    sa.Column('mfu_us', sa.BigInteger(), nullable=False),
    sa.Column('mfu_w', sa.BigInteger(), nullable=False),
    sa.Column('kwh', sqlmodel.sql.sqltypes.AutoString(length=60), nullable=False),
    sa.Column('kwh_slices', sa.Integer(), nullable=False),
    sa.Column('kwh_node_us', sa.BigInteger(), nullable=False),
    sa.Column('billed', sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
    sa.Column('util_sources', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('month', 'node_type_id', 'offer_key', 'project_key', 'status', name='uq_rollup_month')
    )
    op.create_table('rollup_peak',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('node_type_id', sa.Integer(), nullable=False),
    sa.Column('offer_key', sa.Integer(), nullable=False),
    sa.Column('peak', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('month', 'node_type_id', 'offer_key', name='uq_rollup_peak')
    )
    op.create_table('rollup_slice',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('node_type_id', sa.Integer(), nullable=False),
    sa.Column('offer_id', sa.Integer(), nullable=True),
    sa.Column('project_id', sa.Integer(), nullable=True),
    sa.Column('status', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('start_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('end_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('nodes', sa.Integer(), nullable=False),
    sa.Column('gpus_per_node', sa.Integer(), nullable=False),
    sa.Column('split', sa.Boolean(), nullable=False),
    sa.Column('slices', sa.Integer(), nullable=False),
    sa.Column('node_us', sa.BigInteger(), nullable=False),
    sa.Column('gpu_us', sa.BigInteger(), nullable=False),
    sa.Column('tokens', sa.BigInteger(), nullable=False),
    sa.Column('util_slices', sa.Integer(), nullable=False),
    sa.Column('util_us', sa.BigInteger(), nullable=False),
    sa.Column('util_w', sa.BigInteger(), nullable=False),
    sa.Column('mfu_us', sa.BigInteger(), nullable=False),
    sa.Column('mfu_w', sa.BigInteger(), nullable=False),
    sa.Column('kwh', sqlmodel.sql.sqltypes.AutoString(length=60), nullable=False),
    sa.Column('kwh_slices', sa.Integer(), nullable=False),
    sa.Column('kwh_node_us', sa.BigInteger(), nullable=False),
    sa.Column('billed', sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False),
    sa.Column('util_sources', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'month', name='uq_rollup_slice')
    )
    with op.batch_alter_table('rollup_slice', schema=None) as batch_op:
        batch_op.create_index('ix_rollup_slice_scope', ['month', 'node_type_id', 'start_at'], unique=False)
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.create_index('ix_run_ended_started', ['ended_at', 'started_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_index('ix_run_ended_started')
    with op.batch_alter_table('rollup_slice', schema=None) as batch_op:
        batch_op.drop_index('ix_rollup_slice_scope')

    op.drop_table('rollup_slice')
    op.drop_table('rollup_peak')
    op.drop_table('rollup_month')
    op.execute(sa.text("DELETE FROM setting WHERE key IN ('rollup:tz', 'rollup:rules')"))
