"""Alembic environment: runs migrations on the engine handed over by trainledger.store.db."""

import trainledger.store.models  # noqa: F401  (registers the tables)
from alembic import context
from sqlmodel import SQLModel

config = context.config
target_metadata = SQLModel.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # trainledger.store.db.upgrade_schema: its transaction, committed by the caller
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = config.attributes.get("engine")
    if engine is None:
        from trainledger.store.db import make_engine

        engine = make_engine(config.get_main_option("sqlalchemy.url"), upgrade=False)
    with engine.connect() as connection:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


run_migrations_online()
