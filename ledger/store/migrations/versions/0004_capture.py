"""capture: resume chains, checkpoints and lost work on runs; wrapper nodes; lost work in the rollup

Runs get ``resume_of`` (the run this one restarted from), their last
checkpoint (time, step, path) and their lost interval; run nodes get the
status, heartbeat, exit code and process count a ``trainledger run`` wrapper
records; the rollup tables get the integer facts of lost work.

Back-fill: no run had a checkpoint before this revision, so a failed, crashed
or cancelled run lost its whole costed interval (start → end, or its last
heartbeat when it has no end), and the lost facts of its rollup slices are its
whole slices. Both are exact SQL updates; nothing else changes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

WASTE = "('failed', 'crashed', 'cancelled')"
LOST_INTS = ("lost_node_us", "lost_gpu_us", "lost_ckpt_node_us", "lost_ckpt_gpu_us")
LOST_TEXTS = ("lost_billed", "lost_ckpt_billed")


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resume_of", sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True))
        batch_op.add_column(sa.Column("last_checkpoint_at", trainledger.store.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("last_checkpoint_step", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("last_checkpoint_path", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=True))
        batch_op.add_column(sa.Column("lost_from", trainledger.store.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("lost_until", trainledger.store.types.UTCDateTime(), nullable=True))
        batch_op.create_index(batch_op.f("ix_run_resume_of"), ["resume_of"], unique=False)
    with op.batch_alter_table("run_node", schema=None) as batch_op:
        batch_op.add_column(sa.Column("status", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=True))
        batch_op.add_column(sa.Column("heartbeat_at", trainledger.store.types.UTCDateTime(), nullable=True))
        batch_op.add_column(sa.Column("exit_code", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("processes", sa.Integer(), nullable=True))
    for table in ("rollup_slice", "rollup_month"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in LOST_INTS:
                batch_op.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))
            for name in LOST_TEXTS:
                batch_op.add_column(sa.Column(name, sqlmodel.sql.sqltypes.AutoString(length=2000), nullable=False,
                                              server_default="{}"))
    _backfill()


def _backfill() -> None:
    # the costed end of an ended run (trainledger.money.rates.months.run_interval): its end, else its last heartbeat,
    # never before its start
    op.execute(sa.text(
        f"UPDATE run SET lost_from = started_at, lost_until = CASE "
        f"WHEN ended_at IS NOT NULL THEN CASE WHEN ended_at > started_at THEN ended_at ELSE started_at END "
        f"WHEN heartbeat_at IS NOT NULL AND heartbeat_at > started_at THEN heartbeat_at ELSE started_at END "
        f"WHERE status IN {WASTE} AND started_at IS NOT NULL"))
    for table in ("rollup_slice", "rollup_month"):
        op.execute(sa.text(f"UPDATE {table} SET lost_node_us = node_us, lost_gpu_us = gpu_us, lost_billed = billed "
                           f"WHERE status IN {WASTE}"))


def downgrade() -> None:
    for table in ("rollup_month", "rollup_slice"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in (*LOST_TEXTS, *LOST_INTS):
                batch_op.drop_column(name)
    with op.batch_alter_table("run_node", schema=None) as batch_op:
        for name in ("processes", "exit_code", "heartbeat_at", "status"):
            batch_op.drop_column(name)
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_resume_of"))
        for name in ("lost_until", "lost_from", "last_checkpoint_path", "last_checkpoint_step", "last_checkpoint_at",
                     "resume_of"):
            batch_op.drop_column(name)
