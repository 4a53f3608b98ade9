"""goodput: run_phase, per-node phase durations of a run (ledger/sources/record/phases.py, ledger/money/goodput/account.py)

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-04
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = '0011'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('run_phase',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('node', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('phase', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('ckpt_seconds', sa.Float(), nullable=True),
    sa.Column('ckpt_count', sa.Integer(), nullable=True),
    sa.Column('first_at', trainledger.store.types.UTCDateTime(), nullable=True),
    sa.Column('last_at', trainledger.store.types.UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'node', 'phase', name='uq_run_phase')
    )


def downgrade() -> None:
    op.drop_table('run_phase')
