"""planner: link speeds of node types (intra-node per GPU, inter-node per node, latencies)

The shipped presets get the catalog's figures (data/pricing.toml, with their
sources); node types a user imported keep NULL until re-imported with them.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

COLUMNS = ("intra_node_gbytes_per_s", "intra_node_latency_us", "inter_node_gbits_per_s", "inter_node_latency_us")
#: the presets' figures as data/pricing.toml had them when this revision was written
PRESETS = {
    "rtx4090-8x": (16.0, 10.0, 25.0, 30.0),
    "a100-8x": (300.0, 5.0, 200.0, 5.0),
    "h100-8x": (450.0, 5.0, 400.0, 5.0),
    "h200-8x": (450.0, 5.0, 400.0, 5.0),
}


def upgrade() -> None:
    with op.batch_alter_table("node_type", schema=None) as batch_op:
        for name in COLUMNS:
            batch_op.add_column(sa.Column(name, sa.Float(), nullable=True))
    node_type = sa.table("node_type", sa.column("name", sa.String), sa.column("source", sa.String),
                         *(sa.column(c, sa.Float) for c in COLUMNS))
    for name, values in PRESETS.items():
        op.execute(node_type.update()
                   .where(node_type.c.name == name, node_type.c.source == "preset")
                   .values(dict(zip(COLUMNS, values))))


def downgrade() -> None:
    # ALTER TABLE ... DROP COLUMN in place (SQLite ≥ 3.35): recreating node_type would trip the
    # foreign keys of offer, fleet and run that point at it.
    with op.batch_alter_table("node_type", schema=None, recreate="never") as batch_op:
        for name in reversed(COLUMNS):
            batch_op.drop_column(name)
