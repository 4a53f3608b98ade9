"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-12-02
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table('node_type',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('gpu_model', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('gpus_per_node', sa.Integer(), nullable=False),
    sa.Column('gpu_memory_gb', sa.Float(), nullable=False),
    sa.Column('peak_bf16_tflops', sa.Float(), nullable=False),
    sa.Column('interconnect', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('network', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('node_type', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_node_type_name'), ['name'], unique=True)

    op.create_table('project',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('project', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_project_name'), ['name'], unique=True)

    op.create_table('setting',
    sa.Column('key', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('value', sqlmodel.sql.sqltypes.AutoString(length=1000), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    op.create_table('user_account',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('role', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('user_account', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_user_account_name'), ['name'], unique=True)

    op.create_table('offer',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('node_type_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.Enum('rent_elastic', 'rent_reserved', 'own', name='offerkind'), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('price_per_node_hour', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('price_per_node_month', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('billing_granularity_hours', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('minimum_hours', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('capex_per_node', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('depreciation_months', sa.Integer(), nullable=True),
    sa.Column('residual_value', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('power_kw_load', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('power_kw_idle', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('electricity_price_per_kwh', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('pue', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('operations_per_node_month', trainledger.store.types.Money(precision=20, scale=6), nullable=True),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('notes', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.ForeignKeyConstraint(['node_type_id'], ['node_type.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('offer', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_offer_name'), ['name'], unique=True)
        batch_op.create_index(batch_op.f('ix_offer_node_type_id'), ['node_type_id'], unique=False)

    op.create_table('fleet',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('offer_id', sa.Integer(), nullable=False),
    sa.Column('node_count', sa.Integer(), nullable=False),
    sa.Column('valid_from', sa.Date(), nullable=False),
    sa.Column('valid_to', sa.Date(), nullable=True),
    sa.ForeignKeyConstraint(['offer_id'], ['offer.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    with op.batch_alter_table('fleet', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_fleet_offer_id'), ['offer_id'], unique=False)

    op.create_table('run',
    sa.Column('id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('name', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=True),
    sa.Column('user_id', sa.Integer(), nullable=True),
    sa.Column('launcher', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('node_type_id', sa.Integer(), nullable=False),
    sa.Column('offer_id', sa.Integer(), nullable=True),
    sa.Column('nodes', sa.Integer(), nullable=False),
    sa.Column('gpus_per_node', sa.Integer(), nullable=False),
    sa.Column('world_size', sa.Integer(), nullable=True),
    sa.Column('strategy', sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
    sa.Column('dp', sa.Integer(), nullable=True),
    sa.Column('tp', sa.Integer(), nullable=True),
    sa.Column('pp', sa.Integer(), nullable=True),
    sa.Column('zero_stage', sa.Integer(), nullable=True),
    sa.Column('micro_batch', sa.Integer(), nullable=True),
    sa.Column('grad_accum', sa.Integer(), nullable=True),
    sa.Column('model_shape', sqlmodel.sql.sqltypes.AutoString(length=50), nullable=False),
    sa.Column('params', sa.BigInteger(), nullable=True),
    sa.Column('n_layers', sa.Integer(), nullable=True),
    sa.Column('hidden', sa.Integer(), nullable=True),
    sa.Column('heads', sa.Integer(), nullable=True),
    sa.Column('seq_len', sa.Integer(), nullable=True),
    sa.Column('sweep_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=True),
    sa.Column('config', sa.JSON(), nullable=True),
    sa.Column('status', sa.Enum('queued', 'running', 'succeeded', 'failed', 'cancelled', 'crashed', name='runstatus'), nullable=False),
    sa.Column('created_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('started_at', trainledger.store.types.UTCDateTime(), nullable=True),
    sa.Column('ended_at', trainledger.store.types.UTCDateTime(), nullable=True),
    sa.Column('heartbeat_at', trainledger.store.types.UTCDateTime(), nullable=True),
    sa.Column('steps', sa.Integer(), nullable=True),
    sa.Column('tokens', sa.BigInteger(), nullable=True),
    sa.Column('step_time_median_s', sa.Float(), nullable=True),
    sa.Column('step_time_p95_s', sa.Float(), nullable=True),
    sa.Column('tokens_per_s', sa.Float(), nullable=True),
    sa.Column('mfu', sa.Float(), nullable=True),
    sa.Column('gpu_util_mean', sa.Float(), nullable=True),
    sa.Column('gpu_util_p95', sa.Float(), nullable=True),
    sa.Column('util_source', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=True),
    sa.Column('peak_mem_bytes', sa.BigInteger(), nullable=True),
    sa.Column('comm_share', sa.Float(), nullable=True),
    sa.Column('final_loss', sa.Float(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('error', sqlmodel.sql.sqltypes.AutoString(length=4000), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('hostname', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=True),
    sa.ForeignKeyConstraint(['node_type_id'], ['node_type.id'], ),
    sa.ForeignKeyConstraint(['offer_id'], ['offer.id'], ),
    sa.ForeignKeyConstraint(['project_id'], ['project.id'], ),
    sa.ForeignKeyConstraint(['user_id'], ['user_account.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_node_type_id'), ['node_type_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_offer_id'), ['offer_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_project_id'), ['project_id'], unique=False)
        batch_op.create_index('ix_run_started_ended', ['started_at', 'ended_at'], unique=False)
        batch_op.create_index('ix_run_status_heartbeat', ['status', 'heartbeat_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_strategy'), ['strategy'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_sweep_id'), ['sweep_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_run_user_id'), ['user_id'], unique=False)

    op.create_table('metric_sample',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('node', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('gpu', sa.Integer(), nullable=False),
    sa.Column('metric', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('ts', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('value', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'node', 'gpu', 'metric', 'ts', name='uq_metric_sample')
    )
    op.create_table('run_node',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('hostname', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('node_rank', sa.Integer(), nullable=True),
    sa.Column('gpu_util_mean', sa.Float(), nullable=True),
    sa.Column('gpu_util_p95', sa.Float(), nullable=True),
    sa.Column('util_source', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=True),
    sa.Column('mem_peak_bytes', sa.BigInteger(), nullable=True),
    sa.Column('energy_kwh', sa.Float(), nullable=True),
    sa.Column('nic_rx_bytes_per_s', sa.Float(), nullable=True),
    sa.Column('nic_tx_bytes_per_s', sa.Float(), nullable=True),
    sa.Column('step_time_share', sa.Float(), nullable=True),
    sa.Column('straggler', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['run.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'hostname', name='uq_run_node_host')
    )
    with op.batch_alter_table('run_node', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_run_node_run_id'), ['run_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('run_node', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_node_run_id'))

    op.drop_table('run_node')
    op.drop_table('metric_sample')
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_run_user_id'))
        batch_op.drop_index(batch_op.f('ix_run_sweep_id'))
        batch_op.drop_index(batch_op.f('ix_run_strategy'))
        batch_op.drop_index('ix_run_status_heartbeat')
        batch_op.drop_index('ix_run_started_ended')
        batch_op.drop_index(batch_op.f('ix_run_project_id'))
        batch_op.drop_index(batch_op.f('ix_run_offer_id'))
        batch_op.drop_index(batch_op.f('ix_run_node_type_id'))

    op.drop_table('run')
    with op.batch_alter_table('fleet', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_fleet_offer_id'))

    op.drop_table('fleet')
    with op.batch_alter_table('offer', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_offer_node_type_id'))
        batch_op.drop_index(batch_op.f('ix_offer_name'))

    op.drop_table('offer')
    with op.batch_alter_table('user_account', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_user_account_name'))

    op.drop_table('user_account')
    op.drop_table('setting')
    with op.batch_alter_table('project', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_project_name'))

    op.drop_table('project')
    with op.batch_alter_table('node_type', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_node_type_name'))

    op.drop_table('node_type')
    # PostgreSQL keeps enum types after their tables are gone
    sa.Enum(name="runstatus").drop(op.get_bind(), checkfirst=True)
    sa.Enum(name="offerkind").drop(op.get_bind(), checkfirst=True)
