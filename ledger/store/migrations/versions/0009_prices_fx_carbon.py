"""prices, exchange rates and carbon: offer price versions, fx_rate, carbon_intensity, charge periods in the rollup

* ``offer_price``: every offer gets version 1 with its current prices, valid from the
  earliest run (a ledger without runs: from 1970-01-01), so no figure of an existing ledger changes.
* ``fx_rate`` and ``carbon_intensity`` start empty.
* ``node_type.nominal_power_kw`` (for CO2e estimates): the shipped node types get their preset figure.
* ``rollup_slice`` / ``rollup_month`` are keyed by charge period (``charge_from``). No price,
  rate or intensity changes inside a month yet, so every stored row's charge period is its month:
  ``charge_from`` is filled with the month's start in the time zone the rollup was built in, and
  nothing needs a rebuild.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import sqlalchemy as sa
import sqlmodel
from alembic import op

import trainledger.store.types

revision = "0009"
down_revision = '0008'
branch_labels = None
depends_on = None

PRICE_COLUMNS = ("price_per_node_hour", "price_per_node_month", "billing_granularity_hours", "minimum_hours",
                 "capex_per_node", "depreciation_months", "residual_value", "power_kw_load", "power_kw_idle",
                 "electricity_price_per_kwh", "pue", "operations_per_node_month")
#: nominal power per node at load (kW) of the shipped node types (data/pricing.toml)
PRESET_POWER_KW = {"rtx4090-8x": "4.0", "a100-8x": "6.5", "h100-8x": "10.2", "h200-8x": "10.2"}


def _price_columns() -> list:
    money = trainledger.store.types.Money
    return [sa.Column(c, sa.Integer() if c == "depreciation_months" else money(), nullable=True) for c in PRICE_COLUMNS]


def upgrade() -> None:
    op.create_table("offer_price",
                    *_price_columns(),
                    sa.Column("id", sa.Integer(), nullable=False),
                    sa.Column("offer_id", sa.Integer(), nullable=False),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("valid_from", trainledger.store.types.UTCDateTime(), nullable=False),
                    sa.Column("created_at", trainledger.store.types.UTCDateTime(), nullable=False),
                    sa.Column("note", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
                    sa.ForeignKeyConstraint(["offer_id"], ["offer.id"]),
                    sa.PrimaryKeyConstraint("id"),
                    sa.UniqueConstraint("offer_id", "valid_from", name="uq_offer_price_from"),
                    sa.UniqueConstraint("offer_id", "version", name="uq_offer_price_version"))
    with op.batch_alter_table("offer_price", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_offer_price_offer_id"), ["offer_id"], unique=False)
    op.create_table("fx_rate",
                    sa.Column("id", sa.Integer(), nullable=False),
                    sa.Column("base", sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
                    sa.Column("quote", sqlmodel.sql.sqltypes.AutoString(length=3), nullable=False),
                    sa.Column("valid_from", sa.Date(), nullable=False),
                    sa.Column("rate", trainledger.store.types.Rate(), nullable=False),
                    sa.Column("source", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
                    sa.PrimaryKeyConstraint("id"),
                    sa.UniqueConstraint("base", "quote", "valid_from", name="uq_fx_rate"))
    op.create_table("carbon_intensity",
                    sa.Column("id", sa.Integer(), nullable=False),
                    sa.Column("node_type_key", sa.Integer(), nullable=False),
                    sa.Column("valid_from", sa.Date(), nullable=False),
                    sa.Column("g_per_kwh", trainledger.store.types.Rate(), nullable=False),
                    sa.Column("location", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
                    sa.Column("source", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
                    sa.PrimaryKeyConstraint("id"),
                    sa.UniqueConstraint("node_type_key", "valid_from", name="uq_carbon_intensity"))
    with op.batch_alter_table("node_type", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nominal_power_kw", trainledger.store.types.Money(), nullable=True))
    conn = op.get_bind()
    nt = sa.table("node_type", sa.column("name", sa.String), sa.column("source", sa.String),
                  sa.column("nominal_power_kw", trainledger.store.types.Money()))
    for name, kw in PRESET_POWER_KW.items():
        conn.execute(nt.update().where(nt.c.name == name, nt.c.source == "preset").values(nominal_power_kw=kw))
    _first_versions(conn)
    _charge_periods()


def _first_versions(conn) -> None:
    """Version 1 of every offer: its prices now, valid from the earliest run (else from 1970-01-01)."""
    run = sa.table("run", sa.column("started_at", trainledger.store.types.UTCDateTime()),
                   sa.column("created_at", trainledger.store.types.UTCDateTime()))
    first = conn.execute(sa.select(sa.func.min(run.c.started_at))).scalar()
    if first is None:
        first = conn.execute(sa.select(sa.func.min(run.c.created_at))).scalar()
    now = datetime.now(timezone.utc)
    first = (trainledger.store.types.UTCDateTime().process_result_value(first, conn.dialect) if first is not None
             else datetime(1970, 1, 1, tzinfo=timezone.utc))
    offer = sa.table("offer", sa.column("id", sa.Integer), *[sa.column(c) for c in PRICE_COLUMNS])
    price = sa.table("offer_price", sa.column("offer_id", sa.Integer), sa.column("version", sa.Integer),
                     sa.column("valid_from", trainledger.store.types.UTCDateTime()),
                     sa.column("created_at", trainledger.store.types.UTCDateTime()), sa.column("note", sa.String),
                     *[sa.column(c) for c in PRICE_COLUMNS])
    rows = [dict(r._mapping) for r in conn.execute(sa.select(offer))]
    if rows:
        conn.execute(price.insert(), [{**{c: r[c] for c in PRICE_COLUMNS}, "offer_id": r["id"], "version": 1,
                                       "valid_from": first, "created_at": now,
                                       "note": "version 1: the prices before price history (migration 0009)"}
                                      for r in rows])


def _charge_periods() -> None:
    """``charge_from`` = the start of the row's month in the rollup's time zone (one charge period per month)."""
    conn = op.get_bind()
    tz_name = conn.execute(sa.text("SELECT value FROM setting WHERE key = 'rollup:tz'")).scalar() or "UTC"
    tz = ZoneInfo(tz_name)
    for table in ("rollup_slice", "rollup_month"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("charge_from", trainledger.store.types.UTCDateTime(), nullable=True))
        t = sa.table(table, sa.column("month", sa.String), sa.column("charge_from", trainledger.store.types.UTCDateTime()))
        for (month,) in conn.execute(sa.select(t.c.month).distinct()).all():
            y, m = int(month[:4]), int(month[5:7])
            start = datetime(y, m, 1, tzinfo=tz).astimezone(timezone.utc)
            conn.execute(t.update().where(t.c.month == month).values(charge_from=start))
    with op.batch_alter_table("rollup_slice", schema=None) as batch_op:
        batch_op.alter_column("charge_from", existing_type=trainledger.store.types.UTCDateTime(), nullable=False)
        batch_op.drop_constraint("uq_rollup_slice", type_="unique")
        batch_op.create_unique_constraint("uq_rollup_slice", ["run_id", "month", "charge_from"])
    with op.batch_alter_table("rollup_month", schema=None) as batch_op:
        batch_op.alter_column("charge_from", existing_type=trainledger.store.types.UTCDateTime(), nullable=False)
        batch_op.drop_constraint("uq_rollup_month", type_="unique")
        batch_op.create_unique_constraint("uq_rollup_month", ["month", "charge_from", "node_type_id", "offer_key",
                                                              "project_key", "status"])


def downgrade() -> None:
    # the rollup's charge periods may have cut months: empty it (rebuilt on the next read) before the old keys return
    op.execute(sa.text("DELETE FROM rollup_peak"))
    op.execute(sa.text("DELETE FROM rollup_month"))
    op.execute(sa.text("DELETE FROM rollup_slice"))
    op.execute(sa.text("DELETE FROM setting WHERE key IN ('rollup:tz', 'rollup:rules', 'rollup:cuts')"))
    with op.batch_alter_table("rollup_month", schema=None) as batch_op:
        batch_op.drop_constraint("uq_rollup_month", type_="unique")
        batch_op.create_unique_constraint("uq_rollup_month", ["month", "node_type_id", "offer_key", "project_key", "status"])
        batch_op.drop_column("charge_from")
    with op.batch_alter_table("rollup_slice", schema=None) as batch_op:
        batch_op.drop_constraint("uq_rollup_slice", type_="unique")
        batch_op.create_unique_constraint("uq_rollup_slice", ["run_id", "month"])
        batch_op.drop_column("charge_from")
    # ALTER TABLE ... DROP COLUMN (SQLite ≥ 3.35): a batch copy would drop node_type, which offers reference
    op.drop_column("node_type", "nominal_power_kw")
    op.drop_table("carbon_intensity")
    op.drop_table("fx_rate")
    with op.batch_alter_table("offer_price", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_offer_price_offer_id"))
    op.drop_table("offer_price")
