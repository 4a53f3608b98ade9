"""Alembic environment: runs migrations on the engine handed over by ledger.store.db."""

from alembic import context
from sqlmodel import SQLModel

import ledger.store.models  # noqa: F401  (registers the tables)

config = context.config
target_metadata = SQLModel.metadata


def run_migrations_online() -> None:
    engine = config.attributes.get("engine")
    if engine is None:
        from ledger.store.db import make_engine

        engine = make_engine(config.get_main_option("sqlalchemy.url"), upgrade=False)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            compare_type=True,
        )
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
