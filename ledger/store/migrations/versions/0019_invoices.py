"""invoices: providers' invoices, their lines and the resource-to-offer mapping (issue 41, docs/INVOICES.md)

``invoice`` holds each imported file (a corrected one replaces the earlier, which keeps its lines and points at
its successor), ``invoice_line`` what it billed (money exact, 12 decimals), ``invoice_map`` which offer and node
a provider's resource stands for. New tables only: no existing figure changes.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""
import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('invoice',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('number', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('month', sqlmodel.sql.sqltypes.AutoString(length=7), nullable=False),
    sa.Column('currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
    sa.Column('fmt', sqlmodel.sql.sqltypes.AutoString(length=10), nullable=False),
    sa.Column('source', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('digest', sqlmodel.sql.sqltypes.AutoString(length=64), nullable=False),
    sa.Column('lines', sa.Integer(), nullable=False),
    sa.Column('billed_cost', trainledger.store.types.Rate(precision=30, scale=12), nullable=False),
    sa.Column('imported_at', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('replaced_by', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['replaced_by'], ['invoice.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('provider', 'digest', name='uq_invoice_digest')
    )
    op.create_index(op.f('ix_invoice_month'), 'invoice', ['month'], unique=False)
    op.create_index('ix_invoice_number', 'invoice', ['provider', 'number'], unique=False)
    op.create_table('invoice_line',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('invoice_id', sa.Integer(), nullable=False),
    sa.Column('line_no', sa.Integer(), nullable=False),
    sa.Column('kind', sqlmodel.sql.sqltypes.AutoString(length=12), nullable=False),
    sa.Column('period_start', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('period_end', trainledger.store.types.UTCDateTime(), nullable=False),
    sa.Column('resource', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('sku', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.Column('description', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
    sa.Column('quantity', trainledger.store.types.Rate(precision=30, scale=12), nullable=True),
    sa.Column('unit', sqlmodel.sql.sqltypes.AutoString(length=40), nullable=False),
    sa.Column('unit_price', trainledger.store.types.Rate(precision=30, scale=12), nullable=True),
    sa.Column('amount', trainledger.store.types.Rate(precision=30, scale=12), nullable=False),
    sa.Column('pricing_currency', sqlmodel.sql.sqltypes.AutoString(length=3), nullable=True),
    sa.Column('fx_rate', trainledger.store.types.Rate(precision=30, scale=12), nullable=True),
    sa.Column('rounding_bound', trainledger.store.types.Rate(precision=30, scale=12), nullable=False),
    sa.ForeignKeyConstraint(['invoice_id'], ['invoice.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_invoice_line_invoice_id'), 'invoice_line', ['invoice_id'], unique=False)
    op.create_table('invoice_map',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('provider', sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
    sa.Column('pattern', sqlmodel.sql.sqltypes.AutoString(length=300), nullable=False),
    sa.Column('offer_id', sa.Integer(), nullable=False),
    sa.Column('node', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
    sa.ForeignKeyConstraint(['offer_id'], ['offer.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('provider', 'pattern', name='uq_invoice_map')
    )
    op.create_index(op.f('ix_invoice_map_offer_id'), 'invoice_map', ['offer_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_invoice_map_offer_id'), table_name='invoice_map')
    op.drop_table('invoice_map')
    op.drop_index(op.f('ix_invoice_line_invoice_id'), table_name='invoice_line')
    op.drop_table('invoice_line')
    op.drop_index('ix_invoice_number', table_name='invoice')
    op.drop_index(op.f('ix_invoice_month'), table_name='invoice')
    op.drop_table('invoice')
